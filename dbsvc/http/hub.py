"""What every connection of one server shares, and the phases its sweeper bounds in time.

Job: one `Hub` per server holds what its connections share: the app, the settings, the CORS
policy, the request-id source, the live connections and how many count against
`max_connections` (and `max_sockets`, once upgraded), the running app tasks, the turn-end flush (connection.py rule 9), the
bytes unfinished request bodies hold (intake.py), and the timeouts as deadlines use them.
This module also names the phases of a connection (`Phase`) and, in one table
(`DEADLINES`), what bounds the time a connection may spend in each.

Must not import connection.py, server.py or ws/server.py: connections depend on the hub,
never the reverse; the hub sees a connection only as a `Tracked`.

    phase     what is happening                      bounded by (DEADLINES)
    HEAD      a request head is being received       header_timeout from the accept, or from
                                                     the first byte after IDLE
    BODY      a request body is being received       the body deadline (intake.py rule 5)
    APP       the request is with the application    nothing (shutdown_timeout bounds it)
    IDLE      keep-alive, between requests           idle_timeout from the last response
    LINGER    final response sent, input discarded   LINGER_SECONDS (connection.py rule 7)
    UPGRADED  handed to an `Upgrade` handler         nothing (the handler owns the socket)
    CLOSED    the transport is gone                  nothing

Rules:
1. A connection's `phase` and `deadline` change together, in one method
   (`HttpConnection._enter`), which takes the deadline from `DEADLINES`: no phase can be
   entered without its bound, and a new phase is a new row of the table, its `Bound`
   included. A phase left unbounded by mistake is how a slowloris hole opens.
2. Deadlines are plain floats of the loop's clock, checked by the sweeper (`sweep`, every
   tick of server.py), so keeping one costs a `loop.time()` per phase, not a timer handle.
   A timeout of 0 is no deadline: the hub holds it as infinity, which is never reached.
3. A new connection starts in HEAD, so a client that connects and never completes a head is
   closed at the header deadline (slowloris), without a response: nothing tells it apart
   from a client that went away, and it may not be reading.
4. BODY's bound moves with the body: each piece the wire hands over enters BODY again with
   the deadline the body intake now gives (intake.py rule 5).
5. A connection the sweeper found past its deadline enters its phase again *expired*: no
   deadline, while what the sweeper began (a close, an abort, a 408 and its linger) ends
   it, so a deadline fires once.
6. The hub is busy while an app task runs or a connection is in any phase but LINGER and
   CLOSED; graceful shutdown (server.py) waits for that to end, up to shutdown_timeout.
7. Past `max_connections`, PROBE_RESERVE (8) more connections are admitted for the probes
   only: they may ask PROBE_PATHS (`/health`, `/ready`) and anything else is 503, so an
   orchestrator's liveness and readiness checks still get their answer at the cap.
8. An upgraded WebSocket leaves the HTTP count (or the reserve) when it upgrades and counts
   against `max_sockets` instead; an upgrade past it is refused 503 before the 101. Idle
   subscribers then never crowd out HTTP requests, and the reverse.
9. A request whose Host the server is not known by (`allowed_hosts`, hosts.py) is refused
   403 before its body is read: DNS rebinding. The probes are exempt: an orchestrator
   calls them by the pod's address, and they say nothing but "ok".
10. Fan-out coalescing: WebSocket output (`Outbox.bulk`) is flushed by a pass of its own.
   After a pass that took under BULK_HOLD_MIN (1 ms) of CPU time the next runs at the turn's end, like
   HTTP output; after a longer one (thousands of sockets), the next waits as long as that
   pass took, at most BULK_HOLD_MAX (50 ms). The frames of the events committed meanwhile
   then leave each socket in the same write: one send per socket per pass instead of one
   per event, so a fan-out's cost per event falls as its rate rises, and the delay it adds
   is never more than the cost of the pass it follows. HTTP responses are not held.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from dbsvc.errors import Forbidden, RequestError, Unavailable
from dbsvc.http.cors import CorsPolicy
from dbsvc.http.hosts import HostPolicy
from dbsvc.http.message import RequestIds
from dbsvc.http.output import Outbox
from dbsvc.http.types import App, HttpSettings, Meter, Request

__all__ = ["DEADLINES", "PROBE_PATHS", "PROBE_RESERVE", "Bound", "Hub", "Phase", "Tracked", "off_when_zero"]

PROBE_RESERVE = 8  # connections past the cap for the probes (rule 7)
PROBE_PATHS = frozenset({"/health", "/ready"})  # the liveness and readiness probes (docs/guide/operations.md)
BULK_HOLD_MIN = 0.001  # rule 10: a WebSocket flush pass this long or longer ...
BULK_HOLD_MAX = 0.050  # ... holds the next one that long, at most this

span_log = logging.getLogger("dbsvc.http.request")


class Phase(enum.Enum):
    HEAD = "head"
    BODY = "body"
    APP = "app"
    IDLE = "idle"
    LINGER = "linger"
    UPGRADED = "upgraded"
    CLOSED = "closed"

    # Members are singletons compared by identity: hashed by identity too, in C, for
    # `DEADLINES[phase]` at every phase change (Enum's own hash is a Python call).
    __hash__ = object.__hash__


class Bound(enum.Enum):
    """What limits the time a connection spends in a phase."""

    HEADER_TIMEOUT = "header_timeout"  # from the phase's start
    BODY_DEADLINE = "body deadline"  # as the body intake says (intake.py rule 5)
    IDLE_TIMEOUT = "idle_timeout"  # from the phase's start
    LINGER = "LINGER_SECONDS"  # from the phase's start (connection.py rule 7)
    NOTHING = "no deadline"


DEADLINES: dict[Phase, Bound] = {
    Phase.HEAD: Bound.HEADER_TIMEOUT,
    Phase.BODY: Bound.BODY_DEADLINE,
    Phase.APP: Bound.NOTHING,
    Phase.IDLE: Bound.IDLE_TIMEOUT,
    Phase.LINGER: Bound.LINGER,
    Phase.UPGRADED: Bound.NOTHING,
    Phase.CLOSED: Bound.NOTHING,
}


class Tracked(Protocol):
    """A connection as the hub and the server see it (connection.HttpConnection)."""

    phase: Phase
    deadline: float
    counted: bool
    reserve: bool  # admitted past the cap for the probes only (rule 7)
    socket: bool  # an upgraded socket, counted against max_sockets (rule 8)

    def on_deadline(self) -> None: ...

    def on_shutdown(self) -> None: ...

    def abort(self) -> None: ...


class Hub:
    """What every connection of one server shares."""

    __slots__ = (
        "app",
        "settings",
        "loop",
        "clock",
        "cors",
        "ids",
        "span_enabled",
        "connections",
        "counted",
        "tasks",
        "shutting_down",
        "_deferred",
        "_bulk",
        "_bulk_cost",
        "header_timeout",
        "idle_timeout",
        "body_wait",
        "body_memory",
        "body_bytes",
        "fast_path",
        "reserved",
        "sockets",
        "hosts",
        "meter",
    )

    def __init__(self, app: App, settings: HttpSettings, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.settings = settings
        self.loop = loop
        # The loop's clock as deadlines read it (rule 2): asyncio's own is time.monotonic,
        # called here without the method's frame; any other loop's `time` as it is.
        base_clock = type(loop).time is asyncio.BaseEventLoop.time  # type: ignore[comparison-overlap]
        self.clock: Callable[[], float] = time.monotonic if base_clock else loop.time
        self.cors = CorsPolicy(settings.cors_origins)
        self.hosts = HostPolicy(settings.allowed_hosts)  # rule 9 (hosts.py)
        self.ids = RequestIds()
        # Checked once: the span is the only per-request log line, and a disabled
        # logger should cost nothing per request (configure logging before serving).
        self.span_enabled = span_log.isEnabledFor(logging.INFO)
        self.meter: Meter | None = None  # unmatched requests' meter (account.py), set by the service
        self.connections: set[Tracked] = set()
        self.counted = 0
        self.reserved = 0  # probe-only connections past the cap (rule 7)
        self.sockets = 0  # upgraded sockets (rule 8)
        self.tasks: set[asyncio.Task[None]] = set()
        self.shutting_down = False
        self._deferred: list[Outbox] = []
        self._bulk: list[Outbox] = []  # WebSocket output, rule 10
        self._bulk_cost = 0.0  # seconds the last bulk pass took
        # Deadlines as connections use them: 0 (off) becomes infinity (rule 2).
        self.header_timeout = off_when_zero(settings.header_timeout)
        self.idle_timeout = off_when_zero(settings.idle_timeout)
        grace = settings.body_rate_grace if settings.min_body_rate else math.inf
        self.body_wait = min(self.idle_timeout, grace)  # a body's deadline before its first byte
        self.body_memory = settings.body_memory
        self.body_bytes = 0  # held by unfinished bodies, all connections
        self.fast_path = settings.http_parser != "h11"  # connections start on fastpath.FastWire

    def admit(self, connection: Tracked) -> bool:
        """Track `connection`; False when it is over the cap and the probes' reserve (it is
        still tracked, uncounted). Past the cap it may take a place of the reserve (rule 7)."""
        self.connections.add(connection)
        if self.shutting_down:
            return False
        if self.counted < self.settings.max_connections:
            self.counted += 1
            connection.counted = True
            return True
        if self.reserved < PROBE_RESERVE:
            self.reserved += 1
            connection.reserve = True
            return True
        return False

    def refusal_of(self, request: Request, reserve: bool) -> RequestError | None:
        """What refuses `request` before its body, by the rules of this hub: a place of the
        probes' reserve asked for anything but a probe (rule 7), a Host this server is not
        known by (rule 9)."""
        if not reserve and not self.hosts.enabled:
            return None  # the common case: nothing to check
        probe = request.path in PROBE_PATHS
        if reserve and not probe:
            return Unavailable(
                f"connection limit of {self.settings.max_connections} reached: "
                "only /health and /ready are answered past it"
            )
        if self.hosts.enabled and not probe:
            host = request.header("host")
            if not self.hosts.permits(host):
                return Forbidden(
                    f"host {host!r} is not allowed: expected one of "
                    f"{', '.join(self.settings.allowed_hosts)} (SERVICE_ALLOWED_HOSTS)"
                )
        return None

    def take_socket(self, connection: Tracked) -> bool:
        """`connection` upgrades: False when max_sockets are open; else it leaves the
        HTTP count (or the reserve) and counts as a socket from now on (rule 8)."""
        if self.sockets >= self.settings.max_sockets:
            return False
        self._uncount(connection)
        self.sockets += 1
        connection.socket = True
        return True

    def forget(self, connection: Tracked) -> None:
        self.connections.discard(connection)
        self._uncount(connection)
        if connection.socket:
            connection.socket = False
            self.sockets -= 1

    def _uncount(self, connection: Tracked) -> None:
        if connection.counted:
            connection.counted = False
            self.counted -= 1
        if connection.reserve:
            connection.reserve = False
            self.reserved -= 1

    def defer(self, outbox: Outbox) -> None:
        """Write `outbox`'s held output when this turn of the loop ends (connection.py
        rule 9): the flush is queued behind every callback already ready, so responses
        to all the requests read in one turn (and WebSocket frames fanned out in it)
        leave together. WebSocket output may be held a little longer (rule 10)."""
        if outbox.bulk:
            bulk = self._bulk
            if not bulk:
                cost = self._bulk_cost
                if cost < BULK_HOLD_MIN:
                    self.loop.call_soon(self._flush_bulk)
                else:
                    self.loop.call_later(min(cost, BULK_HOLD_MAX), self._flush_bulk)
            bulk.append(outbox)
            return
        if not self._deferred:
            self.loop.call_soon(self._flush_deferred)
        self._deferred.append(outbox)

    def _flush_deferred(self) -> None:
        pending, self._deferred = self._deferred, []
        for outbox in pending:
            outbox.flush()

    def _flush_bulk(self) -> None:
        """Rule 10: one pass over the held WebSocket output, timed for the next hold."""
        started = time.thread_time()  # CPU time: a pass preempted is not heavier
        pending, self._bulk = self._bulk, []
        for outbox in pending:
            outbox.flush()
        self._bulk_cost = time.thread_time() - started

    def run_task(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def sweep(self) -> None:
        """Tell every connection past its deadline (rule 2)."""
        now = self.clock()
        expired = [c for c in self.connections if c.deadline <= now]
        for connection in expired:
            connection.on_deadline()

    def busy(self) -> bool:
        """True while a request is in flight or an upgraded connection is open (rule 6)."""
        if self.tasks:
            return True
        for connection in self.connections:
            if connection.phase is not Phase.LINGER and connection.phase is not Phase.CLOSED:
                return True
        return False


def off_when_zero(seconds: float) -> float:
    """A timeout setting as a deadline uses it: 0 means off, held as infinity (rule 2)."""
    return seconds if seconds > 0 else math.inf
