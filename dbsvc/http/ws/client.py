"""A small blocking WebSocket client for command-line tools and the read replica.

`open_websocket(url)` connects, completes the opening handshake and returns a
`ClientWebSocket`; `dbsvc replicate` (replica/consumer.py) and a read replica's follower
thread (replica/follower.py) read the `/replicate` stream through it. wsproto's
`WSConnection(CLIENT)` does the HTTP handshake; the socket is a plain blocking one with
timeouts, no asyncio. Its errors (`WebSocketClientError` and kin) live in `dbsvc.errors`,
so a caller can name them without loading this module.

Imports wsproto, the stdlib socket (and `ssl` for wss://) and the shared close codes; never
the server side (`ws.server`), h11, the realtime layer, storage or the application.

Rules:
C1. `ws://` and `wss://` URLs (TLS through the stdlib `ssl` default context: the system
    CAs, or SSL_CERT_FILE). No extension is offered (server rule 1's reason holds both
    ways: wsproto inflates a compressed message without a size limit).
C2. Connecting and the handshake share one deadline (`timeout`). Any status other than
    101 raises `HandshakeRefused` with the status, headers and body (at most 1 MiB; a
    problem+json body is parsed into `problem`), so a caller tells 410 from 401. A socket
    error or a garbled answer is `WebSocketClientError`.
C3. `receive(timeout)` returns one whole message (fragments reassembled), or None when
    none completed within `timeout`; a partial message waits for the next call. Bytes the
    socket already holds are read even once `timeout` is spent (a poll, never a wait), so
    `receive(0)` answers what has arrived, not only what an earlier read brought. A message
    over `max_message` bytes (80 MiB by default) closes with 1009 and raises `MessageTooBig`.
C4. Pings are answered at once. Nothing at all from the server for `idle_timeout` seconds
    (75: the server pings an idle peer every 30) aborts the socket as dead.
C5. The end of the stream raises `WebSocketClosed(code, reason)`: the server's close
    frame (answered first), a protocol error (1002/1007, answered), or 1006 when TCP ended
    without one. `close()` sends a close frame and waits (bounded) for the server to end
    TCP (RFC 6455 §7.1.1: the server closes first).
C6. Frame boundaries are found here, not by wsproto: every frame header is read as the
    bytes come, and a whole frame that is a message by itself (FIN, no RSV bit, binary,
    not masked, at most `max_message` bytes, outside a fragmented message) is cut from the
    bytes at once, the `/replicate` stream's every frame (wsproto's frame parsing, event
    objects and reassembly were a tenth of a read replica's CPU: bench/README.md). Every
    other frame goes to wsproto whole as its bytes come, from its first byte to its last,
    so wsproto never holds part of a frame when a cut one follows, and its checks (control
    frames, fragments, text, close, masks, RSV bits, sizes) are the ones that decide. The
    handshake feeds wsproto the HTTP answer only; the bytes after it are read here.
C7. `receive_many(limit, max_bytes, timeout)` is `receive(timeout)` then `receive(0)`
    until `limit` messages, or until their lengths reach `max_bytes` (the message that
    reaches it joins), or until none has arrived, in one call: a read replica's group
    (replica/groups.py G1) taken from the messages already cut at once, with no Python
    call a message. The end of the stream after the first message ends the list; the next
    call raises it (C5).
"""

from __future__ import annotations

import collections
import select
import socket
import struct
import time
import urllib.parse
from bisect import bisect_left
from collections.abc import Iterable
from itertools import accumulate, islice, repeat, starmap
from typing import Any

from wsproto import WSConnection
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    TextMessage,
)
from wsproto.events import Request as WsRequest
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from dbsvc.errors import HandshakeRefused, MessageTooBig, WebSocketClientError, WebSocketClosed
from dbsvc.http.ws.common import ABNORMAL, NORMAL_CLOSURE, TOO_BIG

CLIENT_MAX_MESSAGE = 80 * 1024 * 1024
CLIENT_IDLE_TIMEOUT = 75.0
_REFUSAL_BODY_LIMIT = 1 << 20
_RECV_SIZE = 1 << 18
_POLL_READ = 0.05  # the bound of rule C3's one read past the deadline
_HEAD16 = struct.Struct(">HH").unpack_from  # a frame header with a 16-bit length (rule C6)


def _client_target(url: str) -> tuple[str, int, str, str, bool]:
    """(host, port, Host header, request target, tls) of a ws:// or wss:// URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("ws", "wss"):
        raise WebSocketClientError(f"unsupported URL scheme {parts.scheme!r} in {url!r}: expected 'ws' or 'wss'")
    tls = parts.scheme == "wss"
    try:
        host, port = parts.hostname, parts.port or (443 if tls else 80)
    except ValueError as exc:
        raise WebSocketClientError(f"bad port in {url!r}: {exc}") from exc
    if not host:
        raise WebSocketClientError(f"no host in {url!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return host, port, parts.netloc.rpartition("@")[2], target, tls


def open_websocket(
    url: str,
    *,
    headers: Iterable[tuple[str, str]] = (),
    timeout: float = 10.0,
    max_message: int = CLIENT_MAX_MESSAGE,
    idle_timeout: float = CLIENT_IDLE_TIMEOUT,
) -> ClientWebSocket:
    """Connect to `url` and complete the opening handshake within `timeout` seconds (C1, C2)."""
    host, port, authority, target, tls = _client_target(url)
    deadline = time.monotonic() + timeout
    ws = WSConnection(ConnectionType.CLIENT)
    extra = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    status, refused_headers, body = 0, [], bytearray()
    answer: bytearray | None = bytearray()  # the HTTP answer until its end is seen (rule C6)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise WebSocketClientError(f"cannot connect to {host}:{port}: {exc}") from exc
    try:
        if tls:
            import ssl

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        sock.sendall(ws.send(WsRequest(host=authority, target=target, extra_headers=extra)))
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WebSocketClientError(f"no complete handshake answer from {url} within {timeout} s")
            sock.settimeout(remaining)
            data = sock.recv(_RECV_SIZE)
            after = b""
            if data and answer is not None:
                answer += data
                end = answer.find(b"\r\n\r\n")
                if end >= 0:  # wsproto gets the answer; what follows a 101 is frames
                    after = bytes(answer[end + 4 :])
                    answer = None
            ws.receive_data(data[: len(data) - len(after)] if data else None)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    return ClientWebSocket(sock, ws, max_message, idle_timeout, after)
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    refused_headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in event.headers]
                    if not event.has_body:
                        raise HandshakeRefused(status, refused_headers, b"")
                    if after:  # the refusal's body
                        ws.receive_data(after)
                        after = b""
                elif isinstance(event, RejectData):
                    body += event.data[: _REFUSAL_BODY_LIMIT - len(body)]
                    if event.body_finished or len(body) >= _REFUSAL_BODY_LIMIT:
                        raise HandshakeRefused(status, refused_headers, bytes(body))
            if not data:
                if status:
                    raise HandshakeRefused(status, refused_headers, bytes(body))
                raise WebSocketClientError(f"{url}: the server closed the connection during the handshake")
    except (OSError, RemoteProtocolError, WebSocketClientError) as exc:
        sock.close()
        if isinstance(exc, WebSocketClientError):
            raise
        raise WebSocketClientError(f"{url}: handshake failed: {exc}") from exc


class ClientWebSocket:
    """One open client socket (rules C3-C5); a context manager that closes it."""

    def __init__(
        self, sock: socket.socket, ws: WSConnection, max_message: int, idle_timeout: float, after: bytes = b""
    ) -> None:
        self._sock = sock
        self._ws = ws
        self._max_message = max_message
        self._idle_timeout = idle_timeout
        self._last_seen = time.monotonic()
        self._ready: collections.deque[bytes | str] = collections.deque()
        self._parts: list[Any] = []
        self._size = 0
        self._ended: WebSocketClientError | None = None
        self._buffer = bytearray()  # bytes from a frame boundary on, not yet taken (rule C6)
        self._passing = 0  # bytes of the frame in hand that are wsproto's still
        self._need = 0  # bytes `_buffer` must hold before it is parsed again (a frame's)
        if after:
            self._take(after)  # frames that came with the 101

    def __enter__(self) -> ClientWebSocket:
        return self

    @property
    def sock(self) -> socket.socket:
        """The connected socket (an `ssl.SSLSocket` for wss): its address, or what its TLS
        layer decrypted and holds where `select` cannot see it (`pending()`, rule C3)."""
        return self._sock

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def receive(self, timeout: float | None = None) -> bytes | str | None:
        """The next whole message; None if none completed within `timeout` (rule C3)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._ready:
                return self._ready.popleft()
            if self._ended is not None:
                raise self._ended
            now = time.monotonic()
            idle_end = self._last_seen + self._idle_timeout
            if now >= idle_end:  # rule C4
                self._end(WebSocketClosed(ABNORMAL, f"nothing received for {self._idle_timeout:g} s"))
                continue
            if deadline is not None and now >= deadline:
                if not select.select((self._sock,), (), (), 0)[0]:  # rule C3: what the socket holds
                    return None  # already is read, even then; nothing is waited for
                wait = _POLL_READ  # readable: a plain socket's recv returns at once (TLS: a record's rest)
            else:
                wait = idle_end - now if deadline is None else min(idle_end, deadline) - now
            self._read(wait)

    def receive_many(self, limit: int, max_bytes: int, timeout: float | None = None) -> list[bytes | str]:
        """Rule C7: the whole messages that have arrived, the first awaited up to `timeout`
        ([] if none completed), up to `limit` of them or `max_bytes` of their lengths."""
        first = self.receive(timeout)
        if first is None:
            return []
        batch, size, ready = [first], len(first), self._ready
        while len(batch) < limit and size < max_bytes:
            if ready:
                sizes = list(accumulate(map(len, islice(ready, limit - len(batch))), initial=size))
                count = min(bisect_left(sizes, max_bytes), len(sizes) - 1)  # the one reaching it joins
                # No Python call a message: all of them in one C call, or some popped by a C loop
                # (a group of 1,024 from reads of ~1,000 /replicate frames takes either, in turn).
                if count == len(ready):
                    batch += ready
                    ready.clear()
                else:
                    batch += starmap(ready.popleft, repeat((), count))
                size = sizes[count]
            elif self._ended is None and select.select((self._sock,), (), (), 0)[0]:
                self._read(_POLL_READ)  # rule C3: what the socket already holds, never a wait
            else:
                break
        return batch

    def _read(self, wait: float) -> None:
        """One `recv` of up to `wait` seconds; its bytes cut (C6), or the end noted (C5)."""
        self._sock.settimeout(wait)
        try:
            data = self._sock.recv(_RECV_SIZE)
        except TimeoutError:
            return
        except OSError as exc:
            self._end(WebSocketClosed(ABNORMAL, f"connection lost: {exc}"))
            return
        if not data:
            self._end(WebSocketClosed(ABNORMAL, "connection closed without a close frame"))
            return
        self._last_seen = time.monotonic()
        self._take(data)

    def close(self, code: int = NORMAL_CLOSURE, reason: str = "", timeout: float = 2.0) -> None:
        """Send a close frame, wait up to `timeout` for the server to end TCP, close (C5)."""
        if self._sock.fileno() < 0:
            return
        if self._ws.state is ConnectionState.OPEN:
            try:
                self._send(CloseConnection(code=code, reason=reason))
                deadline = time.monotonic() + timeout
                while (remaining := deadline - time.monotonic()) > 0:
                    self._sock.settimeout(remaining)
                    if not self._sock.recv(_RECV_SIZE):
                        break
            except OSError:
                pass
        self._sock.close()

    def _take(self, data: bytes) -> None:
        """Rule C6: cut the whole binary messages out of `data`, and pass every other
        frame to wsproto as its bytes come."""
        if self._passing:
            if len(data) <= self._passing:
                self._passing -= len(data)
                self._pass(data)
                return
            self._pass(data[: self._passing])
            data = data[self._passing :]
            self._passing = 0
        if self._buffer:
            if len(self._buffer) + len(data) < self._need:  # a large frame's bytes: kept, not parsed again
                self._buffer += data
                return
            data = b"".join((self._buffer, data))  # one copy of the bytes read, not two
            self._buffer.clear()
        self._need = 0
        size, at, ready = len(data), 0, self._ready
        cut = ready.append
        while size - at >= 2 and self._ended is None:
            if not self._parts and self._max_message > 0xFFFF:
                # The /replicate stream's frames (126 to 65535 bytes, a 16-bit length, RFC 6455
                # §5.2) cut a step each; any other frame, or a part, takes the step below.
                # One C call reads a header's two words: 0x827E (FIN, binary; a 16-bit
                # length, not masked) and the length.
                last = size - 4
                while at <= last:
                    kind, length = _HEAD16(data, at)
                    end = at + 4 + length
                    if kind != 0x827E or end > size:
                        break
                    cut(data[at + 4 : end])
                    at = end
                if size - at < 2:
                    break
            first, second = data[at], data[at + 1]
            length, head = second & 0x7F, 2
            if length == 126:
                if size - at < 4:
                    break
                length, head = int.from_bytes(data[at + 2 : at + 4], "big"), 4
            elif length == 127:
                if size - at < 10:
                    break
                length, head = int.from_bytes(data[at + 2 : at + 10], "big"), 10
            if first == 0x82 and second < 0x80 and not self._parts and length <= self._max_message:
                end = at + head + length
                if end > size:
                    self._need = end - at  # the rest of it comes with the next bytes
                    break
                ready.append(data[at + head : end])
                at = end
                continue
            whole = head + (4 if second & 0x80 else 0) + length  # anything else: wsproto's
            if size - at < whole:
                self._passing = whole - (size - at)
                self._pass(data[at:])
                return
            self._pass(data[at : at + whole])
            at += whole
        if at < size:
            self._buffer += data[at:]

    def _pass(self, data: bytes) -> None:
        """Bytes of frames that wsproto decides on (rule C6), and the messages it makes."""
        if self._ended is not None:
            return
        try:
            self._ws.receive_data(data)
        except LocalProtocolError:  # bytes after a close
            return
        self._drain()

    def _drain(self) -> None:
        ws = self._ws
        for event in ws.events():
            if isinstance(event, (BytesMessage, TextMessage)):
                data = event.data
                self._size += len(data.encode("utf-8")) if isinstance(data, str) else len(data)
                if self._size > self._max_message:  # rule C3
                    self._parts.clear()
                    self._send(CloseConnection(code=TOO_BIG, reason="message too big"))
                    self._end(MessageTooBig(f"a message over {self._max_message} bytes"))
                    return
                self._parts.append(data)
                if event.message_finished:
                    parts, self._parts, self._size = self._parts, [], 0
                    self._ready.append("".join(parts) if isinstance(data, str) else b"".join(parts))
            elif isinstance(event, Ping):
                self._send(event.response())
            elif isinstance(event, CloseConnection):
                if ws.state is not ConnectionState.CLOSED:  # the peer's close, or a
                    self._send(CloseConnection(code=event.code, reason=""))  # protocol error
                self._end(WebSocketClosed(event.code, event.reason or ""))
                return

    def _send(self, event: Event) -> None:
        try:
            self._sock.settimeout(self._idle_timeout)
            self._sock.sendall(self._ws.send(event))
        except (OSError, LocalProtocolError):
            pass  # the next recv reports the broken socket

    def _end(self, error: WebSocketClientError) -> None:
        if self._ended is None:
            self._ended = error
        self._sock.close()
