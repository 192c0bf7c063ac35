"""app.py's reads (`Application.list`, `read`, `_check_as_of`, `_read_headers`) answered in
process over a real store: the bytes, status and headers a client gets, where mutation
testing found them unpinned (docs/mutation.md, "... session 11, wt-mpo"). The same answers
over a server and sockets are tests/app/test_crud.py's and test_etag.py's; these run in
the test process, so mutants of app.py are seen (a child server imports the unmutated app)."""

from __future__ import annotations

import json

import pytest

from dbsvc.app import Application
from dbsvc.compiler import compile_schema
from dbsvc.errors import BadQuery, NotFound
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.realtime.broker import Broker
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from support.app_calls import fresh
from support.storage import open_store, post, run, user


def get(app: Application, target: str, headers: list[tuple[str, str]] | None = None):
    path, pairs = split_target(target)
    return app(Request("GET", target, path, pairs, headers or []))


@pytest.fixture
def filled(tmp_path):
    """A store with users 1-5 and posts 1-3 of user 1 (watermarks: User 5, BlogPost 3), then
    user 2 renamed (User 6): its application, and the store."""
    store = open_store(str(tmp_path), sync="off")

    async def fill() -> None:
        for i in range(1, 6):
            await store.insert("User", user(i, name=f"n{i}"))
        for i in range(1, 4):
            await store.insert("BlogPost", post(i, title=f"t{i}", score=float(i)))
        await store.replace("User", 2, user(2, name="renamed"))

    run(fill())
    yield fresh(store), store
    store.close()


def test_a_list_answers_its_page_totals_and_the_present_headers(filled):
    app, store = filled
    answer = get(app, "/api/user?sort=name&limit=2&offset=1")
    assert answer.status == 200
    body = json.loads(answer.body)
    assert [r["name"] for r in body["data"]] == ["n3", "n4"]
    assert (body["total"], body["limit"], body["offset"]) == (5, 2, 1)
    headers = dict(answer.headers)
    assert headers["Dbsvc-Watermark"] == "6" and headers["Dbsvc-Offset"] == str(store.head_offset)
    assert headers["Link"].startswith("</api/user?sort=name&limit=2&cursor=") and headers["Link"].endswith('rel="next"')
    last = get(app, "/api/user?sort=name&limit=2&offset=3")
    assert [r["name"] for r in json.loads(last.body)["data"]] == ["n5", "renamed"]
    assert "Link" not in dict(last.headers)  # no page after the last
    kept = get(app, "/api/user?sort=name&limit=2&offset=1")  # the kept page: the same answer
    assert (kept.status, kept.body, sorted(kept.headers)) == (200, answer.body, sorted(answer.headers))


def test_a_lists_link_leads_on_from_the_pages_last_record(filled):
    app, _ = filled
    first = get(app, "/api/user?sort=name&limit=3")
    assert [r["name"] for r in json.loads(first.body)["data"]] == ["n1", "n3", "n4"]
    link = dict(first.headers)["Link"]
    assert link.startswith("<") and link.endswith('>; rel="next"')
    after = get(app, link[1 : link.index(">")])
    assert [r["name"] for r in json.loads(after.body)["data"]] == ["n5", "renamed"]
    assert "Link" not in dict(after.headers)


def test_a_list_of_a_projection_answers_only_its_fields(filled):
    app, _ = filled
    body = json.loads(get(app, "/api/user?projection=card&limit=2").body)
    assert body["data"] == [{"id": 1, "name": "n1"}, {"id": 2, "name": "renamed"}]


def test_a_list_at_a_past_watermark_answers_that_state_with_its_watermark_and_no_offset(filled):
    app, _ = filled
    for attempt in range(2):  # made, then kept (readcache.py PastPages): the same answer
        answer = get(app, "/api/user?as_of=5&sort=name&limit=2")
        assert answer.status == 200, attempt
        body = json.loads(answer.body)
        assert [r["name"] for r in body["data"]] == ["n1", "n2"], attempt  # before the rename
        assert body["total"] == 5
        headers = dict(answer.headers)
        assert headers["Dbsvc-Watermark"] == "5" and "Dbsvc-Offset" not in headers
        assert "Link" in headers
    at_now = get(app, "/api/user?as_of=6&sort=name&limit=10")
    assert [r["name"] for r in json.loads(at_now.body)["data"]][-1] == "renamed"
    assert dict(at_now.headers)["Dbsvc-Watermark"] == "6"


def test_an_as_of_ahead_of_the_watermark_is_refused_naming_the_range(filled):
    app, _ = filled
    message = r"^as_of=7 is ahead of the current watermark of User \(6\): expected an integer from 0 to 6$"
    with pytest.raises(BadQuery, match=message):
        get(app, "/api/user?as_of=7")
    with pytest.raises(BadQuery, match=message):
        get(app, "/api/user/1?as_of=7")
    assert json.loads(get(app, "/api/user?as_of=6").body)["total"] == 5  # the watermark itself is fine
    assert get(app, "/api/user/1?as_of=6").status == 200


def test_a_read_answers_the_record_its_version_and_the_present_headers(filled):
    app, store = filled
    answer = get(app, "/api/user/2")
    assert answer.status == 200
    record = json.loads(answer.body)
    assert (record["id"], record["name"]) == (2, "renamed")
    headers = dict(answer.headers)
    assert headers["Dbsvc-Watermark"] == "6" and headers["Dbsvc-Offset"] == str(store.head_offset)
    tag = headers["ETag"]
    assert tag.startswith('"') and tag != dict(get(app, "/api/user/1").headers)["ETag"]
    assert json.loads(get(app, "/api/user/2?projection=card").body) == {"id": 2, "name": "renamed"}


def test_a_read_whose_tag_matches_is_304_without_a_body(filled):
    app, _ = filled
    tag = dict(get(app, "/api/user/2").headers)["ETag"]
    same = get(app, "/api/user/2", [("if-none-match", tag)])
    assert (same.status, same.body, same.content_type) == (304, b"", None)
    assert dict(same.headers)["ETag"] == tag
    other = get(app, "/api/user/2", [("if-none-match", '"0"')])
    assert other.status == 200 and json.loads(other.body)["name"] == "renamed"


def test_a_read_at_a_past_watermark_answers_the_record_then(filled):
    app, _ = filled
    answer = get(app, "/api/user/2?as_of=5")
    assert answer.status == 200 and json.loads(answer.body)["name"] == "n2"
    headers = dict(answer.headers)
    assert headers["Dbsvc-Watermark"] == "5" and "Dbsvc-Offset" not in headers and "ETag" in headers


def test_a_read_of_a_missing_record_is_404(filled):
    app, _ = filled
    with pytest.raises(NotFound, match="^User 99 does not exist$"):
        get(app, "/api/user/99")
    with pytest.raises(NotFound, match="^User 2 does not exist$"):
        get(app, "/api/user/2?as_of=1")  # user 2 was created after watermark 1


RULED = """
model Person {
  id    int  @id
  name  str  @sort
  team  str  @filter
  @allow(read, record.team == token.team)
  @allow(write, token.role == "admin")
}
"""


@pytest.fixture
def ruled(tmp_path):
    """Persons 1, 2 of team a and 3 of team b (watermark 3), then 4 of team a (4)."""
    module = compile_schema(parse_schema(RULED, "people.dbs"))
    store = Store.open(str(tmp_path), module.MODELS, module.DESCRIPTION, sync="off")

    async def fill() -> None:
        for i, team in ((1, "a"), (2, "a"), (3, "b"), (4, "a")):
            await store.insert("Person", {"id": i, "name": f"p{i}", "team": team})

    run(fill())
    yield Application(module, store, Broker(store, module.BY_NAME, 64)), module.BY_NAME["Person"], store
    store.close()


def ask(app: Application, model, target: str, team: str, segment: str | None = None):
    path, pairs = split_target(target)
    return app.dispatch(Request("GET", target, path, pairs, []), model, segment, {"team": team})


def test_a_ruled_list_answers_what_the_token_may_read(ruled):
    app, person, store = ruled
    answer = ask(app, person, "/api/person?sort=name&limit=2", "a")
    body = json.loads(answer.body)
    assert [r["id"] for r in body["data"]] == [1, 2] and body["total"] == 3
    assert dict(answer.headers)["Dbsvc-Watermark"] == "4"
    assert [r["id"] for r in json.loads(ask(app, person, "/api/person", "b").body)["data"]] == [3]


def test_a_ruled_list_the_token_may_see_nothing_of_is_empty_with_its_headers(ruled):
    app, person, store = ruled
    answer = ask(app, person, "/api/person?team=b&limit=7&offset=2", "a")
    assert (answer.status, answer.body) == (200, b'{"data":[],"total":0,"limit":7,"offset":2}')
    headers = dict(answer.headers)
    assert headers["Dbsvc-Watermark"] == "4" and headers["Dbsvc-Offset"] == str(store.head_offset)
    past = ask(app, person, "/api/person?team=b&as_of=3", "a")
    assert (past.status, json.loads(past.body)["data"]) == (200, [])
    assert dict(past.headers)["Dbsvc-Watermark"] == "3" and "Dbsvc-Offset" not in dict(past.headers)


def test_a_ruled_past_list_is_answered_per_token_not_kept_for_the_first(ruled):
    app, person, _ = ruled
    target = "/api/person?as_of=3&sort=name"
    assert [r["id"] for r in json.loads(ask(app, person, target, "a").body)["data"]] == [1, 2]
    assert [r["id"] for r in json.loads(ask(app, person, target, "b").body)["data"]] == [3]


def test_a_ruled_read_of_a_record_the_token_may_not_read_is_404(ruled):
    app, person, _ = ruled
    assert json.loads(ask(app, person, "/api/person/3", "b", "3").body)["name"] == "p3"
    with pytest.raises(NotFound, match="^Person 3 does not exist$"):
        ask(app, person, "/api/person/3", "a", "3")
    with pytest.raises(NotFound, match="^Person 3 does not exist$"):
        ask(app, person, "/api/person/3?as_of=3", "a", "3")
