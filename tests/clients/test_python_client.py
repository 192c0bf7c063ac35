"""The generated Python client against one real server (schemas/blog.dbs, shared by the file).

What a user of the client meets: CRUD returning records, ETags and `if_match`, every refusal
as an exception of its problem code, the query surface (filters, operators, sort, search,
projections, expand, as_of, cursor pages), batches, a feed, and the clear errors of a wrong
keyword, an unreachable server and a missing `websockets`.
"""

from __future__ import annotations

import re
import sys

import pytest

from support.client_kit import SCHEMAS, client_module
from support.server import start_server


@pytest.fixture(scope="module")
def blog(tmp_path_factory):
    return client_module(SCHEMAS / "blog.dbs", tmp_path_factory.mktemp("client"), "python_client_blog")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = start_server(SCHEMAS / "blog.dbs", tmp_path_factory.mktemp("data"))
    yield started
    started.stop()


@pytest.fixture()
def client(blog, server):
    return blog.Client(f"http://127.0.0.1:{server.port}")


def new_user(client, name: str, **fields) -> int:
    return client.user.create({"email": f"{name.lower()}@example.com", "name": name, **fields})


def test_crud_returns_typed_records(blog, client):
    uid = new_user(client, "Crud", age=30)
    assert isinstance(uid, int)
    user = client.user.get(uid)
    assert (user["name"], user["age"], user["role"]) == ("Crud", 30, "reader")
    assert client.user.patch(uid, {"age": 31})["age"] == 31
    replaced = client.user.replace(uid, {"email": "crud@example.com", "name": "Crud II"})
    assert (replaced["name"], replaced["age"]) == ("Crud II", None)  # PUT: omitted nullable fields become null
    assert client.user.card.get(uid) == {"id": uid, "name": "Crud II"}
    client.user.delete(uid)
    with pytest.raises(blog.NotFoundError) as caught:
        client.user.get(uid)
    assert caught.value.status == 404


def test_refusals_are_exceptions_of_their_problem_code(blog, client):
    with pytest.raises(blog.NotFoundError) as missing:
        client.user.get(10**9)
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    with pytest.raises(blog.ConstraintViolationError) as invalid:
        client.user.create({"email": "bad@example.com", "name": ""})
    assert invalid.value.status == 422
    assert [e["field"] for e in invalid.value.errors] == ["name"]
    new_user(client, "Twice")
    with pytest.raises(blog.UniqueViolationError) as clash:
        new_user(client, "Twice")
    assert clash.value.problem["field"] == "email"
    with pytest.raises(blog.ForeignKeyViolationError):
        client.blog_post.create({"author_id": 10**9, "title": "t", "body": "b", "score": 1})
    with pytest.raises(blog.BadQueryError) as bad:
        client.user.list(role="owner")  # type: ignore[arg-type]  (mypy refuses it too)
    assert "expected one of admin, editor, reader" in bad.value.detail
    assert isinstance(bad.value, blog.ApiError) and isinstance(bad.value, blog.ClientError)


def test_a_record_still_referenced_refuses_its_delete(blog, client):
    uid = new_user(client, "Parent")
    client.blog_post.create({"author_id": uid, "title": "Child", "body": "b", "score": 1})
    with pytest.raises(blog.ReferencedError) as caught:
        client.user.delete(uid)
    assert caught.value.status == 409


def test_fetch_gives_the_etag_and_if_match_guards_a_write(blog, client):
    uid = new_user(client, "Etag")
    fetched = client.user.fetch(uid)
    assert fetched.etag and fetched.watermark and fetched.head
    client.user.patch(uid, {"age": 40}, if_match=fetched.etag)
    with pytest.raises(blog.PreconditionFailedError) as stale:
        client.user.patch(uid, {"age": 41}, if_match=fetched.etag)
    assert stale.value.status == 412
    assert client.user.get(uid)["age"] == 40
    with pytest.raises(blog.PreconditionFailedError):
        client.user.delete(uid, if_match=fetched.etag)
    client.user.delete(uid, if_match=client.user.fetch(uid).etag)


def test_a_keyword_a_model_does_not_take_is_refused_before_any_request(blog):
    offline = blog.Client("http://127.0.0.1:9")  # nothing listens: a request would fail differently
    with pytest.raises(blog.QueryError, match="User list takes no keyword 'age'; it takes: age__gt"):
        offline.user.list(age=3)  # type: ignore[call-arg]
    with pytest.raises(blog.QueryError, match="takes no keyword 'sort'"):
        offline.user.live_query(sort="name")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        offline.user.list(search="ann")  # type: ignore[call-arg]  (User has no @search fields)


def test_an_unreachable_server_is_a_transport_error(blog):
    with pytest.raises(blog.TransportError, match="GET /api/user"):
        blog.Client("http://127.0.0.1:9", timeout=2).user.list()


def test_queries_take_filters_operators_sort_search_projection_and_expand(client):
    ids = [new_user(client, f"Q{i}", age=50 + i, role="editor" if i % 2 else "admin") for i in range(4)]
    page = client.user.card.list(age__gte=51, age__lt=53, sort="-age")
    assert [r["id"] for r in page.data] == [ids[2], ids[1]] and page.total == 2
    assert [r["name"] for r in client.user.list(role=["admin"], name__prefix="Q", sort=["age"]).data] == ["Q0", "Q2"]
    post = client.blog_post.create({"author_id": ids[0], "title": "Searchable words", "body": "zebra", "score": 2.5})
    found = client.blog_post.summary.list(search="zeb", expand="author_id:card")
    assert found.data == [
        {"id": post, "title": "Searchable words", "score": 2.5, "_expand": {"author_id": {"id": ids[0], "name": "Q0"}}}
    ]
    assert client.blog_post.get(post, expand=["author_id"])["_expand"]["author_id"]["email"] == "q0@example.com"


def test_pages_follow_the_link_cursor_to_the_last_page(client):
    for i in range(5):
        new_user(client, f"Page{i}", age=90 + i)
    whole = client.user.card.list(age__gte=90, sort="-age").data
    pages = list(client.user.card.pages(age__gte=90, sort="-age", limit=2))
    assert [len(p.data) for p in pages] == [2, 2, 1]
    assert pages[-1].next_cursor is None and pages[0].next_cursor
    assert [r for p in pages for r in p.data] == whole
    assert list(client.user.card.iterate(age__gte=90, sort="-age", limit=2)) == whole


def test_as_of_reads_the_past(client):
    uid = new_user(client, "Past", age=1)
    before = client.user.fetch(uid).watermark
    client.user.patch(uid, {"age": 2})
    assert client.user.get(uid, as_of=before)["age"] == 1
    assert client.user.card.list(name="Past", as_of=before).data == [{"id": uid, "name": "Past"}]


def test_a_batch_writes_all_its_ops_or_none(blog, client):
    done = client.batch(
        [
            client.user.create_op({"email": "batch@example.com", "name": "Batch"}),
            client.blog_post.create_op({"author_id": blog.op_ref(0), "title": "B", "body": "b", "score": 1}),
            client.blog_post.patch_op(blog.op_ref(1), {"published": True}),
        ]
    )
    assert [r["status"] for r in done.results] == [201, 201, 200] and done.last == done.first + 2
    assert client.blog_post.get(done.results[1]["id"])["published"] is True
    with pytest.raises(blog.UniqueViolationError) as refused:
        client.batch(
            [
                client.user.create_op({"email": "batch2@example.com", "name": "B2"}),
                client.user.create_op({"email": "batch@example.com", "name": "B3"}),
            ]
        )
    assert refused.value.problem["op"] == 1
    assert client.user.list(email="batch2@example.com").total == 0


def test_the_client_checks_the_fingerprint_of_the_schema_served(blog, server):
    with blog.Client(f"http://127.0.0.1:{server.port}") as client:
        client.check_fingerprint()
        assert client.snapshot()["fingerprint"] == blog.SCHEMA_FINGERPRINT


def test_a_subscription_from_now_sees_each_write_once_and_a_batch_whole(client):
    events: list[dict] = []
    with client.user.subscribe(events.append, role="admin") as subscription:
        uid = new_user(client, "Sub", role="admin")
        client.batch(
            [client.user.create_op({"email": f"sb{i}@example.com", "name": "SB", "role": "admin"}) for i in range(3)]
        )
        head = client.user.head()
        assert subscription.wait_for_offset(head, 10), subscription.error
    assert [e["kind"] for e in events] == ["insert"] * 4
    assert events[0]["id"] == uid and events[-1]["batch"]["end"] is True
    assert [e["offset"] for e in events] == sorted({e["offset"] for e in events})


def test_a_feed_without_websockets_is_a_clear_error_and_rest_still_works(blog, client, monkeypatch):
    monkeypatch.setitem(sys.modules, "websockets", None)
    monkeypatch.setitem(sys.modules, "websockets.sync.client", None)
    with pytest.raises(blog.RealtimeUnavailable, match="pip install websockets"):
        client.user.subscribe(print)
    with pytest.raises(blog.RealtimeUnavailable):
        client.user.live_query()
    assert client.user.list(limit=0).total >= 0


def test_feeds_by_model_name_take_their_query_as_a_dict(blog, client):
    events: list[dict] = []
    with pytest.raises(blog.QueryError, match="no model 'Author': the models are"):
        client.subscribe("Author", {}, events.append)
    with pytest.raises(blog.QueryError, match="takes no keyword 'limit'"):
        client.live_query("user", {"limit": 1})
    with (
        client.subscribe("User", {"role": "editor", "projection": "card"}, events.append) as subscription,
        client.live_query("blog-post", {"published": True, "projection": "summary"}) as published,
    ):
        uid = new_user(client, "ByName", role="editor")
        post = client.blog_post.create({"author_id": uid, "title": "Named", "body": "b", "score": 1, "published": True})
        assert subscription.wait_for_offset(client.user.head(), 10), subscription.error
        assert published.wait_until(lambda records: post in records, 10), published.error
    assert [e["kind"] for e in events] == ["insert", "link"]  # the post links to its author
    assert events[0]["record"] == {"id": uid, "name": "ByName"} and events[1]["child_id"] == post
    assert published.records()[post] == {"id": post, "title": "Named", "score": 1.0}


def test_a_handler_that_raises_ends_the_feed_with_its_error(client):
    seen: list[dict] = []
    failures: list[BaseException] = []

    def handler(event: dict) -> None:
        seen.append(event)
        raise OSError("disk full")  # an OSError of the handler's, not of the socket's

    subscription = client.user.subscribe(handler, on_error=failures.append)
    try:
        new_user(client, "Raiser")
        new_user(client, "Raiser2")
        assert subscription.wait_for_offset(client.user.head(), 10)  # wakes when the feed ends
    finally:
        subscription.close()
    assert [str(e) for e in failures] == ["disk full"] and subscription.error is failures[0]
    assert len(seen) == 1 and subscription.connects == 1  # not retried as a dropped socket


def test_reads_carry_the_offset_of_the_clients_last_write(blog, server, monkeypatch, capsys):
    """`Dbsvc-After` (docs/guide/clients.md): none before the client's first write; then
    every read carries the highest offset its writes (any thread's) were answered with; a
    refused write changes nothing; writes carry none. What goes on the wire is read from
    http.client's own debug output (a request head is one `send:` line, a body another)."""
    client = blog.Client(f"http://127.0.0.1:{server.port}")
    monkeypatch.setattr("http.client.HTTPConnection.debuglevel", 1)
    head = re.compile(r"^send: b'(GET|HEAD|POST|PUT|PATCH|DELETE) [^ ]+ HTTP/1\.1\\r\\n(.*)'$")

    def sent() -> list[tuple[str, str | None]]:
        heads = [head.match(line) for line in capsys.readouterr().out.splitlines()]
        after = re.compile(r"Dbsvc-After: (\d+)\\r\\n")
        return [(m[1], (a[1] if (a := after.search(m[2])) else None)) for m in heads if m]

    client.user.list()
    assert sent() == [("GET", None)]
    uid = new_user(client, "After")
    client.user.get(uid)
    (post, _), (get, offset) = sent()
    assert (post, get) == ("POST", "GET") and offset is not None and int(offset) > 0
    with pytest.raises(blog.ApiError):
        new_user(client, "After")  # the same email: refused, nothing written
    client.user.get(uid)
    assert sent() == [("POST", None), ("GET", offset)]
    client.user.patch(uid, {"age": 5})
    client.user.list(limit=1)
    (patch, none), (get, later) = sent()
    assert (patch, none, get) == ("PATCH", None, "GET") and int(later) > int(offset)
