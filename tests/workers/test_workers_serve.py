"""`dbsvc serve SCHEMA --workers 2` end to end: a supervisor, a writer and a reader on one port.

One process tree serves the whole file (a module fixture: its start is the expensive part),
behind the token guard (so the reader follows its writer with the supervisor's key, not a
token, and forwards writes under the client's token), and each test begins by finding
every worker, so each leaves the tree whole for the next:
- every worker answers every route (REST, /batch, operational, WebSockets);
- a write through any worker is seen by the next read on the same connection;
- kill -9 of the reader loses nothing, and the supervisor starts it again;
- kill -9 of the writer: writes answer 503 with Retry-After until it is back, reads go on;
- the writer's private port refuses anyone without the supervisor's key;
- SIGTERM to the supervisor stops every worker, readers first, with status 0.
Every wait is a poll with a deadline; connections are pinned to a worker (workers_kit.py).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from websockets.asyncio.client import connect

from support.authkit import TENANT, mint, public_pem
from support.server import ROOT, service_env
from support.workers_kit import Workers, start_workers

BLOG = ROOT / "schemas" / "blog.dbs"


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """The file's tree, started again only if a test stopped it (the SIGTERM test, when
    the tests run in another order than the file's)."""
    root = tmp_path_factory.mktemp("workers")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (root / "idp.pem").write_bytes(public_pem(key))
    (root / "data" / TENANT).mkdir(parents=True)
    env = {"SERVICE_JWT_PUBKEY": str(root / "idp.pem"), "SERVICE_TENANT": TENANT}
    started: list[Workers] = []

    def current() -> Workers:
        if not started or started[-1].proc.poll() is not None:
            started.append(start_workers(BLOG, root / "data", 2, env))
            started[-1].headers = {"Authorization": f"Bearer {mint(key, 'RS256')}"}
        return started[-1]

    yield current
    for workers in started:
        if workers.proc.poll() is None:
            workers.stop(signal.SIGKILL)


@pytest.fixture
def tree(trees) -> Workers:
    return trees()


def user(name: str) -> dict:
    return {"email": f"{name}@example.com", "name": name}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def until(check, what: str, timeout: float = 60.0, every: float = 0.05):
    """Poll `check()` until it returns something truthy, within `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_every_worker_answers_every_route(tree):
    created = tree.connection_to("writer").request("POST", "/api/user", user("route-seed"))
    assert created.status == 201
    for label in tree.labels:
        conn = tree.connection_to(label)
        assert conn.worker["role"] == ("writer" if label == "writer" else "reader")
        assert conn.get("/health").json["worker"]["label"] == label
        assert conn.get("/ready").status == 200
        metrics = conn.get("/metrics")
        assert metrics.status == 200 and metrics.json["worker"]["label"] == label
        assert f'worker="{label}"' in conn.request("GET", "/metrics", headers={"Accept": "text/plain"}).body.decode()
        assert conn.get("/openapi.json").status == 200 and conn.get("/api/").status == 200
        mine = conn.request("POST", "/api/user", user(f"every-{label}"))
        assert mine.status == 201, mine
        key = mine.json["id"]
        assert conn.get(f"/api/user/{key}").json["name"] == f"every-{label}"
        assert conn.get("/api/user?name=route-seed").json["total"] == 1
        assert conn.request("PUT", f"/api/user/{key}", {**user(f"every-{label}"), "age": 7}).json["age"] == 7
        assert conn.request("PATCH", f"/api/user/{key}", {"age": 8}).json["age"] == 8
        batch = conn.request(
            "POST", "/batch", {"ops": [{"op": "patch", "model": "user", "id": key, "record": {"age": 9}}]}
        )
        assert batch.status == 200 and conn.get(f"/api/user/{key}").json["age"] == 9
        assert conn.request("DELETE", f"/api/user/{key}").status == 204
        assert conn.get(f"/api/user/{key}").status == 404
        snapshot = conn.get("/snapshot").json
        assert snapshot["offset"] == int(conn.get("/api/user").headers["dbsvc-offset"])
        asyncio.run(asyncio.wait_for(sockets_answer(tree, label, snapshot["offset"]), 60))
    # Both workers hold the same history: the same epoch, offsets and watermarks.
    a, b = (tree.connection_to(label).get("/snapshot").json for label in tree.labels)
    assert (a["epoch"], a["offset"], a["watermarks"]) == (b["epoch"], b["offset"], b["watermarks"])


async def sockets_answer(tree: Workers, label: str, head: int) -> None:
    """/subscribe (with after=), /live-query and /replicate on a socket `label` accepted."""
    base = f"ws://127.0.0.1:{tree.port}"
    token = tree.headers
    async with connect(
        f"{base}/subscribe/user?after={head - 1}", sock=tree.socket_to(label), additional_headers=token
    ) as ws:
        event = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert event["offset"] == head
    async with connect(
        f"{base}/live-query/user?name=route-seed", sock=tree.socket_to(label), additional_headers=token
    ) as ws:
        init = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert init["type"] == "Init" and [r["name"] for r in init["records"]] == ["route-seed"]
    async with connect(
        f"{base}/replicate?after={head - 1}", sock=tree.socket_to(label), additional_headers=token
    ) as ws:
        frame = await asyncio.wait_for(ws.recv(), 10)
        assert int.from_bytes(frame[:8], "big") == head


def test_a_write_through_any_worker_is_read_on_the_same_connection(tree):
    for label in tree.labels:
        conn = tree.connection_to(label)
        for n in range(20):
            created = conn.request("POST", "/api/user", user(f"ryw-{label}-{n}"))
            assert created.status == 201
            read = conn.get(f"/api/user/{created.json['id']}")
            assert read.status == 200, (label, n, read)
            assert int(read.headers["dbsvc-offset"]) >= int(created.headers["dbsvc-offset"])
            changed = conn.request("PATCH", f"/api/user/{created.json['id']}", {"age": n})
            assert conn.get(f"/api/user/{created.json['id']}").json["age"] == n, changed


def test_a_read_naming_a_writes_offset_sees_it_on_any_connection(tree):
    """`Dbsvc-After` (docs/workers.md): a client writes on the writer's connection and reads
    on the reader's at once, naming the offset the write answered; the reader answers from
    a state that holds it, every time. A value that is no offset is 400 on the reader; the
    writer, which applied it itself, ignores the header."""
    writer, reader = tree.connection_to("writer"), tree.connection_to("reader-1")
    for n in range(30):
        created = writer.request("POST", "/api/user", user(f"after-{n}"))
        assert created.status == 201
        offset = created.headers["dbsvc-offset"]
        read = reader.request("GET", f"/api/user/{created.json['id']}", headers={"Dbsvc-After": offset})
        assert read.status == 200 and read.json["name"] == f"after-{n}", (n, read)
        listed = reader.request("GET", f"/api/user?name=after-{n}", headers={"Dbsvc-After": offset})
        assert listed.json["total"] == 1 and int(listed.headers["dbsvc-offset"]) >= int(offset)
    refused = reader.request("GET", "/api/user", headers={"Dbsvc-After": "soon"})
    assert refused.status == 400 and refused.json["code"] == "bad_request"
    assert refused.json["detail"].startswith("Dbsvc-After 'soon' is not an offset")
    assert writer.request("GET", "/api/user?limit=1", headers={"Dbsvc-After": "soon"}).status == 200


def test_a_forwarded_refusal_is_the_writers_answer(tree):
    reader = tree.connection_to("reader-1")
    writer = tree.connection_to("writer")
    writer.request("POST", "/api/user", user("dup"))
    for conn in (reader, writer):
        refused = conn.request("POST", "/api/user", user("dup"))
        assert refused.status == 409 and refused.headers["content-type"] == "application/problem+json"
        assert refused.json["code"] == "unique_violation"
        assert refused.json["request_id"] == refused.headers["x-request-id"]
        assert conn.request("POST", "/api/nothing", {}).status == 404


def test_a_reader_forwards_a_write_whatever_its_client_sends_of_the_private_hop(tree):
    """A client's own Dbsvc-Worker-Key is replaced, not passed on; an HTTP/1.0 request
    without Host still reaches the writer (HTTP/1.1 needs one: the writer's is given)."""
    reader = tree.connection_to("reader-1")
    forged = reader.request("POST", "/api/user", user("forged-key"), headers={"Dbsvc-Worker-Key": "forged"})
    assert forged.status == 201, forged
    sock = tree.socket_to("reader-1")
    body = json.dumps(user("http-one-oh")).encode()
    token = tree.headers["Authorization"].encode()
    sock.sendall(
        b"POST /api/user HTTP/1.0\r\nAuthorization: %s\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (token, len(body), body)
    )
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    sock.close()
    assert answer.startswith(b"HTTP/1.1 201 "), answer


def test_a_reader_forwards_a_write_under_the_clients_own_token(tree):
    reader = tree.connection_to("reader-1")
    refused = reader.request("POST", "/api/user", user("no-token"), headers={"Authorization": ""})
    assert refused.status == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    assert refused.json["code"] == "unauthorized"
    assert reader.get("/metrics").json["replica"]["state"] == "following"


def test_the_writers_private_port_needs_the_supervisors_key(tree):
    port = tree.private_port()
    for headers in ({}, tree.headers, {"Dbsvc-Worker-Key": "guess"}):
        for method, path in (("GET", "/replicate/snapshot"), ("GET", "/snapshot"), ("POST", "/api/user")):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request(method, path, body=json.dumps(user("sneaky")), headers=headers)
            reply = conn.getresponse()
            assert reply.status == 403, (path, headers)
            assert b"Dbsvc-Worker-Key is missing or wrong" in reply.read()
            conn.close()


def test_a_second_supervisor_on_the_same_tenant_refuses_to_start(tree):
    """One writer per tenant holds with workers too: the second tree's writer meets the
    lock (exit 2 before it was ready), and so its supervisor exits 2, touching nothing."""
    writer_pid = tree.connection_to("writer").worker["pid"]
    before = sorted(p.name for p in (tree.data_dir / TENANT / "workers").iterdir())
    done = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(BLOG), "--workers", "2"],
        env=service_env(tree.data_dir, tree.env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert f"is locked by process {writer_pid}" in done.stderr
    assert "worker writer exited with status 2 before it was ready" in done.stderr
    assert sorted(p.name for p in (tree.data_dir / TENANT / "workers").iterdir()) == before
    assert tree.connection_to("reader-1").get("/ready").status == 200


def test_kill_9_of_the_reader_loses_nothing_and_it_comes_back(tree):
    writer = tree.connection_to("writer")
    before = tree.connection_to("reader-1")
    pid = before.worker["pid"]
    keys = [writer.request("POST", "/api/user", user(f"before-kill-{n}")).json["id"] for n in range(5)]
    os.kill(pid, signal.SIGKILL)
    until(lambda: not alive(pid), "the reader is gone")
    keys += [writer.request("POST", "/api/user", user(f"during-kill-{n}")).json["id"] for n in range(5)]
    tree.wait_log(r"worker reader-1 ready", count=2)
    after = until(lambda: tree.connection_to("reader-1"), "the reader answers again")
    assert after.worker["pid"] != pid
    for key in keys:
        assert after.get(f"/api/user/{key}").status == 200
    assert after.get("/snapshot").json["offset"] >= created_offset(writer)


def test_a_reader_whose_copy_is_damaged_copies_the_writer_again(tree):
    """A reader's directory is a cache of the writer's: a log damaged before its tail (a
    disk fault: a byte flipped while the reader was down) is discarded, not a reader that
    fails to start for ever."""
    writer = tree.connection_to("writer")
    keys = [writer.request("POST", "/api/user", user(f"damage-{n}")).json["id"] for n in range(5)]
    reader = tree.connection_to("reader-1")
    until(lambda: reader.get(f"/api/user/{keys[-1]}").status == 200, "the reader has the rows")
    pid = reader.worker["pid"]
    readies = sum("worker reader-1 ready" in line for line in list(tree.log))
    os.kill(pid, signal.SIGKILL)
    until(lambda: not alive(pid), "the reader is gone")
    log = tree.data_dir / TENANT / "workers" / "reader-1" / "log"
    data = bytearray(log.read_bytes())
    data[80] ^= 0xFF  # inside the first frame, with good frames after it
    log.write_bytes(bytes(data))
    tree.wait_log(r"worker reader-1 ready", count=readies + 1)
    tree.wait_log(r"copy is damaged .* copying the writer again worker=reader-1")
    again = tree.connection_to("reader-1")
    assert again.worker["pid"] != pid
    for key in keys:
        assert again.get(f"/api/user/{key}").status == 200


def created_offset(conn) -> int:
    """The writer's head as its last read says (`Dbsvc-Offset`)."""
    return int(conn.get("/api/user").headers["dbsvc-offset"])


def test_kill_9_of_the_writer_stops_writes_until_it_is_back_and_reads_go_on(tree):
    writer = tree.connection_to("writer")
    reader = tree.connection_to("reader-1")
    key = writer.request("POST", "/api/user", user("kept-across-writer-kill")).json["id"]
    until(lambda: reader.get(f"/api/user/{key}").status == 200, "the reader has the record")
    os.kill(writer.worker["pid"], signal.SIGKILL)
    until(lambda: not alive(writer.worker["pid"]), "the writer is gone")
    refused = reader.request("POST", "/api/user", user("while-the-writer-is-down"))
    assert refused.status == 503, refused
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json["code"] == "unavailable" and "writer" in refused.json["detail"]
    assert int(refused.headers["retry-after"]) >= 1
    assert reader.get(f"/api/user/{key}").json["name"] == "kept-across-writer-kill"
    assert reader.get("/api/user?name=kept-across-writer-kill").json["total"] == 1
    tree.wait_log(r"worker writer ready", count=2)

    def written():
        reply = reader.request("POST", "/api/user", user("after-the-writer-is-back"))
        return reply if reply.status == 201 else None

    created = until(written, "a write through the reader succeeds again", every=0.2)
    assert reader.get(f"/api/user/{created.json['id']}").status == 200
    assert tree.connection_to("writer").worker["pid"] != writer.worker["pid"]


def test_sigterm_to_the_supervisor_stops_every_worker(tree):
    pids = tree.pids()
    assert tree.stop(signal.SIGTERM) == 0
    assert not [label for label, pid in pids.items() if alive(pid)]
    text = "".join(tree.log)
    reader_closed = text.rindex(f"stopped; tenant {TENANT!r} closed cleanly worker=reader-1")
    assert reader_closed < text.rindex(f"stopped; tenant {TENANT!r} closed cleanly worker=writer")
    assert "stopped; all 2 workers exited worker=supervisor" in text
