"""The listening side: bind, accept, enforce the connection cap and deadlines, shut down.

`serve(app, settings, stop=..., on_ready=...)` runs until `stop` is set. Each accepted
socket gets an `HttpConnection` (`dbsvc.http.connection`) sharing one `Hub`: the app, the
settings, the CORS policy, the request-id source and the set of live connections.

Design notes, measured or checked rather than assumed:
- `asyncio.Protocol` callbacks, not streams: a protocol gets `data_received(bytes)` straight
  from the selector loop, with no StreamReader buffer, no coroutine per connection and no
  await per read, and pause/resume_reading give exact back-pressure. Measured with
  bench/http_bench.py (wrk -c64, server CPU per request, same busy 2-core machine): a
  bare streams + h11 loop with none of this layer's work (no Request, limits, Date,
  request id) cost 148-149 us/request; this layer with all of it 152-158 us/request.
- h11 was most of the cost: about 55-75 us of a small request's CPU, against 6 us for the
  fast path (fastpath.py), which now reads the common request and writes its response as
  bytes, handing anything else to h11 (wire.py). Measured with bench/service_bench.py
  beside a bare asyncio + h11 server (bench/bare_h11_server.py): the canned server
  answers 3.7 times its requests/s, GET one record 3.0 times (bench/README.md).
  `SERVICE_HTTP_PARSER=h11` turns the fast path off.
- Timeouts (header_timeout, idle_timeout, the body deadline, linger) are deadlines stored on
  each connection and checked by one sweeper task every `tick` seconds (a quarter of the
  shortest timeout, within [0.05, 0.5] s), instead of a timer handle per request: a
  keep-alive request costs a float store, and a deadline fires at most one tick late.
  A timeout of 0 is off: the hub holds it as infinity, so no deadline is ever reached.
- Unfinished request bodies share one memory budget (`body_memory`): the hub counts the
  bytes they hold (`body_bytes`), connections check and return them (connection.py rule 11).
- Connection cap: a connection beyond `max_connections` is accepted, answered
  503 `unavailable` (problem+json) and closed; it is never counted, so the cap only counts
  connections being served.
- EMFILE/ENFILE on accept never stops the accept loop: asyncio's
  `BaseSelectorEventLoop._accept_connection` catches EMFILE, ENFILE, ENOBUFS and ENOMEM,
  logs "socket.accept() out of system resource" through the loop's exception handler,
  removes the listening socket's reader and re-adds it after ACCEPT_RETRY_DELAY (1 s).
  tests/http/test_limits.py::test_accept_survives_emfile checks it end to end.
- Graceful shutdown (docs/guide/operations.md: SIGTERM lets in-flight requests finish): stop accepting
  (close the listening sockets), close idle and half-read-head connections, tell upgraded
  handlers (`shutdown()`), answer the in-flight requests with `Connection: close`, wait up to
  `shutdown_timeout` for them and for running app tasks, then abort whatever is left.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
from collections.abc import Callable, Coroutine
from typing import Any

from dbsvc.http.connection import LINGER_SECONDS, HttpConnection, Phase, span_log
from dbsvc.http.cors import CorsPolicy
from dbsvc.http.message import RequestIds
from dbsvc.http.output import Outbox
from dbsvc.http.types import App, HttpSettings

log = logging.getLogger("dbsvc.http")

__all__ = ["serve"]


class Hub:
    """What every connection of one server shares."""

    __slots__ = ("app", "settings", "loop", "cors", "ids", "span_enabled", "connections",
                 "counted", "tasks", "shutting_down", "_deferred", "header_timeout", "idle_timeout",
                 "body_wait", "body_memory", "body_bytes", "fast_path")

    def __init__(self, app: App, settings: HttpSettings, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.settings = settings
        self.loop = loop
        self.cors = CorsPolicy(settings.cors_origins)
        self.ids = RequestIds()
        # Checked once: the span is the only per-request log line, and a disabled
        # logger should cost nothing per request (configure logging before serving).
        self.span_enabled = span_log.isEnabledFor(logging.INFO)
        self.connections: set[HttpConnection] = set()
        self.counted = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.shutting_down = False
        self._deferred: list[Outbox] = []
        # Deadlines as connections use them: 0 (off) becomes infinity.
        self.header_timeout = _off_when_zero(settings.header_timeout)
        self.idle_timeout = _off_when_zero(settings.idle_timeout)
        grace = settings.body_rate_grace if settings.min_body_rate else math.inf
        self.body_wait = min(self.idle_timeout, grace)      # a body's deadline before its first byte
        self.body_memory = settings.body_memory
        self.body_bytes = 0                                 # held by unfinished bodies, all connections
        self.fast_path = settings.http_parser != "h11"      # connections start on fastpath.FastWire

    def admit(self, connection: HttpConnection) -> bool:
        """Track `connection`; False when it is over the cap (it is still tracked, uncounted)."""
        self.connections.add(connection)
        if self.shutting_down or self.counted >= self.settings.max_connections:
            return False
        self.counted += 1
        connection.counted = True
        return True

    def forget(self, connection: HttpConnection) -> None:
        self.connections.discard(connection)
        if connection.counted:
            connection.counted = False
            self.counted -= 1

    def defer(self, outbox: Outbox) -> None:
        """Write `outbox`'s held output when this turn of the loop ends (connection.py
        rule 9): the flush is queued behind every callback already ready, so responses
        to all the requests read in one turn (and WebSocket frames fanned out in it)
        leave together."""
        if not self._deferred:
            self.loop.call_soon(self._flush_deferred)
        self._deferred.append(outbox)

    def _flush_deferred(self) -> None:
        pending, self._deferred = self._deferred, []
        for outbox in pending:
            outbox.flush()

    def run_task(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def sweep(self) -> None:
        now = self.loop.time()
        expired = [c for c in self.connections if c.deadline <= now]
        for connection in expired:
            connection.on_deadline()

    def busy(self) -> bool:
        """True while a request is in flight or an upgraded connection is open."""
        if self.tasks:
            return True
        for connection in self.connections:
            if connection.phase is not Phase.LINGER and connection.phase is not Phase.CLOSED:
                return True
        return False


def _off_when_zero(seconds: float) -> float:
    return seconds if seconds > 0 else math.inf


def _tick(hub: Hub) -> float:
    shortest = min(hub.header_timeout, hub.idle_timeout, hub.body_wait, LINGER_SECONDS)
    return min(0.5, max(0.05, shortest / 4))


async def _sweep_forever(hub: Hub, tick: float) -> None:
    while True:
        await asyncio.sleep(tick)
        hub.sweep()


async def serve(app: App, settings: HttpSettings, *, stop: asyncio.Event,
                on_ready: Callable[[int], None] | None = None, hub: Hub | None = None) -> None:
    """Serve `app` on settings.host:settings.port until `stop` is set, then shut down gracefully.

    `on_ready(port)` is called once the socket listens (port 0 binds an ephemeral port).
    `hub` is the connections' shared state, built on this loop for `app` and `settings`, when
    the caller wants to look at it (the in-process protocol tests do); made here otherwise.
    Returns after every connection is closed, at most about `shutdown_timeout` after `stop`.
    """
    loop = asyncio.get_running_loop()
    if hub is None:
        hub = Hub(app, settings, loop)
    server = await loop.create_server(
        lambda: HttpConnection(hub), settings.host, settings.port,
        reuse_address=True, backlog=min(4096, max(128, settings.max_connections)))
    port = server.sockets[0].getsockname()[1]
    tick = _tick(hub)
    sweeper = loop.create_task(_sweep_forever(hub, tick))
    log.info("listening on %s:%d", settings.host, port)
    try:
        if on_ready is not None:
            on_ready(port)
        await stop.wait()
    finally:
        server.close()                                      # stop accepting
        hub.shutting_down = True
        for connection in list(hub.connections):
            connection.on_shutdown()
        deadline = loop.time() + _off_when_zero(settings.shutdown_timeout)
        while hub.busy() and loop.time() < deadline:
            await asyncio.sleep(min(0.02, tick))
            hub.sweep()
        sweeper.cancel()
        leftover = [c for c in hub.connections if c.phase is not Phase.CLOSED]
        if hub.busy():
            log.warning("shutdown timeout: aborting %d connections and %d tasks",
                        len(leftover), len(hub.tasks))
        for connection in leftover:
            connection.abort()
        for task in list(hub.tasks):
            task.cancel()
        if hub.tasks:
            await asyncio.wait(list(hub.tasks), timeout=1.0)
        try:
            await asyncio.wait_for(server.wait_closed(), timeout=1.0)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass
        await asyncio.sleep(0)                              # let connection_lost callbacks run
        log.info("stopped serving on %s:%d", settings.host, port)


async def serve_until_signalled(app: App, settings: HttpSettings,
                                on_ready: Callable[[int], None] | None = None) -> None:
    """`serve` until SIGINT or SIGTERM (docs/guide/operations.md#deployment), then the same
    graceful shutdown. The one place a process's signals are tied to the server."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await serve(app, settings, stop=stop, on_ready=on_ready)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
