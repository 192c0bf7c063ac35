"""`expand=` as a user meets it over REST (issue 34 item 4; docs/guide/queries.md,
"Embedded references"): the exact bytes of a get and a list, with a projection, at `as_of`,
walked by cursor, refused with a 400 that changes nothing, and under an access rule that
hides the referenced record. (The moment `as_of` names, read back from the log after a
restart: tests/storage/test_storage_instants.py.) Real servers on loopback ports, the blog demo schema and a
ruled schema of this file.
"""

from __future__ import annotations

import pytest

from support.accesskit import Bearer, keypair, start_ruled_server
from support.server import ROOT, start_server

JOINED = "2026-01-02T03:04:05Z"
ANN = f'{{"id":1,"email":"ann@example.com","name":"Ann","age":31,"role":"reader","joined":"{JOINED}","profile":null}}'


@pytest.fixture(scope="module")
def blog(tmp_path_factory):
    """A fresh blog server: Ann (1) and Bo (2), posts 1 and 3 by Ann, post 2 by Bo."""
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path_factory.mktemp("expand") / "data")
    for name, age in (("Ann", 31), ("Bo", None)):
        body = {"email": f"{name.lower()}@example.com", "name": name, "age": age, "joined": JOINED}
        assert server.post("/api/user", body).status == 201
    for author, title, score in ((1, "One", 1), (2, "Two", 2), (1, "Three", 3)):
        body = {"author_id": author, "title": title, "body": "b", "score": score}
        assert server.post("/api/blog-post", body).status == 201
    yield server
    server.stop()


def test_a_get_embeds_the_referenced_record_last_in_the_record(blog):
    reply = blog.get("/api/blog-post/1?expand=author_id")
    assert reply.status == 200
    assert reply.body == (
        b'{"id":1,"author_id":1,"title":"One","body":"b","published":false,"score":1.0,"tags":null,'
        b'"_expand":{"author_id":' + ANN.encode() + b"}}"
    )


def test_a_list_embeds_each_reference_with_the_referenced_projection(blog):
    reply = blog.get("/api/blog-post?expand=author_id:card&projection=summary&sort=-score")
    assert reply.status == 200
    assert reply.body == (
        b'{"data":['
        b'{"id":3,"title":"Three","score":3.0,"_expand":{"author_id":{"id":1,"name":"Ann"}}},'
        b'{"id":2,"title":"Two","score":2.0,"_expand":{"author_id":{"id":2,"name":"Bo"}}},'
        b'{"id":1,"title":"One","score":1.0,"_expand":{"author_id":{"id":1,"name":"Ann"}}}'
        b'],"total":3,"limit":100,"offset":0}'
    )


def test_expand_follows_filters_operators_sort_and_cursor_pages(blog):
    path = "/api/blog-post?score__gte=1&author_id=1&sort=-score&limit=1&projection=summary&expand=author_id:card"
    pages = []
    while path is not None:
        reply = blog.get(path)
        assert reply.status == 200, reply
        pages.append(reply.json)
        link = reply.headers.get("link")
        path = None if link is None else link[1 : link.index(">")]
        assert len(pages) < 10
    assert [p["total"] for p in pages] == [2, 2]
    assert [r for p in pages for r in p["data"]] == [
        {"id": 3, "title": "Three", "score": 3.0, "_expand": {"author_id": {"id": 1, "name": "Ann"}}},
        {"id": 1, "title": "One", "score": 1.0, "_expand": {"author_id": {"id": 1, "name": "Ann"}}},
    ]


def test_as_of_reads_the_referenced_record_as_it_was_at_that_moment(tmp_path):
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path / "data")
    try:
        assert server.post("/api/user", {"email": "a@example.com", "name": "Ann"}).status == 201
        assert server.post("/api/blog-post", {"author_id": 1, "title": "T", "body": "b", "score": 1}).status == 201
        assert server.request("PATCH", "/api/user/1", {"name": "Annie"}).status == 200
        assert server.request("PATCH", "/api/blog-post/1", {"title": "T2"}).status == 200
        assert server.request("PATCH", "/api/user/1", {"name": "Anne"}).status == 200
        # BlogPost watermark 1 lasted from its first row to its second: the last moment
        # of it saw Annie (User row 2), not yet Anne
        past = server.get("/api/blog-post/1?as_of=1&expand=author_id:card")
        assert past.status == 200
        assert (
            past.body
            == b'{"id":1,"author_id":1,"title":"T","body":"b","published":false,"score":1.0,"tags":null,"_expand":{"author_id":{"id":1,"name":"Annie"}}}'
        )
        assert past.headers["dbsvc-watermark"] == "1"
        listed = server.get("/api/blog-post?as_of=1&expand=author_id:card&projection=summary")
        assert listed.body == (
            b'{"data":[{"id":1,"title":"T","score":1.0,"_expand":{"author_id":{"id":1,"name":"Annie"}}}],'
            b'"total":1,"limit":100,"offset":0}'
        )
        now = server.get("/api/blog-post/1?as_of=2&expand=author_id:card&projection=summary")
        assert now.body == b'{"id":1,"title":"T2","score":1.0,"_expand":{"author_id":{"id":1,"name":"Anne"}}}'
    finally:
        server.stop()


@pytest.mark.parametrize(
    "query, detail",
    [
        (
            "expand=title",
            "cannot expand 'title'; @ref fields of BlogPost: author_id (each once, as field or field:projection)",
        ),
        (
            "expand=author_id:summary",
            "unknown projection 'summary' in expand 'author_id:summary'; author_id references User, "
            "projections of User: card",
        ),
        ("expand=author_id,author_id", "expand names 'author_id' twice in 'author_id,author_id'"),
        ("expand=author_id&expand=author_id", "'expand' given more than once"),
    ],
)
def test_a_bad_expand_is_400_naming_what_is_allowed_and_changes_nothing(blog, query, detail):
    before = blog.get("/api/blog-post").body, blog.get("/api/user").body
    for path in (f"/api/blog-post?{query}", f"/api/blog-post/1?{query}"):
        reply = blog.get(path)
        assert reply.status == 400, reply
        assert reply.headers["content-type"] == "application/problem+json"
        assert reply.json["code"] == "bad_query"
        assert reply.json["detail"] == detail
    assert (blog.get("/api/blog-post").body, blog.get("/api/user").body) == before


def test_expand_on_a_model_without_refs_says_so(blog):
    reply = blog.get("/api/user?expand=author_id")
    assert reply.status == 400
    assert reply.json["detail"] == (
        "cannot expand 'author_id': User has no @ref fields (expand embeds the record a @ref field points to)"
    )


RULED = """
model Person {
  id    int  @id
  name  str
  team  str  @filter
  @projection(card, id, name)
  @allow(read, record.team == token.team)
  @allow(write, token.role == "admin")
}

model Task {
  id        int   @id
  owner     int   @ref(Person) @filter
  reviewer  int?  @ref(Person)
  title     str   @sort
  @allow(all, token.sub != null)
}
"""


@pytest.fixture(scope="module")
def ruled(tmp_path_factory):
    """Persons 1 (team a) and 2 (team b); tasks 1 (owner 1, reviewer 2), 2 (owner 2, no reviewer)."""
    root = tmp_path_factory.mktemp("ruled")
    private, key_path = keypair(root)
    schema = root / "tasks.dbs"
    schema.write_text(RULED)
    server = start_ruled_server(schema, key_path, root / "data")
    admin = Bearer(server, private, sub="root", role="admin", team="a")
    for name, team in (("Ann", "a"), ("Bo", "b")):
        assert admin("POST", "/api/person", {"name": name, "team": team}).status == 201
    assert admin("POST", "/api/task", {"owner": 1, "reviewer": 2, "title": "first"}).status == 201
    assert admin("POST", "/api/task", {"owner": 2, "reviewer": None, "title": "second"}).status == 201
    yield server, private
    server.stop()


def test_a_referenced_record_the_token_may_not_read_is_left_out(ruled):
    server, private = ruled
    team_a = Bearer(server, private, sub="ann", team="a")
    reply = team_a("GET", "/api/task?expand=owner:card,reviewer:card")
    assert reply.status == 200
    assert reply.body == (
        b'{"data":['
        b'{"id":1,"owner":1,"reviewer":2,"title":"first","_expand":{"owner":{"id":1,"name":"Ann"}}},'
        b'{"id":2,"owner":2,"reviewer":null,"title":"second","_expand":{}}'
        b'],"total":2,"limit":100,"offset":0}'
    )
    # the same token may not read Person 2 itself: 404, as the entry is absent
    assert team_a("GET", "/api/person/2").status == 404
    team_b = Bearer(server, private, sub="bo", team="b")
    assert team_b("GET", "/api/task/1?expand=reviewer,owner").body == (
        b'{"id":1,"owner":1,"reviewer":2,"title":"first","_expand":{"reviewer":{"id":2,"name":"Bo","team":"b"}}}'
    )
