"""The life of one connection in dbsvc/http/connection.py, watched from both ends: what
the client gets, and what the server holds (its hub's connections and connection count,
parked input, paused reading, buffered output) and logs.

Rules 1 (input parked and reading paused while the app works or the client does not read),
7 (a half-closed client, the linger), 11 (the deadlines: a slow head, a slow body, a quiet or
stuck keep-alive connection) and 12 (at most PIPELINE_BUDGET requests started per turn of
the loop), the connection cap, the peer address, and what `connection_lost` gives back.

The server runs in this process (support/inprocess.py) so that mutation testing sees it
(docs/mutation.md). Its application is the demo app plus a few routes whose timing the
test controls (`Lab`): a request held until the test releases it, one that blocks the
server's loop while the client sends more, and one that tells in which turn of the loop it
started. Looking at the hub happens on the server's loop (`InProcessServer.call`); the
connection's own fields (`_unfed`, `_transport`, `_out`) are read there, never changed.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import re
import socket
import struct
import termios
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

import dbsvc.http.respond as respond_module
from dbsvc.http.connection import PIPELINE_BUDGET, HttpConnection, Phase
from dbsvc.http.types import Deferred, HttpSettings, Request, Response
from support.demo_app import app as demo_app
from support.httpkit import Client, assert_one_layer_crash
from support.inprocess import WAIT, InProcessServer

MAX_BODY = 1024
PARSER = os.environ.get("SERVICE_HTTP_PARSER", "fast")  # tests/http/conftest.py
BOTH_PARSERS = pytest.mark.parametrize("parser", sorted({PARSER, "fast", "h11"}))
SHORT = 0.5  # a deadline the test waits for; nothing asserts how soon it fires


class Lab:
    """The demo app, plus routes whose timing the test controls."""

    def __init__(self) -> None:
        self.held: list[asyncio.Future] = []
        self.seen: list[str] = []  # the target of every request it was given
        self.turn = 0
        self._turn_ends = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, request: Request):
        self.seen.append(request.target)
        path = request.path
        if path == "/client":
            return Response(200, json.dumps(request.client).encode())
        if path == "/hold":  # answered when the test says so
            future = asyncio.get_running_loop().create_future()
            self.held.append(future)
            return Deferred(future, Response(200, json.dumps({"held": request.target}).encode()))
        if path == "/turn":
            return Response(200, json.dumps({"target": request.target, "turn": self._current_turn()}).encode())
        if path == "/block":  # holds the whole loop (rule 12's window)
            turn = self._current_turn()
            self.entered.set()
            self.release.wait(WAIT)
            return Response(200, json.dumps({"target": request.target, "turn": turn}).encode())
        return demo_app(request)

    def _current_turn(self) -> int:
        """The number of the loop's turn this request started in: the first request of a turn
        asks for a callback that counts the turn as over; it runs first in the next turn, before
        the connection's own `_resume_turn` (asyncio runs callbacks in the order they were asked)."""
        if not self._turn_ends:
            self._turn_ends = True
            asyncio.get_running_loop().call_soon(self._next_turn)
        return self.turn

    def _next_turn(self) -> None:
        self.turn += 1
        self._turn_ends = False


class Served(InProcessServer):
    lab: Lab

    def client(self) -> Client:
        return Client(self.port, timeout=WAIT)

    def connection_of(self, client: Client) -> HttpConnection:
        """The server's connection for `client` (found by the client's port)."""
        port = client.sock.getsockname()[1]

        def find() -> list[HttpConnection]:
            assert self.hub is not None
            return [c for c in self.hub.connections if c.peer is not None and c.peer[1] == port]

        deadline = time.monotonic() + WAIT
        while not (found := self.call(find)):
            assert time.monotonic() < deadline, "the server never saw the client"
            time.sleep(0.01)
        return found[0]

    def asyncio_errors(self) -> list[str]:
        """Errors asyncio logged: a protocol callback of ours that raised."""
        return [line for line in self.log.lines if " ERROR asyncio" in line.split("\n")[0]]


def wait_until(predicate: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def unread_by_server(conn: HttpConnection) -> int:
    """Bytes the client sent that still wait in the kernel for the server to read them."""
    fd = conn.transport.get_extra_info("socket").fileno()
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


@pytest.fixture
def serve() -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(**overrides) -> Served:
        options = dict(
            host="127.0.0.1",
            port=0,
            max_body=MAX_BODY,
            max_connections=64,
            header_timeout=WAIT,
            idle_timeout=WAIT * 10,
            shutdown_timeout=2.0,
            min_body_rate=0.0,
            body_rate_grace=5.0,
            body_memory=64 << 20,
            http_parser=PARSER,
        )
        options.update(overrides)
        lab = Lab()
        server = Served(lab, HttpSettings(**options))
        server.lab = lab
        started.append(server.start())
        return server

    yield start
    for server in started:
        server.lab.release.set()
        errors = server.asyncio_errors()
        server.stop()
        assert errors == [], errors


def get(target: str, extra: str = "") -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode()


# -- the peer ---------------------------------------------------------------------------


@BOTH_PARSERS
def test_the_application_sees_the_clients_address_and_port(serve, parser):
    served = serve(http_parser=parser)
    client = served.client()
    host, port = client.sock.getsockname()[:2]
    assert client.request("GET", "/client").json() == [host, port]
    # Also after the fast path handed the connection to h11 (a chunked body).
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n")
    assert client.read_response().json()["body"] == "ab"
    assert client.request("GET", "/client").json() == [host, port]
    client.close()


# -- rule 1: input parked while the application works ----------------------------------


def test_rule_1_input_is_parked_and_reading_paused_while_the_app_works(serve):
    served = serve()
    client = served.client()
    conn = served.connection_of(client)
    for round_ in (1, 2):  # the pause must come back the second time
        client.send(get(f"/hold?round={round_}"))
        wait_until(lambda: len(served.lab.held) == round_, "the app to hold the request")
        follow = get(f"/echo?after={round_}")
        client.send(follow)
        wait_until(lambda: served.call(lambda: bool(conn.parked)), "the server to park the next request")
        parked, reading = served.call(lambda: (conn.parked, conn.transport.is_reading()))
        assert parked == follow  # not parsed yet: the app has the first one
        assert reading is False  # and nothing more is read meanwhile
        served.call(lambda: served.lab.held[-1].set_result(None))
        assert client.read_response().json() == {"held": f"/hold?round={round_}"}
        assert client.read_response().json()["query"] == [["after", str(round_)]]
        wait_until(lambda: served.call(lambda: conn.transport.is_reading()), "reading to resume")
        assert served.call(lambda: conn.parked) == b""
    assert client.request("GET", "/echo?last=1").status == 200
    client.close()


def test_rule_1_a_client_that_does_not_read_holds_one_response_not_all(serve):
    # 40 answers of 1 MiB asked for at once and left unread: the server stops at the write
    # buffer's high-water mark instead of rendering all 40 MiB into memory; what the client
    # sends meanwhile is parked with reading paused; everything arrives in order once read.
    served = serve()
    client = served.client()
    conn = served.connection_of(client)
    size, count = 1 << 20, 40
    client.send(b"".join(get(f"/big?n={size}&i={i}") for i in range(count)))
    bound = 4 * size  # one answer, the mark, one held batch
    wait_until(
        lambda: served.call(lambda: conn.writing_paused or conn.buffered_out > bound),
        "the transport to ask the server to stop writing",
    )
    assert served.call(lambda: conn.writing_paused) is True
    assert served.call(lambda: conn.buffered_out) <= bound
    more = get("/echo?after=big")
    client.send(more)
    wait_until(lambda: served.call(lambda: bool(conn.parked)), "the server to park the request")
    assert served.call(lambda: (conn.parked, conn.transport.is_reading())) == (more, False)
    assert served.call(lambda: conn.buffered_out) <= bound
    for i in range(count):
        response = client.read_response()
        assert response.status == 200 and len(response.body) == size, i
    assert client.read_response().json()["query"] == [["after", "big"]]
    wait_until(lambda: served.call(lambda: conn.transport.is_reading()), "reading to resume")
    assert served.call(lambda: not conn.writing_paused and not conn.parked)
    client.close()


# -- rule 7: the client's half-close ----------------------------------------------------


@BOTH_PARSERS
def test_rule_7_a_client_that_half_closes_after_its_request_still_gets_the_answer(serve, parser):
    served = serve(http_parser=parser)
    client = served.client()
    conn = served.connection_of(client)
    client.send(get("/hold?half=1"))
    wait_until(lambda: len(served.lab.held) == 1, "the app to hold the request")
    client.sock.shutdown(socket.SHUT_WR)  # "that was all": the EOF comes while the app works
    wait_until(lambda: served.call(lambda: conn.saw_eof or conn.transport.is_closing()), "the server to see the EOF")
    served.call(lambda: served.lab.held[0].set_result(None))
    assert client.read_response().json() == {"held": "/hold?half=1"}
    assert client.is_closed(WAIT)  # then the server closes too
    wait_until(lambda: served.call(lambda: conn not in served.hub.connections), "the server to forget it")


@BOTH_PARSERS
def test_rule_7_a_half_close_between_requests_closes_the_connection(serve, parser):
    served = serve(http_parser=parser)  # idle_timeout is far away
    client = served.client()
    conn = served.connection_of(client)
    assert client.request("GET", "/echo?first=1").status == 200
    client.sock.shutdown(socket.SHUT_WR)
    assert client.is_closed(WAIT)
    wait_until(
        lambda: served.call(lambda: conn not in served.hub.connections and served.hub.counted == 0),
        "the server to forget the connection",
    )


def test_rule_7_a_lingering_connection_discards_input_and_ends_at_the_clients_eof(serve, monkeypatch):
    monkeypatch.setattr(respond_module, "LINGER_SECONDS", WAIT * 10)  # only the client's EOF ends it
    served = serve()
    client = served.client()
    conn = served.connection_of(client)
    client.send(f"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {MAX_BODY * 8}\r\n\r\n".encode())
    assert client.read_response().status == 413
    assert client.is_closed(WAIT)  # the server's FIN after the answer
    assert served.call(lambda: conn.phase) is Phase.LINGER
    junk = b"j" * (300 << 10)
    client.send(junk)  # the refused body still comes: discarded
    wait_until(lambda: served.call(lambda: unread_by_server(conn) == 0), "the server to read the junk")
    assert served.call(lambda: (conn.phase, conn.parked)) == (Phase.LINGER, b"")
    client.sock.shutdown(socket.SHUT_WR)
    wait_until(lambda: served.call(lambda: conn not in served.hub.connections), "the server to close at the EOF")
    client.close()


# -- rule 11: deadlines ------------------------------------------------------------------


@pytest.mark.parametrize("kept_alive", [False, True], ids=["first request", "after an answer"])
def test_a_head_that_never_ends_is_closed_at_its_deadline_without_an_answer(serve, debug_log, kept_alive):
    served = serve(header_timeout=SHORT)
    client = served.client()
    conn = served.connection_of(client)
    if kept_alive:  # the deadline starts again at the next head
        assert client.request("GET", "/echo?first=1").status == 200
    client.send(b"GET /echo HTTP/1.1\r\nHost: t\r\n")  # and nothing more (slowloris)
    try:
        assert client.reader.read(1) == b""  # closed: no response at all
    except ConnectionResetError:
        pass
    host, port = client.sock.getsockname()[:2]
    wait_until(lambda: served.call(lambda: conn not in served.hub.connections), "the server to forget it")
    lines = [line for line in served.log.lines if "timed out" in line]
    assert len(lines) == 1 and lines[0].endswith(
        f" DEBUG dbsvc.http: closing ('{host}', {port}): timed out in phase head"
    ), lines
    client.close()


def test_the_next_head_on_a_kept_alive_connection_gets_the_whole_header_time(serve):
    served = serve()  # header_timeout: WAIT
    client = served.client()
    assert client.request("GET", "/echo?first=1").status == 200
    client.send(b"GET /echo?second=1 HTTP/1.1\r\n")
    time.sleep(1.2)  # a slow client: the sweeper looks meanwhile
    client.send(b"Host: t\r\n\r\n")
    assert client.read_response().json()["query"] == [["second", "1"]]
    client.close()


def test_a_quiet_keep_alive_connection_ends_with_a_fin_at_the_idle_deadline(serve, debug_log):
    served = serve(idle_timeout=SHORT)
    client = served.client()
    conn = served.connection_of(client)
    assert client.request("GET", "/echo").status == 200
    client.sock.settimeout(WAIT)
    assert client.sock.recv(1) == b""  # an orderly close, not a reset
    wait_until(lambda: served.call(lambda: conn not in served.hub.connections), "the server to forget it")
    assert [line for line in served.log.lines if "timed out" in line] == []  # nothing unusual to say
    client.close()


def test_a_client_that_stops_reading_is_dropped_at_the_idle_deadline(serve, debug_log):
    served = serve(idle_timeout=SHORT)
    client = served.client()
    conn = served.connection_of(client)
    client.send(get(f"/big?n={16 << 20}"))  # far more than the socket buffers, never read
    wait_until(
        lambda: served.call(lambda: conn not in served.hub.connections), "the server to drop the connection"
    )  # close() would wait for the client forever
    host, port = client.sock.getsockname()[:2]
    lines = [line for line in served.log.lines if "timed out" in line]
    assert len(lines) == 1 and lines[0].endswith(f"closing ('{host}', {port}): timed out in phase idle"), lines
    client.close()


def test_a_body_that_stops_coming_is_408_naming_what_arrived(serve):
    served = serve(idle_timeout=SHORT)  # the longest pause inside a body
    client = served.client()
    conn = served.connection_of(client)
    started = time.monotonic()
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nX-Request-Id: slow-body-1\r\nContent-Length: 10\r\n\r\nabc")
    response = client.read_response()
    waited = time.monotonic() - started
    assert response.status == 408
    assert response.header("connection") == "close"
    problem = response.json()
    assert problem["request_id"] == "slow-body-1"  # the request's own id, not a fresh one
    match = re.fullmatch(r"request body too slow: 3 bytes received in (\d+\.\d) s", problem["detail"])
    assert match is not None, problem["detail"]
    assert float(match.group(1)) <= waited + 0.1  # seconds since its head, as the client saw them
    assert client.is_closed(WAIT)
    client.sock.shutdown(socket.SHUT_WR)  # read it all: the linger may end
    wait_until(
        lambda: served.call(lambda: conn not in served.hub.connections and served.hub.body_bytes == 0),
        "the server to forget the connection and its 3 bytes",
    )


# -- the connection cap ------------------------------------------------------------------


def test_a_refused_connection_does_not_free_a_place_under_the_cap(serve):
    served = serve(max_connections=1)
    first = served.client()
    assert first.request("GET", "/echo").status == 200  # holds the only place
    for _ in range(2):  # a refused one leaving frees nothing
        refused = served.client()
        response = refused.request("GET", "/echo")
        assert response.status == 503 and response.json()["code"] == "unavailable"
        assert refused.is_closed(WAIT)
        refused.close()
        wait_until(lambda: served.call(lambda: len(served.hub.connections) == 1), "the refused one to go")
        assert served.call(lambda: served.hub.counted) == 1
    first.close()
    wait_until(
        lambda: served.call(lambda: served.hub.counted == 0 and not served.hub.connections),
        "the place to be given back",
    )
    after = served.client()
    assert after.request("GET", "/echo").status == 200
    after.close()


# -- rule 12: fairness -------------------------------------------------------------------


@pytest.mark.parametrize("then", ["more requests", "eof"])
def test_rule_12_one_connection_starts_at_most_a_budget_of_requests_per_turn(serve, then):
    # 100 pipelined requests in one write. The 33rd blocks the server's loop while the
    # client sends 10 more (or half-closes): those bytes arrive while the connection is
    # between two budgets, and must wait for its next turn like the rest.
    served = serve()
    lab = served.lab
    client = served.client()
    targets = [f"/block?i={i}" if i == PIPELINE_BUDGET + 1 else f"/turn?i={i}" for i in range(1, 101)]
    client.send(b"".join(get(target) for target in targets))
    assert lab.entered.wait(WAIT)
    if then == "eof":
        client.sock.shutdown(socket.SHUT_WR)
    else:
        late = [f"/turn?i={i}" for i in range(101, 111)]
        client.send(b"".join(get(target) for target in late))
        targets += late
    time.sleep(0.2)  # the bytes reach the server's socket meanwhile
    lab.release.set()
    answers = [client.read_response().json() for _ in targets]
    assert [a["target"] for a in answers] == targets  # in request order
    # Counted by the app: the budget counts heads, so the head that ends a budget has its
    # request reach the app at the start of the next turn; never more than a budget per turn.
    per_turn = Counter(a["turn"] for a in answers)
    assert max(per_turn.values()) == PIPELINE_BUDGET, per_turn
    if then == "eof":
        assert client.is_closed(WAIT)
    else:
        assert client.request("GET", "/echo?after=budget").status == 200  # still served
    client.close()


def test_rule_12_requests_parked_behind_an_answer_cut_short_by_an_abort_never_reach_the_app(serve):
    # A held answer completes and the connection is aborted in the same turn (the shutdown
    # timeout), with three budgets of requests parked behind it. The connection answers (the
    # aborted transport drops the bytes) and starts one budget of the parked requests before
    # it learns of the abort; it yields (rule 12), `connection_lost` comes before its next
    # turn, and no further request may reach the application.
    served = serve()
    lab = served.lab
    client = served.client()
    conn = served.connection_of(client)
    client.send(get("/hold?first=1"))
    wait_until(lambda: len(lab.held) == 1, "the app to hold the request")
    parked = b"".join(get(f"/echo?i={i}") for i in range(3 * PIPELINE_BUDGET))
    client.send(parked)
    wait_until(lambda: served.call(lambda: conn.parked) == parked, "the server to park the requests")
    served.call(lambda: (lab.held[0].set_result(None), conn.abort()))
    wait_until(lambda: served.call(lambda: conn not in served.hub.connections), "the server to forget it")
    seen = served.call(lambda: list(lab.seen))  # after the turn the connection yielded to
    assert seen[0] == "/hold?first=1"
    assert seen[1:] == [f"/echo?i={i}" for i in range(len(seen) - 1)]
    assert len(seen) - 1 <= PIPELINE_BUDGET, len(seen)
    client.close()


def test_rule_8_a_bug_met_after_the_connection_yielded_is_logged_with_its_type(serve, caplog):
    # The 33rd pipelined request is read when the loop comes back to the connection
    # (rule 12); the demo's /bad-upgrade then makes the WebSocket layer raise after the 101.
    served = serve()
    client = served.client()
    upgrade = (
        b"GET /bad-upgrade HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"X-Request-Id: crash-33\r\n\r\n"
    )
    with caplog.at_level(logging.ERROR, logger="dbsvc.http"):
        client.send(b"".join(get(f"/echo?i={i}") for i in range(PIPELINE_BUDGET)) + upgrade)
        for i in range(PIPELINE_BUDGET):
            assert client.read_response().json()["query"] == [["i", str(i)]]
        assert client.read_response().status == 101
        assert client.is_closed(WAIT)
    assert_one_layer_crash(caplog.records, "upgraded", "crash-33", TypeError)
    assert served.client().request("GET", "/echo").status == 200
