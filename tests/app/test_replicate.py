"""`/replicate` through a real server and the `websockets` client (docs/guide/realtime.md):
binary PersistedEvent frames, resume, restarts, kill -9, refusals, a slow reader's cost."""

from __future__ import annotations

import asyncio
import http.client
import json
import signal
import socket
import threading
import time
import zlib

import pytest

from support.consumer_kit import USER, write_users
from support.server import ROOT, start_server
from support.wskit import open_ws, post, refusal, run


def parse(message: bytes) -> tuple[int, dict]:
    """Check one PersistedEvent like a careful consumer: (offset, event)."""
    assert isinstance(message, bytes)
    offset = int.from_bytes(message[:8], "big")
    crc = int.from_bytes(message[8:12], "big")
    length = int.from_bytes(message[12:16], "big")
    payload = message[16:]
    assert length == len(payload) and crc == zlib.crc32(payload)
    event = json.loads(payload)
    assert event["offset"] == offset
    return offset, event


async def take(server, after: int, count: int, **kw) -> list[bytes]:
    async with open_ws(server, f"/replicate?after={after}", **kw) as ws:
        return [await asyncio.wait_for(ws.recv(), 10) for _ in range(count)]


@pytest.fixture
def blog(serve):
    return serve()


@pytest.fixture(scope="module")
def refusing(tmp_path_factory):
    """One blog server holding one user (the head at offset 1), shared by the 22 refusal cases:
    a refused upgrade writes nothing, so each case sees the same head, and each asserts that
    nothing was added. A server a case was 22 starts (about a fifth of this file's time)."""
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path_factory.mktemp("refusing") / "data")
    write_users(server.port, 1)
    yield server
    server.stop()


def test_frames_are_the_committed_rows_in_order(blog):
    write_users(blog.port, 3)
    assert blog.request("PATCH", "/api/user/2", {"name": "B"}).status == 200
    assert blog.request("DELETE", "/api/user/3").status == 204
    frames = run(take(blog, 0, 5))
    events = [parse(f) for f in frames]
    assert [o for o, _ in events] == [1, 2, 3, 4, 5]
    assert [e["kind"] for _, e in events] == ["insert"] * 3 + ["update", "delete"]
    assert events[3][1]["previous"]["name"] == "Ann"


def test_resume_after_n_gives_exactly_the_rest_and_streams_are_identical(blog):
    write_users(blog.port, 20)

    async def body():
        whole, again = await asyncio.gather(take(blog, 0, 20), take(blog, 0, 20))
        assert whole == again  # two replicas: byte-identical
        assert await take(blog, 7, 13) == whole[7:]
        async with open_ws(blog, "/replicate?after=20") as ws:  # at the head: live only
            await post(blog, "/api/user", {**USER, "email": "live@x.io"})
            offset, event = parse(await asyncio.wait_for(ws.recv(), 10))
            assert (offset, event["record"]["email"]) == (21, "live@x.io")

    run(body())


def test_replay_then_live_has_no_gap_and_no_duplicate_under_writes(blog):
    write_users(blog.port, 300, "pre")
    writers = [threading.Thread(target=write_users, args=(blog.port, 150, f"w{n}-")) for n in range(2)]

    async def body():
        for t in writers:
            t.start()
        async with open_ws(blog, "/replicate?after=0") as ws:
            offsets = [parse(await asyncio.wait_for(ws.recv(), 10))[0] for _ in range(600)]
        for t in writers:
            await asyncio.to_thread(t.join, 60)
        assert offsets == list(range(1, 601))

    run(body())


def test_default_after_is_zero(blog):
    write_users(blog.port, 2)

    async def body():
        async with open_ws(blog, "/replicate") as ws:
            assert parse(await asyncio.wait_for(ws.recv(), 10))[0] == 1

    run(body())


def test_a_large_payload_travels_in_one_frame(blog):
    big = "x" * 700_000  # a 64-bit WebSocket length
    assert blog.post("/api/user", {**USER, "profile": big}).status == 201
    [frame] = run(take(blog, 0, 1))
    assert parse(frame)[1]["record"]["profile"] == big


@pytest.mark.parametrize(
    "query, status, code",
    [
        ("after=abc", 400, "bad_query"),  # not an offset: as on the feeds
        ("after=-1", 400, "bad_query"),
        ("after=1.5", 400, "bad_query"),
        ("after=", 400, "bad_query"),
        ("after=5", 400, "offset_out_of_range"),  # ahead of the head (1)
        ("after=0&after=1", 400, "bad_query"),
        ("since=0", 400, "bad_query"),
    ],
)
def test_bad_after_is_refused_before_the_upgrade(refusing, query, status, code):
    got, problem, _ = run(refusal(refusing, f"/replicate?{query}"))
    assert (got, problem["code"]) == (status, code), problem
    assert refusing.get("/api/user").json["total"] == 1


@pytest.mark.parametrize("route", ["/replicate", "/subscribe/user", "/live-query/user"])
@pytest.mark.parametrize(
    "after, code",
    [
        ("99999999999999999999", "bad_query"),  # 20 digits, past int64
        ("18446744073709551616", "bad_query"),  # 2**64, 20 digits
        ("9223372036854775808", "bad_query"),  # int64 max + 1
        ("9223372036854775807", "offset_out_of_range"),  # an offset, ahead of the head
        ("00000000000000000099", "offset_out_of_range"),  # 20 digits, 99: ahead of the head
    ],
)
def test_after_past_int64_is_bad_query_and_ahead_of_the_head_is_out_of_range(refusing, route, after, code):
    """Every route answers a malformed `after` one way, whatever the digits count."""
    got, problem, _ = run(refusal(refusing, f"{route}?after={after}"))
    assert (got, problem["code"]) == (400, code), problem
    assert after.lstrip("0") in problem["detail"]
    assert refusing.get("/api/user").json["total"] == 1


def test_replication_off_is_404_and_snapshot_says_so(serve):
    server = serve(ROOT / "schemas" / "inventory.dbs")
    got, problem, _ = run(refusal(server, "/replicate?after=0"))
    assert (got, problem["code"]) == (404, "replication_disabled")
    assert server.get("/snapshot").json["replication"] is False


def test_offsets_survive_a_restart(serve, tmp_path):
    data = tmp_path / "data"
    first = serve(data_dir=data)
    write_users(first.port, 5)
    assert first.stop() == 0
    second = serve(data_dir=data)
    write_users(second.port, 2, "again")
    frames = run(take(second, 3, 4))
    assert [parse(f)[0] for f in frames] == [4, 5, 6, 7]
    assert second.get("/snapshot").json["offset"] == 7


def test_kill_9_under_writes_leaves_a_gap_free_stream_that_resumes(serve, tmp_path):
    data = tmp_path / "data"
    server = serve(data_dir=data)
    stop = threading.Event()
    acked: list[int] = []

    def writer() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        i = 0
        try:
            while not stop.is_set() and i < 5000:
                conn.request(
                    "POST",
                    "/api/user",
                    json.dumps({**USER, "email": f"k{i}@x.io"}),
                    {"Content-Type": "application/json"},
                )
                reply = conn.getresponse()
                reply.read()
                if reply.status == 201:
                    acked.append(i)
                i += 1
        except (OSError, http.client.HTTPException):
            pass  # the server died under us

    async def body():
        thread = threading.Thread(target=writer)
        thread.start()
        async with open_ws(server, "/replicate?after=0") as ws:
            seen = []
            while len(seen) < 100:
                seen.append(parse(await asyncio.wait_for(ws.recv(), 10))[0])
            server.proc.send_signal(signal.SIGKILL)
            try:
                while True:
                    seen.append(parse(await asyncio.wait_for(ws.recv(), 10))[0])
            except Exception:
                pass
        stop.set()
        await asyncio.to_thread(thread.join, 30)
        return seen

    seen = run(body())
    server.proc.wait(timeout=10)
    assert seen == list(range(1, len(seen) + 1))
    restarted = serve(data_dir=data)
    head = restarted.get("/snapshot").json["offset"]
    assert head >= len(seen) and head >= len(acked)  # nothing streamed or acked was lost
    resumed = run(take(restarted, seen[-1], head - seen[-1]))
    assert [parse(f)[0] for f in resumed] == list(range(seen[-1] + 1, head + 1))
    write_users(restarted.port, 1, "after")
    assert restarted.get("/snapshot").json["offset"] == head + 1  # never reused


def test_guard_applies_to_replicate(serve, tmp_path):
    from support.idp import TestIdp

    idp = TestIdp(tmp_path)
    server = serve(data_dir=idp.data_dir(), env=idp.server_env())
    good = idp.token()
    auth = {"Authorization": f"Bearer {good}"}
    assert server.post("/api/user", USER, headers=auth).status == 201

    async def body():
        got, problem, _ = await refusal(server, "/replicate")
        assert (got, problem["code"]) == (401, "unauthorized")
        foreign = idp.token(tenant="other")
        got, problem, _ = await refusal(server, "/replicate", additional_headers={"Authorization": f"Bearer {foreign}"})
        assert (got, problem["code"]) == (403, "forbidden")
        [frame] = await take(server, 0, 1, additional_headers=auth)
        assert parse(frame)[0] == 1

    run(body())


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_slow_replica_does_not_grow_server_memory(serve):
    # No ping: this replica sends nothing, so past the ping interval (30 s; a folder run at
    # load ~25 got a ping amid the frames) the server pings it, and the reads below take
    # every frame for data.
    server = serve(env={"SERVICE_SYNC": "off", "SERVICE_WS_PING_INTERVAL": "3600"})
    profile = "x" * 100_000
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    for i in range(300):  # 30 MB of log
        conn.request(
            "POST",
            "/api/user",
            json.dumps({**USER, "email": f"{i}@x.io", "profile": profile}),
            {"Content-Type": "application/json"},
        )
        assert conn.getresponse().read()
    before = _rss_kib(server.proc.pid)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", server.port))
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    sock.sendall(
        f"GET /replicate?after=0 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101")
    # The replica reads nothing while 300 more writes arrive live.
    for i in range(300, 600):
        conn.request(
            "POST",
            "/api/user",
            json.dumps({**USER, "email": f"{i}@x.io", "profile": profile}),
            {"Content-Type": "application/json"},
        )
        assert conn.getresponse().read()
    time.sleep(0.5)
    during = _rss_kib(server.proc.pid)
    # The records themselves are in memory (30 MB more); the stream holds at most its
    # socket buffers and one read chunk, never the 60 MB it still owes the replica.
    assert during - before < 30 * 1024 + 16 * 1024, (before, during)
    metrics = server.get("/metrics").json["realtime"]
    assert metrics["replication_streams"] == 1 and metrics["lagged_closes"] == 0
    # Reading at last, it gets every frame in order.
    sock.settimeout(30)
    received = 0
    buffer = b""
    last = 0
    while last < 600:
        chunk = sock.recv(1 << 20)
        assert chunk
        buffer += chunk
        while len(buffer) >= 2:
            n, i = buffer[1] & 0x7F, 2
            if n == 126:
                n, i = int.from_bytes(buffer[2:4], "big"), 4
            elif n == 127:
                n, i = int.from_bytes(buffer[2:10], "big"), 10
            if len(buffer) < i + n:
                break
            offset, _event = parse(buffer[i : i + n])
            assert offset == last + 1
            last = offset
            received += 1
            buffer = buffer[i + n :]
    sock.close()
    conn.close()
    assert received == 600
