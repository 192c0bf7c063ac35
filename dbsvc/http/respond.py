"""A connection's answering half: its state, its phases, and everything it sends.

`Responder` is the base class of `HttpConnection` (connection.py), which reads requests
from the wire and hands them to the application; this class takes the application's
result from there: a `Response` sent at once, a `Deferred` sent when its future settles, an
awaitable awaited in a task, an `Upgrade` checked and handed to a `WebSocketConnection`;
each response encoded by the wire, accounted (account.py: the span line, the route's
meter) and written, and every refusal and failure answered and closed. It stands apart from
the reading because the two change for different reasons (a parser's events against the
response's paths and error handling), and each is half of what one module held up to 600
lines. The state both halves share (`__slots__`, set in `__init__`), the one writer of a
phase and its deadline (`_enter`, hub.py rule 1) and the calls the server makes of a
connection (`Tracked` in hub.py: `on_deadline`, `abort`, `on_shutdown`, which end one) are
here, in the class the other extends.

Rule numbers are connection.py's (its module docstring lists them all, one numbering for
the whole connection); this module keeps rules 7 (linger after a closing answer), 8 (no
exception escapes to asyncio), 9 (turn-end writes, through output.py's `Outbox`) and 10
(the WebSocket upgrade). Must not import connection.py or server.py: they depend on it.
A base class, not a helper object: a request's answer is the same method calls it was
when one class held both halves, with no call more between them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from dbsvc.errors import RequestError, Unavailable
from dbsvc.http.account import account
from dbsvc.http.fastpath import FastWire
from dbsvc.http.hub import DEADLINES, Bound, Hub, Phase
from dbsvc.http.intake import BodyIntake
from dbsvc.http.message import REASONS, Head, response_headers
from dbsvc.http.output import Outbox
from dbsvc.http.problem import error_response, last_words, problem_response
from dbsvc.http.types import Completion, Deferred, Response, Upgrade, Upgraded
from dbsvc.http.wire import Wire
from dbsvc.http.ws.server import WebSocketConnection, handshake_headers

LINGER_SECONDS = 2.0

log = logging.getLogger("dbsvc.http")

_INF = math.inf

_NOTHING, _IDLE_TIMEOUT, _HEADER_TIMEOUT, _BODY_DEADLINE = (
    Bound.NOTHING,
    Bound.IDLE_TIMEOUT,
    Bound.HEADER_TIMEOUT,
    Bound.BODY_DEADLINE,
)
HEAD, BODY, APP, IDLE, LINGER, UPGRADED, CLOSED = (
    Phase.HEAD,
    Phase.BODY,
    Phase.APP,
    Phase.IDLE,
    Phase.LINGER,
    Phase.UPGRADED,
    Phase.CLOSED,
)


class Responder(asyncio.Protocol):
    """What one accepted socket holds, and how it answers; `HttpConnection` reads."""

    # The attributes, packed: one a line would make a list longer than the class's methods.
    __slots__ = ("_hub", "_wire", "_transport", "_peer", "phase", "deadline", "counted", "reserve", "socket",
                 "_unfed", "_reading_paused", "_out", "_eof", "_eof_fed", "_head", "_intake", "_preflight",
                 "_started", "_upgraded", "_deferred", "_yielding")  # fmt: skip

    def __init__(self, hub: Hub) -> None:
        self._hub = hub
        self._wire: Wire = FastWire(hub.ids, None)  # replaced once the peer is known
        self._transport: Any = None
        self._peer: tuple[str, int] | None = None
        self._intake = BodyIntake(hub)
        self._enter(HEAD)  # entered again, its clock restarted, at the accept
        self.counted = False
        self.reserve = False  # hub.py rule 7
        self.socket = False  # hub.py rule 8
        self._unfed = bytearray()
        self._reading_paused = False
        self._out = Outbox(hub.defer)  # rule 9, and write back-pressure
        self._eof = False
        self._eof_fed = False
        self._head: Head | None = None
        self._preflight = False
        self._started = 0.0
        self._upgraded: Upgraded | None = None
        self._deferred: Response | None = None  # the answer waiting for a Deferred
        self._yielding = False  # rule 12

    @property
    def peer(self) -> tuple[str, int] | None:
        """The client's (host, port) once accepted (None off TCP): how a test finds the
        connection of its own socket among the hub's."""
        return self._peer

    @property
    def writing_paused(self) -> bool:
        """Whether the transport asked this connection to stop writing (rule 9)."""
        return self._out.paused

    @property
    def wire(self) -> Wire:
        """The protocol reader this connection runs (fast path or h11; the first may hand over)."""
        return self._wire

    # What a test of rules 1, 2, 7 and 9 asks of a connection it steps on the server's loop
    # (tests/http/test_http_conn_lifecycle.py), read-only: the connection's own names for
    # its state, so a rename inside it is not a test's concern.

    @property
    def transport(self) -> Any:
        """The asyncio transport once accepted (None before): whether it reads, is closing, its socket."""
        return self._transport

    @property
    def parked(self) -> bytes:
        """The bytes read but not yet fed to the parser (rules 1 and 2), copied."""
        return bytes(self._unfed)

    @property
    def buffered_out(self) -> int:
        """Bytes of answers not yet passed to the kernel: held in the outbox or the transport's write buffer (rule 9)."""
        return self._out.buffered

    @property
    def saw_eof(self) -> bool:
        """Whether the client's end of input (its half-close) has arrived (rule 7)."""
        return self._eof

    # -- called by the server ---------------------------------------------------------

    def on_deadline(self) -> None:
        """The sweeper found this connection past its deadline: end the phase it bounds."""
        phase = self.phase
        try:
            self._enter(phase, expired=True)  # hub.py rule 5: fires once
            self._out.flush()
            if phase is IDLE and not self._transport.get_write_buffer_size():
                self._transport.close()  # quiet keep-alive: a normal FIN
            elif phase is BODY:
                self._fail(self._intake.timeout_error(), self._head)  # rule 11
            elif phase is HEAD or phase is LINGER or phase is IDLE:
                # HEAD: too slow (slowloris); IDLE with unsent bytes: the client stopped
                # reading its responses, and close() would wait for it forever.
                if phase is not LINGER:
                    log.debug("closing %s: timed out in phase %s", self._peer, phase.value)
                self._transport.abort()
        except Exception as exc:  # rule 8
            self._crash(exc)

    def abort(self) -> None:
        """Drop the connection at once (shutdown timeout)."""
        if self.phase is not CLOSED:
            self._transport.abort()

    def on_shutdown(self) -> None:
        """Graceful shutdown began: idle connections close now, busy ones after their response."""
        phase = self.phase
        if phase is IDLE or phase is HEAD:
            self._out.flush()
            self._transport.close()
        elif self._upgraded is not None:
            self._upgraded.shutdown()

    # -- phases -------------------------------------------------------------------------

    def _enter(self, phase: Phase, expired: bool = False) -> None:
        """Put the connection in `phase` with the deadline `DEADLINES` gives it: the one
        writer of `phase` and `deadline` (hub.py rule 1). `expired`: the sweeper found
        `phase` past its deadline and what it began ends the phase (hub.py rule 5)."""
        self.phase = phase
        bound = DEADLINES[phase]
        if expired or bound is _NOTHING:
            self.deadline = _INF
        elif bound is _IDLE_TIMEOUT:
            self.deadline = self._hub.clock() + self._hub.idle_timeout
        elif bound is _HEADER_TIMEOUT:
            self.deadline = self._hub.clock() + self._hub.header_timeout
        elif bound is _BODY_DEADLINE:
            self.deadline = self._intake.give_up_at
        else:
            assert bound is Bound.LINGER, bound
            self.deadline = self._hub.clock() + LINGER_SECONDS

    def _may_parse(self) -> bool:
        """Whether the next request may be read now: none is with the application, the
        transport takes writes, and the connection is not yielding its turn (rules 1, 12)."""
        return self.phase is not APP and not self._out.paused and not self._yielding

    def _pause_reading(self) -> None:
        if not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()

    def _process(self) -> None:
        """Read the next requests the wire holds: HttpConnection's (connection.py)."""
        raise NotImplementedError

    # -- answers ------------------------------------------------------------------------

    def _deliver(self, result: Any) -> None:
        if type(result) is Response:
            self._send(result, None)
        elif type(result) is Deferred:
            self._deferred = result.response
            result.future.add_done_callback(self._on_settled)
        elif isinstance(result, Upgrade):
            self._upgrade(result)
        elif isinstance(result, Response):
            self._send(result, None)
        elif hasattr(result, "__await__"):
            self._hub.run_task(self._await_app(result))
        else:
            self._send(self._app_error(TypeError(f"app returned {type(result).__name__}")), None)

    async def _await_app(self, awaitable: Any) -> None:
        try:
            result = await awaitable
        except Exception as exc:  # rule 8
            result = self._app_error(exc)
        try:
            if self.phase is not APP:
                return  # the client went away meanwhile
            if not isinstance(result, (Response, Deferred, Upgrade)):
                result = self._app_error(TypeError(f"app returned {type(result).__name__}"))
            self._deliver(result)
            if self._may_parse():
                self._process()
        except Exception as exc:  # rule 8
            self._crash(exc)

    def _on_settled(self, future: asyncio.Future[Any] | Completion) -> None:
        """The future of a `Deferred` completed: send its response, or its error (rule 8)."""
        response, self._deferred = self._deferred, None
        error = future.exception() if not future.cancelled() else asyncio.CancelledError()
        if self.phase is not APP or response is None:
            return  # the client went away meanwhile
        try:
            self._send(self._app_error(error) if error is not None else response, None)
            if self._may_parse():
                self._process()
        except Exception as exc:  # rule 8
            self._crash(exc)

    def _app_error(self, exc: BaseException) -> Response:
        """The response for an exception of the application's; never raises (rule 8)."""
        head = self._head
        return error_response(
            exc, head.request if head is not None else None, head.request.request_id if head is not None else ""
        )

    # -- responses ----------------------------------------------------------------------

    def _send(
        self,
        response: Response,
        extra: list[tuple[bytes, bytes]] | None,
        close: bool = False,
        request_id: str = "",
        fallback: bool = False,
    ) -> None:
        """Send one complete response to the current request, then start the next cycle.

        A response that cannot be sent is replaced by the error's own response, without
        extra headers (`fallback`); if even that fails, the exception goes up to `_crash`."""
        hub = self._hub
        head = self._head
        request = head.request if head is not None else None
        if request is not None:
            request_id = request.request_id
        if hub.cors.enabled and extra is None and head is not None:
            extra = hub.cors.actual_headers(head.origin)
        close = close or hub.shutting_down
        wire = self._wire
        try:
            data, size = wire.encode(response, request, request_id, extra, close)
        except Exception as exc:  # rule 8: e.g. CR/LF in a header value
            if fallback:
                raise
            self._send(self._app_error(exc), [], close, request_id, fallback=True)
            return
        elapsed = time.perf_counter() - self._started  # both clock readings here (the span's test steps them)
        account(hub.span_enabled, hub.meter, request, response.status, size, request_id, elapsed)
        self._head = None
        if wire.closing:
            # Whoever said `Connection: close`, h11 then holds the client's side as MUST_CLOSE,
            # never DONE: a closing response always lingers (rule 7).
            self._out.write(data)
            self._linger()
            return
        self._out.write_later(data)
        wire.start_next_cycle()
        self._enter(IDLE)

    def _fail(self, exc: RequestError, head: Head | None) -> None:
        """Answer `exc` to a request we will not read to its end, then close (rules 4, 5, 7, 11)."""
        self._head = head
        self._intake.drop()
        request_id = head.request.request_id if head is not None else self._hub.ids.choose(None)
        self._send(problem_response(exc, request_id), None, close=True, request_id=request_id)

    def _refused(self, exc: RequestError) -> None:
        """The wire refused the client's bytes: a 4xx or 505 if it still lets us answer, then close."""
        if not self._wire.can_respond:
            self._transport.abort()
            return
        self._fail(exc, self._head)

    def _crash(self, exc: Exception) -> None:
        """Rule 8's last resort, for an exception of this layer's own: log it without its
        message, say 500 in fixed bytes if the wire still allows a response, and close."""
        head = self._head
        request_id = head.request.request_id if head is not None else "-"
        log.error(
            "internal error in the http layer (phase %s, request_id=%s)",
            self.phase.value,
            request_id,
            exc_info=exc,
            extra={"exc_messages": False},
        )
        self._head = None
        self._intake.drop()
        transport = self._transport
        if self.phase is CLOSED or transport is None or transport.is_closing():
            return
        if self.phase is not UPGRADED and self._wire.can_respond:
            self._out.write(last_words(request_id))
            self._linger()
            return
        transport.abort()

    def _refuse(self) -> None:
        """Past max_connections, or met once a shutdown began: a 503 problem naming which, on
        a connection that is never counted."""
        hub = self._hub
        if hub.shutting_down:
            reason = "the server is shutting down"
        else:
            reason = f"connection limit of {hub.settings.max_connections} reached"
        log.debug("refusing %s: %s", self._peer, reason)
        request_id = hub.ids.choose(None)
        response = problem_response(Unavailable(reason), request_id)
        self._send(response, None, close=True, request_id=request_id)

    def _linger(self) -> None:
        """Rule 7: after a closing answer, send FIN but keep reading (and dropping) for a while,
        so bytes the client is still sending do not make our kernel reset the connection
        before the answer is read. A peer that has reset already is simply let go."""
        self._enter(LINGER)
        self._unfed.clear()
        self._out.flush()
        transport = self._transport
        if transport.can_write_eof():
            try:
                transport.write_eof()  # FIN after the buffered response
            except OSError:  # the peer reset first: it is gone
                transport.abort()
                return
        self._resume_reading()
        if self._eof:
            transport.close()

    def _upgrade(self, upgrade: Upgrade) -> None:
        """Rule 10: check the handshake, send the 101, hand the socket to the WebSocket."""
        wire = self._wire
        head = self._head
        assert head is not None
        request = head.request
        try:
            extra = handshake_headers(request, upgrade.subprotocol)
            if not wire.switch_proposed:
                raise AssertionError("h11 did not see an upgrade request")  # handshake_headers checked it
            headers = response_headers(Response(101, b"", extra, None), request.request_id, None, False)
        except RequestError as exc:
            upgrade.session.on_close(1006)
            self._send(problem_response(exc, request.request_id), None)
            return
        except Exception as exc:  # rule 8
            upgrade.session.on_close(1006)
            self._send(self._app_error(exc), None)
            return
        if not self._hub.take_socket(self):  # hub.py rule 8
            upgrade.session.on_close(1006)
            limit = self._hub.settings.max_sockets
            self._send(problem_response(Unavailable(f"WebSocket limit of {limit} reached"), request.request_id), None)
            return
        self._out.write(wire.informational(101, REASONS[101], headers))
        trailing = wire.trailing_data() + bytes(self._unfed)
        self._unfed.clear()
        self._enter(UPGRADED)
        self._upgraded = WebSocketConnection(self._out, self._hub.loop, self._hub.settings, upgrade, request, trailing)
        self._resume_reading()
