"""Slow subscribers through a real server: the lagged close a client meets and resumes from,
the queue's byte bound, and a drain's frames leaving in one write (docs/realtime.md,
"Slow consumers"; session.py rule 4, ws/server.py rules 4 and 5, broker.py rules 9 and 10)."""

from __future__ import annotations

import json
import socket
import time

from support.server import ROOT
from support.wskit import nothing_within, open_ws, raw_websocket, recv_json, run, server_frames

# SERVICE_WS_CLOSE_TIMEOUT, shortened from its 5 s so the pause past it stays cheap; it differs
# from every other timeout of these servers (ping 30 s, pong 30 s, idle 60 s).
CLOSE_TIMEOUT = 0.7
FAST_CLOSE = {"SERVICE_WS_CLOSE_TIMEOUT": str(CLOSE_TIMEOUT)}


def _small_buffer_schema(tmp_path, capacity: int):
    schema = tmp_path / "small.dbs"
    schema.write_text(
        (ROOT / "schemas" / "blog.dbs")
        .read_text()
        .replace("changefeed_capacity = 1024", f"changefeed_capacity = {capacity}")
    )
    return schema


def _metric(server, name: str) -> int:
    return server.get("/metrics").json["realtime"][name]


def _write_until_lagged(server, profile: str, limit: int = 400) -> int:
    """POST users with `profile` until the server counts a lagged close; the writes made."""
    for i in range(limit):
        response = server.post("/api/user", {"email": f"{i}@x.io", "name": "Ann", "profile": profile})
        assert response.status == 201, response.body
        if i % 4 == 3 and _metric(server, "lagged_closes") == 1:
            return i + 1
    raise AssertionError(f"no lagged close after {limit} writes: {server.get('/metrics').json['realtime']}")


def _read_to_end(sock: socket.socket, limit: float = 30.0) -> bytes:
    """Everything the server sends until it closes TCP (a reset ends it too: what came
    before is kept, and the test's asserts tell what was missing)."""
    sock.settimeout(limit)
    data = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    sock.close()
    return data


def _texts_and_close(data: bytes) -> tuple[list[dict], tuple[int, str] | None]:
    frames = server_frames(data)
    texts = [json.loads(payload) for opcode, payload in frames if opcode == 1]
    closes = [payload for opcode, payload in frames if opcode == 8]
    close = (int.from_bytes(closes[0][:2], "big"), closes[0][2:].decode()) if closes else None
    return texts, close


def test_a_lagged_subscriber_that_reads_again_gets_1013_and_resumes_without_gap_or_duplicate(serve, tmp_path):
    server = serve(_small_buffer_schema(tmp_path, 8), env=FAST_CLOSE)
    slow = raw_websocket(server.port, "/subscribe/user", rcvbuf=4096)  # stops reading from here on
    written = _write_until_lagged(server, "x" * 100_000)
    for i in range(3):  # events after the close, for the resume to find
        server.post("/api/user", {"email": f"after{i}@x.io", "name": "Bo"})
    head = written + 3
    # The client comes back later than the close timeout: a pause, not a poll, is the case.
    time.sleep(CLOSE_TIMEOUT + 1.0)
    texts, close = _texts_and_close(_read_to_end(slow))
    assert close is not None, f"no close frame after {len(texts)} events"
    assert close[0] == 1013
    resume = texts[-1]["offset"] if texts else 0
    assert close[1] == f"lagged after {resume}"  # the last event it fully received
    assert [t["offset"] for t in texts] == list(range(1, resume + 1))  # a prefix: no gap
    assert resume < written  # the backlog was dropped, not sent before the close

    async def body():
        async with open_ws(server, f"/subscribe/user?after={resume}") as ws:
            offsets = [(await recv_json(ws))["offset"] for _ in range(head - resume)]
            assert offsets == list(range(resume + 1, head + 1))  # exactly the missing events
            assert await nothing_within(ws, 0.3)

    run(body())


def test_a_stalled_subscriber_is_closed_by_its_byte_budget_long_before_its_frame_count(serve):
    # 1 MiB; capacity stays 1024 frames
    server = serve(env={"SERVICE_CHANGEFEED_BYTES": str(1 << 20), **FAST_CLOSE})
    slow = raw_websocket(server.port, "/subscribe/user", rcvbuf=4096)
    written = _write_until_lagged(server, "y" * 200_000, limit=200)
    assert written < 100  # 1 MiB of 200 KB frames is 5 queued frames, not 1024
    assert _metric(server, "subscriptions") == 0
    texts, close = _texts_and_close(_read_to_end(slow))
    assert close == (1013, f"lagged after {texts[-1]['offset'] if texts else 0}")
    assert [t["offset"] for t in texts] == list(range(1, len(texts) + 1))


def test_events_committed_together_reach_a_subscriber_in_fewer_writes_than_events(serve):
    server = serve()
    sub = raw_websocket(server.port, "/subscribe/user")
    writes = 5
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as http:
        # Pipelined in one send: the server reads them in one turn and commits them together,
        # so their events are published in one drain.
        body = [json.dumps({"email": f"p{i}@x.io", "name": "Pip"}).encode() for i in range(writes)]
        http.sendall(
            b"".join(
                b"POST /api/user HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(b), b)
                for b in body
            )
        )
        answers = b""
        deadline = time.monotonic() + 10
        while answers.count(b"HTTP/1.1 201") < writes and time.monotonic() < deadline:
            answers += http.recv(65536)
        assert answers.count(b"HTTP/1.1 201") == writes
    sub.settimeout(10)
    data, reads = b"", 0
    while len(server_frames(data)) < writes:  # the frames of one send arrive together on loopback
        data += sub.recv(65536)
        reads += 1
    texts = [json.loads(payload) for opcode, payload in server_frames(data) if opcode == 1]
    assert [t["offset"] for t in texts] == list(range(1, writes + 1))
    assert reads < writes  # coalesced: not one send per event
    sub.close()
