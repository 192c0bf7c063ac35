"""The WebSocket layer through a real server: refusals before the upgrade, the token, limits,
liveness, lag and shutdown (docs/guide/realtime.md; dbsvc/http/ws/server.py rules)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time

import pytest

from support.idp import TestIdp
from support.server import ROOT, server_pool
from support.wskit import (
    closed_with,
    nothing_within,
    open_ws,
    post,
    raw_websocket,
    recv_json,
    refusal,
    request,
    run,
    server_frames,
)

USER = {"email": "ann@x.io", "name": "Ann"}


@pytest.fixture
def blog(serve):
    """A server of the test's own, for a test that writes, watches counters or stops it."""
    return serve()


@pytest.fixture(scope="module")
def idle(tmp_path_factory):
    """One server for the module's tests that write nothing and leave no socket open: the
    refusals (one asserts its head offset is 0), the 426 and 405, the documents, ping and
    close. One start instead of eighteen (~1 s of CPU each); its teardown checks that no
    test wrote to it."""
    with server_pool(tmp_path_factory.mktemp("idle") / "data") as pool:
        server = pool()
        yield server
        assert server.get("/snapshot").json["offset"] == 0, "a test wrote to the idle server"


# -- refusals before the upgrade ------------------------------------------------------------


@pytest.mark.parametrize(
    "path, status, code, detail",
    [
        ("/subscribe/nobody", 404, "not_found", "no route for path '/subscribe/nobody'"),
        ("/subscribe/User", 404, "not_found", "no route"),  # kebab only here
        ("/live-query/nobody", 404, "not_found", "no route"),
        ("/subscribe/user?age=3", 400, "bad_query", "cannot filter on 'age' (not marked @filter)"),
        ("/subscribe/user?role=boss", 400, "bad_query", "role"),
        ("/subscribe/user?colour=red", 400, "bad_query", "unknown query parameter 'colour'"),
        ("/live-query/user?projection=nope", 400, "bad_query", "unknown projection 'nope'"),
        ("/subscribe/user?after=abc", 400, "bad_query", "'after' must be a non-negative integer"),
        ("/subscribe/user?after=-1", 400, "bad_query", "'after' must be a non-negative integer"),
        ("/subscribe/user?after=1&after=2", 400, "bad_query", "'after' given more than once"),
        ("/subscribe/user?after=99", 400, "offset_out_of_range", "offset 99 is ahead of the head offset 0"),
        ("/live-query/user?after=99", 400, "offset_out_of_range", "ahead of the head"),
    ],
)
def test_refusals_before_the_upgrade_are_http_problems(idle, path, status, code, detail):
    got_status, problem, headers = run(refusal(idle, path))
    assert (got_status, problem["code"]) == (status, code), problem
    assert detail in problem["detail"]
    assert headers["content-type"] == "application/problem+json"
    assert idle.get("/health").status == 200


def test_a_plain_get_on_a_feed_is_426_with_the_upgrade_header(idle):
    reply = idle.get("/subscribe/user")
    assert reply.status == 426
    assert reply.headers["upgrade"] == "websocket"
    assert reply.json["code"] == "upgrade_required"


def test_a_post_to_a_feed_is_405(idle):
    reply = idle.post("/subscribe/user", {})
    assert reply.status == 405
    assert reply.headers["allow"] == "GET"


def test_replicate_with_replication_off_is_404_replication_disabled(serve):
    server = serve(ROOT / "schemas" / "inventory.dbs")
    status, problem, _ = run(refusal(server, "/replicate?after=0"))
    assert (status, problem["code"]) == (404, "replication_disabled")
    assert server.get("/snapshot").json["replication"] is False


def test_compression_offered_by_the_client_is_declined(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user") as ws:  # websockets offers permessage-deflate
            assert ws.response.headers.get("Sec-WebSocket-Extensions") is None
            await post(blog, "/api/user", USER)
            assert (await recv_json(ws))["kind"] == "insert"

    run(body())


def test_asyncapi_document_is_served(idle):
    reply = idle.get("/asyncapi.json")
    assert reply.status == 200
    assert reply.json["asyncapi"].startswith("3.")


# -- origin ---------------------------------------------------------------------------------


def test_origin_outside_the_cors_list_is_403_and_a_listed_one_opens(serve):
    server = serve(env={"SERVICE_CORS_ORIGINS": "https://app.example"})

    async def body():
        status, problem, _ = await refusal(server, "/subscribe/user", origin="https://evil.example")
        assert (status, problem["code"]) == (403, "forbidden")
        assert "origin 'https://evil.example' is not allowed" in problem["detail"]
        async with open_ws(server, "/subscribe/user", origin="https://app.example"):
            pass
        async with open_ws(server, "/subscribe/user"):  # no Origin: not a browser
            pass
        own = f"http://127.0.0.1:{server.port}"  # a page of the service (/_/)
        async with open_ws(server, "/subscribe/user", origin=own):
            pass
        status, _, _ = await refusal(server, "/subscribe/user", origin=f"http://127.0.0.1:{server.port + 1}")
        assert status == 403  # another port is another origin

    run(body())


# -- the token --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    return TestIdp(tmp_path_factory.mktemp("idp"))


@pytest.fixture
def guarded(serve, idp, tmp_path):
    """A guarded server of the test's own, for a test that writes or holds a socket open."""
    return serve(data_dir=idp.data_dir(f"data-{tmp_path.name}"), env=idp.server_env(SERVICE_JWT_LEEWAY="0"))


@pytest.fixture(scope="module")
def guarded_refusing(idp):
    """One guarded server for the module's refused upgrades: a refusal writes nothing and
    opens no socket, so each sees the same empty tenant; its teardown checks that."""
    data = idp.data_dir("data-refusing")
    with server_pool(data) as pool:
        server = pool(data_dir=data, env=idp.server_env(SERVICE_JWT_LEEWAY="0"))
        yield server
        assert server.get("/snapshot").json["offset"] == 0, "a refused upgrade wrote"


def test_guarded_feed_without_token_is_401(guarded_refusing):
    status, problem, headers = run(refusal(guarded_refusing, "/subscribe/user"))
    assert (status, problem["code"]) == (401, "unauthorized")
    assert headers["www-authenticate"] == 'Bearer realm="dbsvc"'


@pytest.mark.parametrize("how", ["header", "subprotocol"])
def test_bad_and_foreign_tokens_are_refused_before_the_upgrade(guarded_refusing, idp, how):
    def offer(value):
        if how == "header":
            return {"additional_headers": {"Authorization": f"Bearer {value}"}}
        return {"subprotocols": ["bearer", f"bearer.{value}"]}

    async def body():
        status, problem, headers = await refusal(guarded_refusing, "/subscribe/user", **offer("not.a.token"))
        assert (status, problem["code"]) == (401, "unauthorized")
        assert 'error="invalid_token"' in headers["www-authenticate"]
        status, problem, _ = await refusal(guarded_refusing, "/live-query/user", **offer(idp.token(tenant="other")))
        assert (status, problem["code"]) == (403, "forbidden")

    run(body())


def test_subprotocol_token_is_answered_with_bearer(guarded, idp):
    good = idp.token()

    async def body():
        async with open_ws(guarded, "/subscribe/user", subprotocols=["bearer", f"bearer.{good}"]) as ws:
            assert ws.subprotocol == "bearer"
            await post(guarded, "/api/user", USER, headers={"Authorization": f"Bearer {good}"})
            assert (await recv_json(ws))["kind"] == "insert"
        async with open_ws(guarded, "/subscribe/user", additional_headers={"Authorization": f"Bearer {good}"}) as ws:
            assert ws.subprotocol is None

    run(body())


def test_socket_closes_with_4401_when_its_token_expires(guarded, idp):
    short = idp.token(exp=int(time.time()) + 2)

    async def body():
        async with open_ws(guarded, "/subscribe/user", additional_headers={"Authorization": f"Bearer {short}"}) as ws:
            started = time.monotonic()
            code, reason = await closed_with(ws, timeout=8)
            assert (code, reason) == (4401, "token expired")
            assert time.monotonic() - started < 5  # by a timer, with no event needed

    run(body())


# -- limits ---------------------------------------------------------------------------------


def test_message_over_64_kib_closes_with_1009_and_the_server_goes_on(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user") as ws:
            await ws.send("x" * 65536)  # exactly the limit: ignored
            await ws.send(b"y" * (65536 + 1))
            code, _reason = await closed_with(ws)
            assert code == 1009
        async with open_ws(blog, "/subscribe/user") as ws:
            await post(blog, "/api/user", USER)
            assert (await recv_json(ws))["kind"] == "insert"

    run(body())


def test_fragmented_message_over_the_limit_closes_with_1009(idle):
    async def body():
        async with open_ws(idle, "/subscribe/user") as ws:
            await ws.send(iter([b"a" * 40000, b"b" * 40000]))  # two frames, 80,000 bytes
            code, _reason = await closed_with(ws)
            assert code == 1009

    run(body())


def _wait_metric(server, name: str, value: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.get("/metrics").json["realtime"][name] == value:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} never became {value}: {server.get('/metrics').json['realtime']}")


async def _metric_becomes(server, name: str, value: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await request(server, "GET", "/metrics")).json["realtime"][name] == value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never became {value}")


def test_dead_peer_is_dropped_after_a_missed_pong(serve):
    # The alive peer first, then the dead one; the drop is waited for in the log, not seen as
    # a count of 2 within 0.25 s: the dead peer is dropped ping + pong timeout after its
    # handshake, which a test preempted at load (0.7 s once injected) read as 1 already.
    # The pong timeout (1 s) is the time the alive peer's loop has to answer each ping.
    server = serve(env={"SERVICE_WS_PING_INTERVAL": "0.3", "SERVICE_WS_PONG_TIMEOUT": "1"})

    async def body():
        async with open_ws(server, "/subscribe/user", ping_interval=None) as alive:  # answers pings
            await _metric_becomes(server, "subscriptions", 1)
            dead = await asyncio.to_thread(raw_websocket, server.port, "/subscribe/user")  # never answers a ping
            deadline = time.monotonic() + 10
            while not any("no answer to a ping within 1.0 s" in line for line in server.log):
                assert time.monotonic() < deadline, "the dead peer was never dropped"
                await asyncio.sleep(0.05)
            await _metric_becomes(server, "subscriptions", 1, timeout=5)  # the dead one dropped
            await asyncio.sleep(1.5)  # more ping rounds
            assert (await request(server, "GET", "/metrics")).json["realtime"]["subscriptions"] == 1
            await post(server, "/api/user", USER)
            assert (await recv_json(alive))["kind"] == "insert"
            return dead

    dead = run(body())
    dead.settimeout(5)
    received = b""
    while True:
        chunk = dead.recv(65536)
        if not chunk:
            break
        received += chunk
    assert received.startswith(b"\x89\x00")  # the unanswered ping
    dead.close()


def test_slow_consumer_is_closed_1013_while_a_fast_one_keeps_up(serve, tmp_path):
    schema = tmp_path / "small.dbs"
    schema.write_text(
        (ROOT / "schemas" / "blog.dbs").read_text().replace("changefeed_capacity = 1024", "changefeed_capacity = 8")
    )
    # SERVICE_SYNC=off: 80 writes of 200 KB one by one need no fsync each to show the bound;
    # a short close timeout: the slow client's close is not waited for 5 s.
    server = serve(schema, env={"SERVICE_SYNC": "off", "SERVICE_WS_CLOSE_TIMEOUT": "0.7"})
    slow = raw_websocket(server.port, "/subscribe/user", rcvbuf=4096)  # reads nothing from here on
    big = "x" * 200_000
    writes = 80  # 16 MB: well past the kernel's socket buffers and 8 queued frames
    before = _proc_kib(server.proc.pid, "VmRSS")

    async def body():
        async with open_ws(server, "/subscribe/user") as fast:

            async def receive() -> list[int]:
                return [(await recv_json(fast))["offset"] for _ in range(writes)]

            receiver = asyncio.create_task(receive())  # reads while writes go on
            for i in range(writes):
                await post(server, "/api/user", {"email": f"{i}@x.io", "name": "Ann", "profile": big})
            assert await receiver == list(range(1, writes + 1))

    run(body())
    _wait_metric(server, "lagged_closes", 1)
    # Memory stayed bounded: the peak grew by the 16 MB of records the server now holds,
    # not by another 16 MB of frames owed to the slow client.
    assert _proc_kib(server.proc.pid, "VmHWM") - before < 28 * 1024
    assert server.get("/metrics").json["realtime"]["events_sent"] < 2 * writes
    assert server.get("/metrics").json["realtime"]["subscriptions"] == 0
    # The slow client reads at last: the frames it was sent, then 1013 naming the last one.
    slow.settimeout(10)
    data = b""
    while True:
        chunk = slow.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    frames = server_frames(data)
    texts = [json.loads(payload) for opcode, payload in frames if opcode == 1]
    close = [payload for opcode, payload in frames if opcode == 8]
    assert close, "no close frame"
    code = int.from_bytes(close[0][:2], "big")
    reason = close[0][2:].decode()
    assert code == 1013
    assert reason == f"lagged after {texts[-1]['offset']}"
    assert [t["offset"] for t in texts] == list(range(1, len(texts) + 1))  # a prefix, no gap
    assert len(texts) < writes


def _proc_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field}")


def test_sigterm_closes_every_socket_with_1001(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user") as a, open_ws(blog, "/live-query/user") as b:
            await recv_json(b)  # Init
            blog.proc.send_signal(signal.SIGTERM)
            assert (await closed_with(a))[0] == 1001
            assert (await closed_with(b))[0] == 1001

    run(body())
    assert blog.wait(timeout=30) == 0  # its exit, and its log read to the end
    assert any("closed cleanly" in line for line in blog.log)


def test_nothing_is_sent_to_a_feed_after_the_server_closed_it(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user") as ws:
            await ws.send(b"z" * 70000)
            assert (await closed_with(ws))[0] == 1009
        await post(blog, "/api/user", USER)
        assert blog.get("/metrics").json["realtime"]["subscriptions"] == 0
        async with open_ws(blog, "/subscribe/user") as ws:
            assert await nothing_within(ws, 0.2)
            await request(blog, "PATCH", "/api/user/1", {"name": "B"})
            assert (await recv_json(ws))["kind"] == "update"

    run(body())


# -- the wire, byte by byte -------------------------------------------------------------------


def _masked(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    mask = os.urandom(4)
    head = bytes((0x80 * fin | opcode,))
    n = len(payload)
    head += bytes((0x80 | n,)) if n < 126 else bytes((0x80 | 126,)) + n.to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _read_until_eof(sock: socket.socket, timeout: float = 10) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


MALFORMED_FRAMES = [
    ("unmasked client frame", b"\x81\x02hi", 1002),  # RFC 6455 §5.1
    ("reserved bit set (no extension)", b"\xc1\x82" + b"\x00" * 4 + b"hi", 1002),
    ("unknown opcode", _masked(0x3, b"x"), 1002),
    ("fragmented ping", _masked(0x9, b"x", fin=False), 1002),
    ("invalid UTF-8 in text", _masked(0x1, b"\xff\xfe"), 1007),
    ("close code out of range", _masked(0x8, (999).to_bytes(2, "big")), 1002),
]


@pytest.fixture(scope="module")
def framed(tmp_path_factory):
    """One server for the malformed-frame cases: each writes a user of its own (its email
    from its code and name), compares the list before and after its frame, and waits for the
    server to close the connection, so no case sees another's socket or a change it made."""
    with server_pool(tmp_path_factory.mktemp("framed") / "data") as pool:
        yield pool()


# ids by name: the frames hold random masks, and test ids must be the same in every collection
@pytest.mark.parametrize("name, frame, code", MALFORMED_FRAMES, ids=[case[0] for case in MALFORMED_FRAMES])
def test_malformed_frames_close_with_their_code_and_lose_nothing(framed, name, frame, code):
    assert framed.post("/api/user", {"email": f"{code}-{len(name)}@x.io", "name": "Ann"}).status == 201
    before = framed.get("/api/user").json
    sock = raw_websocket(framed.port, "/subscribe/user")
    sock.sendall(frame)
    frames = server_frames(_read_until_eof(sock))  # the server closes TCP itself
    sock.close()
    assert frames and frames[-1][0] == 8, frames
    assert int.from_bytes(frames[-1][1][:2], "big") == code, name
    assert framed.get("/api/user").json == before
    assert framed.get("/metrics").json["realtime"]["subscriptions"] == 0


def test_a_client_close_is_echoed_and_the_server_closes_tcp(idle):
    sock = raw_websocket(idle.port, "/subscribe/user")
    sock.sendall(_masked(0x8, (1000).to_bytes(2, "big") + b"bye"))
    frames = server_frames(_read_until_eof(sock))
    sock.close()
    assert frames == [(8, (1000).to_bytes(2, "big"))]


def test_ping_from_the_client_gets_its_pong(idle):
    sock = raw_websocket(idle.port, "/subscribe/user")
    sock.sendall(_masked(0x9, b"are you there"))
    sock.settimeout(10)
    data = b""
    while len(data) < 2 + len(b"are you there"):
        data += sock.recv(1024)
    assert server_frames(data)[0] == (0xA, b"are you there")
    sock.close()


def test_shutdown_waits_for_a_close_reply_only_up_to_the_close_timeout(serve):
    server = serve(env={"SERVICE_SHUTDOWN_TIMEOUT": "60", "SERVICE_WS_CLOSE_TIMEOUT": "1"})
    sock = raw_websocket(server.port, "/subscribe/user")  # will never answer the close
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    frames = server_frames(_read_until_eof(sock, timeout=30))
    assert frames and frames[0][0] == 8 and int.from_bytes(frames[0][1][:2], "big") == 1001
    assert server.proc.wait(timeout=30) == 0
    assert time.monotonic() - started < 15  # the 1 s close timeout, not the 60 s shutdown timeout
    sock.close()
