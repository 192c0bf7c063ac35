"""The server side of a WebSocket: the handshake check and one upgraded socket.

h11 has already parsed the opening handshake (a GET with `Upgrade: websocket`);
`handshake_headers` checks it (RFC 6455 §4.2.1) and builds the 101's headers, and the
connection layer (connection.py rule 10) writes the 101 and hands the socket, with any
bytes that arrived after the handshake, to a `WebSocketConnection`. From then on wsproto
parses what the client sends (frames, masking, UTF-8 of text, control frames); what the
server sends are data frames built once by `frames.py` and shared between sockets, plus
control frames from wsproto.

The application talks to the socket through two small interfaces (types.py): it returns an
`Upgrade` holding a `Session`, and the session gets a `Channel` (this object) to send on.

Imports wsproto, the protocol layer's own parts (frames, output, types) and the shared
close codes; never the blocking client (`ws.client`), h11, the realtime layer or the
application.

Rules:
1. No extension is negotiated, permessage-deflate included: wsproto inflates a compressed
   message without a size limit (a 200 KB message became 200 MB when tried), so the 101
   never carries `Sec-WebSocket-Extensions`, and a frame with an RSV bit set fails the
   connection with 1002 (RFC 6455 §5.2).
2. A data message over `Upgrade.max_message` bytes (64 KiB by default) closes the socket
   with 1009, counted as its frames arrive (wsproto hands over partial frames), so it is
   never buffered whole (RFC 6455 §7.4.1).
3. Liveness: when nothing arrived for `ws_ping_interval` seconds (30) the server sends a
   ping; a peer that sends nothing within `ws_pong_timeout` (30) after it is dropped
   (aborted, close code 1006). Any bytes from the peer count as a sign of life, and so do
   bytes the transport wrote to it since the last look (`Outbox.written` grew): a consumer
   reading steadily on a slow link meets our ping late, behind the data queued before it,
   and is not dropped for that. One timer handle per socket, re-armed lazily.
4. Closing (RFC 6455 §7.1): `close(code, reason)` sends a close frame after every frame
   already handed to this channel (the frames a session counted as sent are owed: a 1013
   names the last of them). That is little: the transport holds at most the unsent rest of
   one write (rule 5's high-water mark of 0), plus this turn's held output; frames not
   started on the wire wait in the session's queue, which a lagged close drops. It then
   waits `ws_close_timeout` (5 s) for the peer's close frame, longer (up to CLOSE_PATIENCE
   timeouts) while the peer is still reading (rule 3's sign) or our close frame has not
   left our buffer (a client that stopped reading finds it when it reads again), and
   closes TCP (the server closes TCP first, §7.1.1): with a FIN when our close frame has
   left our buffer, so a late reader still finds it, with a reset when it has not; a peer-initiated close is answered
   with the same code and TCP is closed at once. A protocol error from the peer (bad
   framing, invalid UTF-8, a masked-bit violation) is answered with a close frame carrying
   wsproto's code (1002, 1007) and TCP is closed without waiting.
5. Flow control: frames are written through the connection's `Outbox` (output.py): held
   to the end of the loop's turn, so the frames of every event fanned out in one turn
   leave a socket in one write; while fan-outs are heavy, a little past it, so the frames
   of several turns do (hub.py rule 10, at most 50 ms). A fan-out's batch (`send_frames`)
   is written at once: the broker held it already (broker.py rule 10). The transport's
   high-water mark is 0: as soon as the kernel does not take a whole write, the channel is
   not `writable` and the session queues whole frames itself (session.py rule 4), where a
   lagged close can drop them. While the transport is over its high-water mark the
   channel is not `writable` and the socket is not read (a client flooding pings cannot
   grow our write buffer); `Session.on_writable` is called when it drains.
6. A session callback that raises is logged and closes its socket with 1011.
   The session's `on_close(code)` is called exactly once, with the first close code sent
   or received, 1006 when the TCP connection ended without one.
7. A data message from the client is handed to `Session.on_message`; the realtime
   sessions ignore it (documented in docs/realtime.md).
8. Graceful shutdown (`shutdown()`): close with 1001. `Upgrade.close_at` closes with its
   code at its time, by a timer (a token expiring: 4401).
9. When the socket ends it logs one span line: route, duration, frames and bytes sent,
   close code.
10. Fairness and abuse (like connection.py rule 12 for pipelined requests): one turn of
   the loop hands wsproto at most TURN_BYTES (64 KiB, in FEED_SIZE pieces) and acts on at
   most EVENT_BUDGET (256) events; the rest is parked, reading is paused and the socket
   goes on at the next turn (`call_soon`), so 43,000 empty frames in one 256 KiB read
   cost the other connections one budget per turn, not the whole read. Control frames
   (ping, pong, close) are metered by a token bucket, CONTROL_BURST (64) at once and
   CONTROL_RATE (8) a second after that: a peer past it is closed with 1008 (policy
   violation) without waiting for its close, and what it sent after is discarded.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import logging
import time
from collections.abc import Callable
from typing import Any

from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.utilities import LocalProtocolError, generate_accept_token

from dbsvc.errors import BadRequest, UpgradeRequired
from dbsvc.http.frames import binary_frame, text_frame
from dbsvc.http.output import Outbox
from dbsvc.http.types import HttpSettings, Request, Upgrade
from dbsvc.http.ws.common import ABNORMAL, GOING_AWAY, INTERNAL_ERROR, NORMAL_CLOSURE, POLICY_VIOLATION, TOO_BIG
from dbsvc.logs import log_span

# The logger keeps the name of the module this code came from: RUST_LOG selects loggers
# by name (`dbsvc::http::websocket=debug`), and a split of files is no reason to break that.
log = logging.getLogger("dbsvc.http.websocket")
span_log = logging.getLogger("dbsvc.http.request")

# Rule 10: what one socket's input may cost per turn of the loop, and the control frames
# (ping, pong, close) a peer may send: a burst, then a steady rate.
EVENT_BUDGET = 256  # wsproto events acted on per turn
FEED_SIZE = 16 * 1024  # bytes handed to wsproto at a time
TURN_BYTES = 64 * 1024  # bytes handed to wsproto per turn
CONTROL_BURST = 64  # control frames a peer may send at once
CONTROL_RATE = 8.0  # control frames a second, sustained, past the burst
CLOSE_PATIENCE = 6  # rule 4: close timeouts a reading peer may take to answer


class State(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # our close frame sent; waiting for the peer's
    CLOSED = "closed"  # close handshake done or failed; TCP closing or closed


def _tokens(value: str | None) -> list[str]:
    return [t.strip().lower() for t in (value or "").split(",") if t.strip()]


def handshake_headers(request: Request, subprotocol: str | None) -> list[tuple[str, str]]:
    """The 101's headers for a valid opening handshake (RFC 6455 §4.2.1, §4.2.2).

    Raises `UpgradeRequired` (426, with `Upgrade: websocket` and `Sec-WebSocket-Version:
    13`) for a request that is not a WebSocket handshake or asks for another version, and
    `BadRequest` for a malformed or repeated key, or a handshake over HTTP/1.0 (RFC 6455
    §4.1: the handshake is HTTP/1.1 or later, with one `Sec-WebSocket-Key`).
    """
    if (
        request.method != "GET"
        or "websocket" not in _tokens(request.header("upgrade"))
        or "upgrade" not in _tokens(request.header("connection"))
    ):
        raise UpgradeRequired(
            f"{request.path} is a WebSocket route: expected a GET with 'Upgrade: websocket' and 'Connection: Upgrade'"
        )
    if request.http_version == "1.0":  # RFC 6455 §4.1: HTTP/1.1 or later
        raise BadRequest("a WebSocket handshake over HTTP/1.0 is not valid: expected HTTP/1.1")
    version = (request.header("sec-websocket-version") or "").strip()
    if version != "13":
        raise UpgradeRequired(f"Sec-WebSocket-Version {version!r} is not supported: expected '13'")
    keys = [value for name, value in request.headers if name == "sec-websocket-key"]
    if len(keys) > 1:  # RFC 6455 §4.1: exactly one key
        raise BadRequest(f"Sec-WebSocket-Key appears {len(keys)} times: expected exactly one")
    key = (keys[0] if keys else "").strip()
    try:
        valid = len(base64.b64decode(key, validate=True)) == 16
    except (binascii.Error, ValueError):
        valid = False
    if not valid:
        raise BadRequest(f"Sec-WebSocket-Key {key!r} is not valid: expected 16 bytes in base64")
    headers = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Accept", generate_accept_token(key.encode("ascii")).decode("ascii")),
    ]
    if subprotocol is not None:
        headers.append(("Sec-WebSocket-Protocol", subprotocol))
    return headers


class WebSocketConnection:
    """One accepted WebSocket: `types.Upgraded` for the connection layer, `types.Channel`
    for its session."""

    __slots__ = (
        "_ws",
        "_out",
        "_loop",
        "_settings",
        "_session",
        "_request",
        "_route",
        "state",
        "_max_message",
        "_message",
        "_message_size",
        "_message_text",
        "_close_code",
        "_reported",
        "_last_seen",
        "_ping_at",
        "_timer",
        "_expiry",
        "_started",
        "frames_sent",
        "bytes_sent",
        "_reading_paused",
        "_unfed",
        "_yielding",
        "_control_tokens",
        "_control_at",
        "_written_mark",
        "_backlogged",
        "_closing_until",
    )

    def __init__(
        self,
        out: Outbox,
        loop: asyncio.AbstractEventLoop,
        settings: HttpSettings,
        upgrade: Upgrade,
        request: Request,
        trailing: bytes,
    ) -> None:
        self._ws = Connection(ConnectionType.SERVER)  # rule 1: no extensions
        out.bulk = True  # rule 5: fan-outs coalesce (hub.py rule 10)
        if out.transport is not None:  # rule 5: frames not started stay with the session
            out.transport.set_write_buffer_limits(high=0)
        self._out = out
        self._loop = loop
        self._settings = settings
        self._session = upgrade.session
        self._request = request
        self._route = upgrade.route or request.path
        self.state = State.OPEN
        self._max_message = upgrade.max_message
        self._message: list[Any] = []
        self._message_size = 0
        self._message_text = False
        self._close_code: int | None = None
        self._reported = False
        self._last_seen = loop.time()
        self._ping_at: float | None = None
        self._timer: asyncio.TimerHandle | None = loop.call_at(
            self._last_seen + settings.ws_ping_interval, self._on_timer
        )
        self._expiry: asyncio.TimerHandle | None = None
        self._started = time.perf_counter()
        self.frames_sent = 0
        self.bytes_sent = 0
        self._reading_paused = False
        self._unfed = bytearray()  # rule 10: read, not yet given to wsproto
        self._yielding = False
        self._control_tokens = float(CONTROL_BURST)
        self._control_at = self._last_seen
        self._written_mark = 0  # rule 3: out.written at the last timer
        self._backlogged = False  # rule 3: bytes were waiting then
        self._closing_until = 0.0  # rule 4: the longest a close may wait
        if upgrade.close_at is not None:
            when, code, reason = upgrade.close_at
            self._expiry = loop.call_later(max(0.0, when - time.time()), self.close, code, reason)
        self._call(self._session.on_open, self)
        if trailing and self.state is State.OPEN:
            self.data_received(trailing)

    # -- Channel ----------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        return self.state is State.OPEN and not self._out.paused

    def send_frame(self, frame: bytes) -> None:
        if self.state is State.OPEN:
            self._out.write_later(frame)
            self.frames_sent += 1
            self.bytes_sent += len(frame)

    def send_frames(self, data: bytes, count: int) -> None:
        """Rule 5: a fan-out's batch is written now, after anything held; the broker
        already waited for the events it joins (broker.py rule 10)."""
        if self.state is State.OPEN:
            self._out.write(data)
            self.frames_sent += count
            self.bytes_sent += len(data)

    def send_text(self, text: str) -> None:
        self.send_frame(text_frame(text.encode("utf-8")))

    def send_bytes(self, data: bytes) -> None:
        self.send_frame(binary_frame(data))

    def close(self, code: int = NORMAL_CLOSURE, reason: str = "") -> None:
        """Rule 4: send our close frame and wait (bounded) for the peer's."""
        if self.state is not State.OPEN:
            return
        self._send_close(code, reason)
        if self.state is State.OPEN:  # wsproto: now LOCAL_CLOSING
            self.state = State.CLOSING
            now = self._loop.time()
            self._peer_reading()  # the marks rule 4's wait compares with
            self._closing_until = now + CLOSE_PATIENCE * self._settings.ws_close_timeout
            self._arm(now + self._settings.ws_close_timeout)

    # -- Upgraded (transport events) ----------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.state is State.CLOSED:
            return
        self._last_seen = self._loop.time()
        self._unfed += data
        if not self._yielding:
            self._drain()

    def _drain(self) -> None:
        """Rule 10: hand the peer's bytes to wsproto FEED_SIZE at a time and act on its
        events, at most EVENT_BUDGET events and TURN_BYTES bytes per turn of the loop; past
        either, park the rest, pause reading and go on at the next turn (`call_soon`)."""
        ws = self._ws
        budget = EVENT_BUDGET
        fed = 0
        unfed = self._unfed
        while True:
            for event in ws.events():
                budget -= 1
                if self._on_event(event) or self._ended():
                    unfed.clear()
                    return
                if budget <= 0:
                    self._yield_turn()
                    return
            if not unfed:
                self._update_reading()
                return
            if fed >= TURN_BYTES:
                self._yield_turn()
                return
            piece = bytes(unfed[:FEED_SIZE])
            del unfed[:FEED_SIZE]
            fed += len(piece)
            try:
                ws.receive_data(piece)
            except LocalProtocolError:  # bytes after the close handshake
                unfed.clear()
                return

    def _on_event(self, event: Any) -> bool:
        """Act on one wsproto event; True when the peer's input ends here (a close frame,
        or a control-frame flood)."""
        if isinstance(event, (TextMessage, BytesMessage)):
            self._on_data(event)
            return False
        if not self._control_allowed():  # rule 10
            log.info(
                "closing %s socket: over %d control frames at once or %.0f/s", self._route, CONTROL_BURST, CONTROL_RATE
            )
            self._fail(POLICY_VIOLATION, "control frame flood")
            return True
        if isinstance(event, Ping):
            if self._ws.state is ConnectionState.OPEN:
                self._out.write_later(self._ws.send(event.response()))
        elif isinstance(event, CloseConnection):
            self._on_close_frame(event)
            return True
        # a Pong needs nothing: rule 3's _last_seen already moved
        return False

    def _control_allowed(self) -> bool:
        """Rule 10's token bucket: CONTROL_BURST frames, refilled at CONTROL_RATE a second."""
        now = self._loop.time()
        tokens = min(float(CONTROL_BURST), self._control_tokens + (now - self._control_at) * CONTROL_RATE)
        self._control_at = now
        if tokens < 1.0:
            self._control_tokens = tokens
            return False
        self._control_tokens = tokens - 1.0
        return True

    def _yield_turn(self) -> None:
        self._yielding = True
        self._update_reading()
        self._loop.call_soon(self._resume_turn)

    def _resume_turn(self) -> None:
        """The loop came round again after this socket yielded its turn (rule 10)."""
        self._yielding = False
        if self.state is State.CLOSED:
            return
        try:
            self._drain()
        except Exception:  # a bug of ours: this socket, not the loop
            log.exception("WebSocket %s failed while reading", self._route)
            self._abort()

    def _update_reading(self) -> None:
        """Read from the transport unless this socket yields its turn (rule 10) or the
        transport is over its high-water mark (rule 5)."""
        if self.state is State.CLOSED or self._out.closed:
            return
        pause = self._yielding or self._out.paused
        if pause != self._reading_paused:
            self._reading_paused = pause
            if pause:
                self._out.transport.pause_reading()
            else:
                self._out.transport.resume_reading()

    def eof_received(self) -> bool | None:
        return None  # the peer is done: let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = State.CLOSED
        for handle in (self._timer, self._expiry):
            if handle is not None:
                handle.cancel()
        self._timer = self._expiry = None
        if self._close_code is None:
            self._close_code = ABNORMAL
        self._report()
        if span_log.isEnabledFor(logging.INFO):
            request = self._request
            log_span(
                {
                    "method": "GET",
                    "path": request.path,
                    "status": 101,
                    "duration_ms": round((time.perf_counter() - self._started) * 1000.0, 3),
                    "bytes": self.bytes_sent,
                    "request_id": request.request_id,
                    "route": self._route,
                    "frames": self.frames_sent,
                    "close_code": self._close_code,
                }
            )

    def pause_writing(self) -> None:
        self._update_reading()  # rule 5

    def resume_writing(self) -> None:
        self._update_reading()
        if self.state is State.OPEN:
            self._call(self._session.on_writable)

    def shutdown(self) -> None:
        self.close(GOING_AWAY, "server shutting down")

    # -- internals --------------------------------------------------------------------

    def _on_data(self, event: TextMessage | BytesMessage) -> None:
        data = event.data
        size = len(data.encode("utf-8")) if isinstance(data, str) else len(data)
        self._message_size += size
        if self._message_size > self._max_message:  # rule 2
            self._message.clear()
            self._fail(TOO_BIG, f"message over {self._max_message} bytes")
            return
        self._message.append(data)
        if not event.message_finished:
            return
        parts, self._message = self._message, []
        self._message_size = 0
        if isinstance(data, str):
            message: str | bytes = parts[0] if len(parts) == 1 else "".join(parts)
        else:
            message = parts[0] if len(parts) == 1 else b"".join(parts)
        self._call(self._session.on_message, message)

    def _ended(self) -> bool:
        """Whether the socket is closed: a method rather than an inline test because the
        session callback just run may have closed it, which mypy's narrowing of `state`
        after an earlier check cannot see."""
        return self.state is State.CLOSED

    def _call(self, callback: Callable[..., object], *args: Any) -> None:
        """Run a session callback; a bug in it closes this socket with 1011, not the server."""
        try:
            callback(*args)
        except Exception:
            log.exception("WebSocket session %s failed", self._route)
            self.close(INTERNAL_ERROR, "internal error")

    def _on_close_frame(self, event: CloseConnection) -> None:
        ws_state = self._ws.state
        if ws_state is ConnectionState.REMOTE_CLOSING:  # the peer closes: answer
            if self._close_code is None:
                self._close_code = event.code
            self._send_close(event.code, "")
            self._finish()
        elif ws_state is ConnectionState.CLOSED:  # the answer to our close
            self._finish()
        else:  # wsproto: a protocol error
            self._fail(event.code, event.reason or "")

    def _send_close(self, code: int, reason: str) -> None:
        if self._close_code is None:
            self._close_code = code
        try:
            self._out.write_later(self._ws.send(CloseConnection(code=code, reason=reason)))
        except LocalProtocolError:
            pass

    def _fail(self, code: int, reason: str) -> None:
        """Rule 4: a close frame, then TCP closed without waiting for the peer."""
        self._send_close(code, reason)
        self._finish()

    def _finish(self) -> None:
        self.state = State.CLOSED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._out.flush()
        if not self._out.closed:
            self._out.transport.close()
        self._report()

    def _report(self) -> None:
        if not self._reported:
            self._reported = True
            try:
                self._session.on_close(self._close_code if self._close_code is not None else ABNORMAL)
            except Exception:
                log.exception("WebSocket session %s failed while closing", self._route)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        """Rule 3 (ping, then drop) and rule 4 (close handshake timeout)."""
        self._timer = None
        state = self.state
        if state is State.CLOSED:
            return
        now = self._loop.time()
        settings = self._settings
        reading = self._peer_reading()
        if state is State.CLOSING:
            if now < self._closing_until and (reading or self._out.buffered > 0):
                # rule 4: still reading its way to our close, or our close is still ours to
                # write: a peer that paused its reading finds it when it reads again
                self._arm(now + settings.ws_close_timeout)
                return
            log.debug("%s: no close frame from the peer within %.1f s", self._route, settings.ws_close_timeout)
            if self._out.buffered == 0:
                self._out.transport.close()  # our close frame is with the kernel: FIN after it
            else:
                self._abort()
            return
        ping_at = self._ping_at
        if ping_at is not None:
            if self._last_seen <= ping_at and not reading:
                log.info("dropping %s socket: no answer to a ping within %.1f s", self._route, settings.ws_pong_timeout)
                self._abort()
                return
            if self._last_seen <= ping_at:  # alive by what it read: ask again later
                self._last_seen = now
            self._ping_at = None
        due = self._last_seen + settings.ws_ping_interval
        if now >= due:
            self._ping_at = now
            self._out.write_later(self._ws.send(Ping(b"")))
            self._arm(now + settings.ws_pong_timeout)
        else:
            self._arm(due)

    def _peer_reading(self) -> bool:
        """Rule 3: whether the transport wrote bytes out of a backlog since the last look.
        Only the transport's backlog counts: bytes written into an empty kernel buffer (our
        ping, say, or the close frame still held in the Outbox when `close` looks) leave
        whether or not anyone reads them; out of a backlog, only as the peer reads."""
        written, backlogged = self._written_mark, self._backlogged
        self._written_mark = self._out.written
        self._backlogged = self._out.backlog > 0
        return backlogged and self._written_mark > written

    def _abort(self) -> None:
        self.state = State.CLOSED
        if not self._out.closed:
            self._out.transport.abort()
