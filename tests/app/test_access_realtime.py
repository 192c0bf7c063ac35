"""Feeds under access rules through a real server and real tokens (docs/realtime.md,
"Access rules"): each user's sockets get only the records that user may see, an ownership
change is a delete to one and an insert to the other, a live query sees Removed/Added, a
socket that could see nothing is 403, and /replicate needs the schema's replicate rule.
Tokens are minted by PyJWT (an independent library) with a key made here."""

from __future__ import annotations

import asyncio
import time

import jwt
import pytest

from support.accesskit import TENANT, guard_env
from support.accesskit import keypair as make_keypair
from support.wskit import nothing_within, open_ws, recv_json, refusal, run

SCHEMA = """
[runtime]
replication = true

[auth]
issuer = "https://id.example.com/"
audience = "notes"

@allow(replicate, token.role == "replicator")

model Note {
  id     int  @id
  owner  str  @filter @default(token.sub)
  text   str
  @allow(all, record.owner == token.sub)
  @allow(get update, token.role == "admin")
}

model Audit {
  id    int  @id
  what  str
  @allow(read, token.role == "auditor")
}
"""


@pytest.fixture(scope="module")
def keypair(tmp_path_factory):
    return make_keypair(tmp_path_factory.mktemp("keys"))


def token(private, **claims) -> str:
    body = {"exp": int(time.time()) + 300, "tenant": TENANT, "iss": "https://id.example.com/", "aud": "notes"}
    body.update(claims)
    return jwt.encode(body, private, algorithm="ES256")


@pytest.fixture
def notes(serve, keypair, tmp_path):
    _private, path = keypair
    schema = tmp_path / "notes.dbs"
    schema.write_text(SCHEMA)
    data = tmp_path / "data"
    (data / TENANT).mkdir(parents=True)
    return serve(schema=schema, data_dir=data, env=guard_env(path))


def bearer(private, **claims) -> dict:
    return {"Authorization": f"Bearer {token(private, **claims)}"}


def test_each_user_sees_only_its_own_notes_and_an_ownership_change_moves_them(notes, keypair):
    private = keypair[0]
    ann, bo, admin = bearer(private, sub="ann"), bearer(private, sub="bo"), bearer(private, sub="root", role="admin")

    async def body():
        async with (
            open_ws(notes, "/subscribe/note", additional_headers=ann) as ann_feed,
            open_ws(notes, "/subscribe/note", additional_headers=bo) as bo_feed,
        ):
            created = await asyncio.to_thread(notes.post, "/api/note", {"owner": "ann", "text": "ann's"}, headers=ann)
            assert created.status == 201, created.body
            note_id = created.json["id"]
            got = await recv_json(ann_feed)
            assert (got["kind"], got["record"]["owner"]) == ("insert", "ann")
            await asyncio.to_thread(notes.post, "/api/note", {"owner": "bo", "text": "bo's"}, headers=bo)
            got = await recv_json(bo_feed)
            assert (got["kind"], got["record"]["owner"]) == ("insert", "bo")

            async with (
                open_ws(notes, "/live-query/note", additional_headers=ann) as ann_live,
                open_ws(notes, "/live-query/note", additional_headers=bo) as bo_live,
            ):
                init = await recv_json(ann_live)
                assert [r["owner"] for r in init["records"]] == ["ann"]
                init = await recv_json(bo_live)
                assert [r["owner"] for r in init["records"]] == ["bo"]

                moved = await asyncio.to_thread(
                    notes.request, "PATCH", f"/api/note/{note_id}", {"owner": "bo"}, headers=admin
                )
                assert moved.status == 200, moved.body
                left, entered = await recv_json(ann_feed), await recv_json(bo_feed)
                assert (left["kind"], left["record"]["owner"], "previous" in left) == ("delete", "ann", False)
                assert (entered["kind"], entered["record"]["owner"], "previous" in entered) == ("insert", "bo", False)
                assert left["offset"] == entered["offset"]
                removed, added = await recv_json(ann_live), await recv_json(bo_live)
                assert (removed["type"], removed["id"]) == ("Removed", note_id)
                assert (added["type"], added["record"]["owner"]) == ("Added", "bo")
                assert await nothing_within(ann_feed, 0.3)

    run(body())


def test_a_socket_that_could_see_nothing_is_refused(notes, keypair):
    private = keypair[0]

    async def body():
        for path in ("/subscribe/audit", "/live-query/audit"):
            status, problem, _headers = await refusal(notes, path, additional_headers=bearer(private, sub="ann"))
            assert (status, problem["code"]) == (403, "forbidden")
            assert "Audit" in problem["detail"]
        async with open_ws(notes, "/subscribe/audit", additional_headers=bearer(private, sub="x", role="auditor")):
            pass

    run(body())


def test_replication_needs_the_replicate_rule(notes, keypair):
    private = keypair[0]

    async def body():
        for path in ("/replicate", "/replicate/snapshot"):
            status, problem, _headers = await refusal(notes, path, additional_headers=bearer(private, sub="ann"))
            assert (status, problem["code"]) == (403, "forbidden")
        async with open_ws(notes, "/replicate", additional_headers=bearer(private, sub="r", role="replicator")):
            pass

    run(body())
