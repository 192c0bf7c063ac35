"""`POST /batch` through a real server (dbsvc/batchops.py, docs/guide/rest.md#batches-post-batch):
all or nothing, every op checked against the state the earlier ops leave, a refusal naming
its op and leaving the data byte for byte as it was."""

from __future__ import annotations

import itertools

import pytest

from support.accesskit import Bearer, keypair, start_ruled_server

_seq = itertools.count(1)
MODELS = ("user", "blog-post", "comment")


def email() -> str:
    return f"b{next(_seq)}@batch.io"


def new_user(**over) -> dict:
    return {"op": "create", "model": "user", "record": {"email": email(), "name": "Ann", **over}}


def everything(server) -> tuple[bytes, list[bytes]]:
    """The log's bytes and every model's full list, as the client sees them."""
    log = (server.data_dir / "default" / "log").read_bytes()
    return log, [server.get(f"/api/{m}?limit=1000").body for m in MODELS]


@pytest.fixture(scope="module")
def seeded(blog):
    """A user with a post (so deleting the user is refused), shared by the module."""
    uid = blog.post("/api/user", {"email": email(), "name": "Owner"}).json["id"]
    pid = blog.post("/api/blog-post", {"author_id": uid, "title": "t", "body": "b", "score": 1}).json["id"]
    return blog, uid, pid


def test_a_batch_creates_a_parent_and_its_children(blog):
    reply = blog.post(
        "/batch",
        {
            "ops": [
                new_user(),
                {
                    "op": "create",
                    "model": "BlogPost",
                    "record": {"author_id": {"$op": 0}, "title": "first", "body": "b", "score": 1},
                },
                {
                    "op": "create",
                    "model": "blog-post",
                    "record": {"author_id": {"$op": 0}, "title": "second", "body": "b", "score": 2},
                },
                {
                    "op": "create",
                    "model": "comment",
                    "record": {"post_id": {"$op": 1}, "author_id": {"$op": 0}, "body": "hello"},
                },
                {"op": "patch", "model": "blog-post", "id": {"$op": 2}, "record": {"published": True}},
            ]
        },
    )
    assert reply.status == 200, reply
    body = reply.json
    results = body["results"]
    assert [r["status"] for r in results] == [201, 201, 201, 201, 200]
    uid, p1, p2, cid = (r["id"] for r in results[:4])
    assert body["last"] == body["first"] + 4
    assert reply.headers["dbsvc-offset"] == str(body["last"])
    assert [r["etag"] for r in results] == [f'"{o}"' for o in range(body["first"], body["last"] + 1)]
    assert results[4]["record"] == blog.get(f"/api/blog-post/{p2}").json
    assert results[4]["record"]["published"] is True
    assert blog.get(f"/api/blog-post/{p1}").json["author_id"] == uid
    assert blog.get(f"/api/comment/{cid}").json["post_id"] == p1


def test_a_later_op_sees_what_an_earlier_op_did(seeded):
    """Delete a post, then its author: alone the second is refused (referenced); after the
    first in the same batch it is allowed."""
    blog, _uid, _pid = seeded
    uid = blog.post("/api/user", {"email": email(), "name": "Gone"}).json["id"]
    pid = blog.post("/api/blog-post", {"author_id": uid, "title": "t", "body": "b", "score": 1}).json["id"]
    reply = blog.post(
        "/batch",
        {"ops": [{"op": "delete", "model": "blog-post", "id": pid}, {"op": "delete", "model": "user", "id": str(uid)}]},
    )
    assert reply.status == 200, reply
    assert reply.json["results"] == [{"status": 204, "id": pid}, {"status": 204, "id": uid}]
    assert blog.get(f"/api/user/{uid}").status == 404


def _failing(kind: str, uid: int, pid: int) -> tuple[dict, int, str]:
    """An op that alone gets `status` with `code`."""
    return {
        "unique": (
            {"op": "create", "model": "user", "record": {"email": "dup@batch.io", "name": "X"}},
            409,
            "unique_violation",
        ),
        "foreign key": (
            {
                "op": "create",
                "model": "blog-post",
                "record": {"author_id": 10**9, "title": "t", "body": "b", "score": 1},
            },
            409,
            "foreign_key_violation",
        ),
        "referenced": ({"op": "delete", "model": "user", "id": uid}, 409, "referenced"),
        "missing": ({"op": "update", "model": "blog-post", "id": 10**9, "record": {}}, 404, "not_found"),
        "constraint": (new_user(name=""), 422, "constraint_violation"),
        "shape": ({"op": "upsert", "model": "user"}, 400, "bad_request"),
        "unknown model": ({"op": "delete", "model": "nope", "id": 1}, 400, "bad_request"),
    }[kind]


@pytest.mark.parametrize(
    "kind", ["unique", "foreign key", "referenced", "missing", "constraint", "shape", "unknown model"]
)
def test_a_failing_op_at_any_position_refuses_the_whole_batch(seeded, kind):
    blog, uid, pid = seeded
    if blog.get("/api/user?email=dup@batch.io").json["total"] == 0:
        assert blog.post("/api/user", {"email": "dup@batch.io", "name": "Dup"}).status == 201
    bad, status, code = _failing(kind, uid, pid)
    good = [
        new_user(),
        {"op": "patch", "model": "blog-post", "id": pid, "record": {"title": "changed"}},
        {"op": "create", "model": "comment", "record": {"post_id": pid, "author_id": uid, "body": "c"}},
    ]
    for position in range(len(good) + 1):
        before = everything(blog)
        ops = [*good[:position], bad, *good[position:]]
        reply = blog.post("/batch", {"ops": ops})
        assert reply.status == status, (position, reply)
        assert reply.json["code"] == code
        assert reply.json["op"] == position
        assert reply.json["detail"].startswith(f"op {position}: ")
        assert everything(blog) == before, f"{kind} at {position}: the data changed"


@pytest.mark.parametrize(
    "body, detail",
    [
        ([], "a batch is a JSON object"),
        ({}, "'ops' must be a list"),
        ({"ops": []}, "'ops' is empty"),
        ({"ops": [], "atomic": False}, "unknown batch key 'atomic'"),
        ({"ops": [5]}, "op 0: an op is a JSON object"),
        ({"ops": [{"op": {}, "model": "user", "id": 0}]}, "op 0: unknown op {}: expected one of create"),
        ({"ops": [{"op": "create", "model": "user"}]}, "op 0: a create op needs 'record'"),
        ({"ops": [{"op": "delete", "model": "user"}]}, "op 0: a delete op needs 'id'"),
        ({"ops": [{"op": "delete", "model": "user", "id": 1.5}]}, "op 0: 'id' must be a User id"),
        ({"ops": [{"op": "delete", "model": "user", "id": True}]}, "op 0: 'id' must be a User id"),
        (
            {"ops": [{"op": "delete", "model": "user", "id": 2.5}]},
            "op 0: 'id' must be a User id (a number or a string), got 2.5",
        ),
        ({"ops": [{"op": "create", "model": "user", "record": []}]}, "op 0: 'record' must be a JSON object"),
        ({"ops": [{**new_user(), "if_match": '"3"'}]}, "op 0: a create op takes no 'if_match'"),
        (
            {"ops": [{"op": "delete", "model": "user", "id": 1, "if_match": 3}]},
            "op 0: 'if_match' must be a string, got 3",
        ),
        ({"ops": [{"op": "delete", "model": "user", "id": 1, "if_match": "3"}]}, "op 0: 'if_match' '3' is malformed"),
        ({"ops": [{"op": "delete", "model": "user", "id": {"$op": 0}}]}, "op 0: id {'$op': 0} must name an earlier op"),
    ],
)
def test_a_batch_of_a_bad_shape_is_400_and_changes_nothing(seeded, body, detail):
    blog, _uid, _pid = seeded
    before = everything(blog)
    reply = blog.post("/batch", body)
    assert reply.status == 400, reply
    assert reply.json["detail"].startswith(detail), reply.json["detail"]
    assert everything(blog) == before


def test_if_match_holds_against_the_state_the_earlier_ops_leave(seeded):
    blog, uid, _pid = seeded
    tag = blog.get(f"/api/user/{uid}").headers["etag"]
    before = everything(blog)
    # the first op moves the user to a new version: the second's If-Match of the old one fails
    ops = [
        {"op": "patch", "model": "user", "id": uid, "if_match": tag, "record": {"name": "Bo"}},
        {"op": "patch", "model": "user", "id": uid, "if_match": tag, "record": {"name": "Cy"}},
    ]
    reply = blog.post("/batch", {"ops": ops})
    assert reply.status == 412, reply
    assert reply.json["code"] == "precondition_failed" and reply.json["op"] == 1
    assert reply.json["detail"].startswith(f"op 1: If-Match {tag} does not match: User {uid} is at version ")
    assert everything(blog) == before  # the first op's patch is not kept either
    # each op naming the version the one before it gave: both go through
    first = int(tag.strip('"'))
    ops[1]["if_match"] = f'W/"0", "{blog.get("/snapshot").json["offset"] + 1}"'
    reply = blog.post("/batch", {"ops": ops})
    assert reply.status == 200, reply
    assert [r["etag"] for r in reply.json["results"]] == [f'"{reply.json["first"]}"', f'"{reply.json["last"]}"']
    assert reply.json["first"] > first
    assert blog.get(f"/api/user/{uid}").headers["etag"] == reply.json["results"][1]["etag"]


def test_if_match_on_a_missing_record_is_412_and_star_matches_any_existing_one(seeded):
    blog, uid, _pid = seeded
    before = everything(blog)
    reply = blog.post("/batch", {"ops": [{"op": "delete", "model": "user", "id": 987654, "if_match": "*"}]})
    assert reply.status == 412 and reply.json["op"] == 0, reply
    assert reply.json["detail"] == "op 0: If-Match * does not match: User 987654 does not exist"
    assert everything(blog) == before
    reply = blog.post("/batch", {"ops": [{"op": "patch", "model": "user", "id": uid, "if_match": "*", "record": {}}]})
    assert reply.status == 200, reply


def test_an_integral_float_id_names_the_integer_id(seeded):
    # JSON Schema's integer takes 7.0 (the OpenAPI document's id is one), as an int field does
    blog, uid, _pid = seeded
    reply = blog.post("/batch", {"ops": [{"op": "patch", "model": "user", "id": float(uid), "record": {}}]})
    assert reply.status == 200 and reply.json["results"][0]["id"] == uid, reply


def test_a_batch_over_the_op_limit_is_400(seeded):
    blog, _uid, _pid = seeded
    reply = blog.post("/batch", {"ops": [new_user() for _ in range(1001)]})
    assert reply.status == 400 and reply.json["limit"] == 1000
    assert reply.json["detail"] == "a batch holds at most 1000 ops, got 1001: split it"
    full = blog.post("/batch", {"ops": [new_user() for _ in range(1000)]})
    assert full.status == 200 and len(full.json["results"]) == 1000


def test_an_op_ref_of_the_wrong_model_is_400(seeded):
    blog, _uid, _pid = seeded
    ops = [
        new_user(),
        {"op": "create", "model": "comment", "record": {"post_id": {"$op": 0}, "author_id": 1, "body": "c"}},
    ]
    reply = blog.post("/batch", {"ops": ops})
    assert reply.status == 400
    assert reply.json["detail"] == "op 1: post_id {'$op': 0} names a User (op 0), expected a BlogPost"


def test_batch_takes_only_post(blog):
    reply = blog.get("/batch")
    assert reply.status == 405
    assert reply.headers["allow"] == "POST"


RULED = """
model Post {
  id int @id
  author str @filter @default(token.sub)
  title str
  @allow(read, true)
  @allow(create delete, record.author == token.sub)
  @allow(update, record.author == token.sub and new.author == record.author)
}
"""


def test_access_rules_apply_to_each_op(tmp_path):
    """An op the token may not do is 403 for the whole batch; without a token, 401."""
    schema = tmp_path / "ruled.dbs"
    schema.write_text(RULED)
    private, key = keypair(tmp_path)
    server = start_ruled_server(schema, key, tmp_path / "data")
    try:
        alice, bob = Bearer(server, private, sub="alice"), Bearer(server, private, sub="bob")
        assert alice("POST", "/api/post", {"title": "mine"}).status == 201
        assert (
            server.post("/batch", {"ops": [{"op": "create", "model": "post", "record": {"title": "x"}}]}).status == 401
        )
        ops = [
            {"op": "create", "model": "post", "record": {"title": "bob's"}},
            {"op": "patch", "model": "post", "id": 1, "record": {"title": "taken"}},
        ]
        reply = bob("POST", "/batch", {"ops": ops})
        assert reply.status == 403, reply
        assert reply.json["op"] == 1
        assert alice("GET", "/api/post").json["total"] == 1
        reply = alice(
            "POST", "/batch", {"ops": [ops[0], {"op": "patch", "model": "post", "id": 1, "record": {"title": "t"}}]}
        )
        assert reply.status == 200, reply
        assert [r["status"] for r in reply.json["results"]] == [201, 200]
    finally:
        server.stop()
