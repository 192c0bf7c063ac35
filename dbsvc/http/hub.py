"""What every connection of one server shares, and the phases its sweeper bounds in time.

Job: one `Hub` per server holds what its connections share: the app, the settings, the CORS
policy, the request-id source, the live connections and how many count against
`max_connections`, the running app tasks, the turn-end flush (connection.py rule 9), the
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
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
from collections.abc import Coroutine
from typing import Any, Protocol

from dbsvc.http.cors import CorsPolicy
from dbsvc.http.message import RequestIds
from dbsvc.http.output import Outbox
from dbsvc.http.types import App, HttpSettings

__all__ = ["DEADLINES", "Bound", "Hub", "Phase", "Tracked", "off_when_zero"]

span_log = logging.getLogger("dbsvc.http.request")


class Phase(enum.Enum):
    HEAD = "head"
    BODY = "body"
    APP = "app"
    IDLE = "idle"
    LINGER = "linger"
    UPGRADED = "upgraded"
    CLOSED = "closed"


class Bound(enum.Enum):
    """What limits the time a connection spends in a phase."""

    HEADER_TIMEOUT = "header_timeout"       # from the phase's start
    BODY_DEADLINE = "body deadline"         # as the body intake says (intake.py rule 5)
    IDLE_TIMEOUT = "idle_timeout"           # from the phase's start
    LINGER = "LINGER_SECONDS"               # from the phase's start (connection.py rule 7)
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

    def on_deadline(self) -> None: ...

    def on_shutdown(self) -> None: ...

    def abort(self) -> None: ...


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
        self.connections: set[Tracked] = set()
        self.counted = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.shutting_down = False
        self._deferred: list[Outbox] = []
        # Deadlines as connections use them: 0 (off) becomes infinity (rule 2).
        self.header_timeout = off_when_zero(settings.header_timeout)
        self.idle_timeout = off_when_zero(settings.idle_timeout)
        grace = settings.body_rate_grace if settings.min_body_rate else math.inf
        self.body_wait = min(self.idle_timeout, grace)      # a body's deadline before its first byte
        self.body_memory = settings.body_memory
        self.body_bytes = 0                                 # held by unfinished bodies, all connections
        self.fast_path = settings.http_parser != "h11"      # connections start on fastpath.FastWire

    def admit(self, connection: Tracked) -> bool:
        """Track `connection`; False when it is over the cap (it is still tracked, uncounted)."""
        self.connections.add(connection)
        if self.shutting_down or self.counted >= self.settings.max_connections:
            return False
        self.counted += 1
        connection.counted = True
        return True

    def forget(self, connection: Tracked) -> None:
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
        """Tell every connection past its deadline (rule 2)."""
        now = self.loop.time()
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
