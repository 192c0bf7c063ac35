"""Issue 30 item 2 through a real server: a write whose log frame the next start would refuse
is answered 413 `payload_too_large` naming the model, the size and the limit, changes
nothing, and the server starts again on the same data with the record as it was.

The server runs with SERVICE_MAX_BODY at its largest allowed value (half a frame); a body
under it can still make a larger record (numbers in a `json` field are stored in their
canonical form: `1e15` is `1000000000000000.0`), which is how these bodies get past the
body limit to the store's record limit. Real sizes, tens of MB per request: the PUT and
DELETE cases run with `-m slow`.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from dbsvc.storage.events import EventKind, event_payload, record_limit
from dbsvc.storage.logfile import MAX_PAYLOAD, encode_frame
from dbsvc.storage.tenants import create_tenant
from support.server import ROOT, start_server
from support.storage import open_store, user

BLOG = ROOT / "schemas" / "blog.dbs"
MAX_RECORD = record_limit(MAX_PAYLOAD)
ENV = {"SERVICE_MAX_BODY": str(MAX_RECORD), "SERVICE_TENANT": "t"}
JSON = {"Content-Type": "application/json"}
FLOATS = 1_900_000  # "1e15," is 5 bytes of body and 19 stored: 9.5 MB in, 36 MB stored


def floats_body(**fields) -> bytes:
    """A User body whose `profile` is FLOATS copies of 1e15, written short."""
    head = json.dumps(fields)[1:-1]
    return f'{{{head}{", " if head else ""}"profile": [{",".join(["1e15"] * FLOATS)}]}}'.encode()


def start(data):
    # Each request here carries or stores tens of MB, which a loaded host turns into tens of
    # seconds (a PATCH: 13 s at load 18); 30 s, the kit's default, was hit at load 25. A server
    # that is right answers well before either bound; one that hangs still fails.
    return start_server(BLOG, data, ENV, timeout=120, request_timeout=300)


def restarted(server):
    assert server.stop(timeout=120) == 0, "".join(server.log)
    return start(server.data_dir)


def problem(reply) -> dict:
    assert reply.status == 413, reply
    assert reply.headers["content-type"].startswith("application/problem+json")
    body = json.loads(reply.body)
    assert body["code"] == "payload_too_large" and body["model"] == "User"
    return body


def check_record_too_large(reply) -> None:
    body = problem(reply)
    assert body["size"] > MAX_RECORD and body["limit"] == MAX_RECORD
    assert body["detail"].startswith(
        f"record too large: the User record is {body['size']} bytes of JSON, the limit is {MAX_RECORD}"
    )


def tenant_data(tmp_path):
    data = tmp_path / "data"
    create_tenant(str(data), "t")
    return data


def test_a_post_of_a_record_over_the_limit_is_413_and_the_server_restarts(tmp_path):
    server = start(tenant_data(tmp_path))
    try:
        assert server.post("/api/user", {"email": "a@x", "name": "a"}).status == 201
        check_record_too_large(server.request("POST", "/api/user", floats_body(email="b@x", name="b"), JSON))
        server = restarted(server)
        assert server.get("/api/user").json["total"] == 1
    finally:
        server.stop()


@pytest.mark.slow  # the same rule near a small limit: tests/storage/test_storage_record_size.py
def test_a_put_of_a_record_over_the_limit_is_413_and_keeps_the_old_one(tmp_path):
    server = start(tenant_data(tmp_path))
    try:
        old = server.get(f"/api/user/{server.post('/api/user', {'email': 'a@x', 'name': 'a'}).json['id']}").json
        check_record_too_large(server.request("PUT", "/api/user/1", floats_body(email="a@x", name="a"), JSON))
        assert server.get("/api/user/1").json == old
        server = restarted(server)
        assert server.get("/api/user/1").json == old
    finally:
        server.stop()


def test_a_patch_making_an_80_mb_update_frame_is_413_and_the_server_restarts(tmp_path):
    # The case: a 30 MB record (allowed), then a PATCH whose record and previous
    # together are over the 64 MiB frame: before, 200 and a server that could not start.
    server = start(tenant_data(tmp_path))
    try:
        big = {"email": "a@x", "name": "a", "profile": "x" * 30_000_000}
        assert server.post("/api/user", big).status == 201
        check_record_too_large(server.request("PATCH", "/api/user/1", floats_body(), JSON))
        assert server.get("/api/user/1?projection=card").json == {"id": 1, "name": "a"}
        server = restarted(server)
        assert len(server.get("/api/user/1").json["profile"]) == 30_000_000
    finally:
        server.stop()


@pytest.mark.slow  # the same rule near a small limit: tests/storage/test_storage_oversized_delete.py
def test_a_delete_whose_frame_would_carry_an_old_record_too_large_is_204_and_reopens(tmp_path):
    # A record a version before the record limit stored with a frame of exactly 64 MiB at
    # offset 9, watermark 9: its delete frame, at 10 and 10, would be 2 bytes over, so it
    # carries the record with its largest value null (storage/events.py "Sizes"). Before:
    # 413, a record no client could delete.
    data = tenant_data(tmp_path)
    directory = str(data / "t")
    s = open_store(directory)
    try:
        for i in range(1, 9):
            asyncio.run(s.insert("User", user(i)))
    finally:
        s.close()
    rec = user(9, profile="")
    rec["profile"] = "x" * (MAX_PAYLOAD - len(event_payload(EventKind.INSERT, "User", 9, 9, 9, rec)))
    payload = event_payload(EventKind.INSERT, "User", 9, 9, 9, rec)
    assert len(payload) == MAX_PAYLOAD
    with open(os.path.join(directory, "log"), "ab") as f:
        f.write(encode_frame(9, payload))
    del payload, rec
    server = start(data)
    try:
        assert server.request("DELETE", "/api/user/9").status == 204
        assert server.get("/api/user/9").status == 404
        assert len(server.get("/api/user/9?as_of=9").json["profile"]) > 60_000_000  # before it: whole
        server = restarted(server)
        assert server.get("/api/user/9").status == 404
        assert server.get("/snapshot").json["offset"] == 10
    finally:
        server.stop()
    with open(os.path.join(directory, "log"), "rb") as f:
        f.seek(-200, os.SEEK_END)
        tail = f.read()
    assert tail.endswith(b'"profile":null},"omitted":["profile"]}')


def test_the_body_limit_check_still_comes_first(tmp_path):
    server = start(tenant_data(tmp_path))
    try:
        reply = server.request("POST", "/api/user", b"{" + b" " * MAX_RECORD + b"}", JSON)
        body = json.loads(reply.body)
        assert reply.status == 413 and body["limit"] == MAX_RECORD and "model" not in body
        assert body["detail"] == f"request body of {MAX_RECORD + 2} bytes is over the limit of {MAX_RECORD} bytes"
    finally:
        server.stop()
