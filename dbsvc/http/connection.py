"""One HTTP/1.1 connection: an `asyncio.Protocol` driving a request parser (a wire).

The wire (wire.py) is the protocol state machine (sans-IO): the fast path (fastpath.py)
for the requests this service nearly always gets, handing over to h11, the parser of
record, at the first request it is unsure of; or h11 from the start when
`HttpSettings.http_parser` is "h11". This module is the I/O edge around it, in the shape
of h11's `examples/trio-server.py`: feed bytes, pull events, send one response per
request, `start_next_cycle()` after each, and send an error response only while the
wire's state still allows one. Every rule below holds on either wire.

A connection's phase (`Phase`: HEAD, BODY, APP, IDLE, LINGER, UPGRADED, CLOSED) and the
deadline it carries change together, in `_enter` alone, from the table `DEADLINES` of hub.py
(its rules 1-5), and the hub's sweeper calls `on_deadline` past it. The request body is taken
in by a `BodyIntake` (intake.py, its rules 1-6), which keeps the limits of rules 4, 5 and 11.
Must not import server.py: the server depends on this module, never the reverse.

Rules:
1. Responses leave in request order. While the application works on a request (APP), the
   transport's write buffer is over its high-water mark, or the connection yields its turn
   (rule 12), no further request is parsed, and bytes that arrive meanwhile are parked in
   `_unfed` with reading paused (`transport.pause_reading`); so a flood of pipelined
   requests is bounded by one socket read (256 KiB) plus the wire's buffer, however many
   bytes the client sends.
2. The wire is fed at most FEED_SIZE (64 KiB) at a time, and only while it asks for data.
3. A head bigger than MAX_HEAD is 431 (RFC 9110 §15.5.20), whatever the segmentation: h11
   refuses an incomplete head past MAX_HEAD (`max_incomplete_event_size`), a head that
   arrived whole is measured by the h11 wire (wire.H11Wire), and the fast path hands any
   head near the limit to h11. When the request line alone is past it, the answer is 414
   instead (§15.5.15): what the client has to shorten is the target, not its headers.
4. Content-Length together with Transfer-Encoding is 400 and close (intake.py rule 1). The
   fast path hands over any Transfer-Encoding, so this, like rules 6, 10 and 13, is h11's case.
5. A body over `max_body` is 413 (intake.py rule 2), at the head when its length is declared;
   the connection then closes, because the rest of the body was never read.
6. `Expect: 100-continue` gets a 100 only once the head has passed rules 4 and 5
   (RFC 9110 §10.1.1), so a refused client never sends its body.
7. Closing after an error response "lingers" (RFC 9112 §9.6): write, send FIN, discard
   input for up to LINGER_SECONDS, then close, so that unread input does not make the
   kernel reset the connection before the client has read the error.
8. No exception escapes to asyncio. From the application: a RequestError becomes its
   problem response, anything else a logged 500 `internal` carrying the request id. A
   response that cannot be rendered or sent (a body json cannot encode, a bad status or
   header, a 2xx to CONNECT, which h11 would take for a tunnel opened) becomes that 500
   too, and when even that fails, the fixed bytes of `problem.internal_error_response`. An
   exception of this layer's own (a bug) is logged, answered with those fixed bytes if the
   wire still allows a response, and the connection is closed. Every such log shows the
   exception's type and frames, never its message (`exc_messages=False`): a message may
   hold the client's data.
9. A response on a connection that stays open is written at the end of the event loop's
   turn with every other response that turn produced (output.py rules 1-2: one wake-up of
   the reader a turn, pipelined responses in one write); held output is written at once past
   OUT_LIMIT and before anything else touches the transport (an error, a close, a FIN, an
   upgrade), so write back-pressure (rule 1) still bounds it.
10. An `Upgrade` answer is checked as a WebSocket opening handshake (ws/server.py); a
   valid one gets its 101 through h11 (503 when `max_sockets` are open: hub.py rule 8) and
   the socket passes to a `WebSocketConnection`, which from then on receives every
   transport callback (types.Upgraded). An invalid one is answered like any refused
   request (426 or 400) and the connection stays HTTP.
11. A body must keep coming (intake.py rule 5): past its deadline the client gets 408 and
   the connection closes (rule 7). A body that does not fit in what is left of `body_memory`
   (intake.py rule 3) is 503 `unavailable`, and the connection closes.
12. Fairness: one call of `_process` hands at most PIPELINE_BUDGET requests to the
   application (counted at their END, so a yield never falls between a head and its END);
   then the connection yields the loop's turn (`call_soon`) and parks its input (rule 1),
   so a client pipelining thousands of requests delays the others by one budget per turn.
13. `OPTIONS *` (RFC 9112 §3.2.4) is answered here, 204 with `Allow: ASTERISK_ALLOW`,
   the methods dbsvc's routes answer; the asterisk with another method is 400 (message.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any, cast

from dbsvc.errors import RequestError, Unavailable
from dbsvc.http.account import account
from dbsvc.http.fastpath import FastWire
from dbsvc.http.hub import DEADLINES, Bound, Hub, Phase
from dbsvc.http.intake import BodyIntake
from dbsvc.http.message import REASONS, Head, response_headers
from dbsvc.http.output import Outbox
from dbsvc.http.problem import error_response, last_words, problem_response
from dbsvc.http.types import Completion, Deferred, Response, Upgrade, Upgraded
from dbsvc.http.wire import CLOSED as PEER_CLOSED
from dbsvc.http.wire import END, HAND_OVER, MAX_HEAD, NEED_DATA, H11Wire, Wire
from dbsvc.http.ws.server import WebSocketConnection, handshake_headers

__all__ = ["MAX_HEAD", "HttpConnection", "Phase"]

FEED_SIZE = 64 * 1024
LINGER_SECONDS = 2.0
PIPELINE_BUDGET = 32  # requests one connection starts per turn of the loop (rule 12)
# The methods dbsvc's routes answer (dbsvc.routes.ALL_METHODS, which this layer cannot import;
# a test holds the two equal).
ASTERISK_ALLOW = "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"

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


class HttpConnection(asyncio.Protocol):
    """The protocol instance of one accepted socket."""

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

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        # asyncio already sets TCP_NODELAY on every TCP transport it creates
        # (selector_events._SelectorSocketTransport.__init__ calls _set_nodelay).
        self._transport = transport
        self._out.transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = (peer[0], peer[1]) if isinstance(peer, tuple) else None
        hub = self._hub
        self._wire = FastWire(hub.ids, self._peer) if hub.fast_path else H11Wire(hub.ids, self._peer)
        self._enter(HEAD)  # slowloris: hub.py rule 3
        if not hub.admit(self):
            try:
                self._refuse()
            except Exception as exc:  # rule 8
                self._crash(exc)

    def data_received(self, data: bytes) -> None:
        try:
            phase = self.phase
            if phase is UPGRADED:
                self._upgraded.data_received(data)  # type: ignore[union-attr]
                return
            if phase is LINGER or phase is CLOSED:
                return  # rule 7: discarded
            if phase is APP or self._out.paused or self._unfed or self._yielding:
                self._unfed += data  # rule 1: parked, reading paused
                self._pause_reading()
                if self._may_parse():
                    self._process()
                return
            if phase is IDLE:
                self._enter(HEAD)
            if len(data) > FEED_SIZE:
                self._unfed += data  # rule 2: fed in pieces
            else:
                self._wire.receive(data)
            self._process()
        except Exception as exc:  # rule 8: our own bug
            self._crash(exc)

    def eof_received(self) -> bool | None:
        if self._upgraded is not None:
            return self._upgraded.eof_received()
        if self.phase is LINGER:
            return False  # the client is done: close now
        self._eof = True
        if self._may_parse():
            self._process_guarded()
        return True  # keep writing our response

    def pause_writing(self) -> None:
        self._out.paused = True
        if self._upgraded is not None:
            self._upgraded.pause_writing()

    def resume_writing(self) -> None:
        self._out.paused = False
        if self._upgraded is not None:
            self._upgraded.resume_writing()
        elif self._may_parse():
            self._process_guarded()

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter(CLOSED)
        self._out.discard()
        self._intake.drop()
        self._hub.forget(self)
        if self._upgraded is not None:
            self._upgraded.connection_lost(exc)
            self._upgraded = None

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

    # -- the event loop over the wire --------------------------------------------------

    def _process(self) -> None:
        """Pull the wire's events until it needs bytes, a response is pending, or we stop."""
        started = 0
        while self.phase is not APP and not self._out.paused:
            if self.phase is LINGER or self.phase is CLOSED or self.phase is UPGRADED:
                return
            if started >= PIPELINE_BUDGET:  # rule 12
                self._yielding = True
                self._hub.loop.call_soon(self._resume_turn)
                return
            try:
                event = self._wire.next_event()
            except RequestError as exc:  # the client's bytes are not HTTP we serve
                self._refused(exc)
                return
            kind = type(event)
            if kind is Head:
                self._on_head(event)  # type: ignore[arg-type]  # (no cast: a call at run time)
            elif event is END:
                started += 1
                self._on_end()
            elif kind is bytearray or kind is bytes:
                self._on_data(event)  # type: ignore[arg-type]
            elif event is NEED_DATA:
                if self._unfed:
                    piece = bytes(self._unfed[:FEED_SIZE])
                    del self._unfed[:FEED_SIZE]
                    self._wire.receive(piece)
                    continue
                if self._eof and not self._eof_fed:
                    self._eof_fed = True
                    self._wire.receive(b"")
                    continue
                if self._reading_paused:
                    self._resume_reading()
                return
            elif event is HAND_OVER:  # h11 takes the connection from here
                self._wire = cast(FastWire, self._wire).hand_over()
            elif event is PEER_CLOSED:
                self._out.flush()
                self._transport.close()
                return
            else:  # PAUSED: nothing more until we act
                self._pause_reading()
                return

    def _resume_turn(self) -> None:
        """The loop came round again after this connection yielded (rule 12)."""
        self._yielding = False
        if self._may_parse():
            self._process_guarded()

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

    def _process_guarded(self) -> None:
        """`_process` for a callback that data_received's guard does not cover (rule 8)."""
        try:
            self._process()
        except Exception as exc:
            self._crash(exc)

    def _on_head(self, head: Head) -> None:
        hub = self._hub
        self._started = time.perf_counter()  # the span's duration and the route meter's
        self._head = head
        # rules 4, 5 and 11; hub.py rules 7 (the probes' reserve) and 9 (the Host): asked
        # only when there is something to check, a declared body or a reserve or a Host policy
        refusal = self._intake.refusal_of(head) if head.content_length is not None else None
        if refusal is None and (self.reserve or hub.hosts.enabled):
            refusal = hub.refusal_of(head.request, self.reserve)
        if refusal is not None:
            self._fail(refusal, head)
            return
        self._preflight = head.asterisk or (
            hub.cors.enabled
            and head.preflight_method is not None
            and head.origin is not None
            and head.request.method == "OPTIONS"
        )
        if head.complete:
            return  # the wire holds the whole request: END follows at once, no body to take in
        self._intake.begin()
        self._enter(BODY)
        if head.expects_continue and self._wire.expects_100():
            self._out.write(self._wire.informational(100, b"", []))

    def _on_data(self, data: bytes) -> None:
        refusal = self._intake.take(data)  # rules 5 and 11
        if refusal is not None:
            self._fail(refusal, self._head)
            return
        self._enter(BODY)  # its deadline moved on: hub.py rule 4

    def _on_end(self) -> None:
        head = self._head
        assert head is not None
        request = head.request
        if self._intake.size:  # a body taken in by pieces (none for a head that came whole)
            request.body = self._intake.take_body()  # type: ignore[assignment]  # maybe a bytearray
        self._enter(APP)
        if self._preflight:
            self._preflight = False
            if head.asterisk:  # rule 13
                self._send(Response(204, b"", [("Allow", ASTERISK_ALLOW)], None), None)
                return
            extra = self._hub.cors.preflight_headers(head.origin, head.preflight_headers)
            self._send(Response(204, b"", [], None), extra)
            return
        try:
            result = self._hub.app(request)
        except Exception as exc:  # rule 8
            result = self._app_error(exc)
        if type(result) is Response:  # a read's answer: sent on this turn (`_deliver`'s first case)
            self._send(result, None)
        else:
            self._deliver(result)

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
        """Past max_connections: a 503 problem on a connection that is never counted."""
        hub = self._hub
        log.debug("refusing %s: %d connections open", self._peer, hub.settings.max_connections)
        request_id = hub.ids.choose(None)
        response = problem_response(
            Unavailable(f"connection limit of {hub.settings.max_connections} reached"), request_id
        )
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
