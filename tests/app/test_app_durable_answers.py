"""A write is answered only once it is durable, through a real server and a real fsync fault.

Two fault plans (`DBSVC_FAULT`, dbsvc/storage/files.py), one server each:

- `fsync:N:HOLD=<gate>`: the write's fsync (the Nth of the store) creates `<gate>.held`
  and waits for `<gate>`. While it waits the client has received no byte of the answer,
  and the server still answers other connections (the fsync runs off the event loop).
  Once the test creates the gate the answer arrives. The order of events is the proof;
  no clock is read.
- `fsync:N:EIO`: the write's fsync fails. The service then answers that write 503
  (`unavailable`) and turns the tenant read-only until it is restarted (commit.py, failure
  rules): every later write is 503, reads go on and see the state before the failed write.
  After a crash and a restart the failed write is absent, the writes acknowledged earlier
  are intact (the log is byte for byte what they made it), the @unique emails are where
  those writes left them, and the tenant takes writes again.

Each of POST, PUT, PATCH and DELETE is run through both.
"""

from __future__ import annotations

import http.client
import json
import select
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

TIMEOUT = 30.0  # generous: a loaded 2-core machine

KEEP = {"id": 1, "email": "keep@example.com", "name": "Keep", "age": 40}
TARGET = {"id": 2, "email": "target@example.com", "name": "Target", "age": 20}


# The write under test comes after `KEEP` and `TARGET` were created, one fsync each (one
# client waiting for each answer), so its fsync is the store's third.
WRITE_FSYNC = 3


@dataclass(frozen=True)
class Write:
    method: str
    path: str
    body: dict | None
    status: int


WRITES = {
    "POST": Write("POST", "/api/user", {"id": 3, "email": "new@example.com", "name": "New"}, 201),
    "PUT": Write("PUT", "/api/user/2", {"email": "changed@example.com", "name": "Changed"}, 200),
    "PATCH": Write("PATCH", "/api/user/2", {"email": "patched@example.com", "age": 21}, 200),
    "DELETE": Write("DELETE", "/api/user/2", None, 204),
}

WRITE_METHODS = pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))


def seed(server) -> None:
    for record in (KEEP, TARGET):
        reply = server.post("/api/user", record)
        assert reply.status == 201, reply


def send_raw(port: int, write: Write) -> socket.socket:
    """Send `write` on a new connection and return the socket, without reading anything."""
    body = b"" if write.body is None else json.dumps(write.body).encode()
    head = f"{write.method} {write.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
    if write.body is not None:
        head += "Content-Type: application/json\r\n"
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    sock.sendall(head.encode() + b"\r\n" + body)
    return sock


def read_answer(sock: socket.socket, method: str) -> tuple[int, bytes]:
    answer = http.client.HTTPResponse(sock, method=method)
    answer.begin()
    return answer.status, answer.read()


def wait_for_file(path: Path) -> str:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} did not appear within {TIMEOUT} s"
        time.sleep(0.01)
    return path.read_text()


def wait_for_log(server, *parts: str) -> str:
    """The first server log line holding every one of `parts` (the log is drained by a thread)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        for line in list(server.log):
            if all(part in line for part in parts):
                return line
        assert time.monotonic() < deadline, f"no log line with {parts} in:\n{''.join(server.log)}"
        time.sleep(0.01)


def has_bytes(sock: socket.socket, wait: float) -> bool:
    return bool(select.select([sock], [], [], wait)[0])


def current(server, key: int) -> dict | None:
    reply = server.get(f"/api/user/{key}")
    if reply.status == 404:
        return None
    assert reply.status == 200, reply
    return reply.json


def write_key(write: Write) -> int:
    return write.body["id"] if write.method == "POST" else int(write.path.rsplit("/", 1)[1])


def email_taken(server, email: str) -> bool:
    """Whether a new user with `email` is refused as a unique violation (a created probe is
    deleted again)."""
    reply = server.post("/api/user", {"email": email, "name": "Probe"})
    if reply.status == 201:
        assert server.request("DELETE", f"/api/user/{reply.json['id']}").status == 204
        return False
    assert (reply.status, reply.json["code"]) == (409, "unique_violation"), reply
    return True


def users(server) -> dict[int, dict]:
    reply = server.get("/api/user?limit=100")
    assert reply.status == 200, reply
    return {r["id"]: r for r in reply.json["data"]}


# -- a held fsync: no answer before it completes --------------------------------------------


@WRITE_METHODS
def test_write_is_not_answered_before_its_fsync_completes(serve, tmp_path, write):
    gate = tmp_path / "gate"
    held = tmp_path / "gate.held"
    server = serve(env={"DBSVC_FAULT": f"fsync:{WRITE_FSYNC}:HOLD={gate}"})
    seed(server)
    before = users(server)
    sock = send_raw(server.port, write)
    try:
        assert wait_for_file(held) == f"fsync:{WRITE_FSYNC}\n"  # the write's fsync has started
        # The loop is not blocked by the held fsync: another connection is served meanwhile.
        assert server.get("/health").status == 200
        assert users(server)[KEEP["id"]] == before[KEEP["id"]]
        # An answer sent before the fsync would be here already (it leaves in the turn that
        # applied the write, before the committer starts the fsync).
        assert not has_bytes(sock, 0.5), "the write was answered while its fsync was still running"
        gate.touch()
        status, body = read_answer(sock, write.method)
    finally:
        sock.close()
    assert status == write.status, body
    after = users(server)
    if write.method == "DELETE":
        assert write_key(write) not in after
    else:
        assert after[write_key(write)].items() >= write.body.items()


def test_writes_queued_behind_a_held_fsync_wait_for_it_too(serve, tmp_path):
    """Group commit: a second write arriving during the held fsync shares the next one; its
    answer, too, leaves only after the held fsync and its own have completed."""
    gate = tmp_path / "gate"
    server = serve(env={"DBSVC_FAULT": f"fsync:{WRITE_FSYNC}:HOLD={gate}"})
    seed(server)
    first = send_raw(server.port, WRITES["PUT"])
    second = None
    try:
        wait_for_file(tmp_path / "gate.held")
        second = send_raw(server.port, WRITES["POST"])
        assert server.get("/health").status == 200  # both requests were read by now
        assert not has_bytes(first, 0.2) and not has_bytes(second, 0.2)
        gate.touch()
        assert read_answer(first, "PUT")[0] == 200
        assert read_answer(second, "POST")[0] == 201
    finally:
        first.close()
        if second is not None:
            second.close()


# -- a failed fsync: 503, read-only, nothing of the write survives ------------------------


@WRITE_METHODS
def test_failed_fsync_answers_503_and_the_write_is_gone_after_a_crash(serve, write):
    server = serve(env={"DBSVC_FAULT": f"fsync:{WRITE_FSYNC}:EIO"})
    seed(server)
    before = users(server)
    assert set(before) == {KEEP["id"], TARGET["id"]}

    reply = server.request(write.method, write.path, body=write.body)
    assert reply.status == 503, reply
    assert reply.headers["content-type"] == "application/problem+json"
    assert reply.json["code"] == "unavailable"
    assert "read-only" in reply.json["detail"]
    wait_for_log(server, "fsync of", "the store is now read-only")

    # The failed write was rolled back in memory: readers see the state before it.
    assert users(server) == before
    # The tenant is read-only until a restart: every write is refused, reads go on.
    for method, path, body in (
        ("POST", "/api/user", {"email": "later@example.com", "name": "Later"}),
        ("PATCH", "/api/user/1", {"age": 41}),
        ("DELETE", "/api/user/1", None),
    ):
        refused = server.request(method, path, body=body)
        assert (refused.status, refused.json["code"]) == (503, "unavailable"), (method, refused)
    assert server.get("/health").status == 200
    assert current(server, KEEP["id"]) == before[KEEP["id"]]

    server.stop(signal.SIGKILL)
    restarted = serve()
    assert users(restarted) == before
    # The unique emails are where the acknowledged writes left them: the failed write's
    # new email is free, the target's is still its own.
    wanted = (write.body or {}).get("email")
    if wanted is not None:
        assert not email_taken(restarted, wanted)
    assert email_taken(restarted, TARGET["email"])
    # Writable again after the restart: the same write now succeeds, and moves the emails.
    again = restarted.request(write.method, write.path, body=write.body)
    assert again.status == write.status, again
    if wanted is not None:
        assert email_taken(restarted, wanted)
    assert email_taken(restarted, TARGET["email"]) is (write.method == "POST")
    assert email_taken(restarted, KEEP["email"])


def test_failed_fsync_leaves_the_log_as_the_acknowledged_writes_made_it(serve, tmp_path):
    """The log is cut back to the end of the last acknowledged frame: byte for byte what it
    was before the failed write, which is therefore gone even from the page cache."""
    log_path = tmp_path / "data" / "default" / "log"
    server = serve(env={"DBSVC_FAULT": f"fsync:{WRITE_FSYNC}:EIO"})
    seed(server)
    acknowledged = log_path.read_bytes()
    assert server.request("PUT", "/api/user/2", body=WRITES["PUT"].body).status == 503
    assert log_path.read_bytes() == acknowledged
    server.stop(signal.SIGKILL)
    restarted = serve()
    assert current(restarted, TARGET["id"]).items() >= TARGET.items()
    assert current(restarted, KEEP["id"]).items() >= KEEP.items()
