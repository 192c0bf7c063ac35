"""One HTTP/1.1 connection: an `asyncio.Protocol` driving an `h11.Connection`.

h11 is the protocol state machine (sans-IO); this module is the I/O edge around it, in the
shape of h11's `examples/trio-server.py`: feed bytes, pull events, send one response per
request, `start_next_cycle()` after each, and send an error response only while h11's state
still allows one.

Phases of a connection (`Phase`) and the deadline each one carries:

    HEAD      a request head is being received       header_timeout from its first byte
    BODY      a request body is being received       idle_timeout from the last body byte
    APP       the request is with the application    none (shutdown_timeout bounds it)
    IDLE      keep-alive, between requests           idle_timeout from the last response
    LINGER    final response sent, input discarded   LINGER_SECONDS, then closed
    UPGRADED  handed to an `Upgrade` handler         none (the handler owns the socket)
    CLOSED    the transport is gone

A new connection starts in HEAD, so a client that connects and never completes a head is
closed at the header deadline (slowloris). Deadlines are plain floats checked by the
server's sweeper (`dbsvc.http.server`), so the per-request cost is one `loop.time()`.

Rules:
1. Responses leave in request order. While the application works on a request (APP) or the
   transport's write buffer is over its high-water mark, no further request is parsed, and
   bytes that arrive meanwhile are parked in `_unfed` with reading paused
   (`transport.pause_reading`); so a flood of pipelined requests is bounded by one socket
   read (256 KiB) plus h11's buffer, however many bytes the client sends.
2. h11 is fed at most FEED_SIZE (64 KiB) at a time, and only while it asks for data.
3. A head bigger than MAX_HEAD (h11's `max_incomplete_event_size`) is 431 (RFC 9110 §15.5.20).
4. Content-Length together with Transfer-Encoding is 400 and close (RFC 9112 §6.3 item 3:
   such a message may be a smuggling attempt; h11 would silently prefer chunked).
5. A declared Content-Length over `max_body` is answered 413 at once, before any body
   byte is read; a chunked body crossing `max_body` is 413 as soon as it does. Either way
   the connection then closes, because the rest of the body was never read.
6. `Expect: 100-continue` gets a 100 only once the head has passed rules 4 and 5
   (RFC 9110 §10.1.1), so a refused client never sends its body.
7. Closing after an error response "lingers" (RFC 9112 §9.6): write, send FIN, discard
   input for up to LINGER_SECONDS, then close, so that unread input does not make the
   kernel reset the connection before the client has read the error.
8. An exception from the application never escapes: a RequestError becomes its problem
   response, anything else a logged 500 `internal` carrying the request id.
9. A response on a connection that stays open is written at the end of the event loop's
   turn (`Hub.defer`), together with every other response that turn produced, like Redis
   writes its replies just before its event loop sleeps. Each write to a socket whose
   reader sleeps wakes that reader; writing a turn's responses back to back wakes it once
   per turn instead of once per response (on a loaded 2-core VM a wake-up measured as
   costly as a third of a small request). Pipelined responses leave in one write. Held
   output is written at once past OUT_LIMIT (64 KiB), so write back-pressure (rule 1)
   still bounds it, and before anything else touches the transport (an error response,
   a close, a FIN, an upgrade). The holding and the back-pressure flag live in an
   `Outbox` (output.py), which an upgraded WebSocket keeps using.
10. An `Upgrade` answer is checked as a WebSocket opening handshake (websocket.py); a
   valid one gets its 101 through h11 and the socket passes to a `WebSocketConnection`,
   which from then on receives every transport callback (types.Upgraded). An invalid one
   is answered like any refused request (426 or 400) and the connection stays HTTP.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, cast

import h11

from dbsvc.errors import BadRequest, HeadersTooLarge, InternalError, PayloadTooLarge, RequestError, Unavailable
from dbsvc.http.message import Head, read_head, response_headers
from dbsvc.http.output import Outbox
from dbsvc.http.problem import problem_response
from dbsvc.http.types import Deferred, Response, Upgrade, Upgraded
from dbsvc.http.websocket import WebSocketConnection, handshake_headers
from dbsvc.logs import log_request

if TYPE_CHECKING:
    from dbsvc.http.server import Hub

FEED_SIZE = 64 * 1024
MAX_HEAD = 16 * 1024
LINGER_SECONDS = 2.0

log = logging.getLogger("dbsvc.http")
span_log = logging.getLogger("dbsvc.http.request")

_REASONS = {status.value: status.phrase.encode("ascii") for status in HTTPStatus}
_INF = math.inf


class Phase(enum.Enum):
    HEAD = "head"
    BODY = "body"
    APP = "app"
    IDLE = "idle"
    LINGER = "linger"
    UPGRADED = "upgraded"
    CLOSED = "closed"


HEAD, BODY, APP, IDLE, LINGER, UPGRADED, CLOSED = (
    Phase.HEAD, Phase.BODY, Phase.APP, Phase.IDLE, Phase.LINGER, Phase.UPGRADED, Phase.CLOSED)


class HttpConnection(asyncio.Protocol):
    """The protocol instance of one accepted socket."""

    __slots__ = (
        "_hub", "_h11", "_transport", "_peer", "phase", "deadline", "counted",
        "_unfed", "_reading_paused", "_out", "_eof", "_eof_fed",
        "_head", "_body", "_body_size", "_preflight", "_started", "_upgraded",
        "_deferred",
    )

    def __init__(self, hub: Hub) -> None:
        self._hub = hub
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self._transport: Any = None
        self._peer: tuple[str, int] | None = None
        self.phase = HEAD
        self.deadline = _INF
        self.counted = False
        self._unfed = bytearray()
        self._reading_paused = False
        self._out = Outbox(hub.defer)                       # rule 9, and write back-pressure
        self._eof = False
        self._eof_fed = False
        self._head: Head | None = None
        self._body: list[bytes] = []
        self._body_size = 0
        self._preflight = False
        self._started = 0.0
        self._upgraded: Upgraded | None = None
        self._deferred: Response | None = None              # the answer waiting for a Deferred

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        # asyncio already sets TCP_NODELAY on every TCP transport it creates
        # (selector_events._SelectorSocketTransport.__init__ calls _set_nodelay).
        self._transport = transport
        self._out.transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = (peer[0], peer[1]) if isinstance(peer, tuple) else None
        hub = self._hub
        self.deadline = hub.loop.time() + hub.settings.header_timeout
        if not hub.admit(self):
            self._refuse()

    def data_received(self, data: bytes) -> None:
        phase = self.phase
        if phase is UPGRADED:
            self._upgraded.data_received(data)              # type: ignore[union-attr]
            return
        if phase is LINGER or phase is CLOSED:
            return                                          # rule 7: discarded
        if phase is APP or self._out.paused or self._unfed:
            self._unfed += data                             # rule 1: parked, reading paused
            if not self._reading_paused:
                self._reading_paused = True
                self._transport.pause_reading()
            if phase is not APP and not self._out.paused:
                self._process()
            return
        if phase is IDLE:
            self.phase = HEAD
            self.deadline = self._hub.loop.time() + self._hub.settings.header_timeout
        if len(data) > FEED_SIZE:
            self._unfed += data                             # rule 2: fed in pieces
        else:
            self._h11.receive_data(data)
        self._process()

    def eof_received(self) -> bool | None:
        if self._upgraded is not None:
            return self._upgraded.eof_received()
        if self.phase is LINGER:
            return False                                    # the client is done: close now
        self._eof = True
        if self.phase is not APP and not self._out.paused:
            self._process()
        return True                                         # keep writing our response

    def pause_writing(self) -> None:
        self._out.paused = True
        if self._upgraded is not None:
            self._upgraded.pause_writing()

    def resume_writing(self) -> None:
        self._out.paused = False
        if self._upgraded is not None:
            self._upgraded.resume_writing()
        elif self.phase is not APP:
            self._process()

    def connection_lost(self, exc: Exception | None) -> None:
        self.phase = CLOSED
        self.deadline = _INF
        self._out.discard()
        self._hub.forget(self)
        if self._upgraded is not None:
            self._upgraded.connection_lost(exc)
            self._upgraded = None

    # -- called by the server ---------------------------------------------------------

    def on_deadline(self) -> None:
        """The sweeper found this connection past its deadline."""
        phase = self.phase
        self.deadline = _INF
        self._out.flush()
        if phase is IDLE and not self._transport.get_write_buffer_size():
            self._transport.close()                         # quiet keep-alive: a normal FIN
        elif phase is HEAD or phase is BODY or phase is LINGER or phase is IDLE:
            # HEAD/BODY: too slow (slowloris); IDLE with unsent bytes: the client stopped
            # reading its responses, and close() would wait for it forever.
            if phase is not LINGER:
                log.debug("closing %s: timed out in phase %s", self._peer, phase.value)
            self._transport.abort()

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

    # -- the event loop over h11 ------------------------------------------------------

    def _process(self) -> None:
        """Pull h11 events until it needs bytes, a response is pending, or we stop."""
        conn = self._h11
        while self.phase is not APP and not self._out.paused:
            if self.phase is LINGER or self.phase is CLOSED or self.phase is UPGRADED:
                return
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                self._protocol_error(exc)
                return
            if event is h11.NEED_DATA:
                if self._unfed:
                    piece = bytes(self._unfed[:FEED_SIZE])
                    del self._unfed[:FEED_SIZE]
                    conn.receive_data(piece)
                    continue
                if self._eof and not self._eof_fed:
                    self._eof_fed = True
                    conn.receive_data(b"")
                    continue
                if self._reading_paused:
                    self._reading_paused = False
                    self._transport.resume_reading()
                return
            kind = type(event)
            if kind is h11.Request:
                self._on_head(cast(h11.Request, event))
            elif kind is h11.EndOfMessage:
                self._on_end()
            elif kind is h11.Data:
                self._on_data(cast(h11.Data, event).data)
            elif kind is h11.ConnectionClosed:
                self._out.flush()
                self._transport.close()
                return
            else:                                           # PAUSED: nothing more until we act
                if not self._reading_paused:
                    self._reading_paused = True
                    self._transport.pause_reading()
                return

    def _on_head(self, event: h11.Request) -> None:
        hub = self._hub
        if hub.span_enabled:
            self._started = time.perf_counter()
        try:
            head = read_head(event, hub.ids, self._peer)
        except BadRequest as exc:
            self._fail(exc, None)
            return
        self._head = head
        if head.chunked and head.content_length is not None:
            self._fail(BadRequest("request has both content-length and transfer-encoding"), head)
            return
        max_body = hub.settings.max_body
        if head.content_length is not None and head.content_length > max_body:
            self._fail(PayloadTooLarge(
                f"request body of {head.content_length} bytes is over the limit of {max_body} bytes",
                limit=max_body), head)
            return
        self._preflight = (hub.cors.enabled and head.preflight_method is not None
                           and head.origin is not None and head.request.method == "OPTIONS")
        self.phase = BODY
        self.deadline = hub.loop.time() + hub.settings.idle_timeout
        if head.expects_continue and self._h11.they_are_waiting_for_100_continue:
            self._out.write(self._h11.send(h11.InformationalResponse(status_code=100, headers=[])))

    def _on_data(self, data: bytes) -> None:
        self._body_size += len(data)
        max_body = self._hub.settings.max_body
        if self._body_size > max_body:
            self._fail(PayloadTooLarge(
                f"request body is over the limit of {max_body} bytes", limit=max_body), self._head)
            return
        self._body.append(data)
        self.deadline = self._hub.loop.time() + self._hub.settings.idle_timeout

    def _on_end(self) -> None:
        head = self._head
        assert head is not None
        request = head.request
        if self._body:
            request.body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
            self._body = []
            self._body_size = 0
        self.phase = APP
        self.deadline = _INF
        if self._preflight:
            self._preflight = False
            extra = self._hub.cors.preflight_headers(head.origin, head.preflight_headers)
            self._send(Response(204, b"", [], None), extra)
            return
        try:
            result = self._hub.app(request)
        except Exception as exc:                           # rule 8
            result = self._app_error(exc)
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
        except Exception as exc:                           # rule 8
            result = self._app_error(exc)
        if self.phase is not APP:
            return                                          # the client went away meanwhile
        if not isinstance(result, (Response, Deferred, Upgrade)):
            result = self._app_error(TypeError(f"app returned {type(result).__name__}"))
        self._deliver(result)
        if self.phase is not APP and not self._out.paused:
            self._process()

    def _on_settled(self, future: asyncio.Future[Any]) -> None:
        """The future of a `Deferred` completed: send its response, or its error (rule 8)."""
        response, self._deferred = self._deferred, None
        error = future.exception() if not future.cancelled() else asyncio.CancelledError()
        if self.phase is not APP or response is None:
            return                                          # the client went away meanwhile
        self._send(self._app_error(error) if error is not None else response, None)
        if self.phase is not APP and not self._out.paused:
            self._process()

    def _app_error(self, exc: BaseException) -> Response:
        head = self._head
        request_id = head.request.request_id if head is not None else ""
        if isinstance(exc, RequestError):
            return problem_response(exc, request_id)
        request = head.request if head is not None else None
        log.error("unhandled error in %s %s (request_id=%s)",
                  request.method if request else "-", request.path if request else "-",
                  request_id, exc_info=exc)
        return problem_response(InternalError("internal server error"), request_id)

    # -- responses ----------------------------------------------------------------------

    def _send(self, response: Response, extra: list[tuple[bytes, bytes]] | None,
              close: bool = False, request_id: str = "") -> None:
        """Send one complete response to the current request, then start the next cycle."""
        hub = self._hub
        head = self._head
        request = head.request if head is not None else None
        if request is not None:
            request_id = request.request_id
        if hub.cors.enabled and extra is None and head is not None:
            extra = hub.cors.actual_headers(head.origin)
        close = close or hub.shutting_down
        status = response.status
        try:
            headers = response_headers(response, request_id, extra, close)
        except (h11.LocalProtocolError, UnicodeEncodeError) as exc:   # e.g. CR/LF in a value
            response = self._app_error(exc)
            status = response.status
            headers = response_headers(response, request_id, extra, close)
        # response_headers has validated every header as h11 would, so h11's own per-header
        # regex pass is skipped (`_parsed=True`, the flag h11 uses for headers it parsed).
        event = h11.Response(status_code=status, reason=_REASONS.get(status, b""),
                             headers=headers, _parsed=True)
        conn = self._h11
        data = conn.send(event)
        body = response.body
        sent = 0
        if body and (request is None or request.method != "HEAD") and status != 204 and status != 304:
            data += conn.send(h11.Data(data=body))
            sent = len(body)
        data += conn.send(h11.EndOfMessage())
        if hub.span_enabled:
            self._log_span(request, status, sent)
        self._head = None
        if conn.our_state is h11.MUST_CLOSE:
            self._out.write(data)
            if conn.their_state is h11.DONE and not self._unfed:
                self.phase = CLOSED
                self._transport.close()
            else:
                self._linger()
            return
        self._out.write_later(data)
        conn.start_next_cycle()
        self.phase = IDLE
        self.deadline = hub.loop.time() + hub.settings.idle_timeout

    def _fail(self, exc: RequestError, head: Head | None) -> None:
        """Answer `exc` to a request we will not read to its end, then close (rules 4, 5, 7)."""
        self._head = head
        self._body = []
        request_id = head.request.request_id if head is not None else self._hub.ids.choose(None)
        self._send(problem_response(exc, request_id), None, close=True, request_id=request_id)

    def _protocol_error(self, exc: h11.RemoteProtocolError) -> None:
        """h11 refused the client's bytes: a 4xx if h11 still lets us answer, then close."""
        if self._h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            self._transport.abort()
            return
        if exc.error_status_hint == 431:
            error: RequestError = HeadersTooLarge(f"request head is over the limit of {MAX_HEAD} bytes")
        else:
            error = BadRequest(f"malformed request: {exc}")
        self._fail(error, self._head)

    def _refuse(self) -> None:
        """Past max_connections: a 503 problem on a connection that is never counted."""
        hub = self._hub
        log.debug("refusing %s: %d connections open", self._peer, hub.settings.max_connections)
        request_id = hub.ids.choose(None)
        response = problem_response(
            Unavailable(f"connection limit of {hub.settings.max_connections} reached"), request_id)
        self._send(response, None, close=True, request_id=request_id)

    def _linger(self) -> None:
        self.phase = LINGER
        self.deadline = self._hub.loop.time() + LINGER_SECONDS
        self._unfed.clear()
        self._out.flush()
        transport = self._transport
        if transport.can_write_eof():
            transport.write_eof()                           # FIN after the buffered response
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        if self._eof:
            transport.close()

    def _upgrade(self, upgrade: Upgrade) -> None:
        """Rule 10: check the handshake, send the 101, hand the socket to the WebSocket."""
        conn = self._h11
        head = self._head
        assert head is not None
        request = head.request
        try:
            extra = handshake_headers(request, upgrade.subprotocol)
            if conn.their_state is not h11.MIGHT_SWITCH_PROTOCOL:
                raise AssertionError("h11 did not see an upgrade request")   # handshake_headers checked it
            headers = response_headers(Response(101, b"", extra, None), request.request_id, None, False)
        except RequestError as exc:
            upgrade.session.on_close(1006)
            self._send(problem_response(exc, request.request_id), None)
            return
        except Exception as exc:                           # rule 8
            upgrade.session.on_close(1006)
            self._send(self._app_error(exc), None)
            return
        self._out.write(conn.send(h11.InformationalResponse(
            status_code=101, reason=_REASONS[101], headers=headers)))
        buffered, _closed = conn.trailing_data
        trailing = bytes(buffered) + bytes(self._unfed)
        self._unfed.clear()
        self.phase = UPGRADED
        self.deadline = _INF
        self._upgraded = WebSocketConnection(self._out, self._hub.loop, self._hub.settings, upgrade, request,
                                             trailing)
        if self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()

    def _log_span(self, request: Any, status: int, size: int) -> None:
        if request is None:
            log_request("-", "-", status, 0.0, size, "")
        else:
            log_request(request.method, request.path, status, (time.perf_counter() - self._started) * 1000.0,
                        size, request.request_id)
