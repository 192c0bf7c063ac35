"""The listening side: bind, accept, enforce the connection cap and deadlines, shut down.

`serve(app, settings, stop=..., on_ready=...)` runs until `stop` is set. Each accepted
socket gets an `HttpConnection` (`dbsvc.http.connection`) sharing one `Hub`
(`dbsvc.http.hub`): the app, the settings, the CORS policy, the request-id source, the set
of live connections and their deadlines. This module is the top of the protocol layer:
nothing in `dbsvc.http` imports it.

Design notes, measured or checked rather than assumed:
- `asyncio.Protocol` callbacks, not streams: a protocol gets `data_received(bytes)` straight
  from the selector loop, with no StreamReader buffer, no coroutine per connection and no
  await per read, and pause/resume_reading give exact back-pressure. Measured with
  bench/http_bench.py (wrk -c64, server CPU per request): this layer with all its work
  (Request, limits, Date, request id) costs barely more than a bare streams + h11 loop
  doing none of it (the figures: bench/README.md).
- h11 was most of the cost of a small request's CPU, many times the fast path's
  (fastpath.py), which now reads the common request and writes its response as bytes,
  handing anything else to h11 (wire.py). Measured with bench/service_bench.py beside a
  bare asyncio + h11 server (bench/bare_h11_server.py): the figures are in bench/README.md.
  `SERVICE_HTTP_PARSER=h11` turns the fast path off.
- Timeouts (header_timeout, idle_timeout, the body deadline, linger) are deadlines stored on
  each connection (hub.py, its table `DEADLINES`) and checked by one sweeper task every
  `tick` seconds (a quarter of the shortest timeout, within [0.05, 0.5] s), instead of a
  timer handle per request: a keep-alive request costs a float store, and a deadline fires
  at most one tick late. A timeout of 0 is off: the hub holds it as infinity.
- Unfinished request bodies share one memory budget (`body_memory`): the hub counts the
  bytes they hold (`body_bytes`), each connection's body intake checks and returns them
  (intake.py rules 3 and 4).
- Connection cap: a connection beyond `max_connections` is accepted, answered
  503 `unavailable` (problem+json) and closed; it is never counted, so the cap only counts
  connections being served.
- EMFILE/ENFILE on accept never stops the accept loop: asyncio's
  `BaseSelectorEventLoop._accept_connection` catches EMFILE, ENFILE, ENOBUFS and ENOMEM,
  logs "socket.accept() out of system resource" through the loop's exception handler,
  removes the listening socket's reader and re-adds it after ACCEPT_RETRY_DELAY (1 s).
  tests/http/test_http_limits.py::test_accept_survives_emfile checks it end to end.
- Graceful shutdown (docs/guide/operations.md: SIGTERM lets in-flight requests finish): stop accepting
  (close the listening sockets), close idle and half-read-head connections, tell upgraded
  handlers (`shutdown()`), answer the in-flight requests with `Connection: close`, wait up to
  `shutdown_timeout` for them and for running app tasks, then abort whatever is left.
- Binding comes apart from serving (`bind_sockets`), as asyncio's `create_server` binds:
  one socket per address the host resolves to, SO_REUSEADDR (and SO_REUSEPORT with
  `settings.reuse_port`: the workers of `serve --workers N` share the port), IPv6 sockets V6ONLY. A server
  process binds before it opens its tenant (dbsvc/service.py), so a port in use touches
  nothing; `serve` binds itself when given no sockets.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Callable

from dbsvc.http.connection import HttpConnection
from dbsvc.http.hub import Hub, Phase, off_when_zero
from dbsvc.http.respond import LINGER_SECONDS
from dbsvc.http.types import App, HttpSettings

log = logging.getLogger("dbsvc.http")

__all__ = ["serve"]


def bind_sockets(settings: HttpSettings) -> list[socket.socket]:
    """Sockets bound to settings.host:settings.port, not yet listening, one per address the
    host resolves to. Raises OSError (`socket.gaierror` for a name that does not resolve)."""
    infos = socket.getaddrinfo(settings.host or None, settings.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if settings.reuse_port:  # `serve --workers N`: every worker binds this port
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _tick(hub: Hub) -> float:
    """How often the sweeper looks: a deadline fires at most this late."""
    shortest = min(hub.header_timeout, hub.idle_timeout, hub.body_wait, LINGER_SECONDS)
    return min(0.5, max(0.05, shortest / 4))


async def _sweep_forever(hub: Hub, tick: float) -> None:
    while True:
        await asyncio.sleep(tick)
        hub.sweep()


async def serve(
    app: App,
    settings: HttpSettings,
    *,
    stop: asyncio.Event,
    on_ready: Callable[[int], None] | None = None,
    hub: Hub | None = None,
    sockets: list[socket.socket] | None = None,
) -> None:
    """Serve `app` on settings.host:settings.port until `stop` is set, then shut down gracefully.

    `on_ready(port)` is called once the socket listens (port 0 binds an ephemeral port).
    `hub` is the connections' shared state, built on this loop for `app` and `settings`, when
    the caller wants to look at it (the in-process protocol tests do); made here otherwise.
    `sockets`: already bound (`bind_sockets`), which this call then owns; bound here otherwise.
    Returns after every connection is closed, at most about `shutdown_timeout` after `stop`.
    """
    loop = asyncio.get_running_loop()
    if hub is None:
        hub = Hub(app, settings, loop)
    bound = bind_sockets(settings) if sockets is None else sockets
    servers = []
    try:
        for sock in bound:
            servers.append(
                await loop.create_server(
                    lambda: HttpConnection(hub), sock=sock, backlog=min(4096, max(128, settings.max_connections))
                )
            )
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    port = bound[0].getsockname()[1]
    tick = _tick(hub)
    sweeper = loop.create_task(_sweep_forever(hub, tick))
    log.info("listening on %s:%d", settings.host, port)
    try:
        if on_ready is not None:
            on_ready(port)
        await stop.wait()
    finally:
        for server in servers:
            server.close()  # stop accepting
        hub.shutting_down = True
        for connection in list(hub.connections):
            connection.on_shutdown()
        deadline = loop.time() + off_when_zero(settings.shutdown_timeout)
        while hub.busy() and loop.time() < deadline:
            await asyncio.sleep(min(0.02, tick))
            hub.sweep()
        sweeper.cancel()
        leftover = [c for c in hub.connections if c.phase is not Phase.CLOSED]
        if hub.busy():
            log.warning("shutdown timeout: aborting %d connections and %d tasks", len(leftover), len(hub.tasks))
        for connection in leftover:
            connection.abort()
        for task in list(hub.tasks):
            task.cancel()
        if hub.tasks:
            await asyncio.wait(list(hub.tasks), timeout=1.0)
        for server in servers:
            try:
                await asyncio.wait_for(server.wait_closed(), timeout=1.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
        await asyncio.sleep(0)  # let connection_lost callbacks run
        log.info("stopped serving on %s:%d", settings.host, port)


async def serve_until_signalled(
    app: App,
    settings: HttpSettings,
    on_ready: Callable[[int], None] | None = None,
    sockets: list[socket.socket] | None = None,
    hub: Hub | None = None,
) -> None:
    """`serve` until SIGINT or SIGTERM (docs/guide/operations.md#deployment), then the same
    graceful shutdown. The one place a process's signals are tied to the server. `hub`: as
    `serve` takes it (the service builds it to count the open connections for /metrics)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    # SIGIO's default action ends the process. A compaction's release asks the kernel for a
    # write lease on each replaced file for a few microseconds (storage/freeing.py); another
    # process opening that file through /proc in that window makes the kernel send SIGIO to
    # the lease holder. Ignored, the kernel still breaks the lease on its own clock, and
    # nothing here reads the signal (docs/decisions.md, wt-rel and wt-fork).
    ignored = signal.signal(signal.SIGIO, signal.SIG_IGN)
    try:
        await serve(app, settings, stop=stop, on_ready=on_ready, sockets=sockets, hub=hub)
    finally:
        signal.signal(signal.SIGIO, ignored)
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
