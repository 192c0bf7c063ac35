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

`HttpConnection` is the reading half: the asyncio callbacks and the loop over the wire's
events, up to the application's call. Its base `Responder` (respond.py) is the answering
half and what both share: the connection's state and `_enter`, the server's calls
(`on_deadline`, `abort`, `on_shutdown`), the application's result delivered, every response
sent, refused or crashed, the linger and the upgrade: rules 7-10 are kept there. The rules
below are the whole connection's, one numbering for both modules.

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

import time
from typing import Any, cast

from dbsvc.errors import RequestError
from dbsvc.http.fastpath import FastWire
from dbsvc.http.hub import Phase
from dbsvc.http.message import Head
from dbsvc.http.respond import APP, BODY, CLOSED, HEAD, IDLE, LINGER, UPGRADED, Responder
from dbsvc.http.types import Response
from dbsvc.http.wire import CLOSED as PEER_CLOSED
from dbsvc.http.wire import END, HAND_OVER, MAX_HEAD, NEED_DATA, H11Wire

__all__ = ["MAX_HEAD", "HttpConnection", "Phase"]

FEED_SIZE = 64 * 1024
PIPELINE_BUDGET = 32  # requests one connection starts per turn of the loop (rule 12)
# The methods dbsvc's routes answer (dbsvc.routes.ALL_METHODS, which this layer cannot import;
# a test holds the two equal).
ASTERISK_ALLOW = "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"


class HttpConnection(Responder):
    """The protocol instance of one accepted socket: the asyncio callbacks and the loop over
    the wire's events up to the application (its base, respond.py's, answers)."""

    __slots__ = ()  # every attribute is Responder's

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
