"""Read replicas: `dbsvc serve SCHEMA --follow URL` against a real primary
(docs/guide/operations.md#read-replicas; dbsvc/replica/follower.py). Every wait is a poll with a deadline."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from support.server import ROOT, Server, server_pool, start_server

BLOG = ROOT / "schemas" / "blog.dbs"
MODELS = {"user": "-name", "blog-post": "score", "comment": "-created"}  # model -> a sort


@pytest.fixture
def nodes(tmp_path):
    """Factory: nodes(name, follow=None, env=...) -> Server; every one killed afterwards."""
    with server_pool(tmp_path) as pool:

        def start(name: str, follow: Server | None = None, env: dict | None = None) -> Server:
            args = ("--follow", f"http://127.0.0.1:{follow.port}") if follow is not None else ()
            return pool(BLOG, env, tmp_path / name, args)

        yield start


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(primary, replica): one blog primary and its read replica for the module's tests that
    neither stop, restart nor compact a server. Each adds only records of its own (its own
    emails) and reads them back by id, email or offset, so no test's answer depends on what
    another wrote or on their order; each starts once the replica holds the primary's head."""
    root = tmp_path_factory.mktemp("pair")
    with server_pool(root) as pool:
        primary = pool(BLOG, None, root / "primary")
        replica = pool(BLOG, None, root / "replica", ("--follow", f"http://127.0.0.1:{primary.port}"))
        yield primary, replica


@pytest.fixture
def shared(pair):
    """The module's pair, the replica caught up with the primary's head."""
    primary, replica = pair
    wait_caught_up(primary, replica)
    return pair


def wait_caught_up(primary: Server, replica: Server, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        head = primary.get("/snapshot").json["offset"]
        snap = replica.get("/snapshot").json
        if snap["offset"] == head and snap["replica"]["lag_offsets"] == 0:
            return snap
        time.sleep(0.05)
    raise AssertionError(f"replica never caught up: {replica.get('/metrics').json.get('replica')}")


def writer(port: int, count: int, prefix: str, errors: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for i in range(count):
            body = {"email": f"{prefix}{i}@x.io", "name": f"n{i % 7}", "role": ("admin", "reader")[i % 2]}
            conn.request("POST", "/api/user", json.dumps(body), {"Content-Type": "application/json"})
            reply = conn.getresponse()
            data = json.loads(reply.read())
            if reply.status != 201:
                errors.append(data)
                continue
            uid = data["id"]
            conn.request(
                "POST",
                "/api/blog-post",
                json.dumps({"author_id": uid, "title": "t", "body": "b", "score": i}),
                {"Content-Type": "application/json"},
            )
            conn.getresponse().read()
            if i % 3 == 0:
                conn.request(
                    "PATCH", f"/api/user/{uid}", json.dumps({"name": "changed"}), {"Content-Type": "application/json"}
                )
                conn.getresponse().read()
    finally:
        conn.close()


def same_reads(primary: Server, replica: Server) -> None:
    for model, sort in MODELS.items():
        for query in ("?limit=1000", f"?limit=1000&sort={sort}", "?limit=5&offset=3"):
            a, b = primary.get(f"/api/{model}{query}"), replica.get(f"/api/{model}{query}")
            assert (a.status, a.body) == (b.status, b.body), (model, query)
            assert a.headers["dbsvc-watermark"] == b.headers["dbsvc-watermark"]
            assert a.headers["dbsvc-offset"] == b.headers["dbsvc-offset"]
    pa, pb = primary.get("/snapshot").json, replica.get("/snapshot").json
    assert (pa["watermarks"], pa["offset"], pa["epoch"]) == (pb["watermarks"], pb["offset"], pb["epoch"])
    for model in ("user", "blog-post"):  # each record's version (its ETag), from frames or a bootstrap
        for record in primary.get(f"/api/{model}?limit=20").json["data"]:
            path = f"/api/{model}/{record['id']}"
            assert primary.get(path).headers["etag"] == replica.get(path).headers["etag"], path


def test_replica_of_a_primary_under_32_writers_reads_the_same(nodes):
    primary = nodes("primary", env={"SERVICE_SYNC": "off"})
    replica = nodes("replica", follow=primary)
    errors: list = []
    threads = [threading.Thread(target=writer, args=(primary.port, 8, f"w{n}-", errors)) for n in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    wait_caught_up(primary, replica)
    same_reads(primary, replica)
    as_of = primary.get("/api/user?limit=1000&as_of=50")
    assert as_of.body == replica.get("/api/user?limit=1000&as_of=50").body


def test_writes_to_a_replica_are_405_naming_the_primary(shared):
    primary, replica = shared
    head = replica.get("/snapshot").json
    reply = replica.post("/api/user", {"email": "refused@x.io", "name": "A"})
    assert reply.status == 405
    assert reply.json["code"] == "read_only_replica"
    assert reply.headers["allow"] == "GET, HEAD, OPTIONS"
    assert reply.headers["dbsvc-primary"] == f"http://127.0.0.1:{primary.port}"
    assert reply.json["detail"] == (
        f"this server is a read replica of http://127.0.0.1:{primary.port}: send writes to the primary"
    )
    target = primary.post("/api/user", {"email": "target@x.io", "name": "Target"})  # a record the writes name
    wait_caught_up(primary, replica)
    path, before = f"/api/user/{target.json['id']}", replica.get(f"/api/user/{target.json['id']}")
    for method in ("PUT", "PATCH", "DELETE"):
        assert replica.request(method, path, {"email": "refused@x.io", "name": "A"}).status == 405
    # nothing written by the refused requests: the one insert above is the only row since
    assert replica.get(path).body == before.body and before.status == 200
    after = replica.get("/snapshot").json
    assert (after["offset"], after["watermarks"]["User"]) == (head["offset"] + 1, head["watermarks"]["User"] + 1)
    assert replica.get("/api/user?email=refused@x.io").json["total"] == 0


def test_a_read_on_a_replica_naming_a_writes_offset_sees_the_write(shared):
    """`Dbsvc-After` on a read replica (docs/replication.md): written on the primary, read at
    once on the replica naming the write's offset, the record is there every time."""
    primary, replica = shared
    for n in range(20):
        created = primary.post("/api/user", {"email": f"after{n}@x.io", "name": f"after {n}"})
        offset = created.headers["dbsvc-offset"]
        read = replica.request("GET", f"/api/user/{created.json['id']}", headers={"Dbsvc-After": offset})
        assert read.status == 200 and read.json["name"] == f"after {n}", (n, read.status)
    assert replica.request("GET", "/api/user", headers={"Dbsvc-After": "-1"}).status == 400


def test_replica_killed_with_9_resumes_where_it_was(nodes, tmp_path):
    primary = nodes("primary")
    replica = nodes("replica", follow=primary)
    errors: list = []
    writer(primary.port, 20, "a", errors)
    wait_caught_up(primary, replica)
    replica.proc.send_signal(signal.SIGKILL)
    replica.proc.wait(timeout=10)
    writer(primary.port, 20, "b", errors)
    again = nodes("replica", follow=primary)  # same data directory
    wait_caught_up(primary, again)
    same_reads(primary, again)
    assert again.get("/metrics").json["replica"]["bootstraps"] == 0  # resumed, not rebuilt


def test_an_empty_replica_bootstraps_from_the_snapshot_after_a_compaction(nodes, tmp_path):
    primary = nodes("primary")
    errors: list = []
    writer(primary.port, 30, "a", errors)
    assert primary.stop() == 0
    env = dict(os.environ, SERVICE_DATA=str(tmp_path / "primary"), SERVICE_TENANT="default")
    done = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "compact"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    primary = nodes("primary")
    writer(primary.port, 5, "b", errors)
    replica = nodes("replica", follow=primary)
    wait_caught_up(primary, replica)
    same_reads(primary, replica)
    assert replica.get("/metrics").json["replica"]["bootstraps"] == 1


def test_a_replica_that_missed_writes_and_a_compaction_reads_as_its_primary_after(nodes, tmp_path):
    primary = nodes("primary", env={"SERVICE_SYNC": "off"})
    replica = nodes("replica", follow=primary)
    errors: list = []
    writer(primary.port, 10, "a", errors)
    wait_caught_up(primary, replica)
    replica.stop()
    writer(primary.port, 10, "b", errors)
    assert primary.stop() == 0
    env = dict(os.environ, SERVICE_DATA=str(tmp_path / "primary"), SERVICE_TENANT="default")
    assert (
        subprocess.run(
            [sys.executable, str(ROOT / "dbsvc.py"), "compact"], env=env, capture_output=True, timeout=60
        ).returncode
        == 0
    )
    primary = nodes("primary", env={"SERVICE_SYNC": "off"})
    writer(primary.port, 3, "c", errors)
    replica = nodes("replica", follow=primary)
    wait_caught_up(primary, replica)
    same_reads(primary, replica)


def test_a_replica_compacts_at_its_primarys_cut_and_fetches_no_snapshot(nodes, tmp_path):
    # docs/replication.md "The primary compacts": the replica takes the primary's epoch at
    # its cut, with its own compaction, and reads the same as the primary afterwards.
    primary = nodes("primary", env={"SERVICE_SYNC": "off"})
    replica = nodes("replica", follow=primary)
    errors: list = []
    writer(primary.port, 12, "a", errors)
    wait_caught_up(primary, replica)
    assert primary.stop() == 0
    env = dict(os.environ, SERVICE_DATA=str(tmp_path / "primary"), SERVICE_TENANT="default")
    done = subprocess.run([sys.executable, str(ROOT / "dbsvc.py"), "compact"], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    primary = nodes("primary", env={"SERVICE_SYNC": "off", "SERVICE_PORT": str(primary.port)})
    epoch = primary.get("/snapshot").json["epoch"]
    deadline = time.monotonic() + 60
    while replica.get("/snapshot").json["epoch"] != epoch:
        assert time.monotonic() < deadline, replica.get("/metrics").json["replica"]
        time.sleep(0.05)
    writer(primary.port, 6, "b", errors)
    assert not errors
    snap = wait_caught_up(primary, replica)
    assert (snap["replica"]["bootstraps"], snap["replica"]["compactions"]) == (1, 1)  # no snapshot fetched
    same_reads(primary, replica)
    head = primary.get("/snapshot").json["watermarks"]
    for model, key in (("user", "User"), ("blog-post", "BlogPost")):
        for n in range(0, head[key] + 1, 3):
            a, b = primary.get(f"/api/{model}?limit=1000&as_of={n}"), replica.get(f"/api/{model}?limit=1000&as_of={n}")
            assert (a.status, a.body, a.headers["dbsvc-watermark"]) == (b.status, b.body, b.headers["dbsvc-watermark"])
    with open(tmp_path / "primary" / "default" / "snapshot", "rb") as mine:
        with open(tmp_path / "replica" / "default" / "snapshot", "rb") as theirs:
            assert mine.read() == theirs.read()


def test_fingerprint_mismatch_refuses_to_start(shared, tmp_path):
    primary, _ = shared
    other = tmp_path / "other.dbs"
    other.write_text(BLOG.read_text().replace("body      str      @min(1) @max(2000)", "body      str      @max(2000)"))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(other), "--follow", f"http://127.0.0.1:{primary.port}"],
        env=dict(os.environ, SERVICE_PORT="0", SERVICE_DATA=str(tmp_path / "r")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    theirs = primary.get("/snapshot").json["fingerprint"]
    assert "fingerprint" in proc.stderr and theirs in proc.stderr


def test_feeds_on_a_replica_follow_the_primary(shared):
    from websockets.sync.client import connect

    primary, replica = shared
    with connect(f"ws://127.0.0.1:{replica.port}/subscribe/user", open_timeout=10) as ws:
        created = primary.post("/api/user", {"email": "f@x.io", "name": "F"})
        assert created.status == 201
        event = json.loads(ws.recv(timeout=10))
    # the first event the feed sends is this insert, at the offset the primary answered
    assert (event["kind"], event["offset"], event["record"]["email"]) == (
        "insert",
        int(created.headers["dbsvc-offset"]),
        "f@x.io",
    )


def test_a_client_switches_from_primary_to_replica_with_after(shared):
    from websockets.sync.client import connect

    primary, replica = shared
    errors: list = []
    writer(primary.port, 5, "a", errors)
    offset = int(primary.get("/api/user?limit=1").headers["dbsvc-offset"])
    writer(primary.port, 5, "b", errors)
    wait_caught_up(primary, replica)
    with connect(f"ws://127.0.0.1:{replica.port}/subscribe/user?after={offset}", open_timeout=10) as ws:
        got = [json.loads(ws.recv(timeout=10)) for _ in range(5 + 5 + 2)]  # inserts, links, patches
    offsets = [e["offset"] for e in got]
    assert offsets == sorted(offsets) and offsets[0] > offset


# -- the stream as untrusted input: a fake primary ------------------------------------------


def _good_frames(n: int) -> list[bytes]:
    """Frames a real blog primary would send for n user inserts."""
    from dbsvc.storage.events import ChangeEvent, EventKind
    from dbsvc.storage.logfile import encode_frame

    frames = []
    for i in range(1, n + 1):
        record = {
            "id": i,
            "email": f"u{i}@x.io",
            "name": "U",
            "age": None,
            "role": "reader",
            "joined": "2026-01-01T00:00:00Z",
            "profile": None,
        }
        event = ChangeEvent(EventKind.INSERT, "User", i, i, i, record)
        frames.append(encode_frame(i, event.payload()))
    return frames


def _frame_with(offset: int, payload: bytes) -> bytes:
    from dbsvc.storage.logfile import encode_frame

    return encode_frame(offset, payload)


def _bad_third(case: str) -> bytes:
    good = _good_frames(3)[2]
    if case == "wrong crc":
        return good[:8] + b"\x00\x00\x00\x00" + good[12:]
    if case == "truncated":
        return good[:-5]
    if case == "length past the message":
        return good[:12] + (len(good) - 16 + 9).to_bytes(4, "big") + good[16:]
    if case == "offset gap":
        return _good_frames(4)[3]
    if case == "offset repeat":
        return _good_frames(2)[1]
    if case == "bad json":
        return _frame_with(3, b"{not json")
    if case == "unknown model":
        return _frame_with(3, good[16:].replace(b'"model":"User"', b'"model":"Ghost"'))
    if case == "fields of another schema":
        return _frame_with(3, good[16:].replace(b'"age":null,', b""))
    raise AssertionError(case)


class FakePrimary:
    """A WebSocket server in a thread that plays a blog primary: /snapshot over HTTP,
    /replicate/snapshot (an empty epoch), and /replicate with the given messages."""

    def __init__(self, fingerprint: str, messages: list[bytes]) -> None:
        from websockets.sync.server import serve

        from dbsvc.storage.snapshot import ModelImage, SnapshotImage, encode_snapshot

        self.epoch = "ab" * 16
        self.done = threading.Event()
        self.messages = messages
        self.fingerprint = fingerprint
        fields = {
            "User": ["id", "email", "name", "age", "role", "joined", "profile"],
            "BlogPost": ["id", "author_id", "title", "body", "published", "score", "tags"],
            "Comment": ["id", "post_id", "author_id", "body", "created"],
        }
        image = SnapshotImage(self.epoch, 0, [ModelImage(name, f, [], 0) for name, f in fields.items()])
        self.snapshot = b"".join(encode_snapshot(image))
        self.server = serve(self.handle, "127.0.0.1", 0, process_request=self.http)
        self.port = self.server.socket.getsockname()[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def http(self, connection, request):
        if request.path == "/snapshot":
            body = {
                "watermarks": {},
                "epoch": self.epoch,
                "replication": True,
                "offset": len(self.messages),
                "fingerprint": self.fingerprint,
            }
            return connection.respond(200, json.dumps(body))
        return None

    def handle(self, connection) -> None:
        import zlib

        if connection.request.path.startswith("/replicate/snapshot"):
            connection.send(
                json.dumps(
                    {"type": "snapshot", "format": 1, "epoch": self.epoch, "offset": 0, "fingerprint": self.fingerprint}
                )
            )
            connection.send(self.snapshot)
            connection.send(
                json.dumps({"type": "end", "bytes": len(self.snapshot), "crc32": zlib.crc32(self.snapshot)})
            )
            return
        for message in self.messages:
            connection.send(message)
        self.done.wait(10)

    def close(self) -> None:
        self.done.set()
        self.server.shutdown()


# Served, each case is a replica process of its own (a replica stops for good at a bad frame).
# Two stay in the default run, one refused by the reading thread's frame checks and one by the
# store's apply, so the served path of each (the stopped state, the error in /metrics, reads
# still served, the log line) runs on every change; the other six are in the slow set, their
# reasons checked in process on every change: tests/replica/test_follower_frames.py (a crc, a
# truncated payload, a length past the message, an offset repeat, an offset gap),
# test_follower_stream.py (a gap; an unknown model) and test_replica_apply_plain_runs.py (not
# JSON, an unknown model, a missing field).
@pytest.mark.parametrize(
    "case",
    [
        "wrong crc",
        pytest.param("truncated", marks=pytest.mark.slow),
        pytest.param("length past the message", marks=pytest.mark.slow),
        pytest.param("offset gap", marks=pytest.mark.slow),
        pytest.param("offset repeat", marks=pytest.mark.slow),
        pytest.param("bad json", marks=pytest.mark.slow),
        pytest.param("unknown model", marks=pytest.mark.slow),
        "fields of another schema",
    ],
)
def test_a_bad_frame_stops_the_replica_and_nothing_past_the_last_good_one_is_applied(tmp_path, case):
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.schema.describe import schema_fingerprint

    fingerprint = schema_fingerprint(compile_schema(load_schema(str(BLOG))).DESCRIPTION)
    fake = FakePrimary(fingerprint, _good_frames(2) + [_bad_third(case)] + _good_frames(5)[3:])
    replica = start_server(BLOG, tmp_path / "replica", args=("--follow", f"http://127.0.0.1:{fake.port}"))
    try:
        deadline = time.monotonic() + 30
        while replica.get("/metrics").json["replica"]["state"] != "stopped":
            assert time.monotonic() < deadline, replica.get("/metrics").json["replica"]
            time.sleep(0.05)
        report = replica.get("/metrics").json["replica"]
        assert report["error"].startswith(("bad frame at offset", "replication frame at offset")), report
        assert any(f"offset {n}" in report["error"] for n in (2, 3, 4)), report["error"]
        users = replica.get("/api/user?limit=100").json
        assert [u["id"] for u in users["data"]] == [1, 2]
        assert replica.get("/snapshot").json["offset"] == 2
        assert replica.get("/health").status == 200  # still serving reads
        # the state is set before the line is logged, and stderr is drained by a thread: wait for it
        while not any("stopped following" in line for line in replica.log):
            assert time.monotonic() < deadline, replica.log[-5:]
            time.sleep(0.05)
    finally:
        replica.stop()
        fake.close()


def test_a_primary_that_comes_back_with_another_schema_stops_its_replica_which_keeps_serving(tmp_path):
    """The fingerprint is checked on every connection, not only at start (follower.py rule 1):
    a primary redeployed with another schema while its replica runs is not followed on."""
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.schema.describe import schema_fingerprint

    fingerprint = schema_fingerprint(compile_schema(load_schema(str(BLOG))).DESCRIPTION)
    fake = FakePrimary(fingerprint, _good_frames(2))
    replica = start_server(BLOG, tmp_path / "replica", args=("--follow", f"http://127.0.0.1:{fake.port}"))
    try:
        deadline = time.monotonic() + 30
        while replica.get("/snapshot").json["offset"] != 2:
            assert time.monotonic() < deadline, replica.get("/metrics").json["replica"]
            time.sleep(0.05)
        fake.fingerprint = "0123456789abcdef"  # redeployed with another schema
        fake.done.set()  # its restart drops the stream
        while replica.get("/metrics").json["replica"]["state"] != "stopped":
            assert time.monotonic() < deadline, replica.get("/metrics").json["replica"]
            time.sleep(0.05)
        assert replica.get("/metrics").json["replica"]["error"] == (
            f"the primary's schema fingerprint '0123456789abcdef' differs from this replica's "
            f"{fingerprint!r}: serve the same schema on both"
        )
        assert [u["id"] for u in replica.get("/api/user?limit=100").json["data"]] == [1, 2]
        assert replica.get("/health").status == 200
        # the state is set before the line is logged, and stderr is drained by a thread: wait for it
        while not any("stopped following" in line for line in replica.log):
            assert time.monotonic() < deadline, replica.log[-5:]
            time.sleep(0.05)
    finally:
        replica.stop()
        fake.close()
