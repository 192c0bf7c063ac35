"""Settings that could be swapped for one another, each given a value of its own (issue 33:
"two timeouts that are equal in the only test that uses them, so swapping them is invisible").

- The environment: every SERVICE_* variable set at once to a value no other one has, so a
  variable read into its neighbour's field (the header and shutdown timeouts are both 10 s
  by default, the ping interval and pong timeout both 30 s, the connection and socket caps
  both 1024) fails here; the defaults against the figures docs/guide/configuration.md states
  (tests/test_cli_config.py holds that chapter to them: mutmut's copy has no docs/).
- The WebSocket timers (dbsvc/http/ws/server.py rules 3 and 4): the ping interval, the pong
  timeout and the close timeout, three different values on one socket, driven by a manual
  clock (the loop's `time`/`call_at`, nothing of ours faked), so each deadline is met at its
  own instant, to the hundredth of a second, in no wall time.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from dbsvc.config import load_config
from dbsvc.http.output import Outbox
from dbsvc.http.types import HttpSettings, Request, Upgrade
from dbsvc.http.ws.server import WebSocketConnection

# -- the environment, each variable in its own field


def test_every_variable_lands_in_its_own_field():
    env = {
        "SERVICE_HOST": "127.0.0.2",
        "SERVICE_PORT": "3001",
        "SERVICE_MAX_BODY": "1000001",
        "SERVICE_MAX_CONNECTIONS": "1002",
        "SERVICE_MAX_SOCKETS": "1003",
        "SERVICE_HEADER_TIMEOUT": "4.5",
        "SERVICE_IDLE_TIMEOUT": "5.5",
        "SERVICE_SHUTDOWN_TIMEOUT": "6.5",
        "SERVICE_MIN_BODY_RATE": "241",
        "SERVICE_BODY_MEMORY": "2000003",
        "SERVICE_WS_PING_INTERVAL": "7.5",
        "SERVICE_WS_PONG_TIMEOUT": "8.5",
        "SERVICE_WS_CLOSE_TIMEOUT": "9.25",
        "SERVICE_CHANGEFEED_BYTES": "70000",
        "SERVICE_LIST_CACHE_BYTES": "70001",
    }
    config = load_config(env, {"replication": True, "changefeed_capacity": 17, "replication_retain_mb": 3})
    http = config.http
    got = {
        "host": http.host,
        "port": http.port,
        "max_body": http.max_body,
        "max_connections": http.max_connections,
        "max_sockets": http.max_sockets,
        "header_timeout": http.header_timeout,
        "idle_timeout": http.idle_timeout,
        "shutdown_timeout": http.shutdown_timeout,
        "min_body_rate": http.min_body_rate,
        "body_memory": http.body_memory,
        "ws_ping_interval": http.ws_ping_interval,
        "ws_pong_timeout": http.ws_pong_timeout,
        "ws_close_timeout": http.ws_close_timeout,
        "changefeed_bytes": config.changefeed_bytes,
        "list_cache_bytes": config.list_cache_bytes,
        "changefeed_capacity": config.changefeed_capacity,
        "replication_retain_bytes": config.replication_retain_bytes,
    }
    assert got == {
        "host": "127.0.0.2",
        "port": 3001,
        "max_body": 1000001,
        "max_connections": 1002,
        "max_sockets": 1003,
        "header_timeout": 4.5,
        "idle_timeout": 5.5,
        "shutdown_timeout": 6.5,
        "min_body_rate": 241,
        "body_memory": 2000003,
        "ws_ping_interval": 7.5,
        "ws_pong_timeout": 8.5,
        "ws_close_timeout": 9.25,
        "changefeed_bytes": 70000,
        "list_cache_bytes": 70001,
        "changefeed_capacity": 17,
        "replication_retain_bytes": 3 << 20,
    }


def test_the_defaults_are_the_documented_figures():
    config = load_config({}, {"replication": True})
    http = config.http
    assert (http.host, http.port, http.max_body, http.max_connections, http.max_sockets) == (
        "127.0.0.1",
        3000,
        1048576,
        1024,
        1024,
    )
    assert (http.header_timeout, http.idle_timeout, http.shutdown_timeout) == (10.0, 60.0, 10.0)
    assert (http.min_body_rate, http.body_memory) == (240, 67108864)
    assert (http.ws_ping_interval, http.ws_pong_timeout, http.ws_close_timeout) == (30.0, 30.0, 5.0)
    assert (config.changefeed_capacity, config.changefeed_bytes, config.list_cache_bytes) == (1024, 8388608, 8388608)
    assert config.replication_retain_bytes == 256 << 20
    assert load_config({}, {}).replication_retain_bytes == 0  # replication off: nothing retained


# -- the WebSocket timers on a manual clock


class ManualLoop:
    """The part of an event loop a WebSocketConnection uses: `time`, `call_at`, `call_later`,
    `call_soon`; time moves only when `advance` says, running what fell due in order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._due: list[tuple[float, int, Handle]] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any) -> Handle:
        handle = Handle(when, callback, args)
        heapq.heappush(self._due, (when, next(self._seq), handle))
        return handle

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Handle:
        return self.call_at(self.now + delay, callback, *args)

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> Handle:
        return self.call_at(self.now, callback, *args)

    def advance(self, until: float) -> None:
        for _ in range(10_000):
            if not self._due or self._due[0][0] > until:
                break
            when, _seq, handle = heapq.heappop(self._due)
            self.now = max(self.now, when)
            if not handle.cancelled:
                handle.callback(*handle.args)
        else:
            raise AssertionError("the timers never settled")
        self.now = until


class Handle:
    def __init__(self, when: float, callback: Callable[..., Any], args: tuple) -> None:
        self.when, self.callback, self.args = when, callback, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Transport:
    """The kernel's side of a socket: what was written, whether it was closed or aborted."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.ended: str | None = None  # "close" (FIN after the written bytes) or "abort"
        self.stuck = False  # a peer that reads nothing: whatever is written stays buffered
        self.unsent = 0

    def write(self, data: bytes) -> None:
        self.written += data
        if self.stuck:
            self.unsent += len(data)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.ended = self.ended or "close"

    def abort(self) -> None:
        self.ended = self.ended or "abort"

    def is_closing(self) -> bool:
        return self.ended is not None


class Quiet:
    def on_open(self, channel) -> None:
        pass

    def on_message(self, data) -> None:
        pass

    def on_writable(self) -> None:
        pass

    def on_close(self, code: int) -> None:
        pass


PING = b"\x89\x00"  # a server's ping: FIN + opcode 9, unmasked, empty (RFC 6455 §5.5.2)
PONG = b"\x8a\x80" + b"\x00\x00\x00\x00"  # a client's empty pong, masked with a zero key
# Three different values: any two swapped moves a deadline this test pins.
TIMERS = HttpSettings(ws_ping_interval=2.0, ws_pong_timeout=7.0, ws_close_timeout=3.0)


def open_socket(settings: HttpSettings = TIMERS) -> tuple[ManualLoop, WebSocketConnection, Transport]:
    loop = ManualLoop()
    transport = Transport()
    out = Outbox(lambda box: loop.call_soon(box.flush))
    out.transport = transport
    request = Request("GET", "/ws", "/ws", [], [])
    ws = WebSocketConnection(out, loop, settings, Upgrade(Quiet()), request, b"")  # type: ignore[arg-type]
    return loop, ws, transport


def test_the_ping_waits_the_ping_interval_and_the_drop_the_pong_timeout():
    loop, _ws, transport = open_socket()
    loop.advance(1.99)
    assert bytes(transport.written) == b""  # quiet for less than the interval: no ping
    loop.advance(2.0)
    assert bytes(transport.written) == PING  # the ping interval (2 s), not the pong timeout
    loop.advance(8.99)
    assert transport.ended is None  # the pong timeout (7 s after the ping) has not passed
    loop.advance(9.0)
    assert transport.ended == "abort"  # no answer within the pong timeout: dropped


def test_an_answer_within_the_pong_timeout_keeps_the_socket_and_the_next_ping_counts_from_it():
    loop, ws, transport = open_socket()
    loop.advance(2.0)
    assert bytes(transport.written) == PING
    loop.advance(6.5)  # past the close and ping values, inside the pong timeout
    ws.data_received(PONG)
    loop.advance(9.0)  # the pong timer: the peer answered, so the next ping is due 2 s after it
    assert transport.ended is None
    assert bytes(transport.written) == PING * 2
    loop.advance(15.99)
    assert transport.ended is None
    loop.advance(16.0)  # 7 s after the second ping, no answer
    assert transport.ended == "abort"


def test_a_close_to_a_peer_that_reads_nothing_waits_close_patience_close_timeouts():
    # Rule 4: while our close frame has not left our buffer the wait goes on, up to
    # CLOSE_PATIENCE (6) close timeouts, then the connection is reset.
    loop, ws, transport = open_socket()
    transport.stuck = True
    loop.advance(1.0)
    ws.close(1000, "bye")
    loop.advance(1.0)
    assert bytes(transport.written) == b"\x88\x05\x03\xe8bye"  # our close frame, code 1000
    loop.advance(18.99)
    assert transport.ended is None  # 6 x 3 s after the close, less a hundredth
    loop.advance(19.0)
    assert transport.ended == "abort"  # never left our buffer: reset, not FIN


def test_a_close_to_a_silent_peer_ends_at_the_close_timeout():
    loop, ws, transport = open_socket()
    loop.advance(1.0)
    ws.close(1000, "bye")
    loop.advance(3.99)
    assert transport.ended is None  # neither the close (3 s) nor the pong (7 s) timeout yet
    loop.advance(4.0)
    assert transport.ended == "close"  # rule 4: ws_close_timeout, then FIN after our close frame


@pytest.mark.parametrize(
    ("ping", "pong", "first_ping", "dropped"), [(2.0, 7.0, 2.0, 9.0), (7.0, 2.0, 7.0, 9.0), (0.5, 3.0, 0.5, 3.5)]
)
def test_each_timer_follows_its_own_setting(ping, pong, first_ping, dropped):
    loop, _ws, transport = open_socket(HttpSettings(ws_ping_interval=ping, ws_pong_timeout=pong))
    loop.advance(first_ping - 0.01)
    assert bytes(transport.written) == b""
    loop.advance(first_ping)
    assert bytes(transport.written) == PING
    loop.advance(dropped - 0.01)
    assert transport.ended is None
    loop.advance(dropped)
    assert transport.ended == "abort"
