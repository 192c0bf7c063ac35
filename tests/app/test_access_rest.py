"""Access rules through a real server with real tokens (issue 31; docs/guide/rest.md,
"Access rules on these routes"): every row of the REST semantics, one server per module.

Notes are private to their owner unless shared; anyone with the `writer` role may create
(the owner comes from the token), only the owner may change (and not give the note away)
or delete, an admin may do everything. Tokens are signed with a key made here, by PyJWT (an independent library)."""

from __future__ import annotations

import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from support.server import start_server
from support.wskit import refusal, run

SCHEMA = """
model Note {
  id      int   @id
  owner   str   @filter @default(token.sub)
  title   str   @sort
  shared  bool  @filter @default(false)
  @allow(read, record.owner == token.sub or record.shared)
  @allow(create, token.role == "writer")
  @allow(update, record.owner == token.sub and new.owner == token.sub)
  @allow(delete, record.owner == token.sub)
  @allow(all, token.role == "admin")
}

model Audit {
  id    int  @id
  what  str
  @allow(all, token.role == "admin")
}
"""



@pytest.fixture(scope="module")
def keypair(tmp_path_factory):
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    path = tmp_path_factory.mktemp("keys") / "idp.pem"
    path.write_bytes(pem)
    return private, path


@pytest.fixture(scope="module")
def schema(tmp_path_factory):
    path = tmp_path_factory.mktemp("schema") / "notes.dbs"
    path.write_text(SCHEMA)
    return path


@pytest.fixture(scope="module")
def server(schema, keypair, tmp_path_factory):
    data = tmp_path_factory.mktemp("notes") / "data"
    (data / "acme").mkdir(parents=True)
    env = {"SERVICE_JWT_PUBKEY": str(keypair[1]), "SERVICE_JWT_ALG": "ES256", "SERVICE_TENANT": "acme"}
    server = start_server(schema, data, env)
    yield server
    server.stop()


class User:
    """A token's bearer: requests to the server with `Authorization` set."""

    def __init__(self, server, private, **claims) -> None:
        body = {"exp": int(time.time()) + 600, "tenant": "acme", **claims}
        self.server = server
        self.auth = {"Authorization": f"Bearer {jwt.encode(body, private, algorithm='ES256')}"}

    def __call__(self, method: str, path: str, body=None):
        return self.server.request(method, path, body=body, headers=self.auth)


@pytest.fixture(scope="module")
def users(server, keypair):
    private = keypair[0]
    return {
        "ann": User(server, private, sub="ann", role="writer"),
        "bob": User(server, private, sub="bob", role="writer"),
        "eve": User(server, private, sub="eve", role="reader"),
        "root": User(server, private, sub="root", role="admin"),
        "anon": User(server, private),  # valid, but no sub and no role
    }


def note(user, title: str, **fields) -> int:
    reply = user("POST", "/api/note", {"title": title, **fields})
    assert reply.status == 201, reply
    return reply.json["id"]


def without_request_id(reply) -> dict:
    return {k: v for k, v in reply.json.items() if k != "request_id"}


def state(server) -> tuple:
    snapshot = server.get("/snapshot").json
    return snapshot["watermarks"], snapshot["offset"]


def test_a_list_shows_each_token_only_what_it_may_read(users):
    ann, bob, eve, root = users["ann"], users["bob"], users["eve"], users["root"]
    tag = f"list-{time.monotonic_ns()}"
    mine = [note(ann, f"{tag} a{i}") for i in range(5)]
    shared = note(bob, f"{tag} b-shared", shared=True)
    for i in range(3):
        note(bob, f"{tag} b{i}")
    page = ann("GET", "/api/note?sort=title&limit=3&offset=1").json
    visible = ann("GET", "/api/note?sort=title&limit=1000").json
    ids = [r["id"] for r in visible["data"] if r["title"].startswith(tag)]
    assert ids == [*mine, shared]  # titles sort a0..a4, b-shared
    assert {r["owner"] for r in visible["data"]} <= {"ann"} | {r["owner"] for r in visible["data"] if r["shared"]}
    assert page["total"] == visible["total"] and page["data"] == visible["data"][1:4]
    # a filter on the rule's own field: another owner's private notes are an empty page
    assert ann("GET", "/api/note?owner=bob&shared=false").json == {"data": [], "total": 0, "limit": 100, "offset": 0}
    eve_titles = {r["title"] for r in eve("GET", "/api/note?limit=1000").json["data"]}
    assert f"{tag} b-shared" in eve_titles and not any(t.startswith(f"{tag} a") for t in eve_titles)
    assert root("GET", "/api/note?limit=1000").json["total"] >= 9


def test_a_hidden_record_is_404_with_the_body_of_a_missing_one(users):
    ann, bob = users["ann"], users["bob"]
    hidden = note(bob, "bob's secret")
    for method, body in (("GET", None), ("PUT", {"title": "t"}), ("PATCH", {"title": "t"}), ("DELETE", None)):
        seen = ann(method, f"/api/note/{hidden}", body)
        absent = ann(method, "/api/note/999999", body)
        assert (seen.status, absent.status) == (404, 404), method
        assert without_request_id(seen) == {**without_request_id(absent), "detail": f"Note {hidden} does not exist"}
    assert bob("GET", f"/api/note/{hidden}").json["title"] == "bob's secret"


def test_a_readable_record_the_write_rule_refuses_is_403_and_changes_nothing(server, users):
    ann, bob = users["ann"], users["bob"]
    shared = note(bob, "bob's shared note", shared=True)
    before = state(server)
    for method, body, operation in (
        ("PATCH", {"title": "ann's now"}, "update"),
        ("PUT", {"owner": "bob", "title": "ann's now", "shared": True}, "update"),
        ("DELETE", None, "delete"),
    ):
        reply = ann(method, f"/api/note/{shared}", body)
        assert (reply.status, reply.json["code"]) == (403, "forbidden"), method
        assert reply.json["detail"] == f"{operation} of Note is not allowed by the model's access rules for this token"
        assert "bob" not in reply.body.decode()  # never the record's data
    assert state(server) == before
    assert ann("GET", f"/api/note/{shared}").json["title"] == "bob's shared note"
    assert bob("PATCH", f"/api/note/{shared}", {"title": "still bob's"}).status == 200


def test_an_update_that_gives_a_record_away_is_refused(users):
    ann = users["ann"]
    mine = note(ann, "mine")
    assert ann("PATCH", f"/api/note/{mine}", {"owner": "bob"}).status == 403
    assert ann("GET", f"/api/note/{mine}").json["owner"] == "ann"


def test_a_create_the_rule_refuses_is_403_and_stores_nothing(server, users):
    before = state(server)
    reply = users["eve"]("POST", "/api/note", {"title": "a reader's note"})
    assert (reply.status, reply.json["code"]) == (403, "forbidden")
    assert reply.json["detail"] == "create of Note is not allowed by the model's access rules for this token"
    assert state(server) == before


def test_the_owner_comes_from_the_token_and_cannot_be_forged(server, users):
    ann = users["ann"]
    created = note(ann, "filled")
    assert ann("GET", f"/api/note/{created}").json["owner"] == "ann"
    assert ann("GET", f"/api/note/{note(ann, 'same', owner='ann')}").json["owner"] == "ann"
    before = state(server)
    forged = ann("POST", "/api/note", {"title": "forged", "owner": "bob"})
    assert (forged.status, forged.json["code"]) == (403, "forbidden")
    assert "owner" in forged.json["detail"] and "sub" in forged.json["detail"]
    no_sub = users["anon"]("POST", "/api/note", {"title": "nobody's"})
    assert no_sub.status == 403 and "sub" in no_sub.json["detail"]
    assert state(server) == before


def test_as_of_asks_the_rule_of_the_record_as_it_was(server, users):
    ann, bob = users["ann"], users["bob"]
    once_shared = note(bob, "shared, then not", shared=True)
    watermark = server.get("/snapshot").json["watermarks"]["Note"]
    assert bob("PATCH", f"/api/note/{once_shared}", {"shared": False}).status == 200
    assert ann("GET", f"/api/note/{once_shared}").status == 404
    then = ann("GET", f"/api/note/{once_shared}?as_of={watermark}")
    assert (then.status, then.json["shared"]) == (200, True)
    listed = ann("GET", f"/api/note?as_of={watermark}&limit=1000").json["data"]
    assert once_shared in [r["id"] for r in listed]
    assert once_shared not in [r["id"] for r in ann("GET", "/api/note?limit=1000").json["data"]]


def test_metrics_count_the_refusals_by_operation(server, users):
    ann, bob = users["ann"], users["bob"]
    hidden = note(bob, "counted")
    before = server.get("/metrics").json["refused"]
    ann("GET", f"/api/note/{hidden}")
    ann("DELETE", f"/api/note/{hidden}")
    users["eve"]("POST", "/api/note", {"title": "no"})
    ann("POST", "/api/note", {"title": "forged", "owner": "bob"})  # the token default refuses: a create
    ann("GET", "/api/note")
    # a socket that could see nothing is refused at its upgrade, counted in the same map
    status, problem, _headers = run(refusal(server, "/subscribe/audit", additional_headers=ann.auth))
    assert (status, problem["code"]) == (403, "forbidden")
    after = server.get("/metrics").json["refused"]
    assert {op: after[op] - before[op] for op in after} == {
        "list": 0, "get": 1, "create": 2, "update": 0, "delete": 1, "subscribe": 1, "replicate": 0
    }


def test_a_schema_with_rules_and_no_guard_refuses_to_start(schema, tmp_path):
    import subprocess
    import sys

    from support.server import ROOT, service_env

    result = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(schema)],
        cwd=ROOT, env=service_env(tmp_path / "data"), capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("dbsvc: error: the schema has access rules") and "SERVICE_JWT_PUBKEY" in result.stderr
    assert not (tmp_path / "data").exists()
