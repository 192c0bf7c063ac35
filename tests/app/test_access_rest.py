"""Access rules through a real server with real tokens (issue 31; docs/guide/rest.md,
"Access rules on these routes"): every row of the REST semantics, one server per module.

Notes are private to their owner unless shared; anyone with the `writer` role may create
(the owner comes from the token), only the owner may change (and not give the note away)
or delete, an admin may do everything. Tokens are signed with a key made here, by PyJWT (an independent library)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from dbsvc.compiler import compile_schema
from dbsvc.runtime import json_bytes
from dbsvc.schema import load_schema
from dbsvc.storage import Store
from support.accesskit import Bearer as User
from support.accesskit import keypair, start_ruled_server
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
def keys(tmp_path_factory):
    return keypair(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def schema(tmp_path_factory):
    path = tmp_path_factory.mktemp("schema") / "notes.dbs"
    path.write_text(SCHEMA)
    return path


@pytest.fixture(scope="module")
def server(schema, keys, tmp_path_factory):
    server = start_ruled_server(schema, keys[1], tmp_path_factory.mktemp("notes") / "data")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def users(server, keys):
    private = keys[0]
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


def test_operators_and_cursor_pages_count_and_show_only_what_the_token_may_read(users):
    """Issue 34: a range, a prefix and a cursor walk under a row rule (owner or shared)."""
    ann, bob = users["ann"], users["bob"]
    tag = f"ops-{time.monotonic_ns()}"
    mine = [note(ann, f"{tag} a{i}") for i in range(4)]
    shared = note(bob, f"{tag} b-shared", shared=True)
    for i in range(3):
        note(bob, f"{tag} b{i}")
    first = ann("GET", f"/api/note?title__prefix={tag}&sort=-title&limit=2")
    assert first.json["total"] == 5 and [r["id"] for r in first.json["data"]] == [shared, mine[3]]
    walked, path = [], f"/api/note?title__prefix={tag}&sort=-title&limit=2"
    while path:
        reply = ann("GET", path)
        assert reply.status == 200 and reply.json["total"] == 5, reply
        walked += [r["id"] for r in reply.json["data"]]
        link = reply.headers.get("link")
        path = link[1 : link.index(">")] if link else None
    assert walked == [shared, *reversed(mine)]
    ranged = ann("GET", f"/api/note?title__gt={tag}%20a1&title__lt={tag}%20b&limit=10").json
    assert (ranged["total"], [r["id"] for r in ranged["data"]]) == (2, mine[2:])


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


def test_a_ruled_get_answers_its_dict_s_json_which_is_the_stored_text(server, users, schema):
    """A model with rules is read as a dict (its rule asks the record), never sent as its
    stored text unread (app.py `read`, session 28): the body is that dict's JSON, equal to
    the stored text byte for byte, live and `as_of`, and to the record in a list page."""
    ann, bob = users["ann"], users["bob"]
    mine = note(ann, 'odd, "ruled" ✓ \t text')
    watermark = server.get("/snapshot").json["watermarks"]["Note"]
    assert ann("PATCH", f"/api/note/{mine}", {"title": "patched, ✓"}).status == 200
    assert bob("GET", f"/api/note/{mine}").status == 404  # the rule still reads the dict
    now, then = ann("GET", f"/api/note/{mine}"), ann("GET", f"/api/note/{mine}?as_of={watermark}")
    module = compile_schema(load_schema(str(schema)))
    store = Store.open(str(server.data_dir / "acme"), module.MODELS, module.DESCRIPTION, readonly=True)
    try:
        table = store.table("Note")
        assert now.body == table.live[mine] == json_bytes(now.json)
        assert then.body == table.get_as_of(mine, watermark)[0] and then.json["title"] == 'odd, "ruled" ✓ \t text'
    finally:
        store.close()
    listed = ann("GET", "/api/note?owner=ann&limit=1000").json["data"]
    assert json_bytes([r for r in listed if r["id"] == mine][0]) == now.body


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
        "list": 0,
        "get": 1,
        "create": 2,
        "update": 0,
        "delete": 1,
        "subscribe": 1,
        "replicate": 0,
    }


def test_a_schema_with_rules_and_no_guard_refuses_to_start(schema, tmp_path):
    import subprocess
    import sys

    from support.server import ROOT, service_env

    result = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(schema)],
        cwd=ROOT,
        env=service_env(tmp_path / "data"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert (
        result.stderr.startswith("dbsvc: error: the schema has access rules") and "SERVICE_JWT_PUBKEY" in result.stderr
    )
    assert not (tmp_path / "data").exists()


# -- a state machine: random writes by several tokens, every answer held to a model ------------


class AccessMachine(RuleBasedStateMachine):
    """Random creates, patches, puts and deletes by tokens of different `sub` and `role`
    against the notes server, allowed and refused. A model of every note predicts each
    answer from the schema's rules (201/200/204, 403, 404); after each step every token's
    list (its page and `total`) and every note's GET must be exactly what its rules let it
    see, and a refused write must have changed nothing (the offset did not move)."""

    server: Any = None
    users: dict[str, User] = {}
    WHO = ("ann", "bob", "eve", "root")
    ROLE = {"ann": "writer", "bob": "writer", "eve": "reader", "root": "admin"}

    @initialize()
    def start(self) -> None:
        root = self.users["root"]
        for note in root("GET", "/api/note?limit=1000").json["data"]:  # an admin sees and may delete all
            assert root("DELETE", f"/api/note/{note['id']}").status == 204
        self.notes: dict[int, dict] = {}

    # the rules of SCHEMA, written again as plain Python
    def readable(self, who: str, note: dict) -> bool:
        return self.ROLE[who] == "admin" or note["owner"] == who or note["shared"] is True

    def may_update(self, who: str, before: dict, after: dict) -> bool:
        return self.ROLE[who] == "admin" or (before["owner"] == who and after["owner"] == who)

    def may_delete(self, who: str, note: dict) -> bool:
        return self.ROLE[who] == "admin" or note["owner"] == who

    def offset(self) -> int:
        return self.server.get("/snapshot").json["offset"]

    def refused(self, reply, status: int, before: int) -> None:
        assert reply.status == status, reply
        assert self.offset() == before  # nothing written

    def target(self, data) -> int:
        """A note's id, or one no note has (what is drawn never depends on the server's ids,
        so hypothesis can replay and shrink a run)."""
        ids = sorted(self.notes)
        position = data.draw(st.integers(0, 15))
        return ids[position % len(ids)] if ids and position < 12 else 10**6 + position

    @rule(who=st.sampled_from(WHO), title=st.sampled_from(["a", "b", "c"]), shared=st.booleans())
    def create(self, who: str, title: str, shared: bool) -> None:
        before = self.offset()
        reply = self.users[who]("POST", "/api/note", {"title": title, "shared": shared})
        if self.ROLE[who] in ("writer", "admin"):
            assert reply.status == 201, reply
            self.notes[reply.json["id"]] = {"id": reply.json["id"], "owner": who, "title": title, "shared": shared}
        else:
            self.refused(reply, 403, before)

    @rule(who=st.sampled_from(WHO), data=st.data(), put=st.booleans())
    def change(self, who: str, data, put: bool) -> None:
        key = self.target(data)
        note = self.notes.get(key)
        fields = data.draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "title": st.sampled_from(["a", "b", "c"]),
                    "shared": st.booleans(),
                    "owner": st.sampled_from(self.WHO),
                },
            )
        )
        if put:
            base = note or {"owner": who, "title": "x", "shared": False}
            body = {"owner": base["owner"], "title": base["title"], "shared": base["shared"], **fields}
        else:
            body = fields
        before = self.offset()
        reply = self.users[who]("PUT" if put else "PATCH", f"/api/note/{key}", body)
        if note is None or not self.readable(who, note):
            return self.refused(reply, 404, before)
        after = {**note, **body}
        if not self.may_update(who, note, after):
            return self.refused(reply, 403, before)
        assert (reply.status, reply.json) == (200, after)
        self.notes[key] = after

    @rule(who=st.sampled_from(WHO), data=st.data())
    def delete(self, who: str, data) -> None:
        key = self.target(data)
        note = self.notes.get(key)
        before = self.offset()
        reply = self.users[who]("DELETE", f"/api/note/{key}")
        if note is None or not self.readable(who, note):
            return self.refused(reply, 404, before)
        if not self.may_delete(who, note):
            return self.refused(reply, 403, before)
        assert reply.status == 204, reply
        del self.notes[key]

    @invariant()
    def every_token_sees_exactly_what_its_rules_allow(self) -> None:
        for who in self.WHO:
            user = self.users[who]
            visible = sorted((n for n in self.notes.values() if self.readable(who, n)), key=lambda n: n["id"])
            listed = user("GET", "/api/note?limit=1000").json
            assert (listed["data"], listed["total"]) == (visible, len(visible)), who
            page = user("GET", "/api/note?sort=title&limit=2&offset=1").json
            in_order = sorted(visible, key=lambda n: (n["title"], n["id"]))
            assert (page["data"], page["total"]) == (in_order[1:3], len(visible)), who
            for key, note in self.notes.items():
                reply = user("GET", f"/api/note/{key}")
                if self.readable(who, note):
                    assert (reply.status, reply.json) == (200, note)
                else:
                    assert (reply.status, reply.json["detail"]) == (404, f"Note {key} does not exist")


def test_every_answer_follows_a_model_of_the_rules(server, users):
    AccessMachine.server, AccessMachine.users = server, {who: users[who] for who in AccessMachine.WHO}
    runner = AccessMachine.TestCase
    runner.settings = settings(
        max_examples=30,
        stateful_step_count=15,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    runner().runTest()


def test_a_read_through_a_rule_has_the_records_etag_and_a_hidden_one_fails_if_match_as_a_missing_one(users):
    """Issue 35: the ETag names the record version, whoever reads it; a record the token
    may not read has no version for it, so If-Match is 412 there as for a missing one (a
    404 would tell a hidden record from a missing one no better, but a client that sent
    If-Match learns its precondition failed), and nothing changes."""
    ann, bob, root = users["ann"], users["bob"], users["root"]
    shared = note(bob, "etag shared", shared=True)
    hidden = note(bob, "etag hidden")
    tag = root("GET", f"/api/note/{shared}").headers["etag"]
    assert ann("GET", f"/api/note/{shared}").headers["etag"] == tag == bob("GET", f"/api/note/{shared}").headers["etag"]
    before = state(ann.server)
    for method, body in (("PUT", {"title": "t"}), ("PATCH", {"title": "t"}), ("DELETE", None)):
        for path in (f"/api/note/{hidden}", "/api/note/999999"):
            reply = ann(method, path, body, headers={"If-Match": "*"})
            assert (reply.status, reply.json["code"]) == (412, "precondition_failed"), (method, path, reply)
            assert "etag" not in reply.headers
    assert state(ann.server) == before
    assert bob("GET", f"/api/note/{hidden}").json["title"] == "etag hidden"
