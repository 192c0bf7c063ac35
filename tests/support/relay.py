"""A TCP relay on a loopback port that damages a primary's `/replicate/snapshot` in transit,
for the end-to-end tests of a replica's bootstrap (tests/replica/test_replica_damaged_bootstrap.py).

    relay = Relay(primary.port, "crc")      # dbsvc serve ... --follow relay.base
    ...                                      # every snapshot connection arrives damaged
    relay.heal()                             # from now on every byte passes as it came

Every connection is relayed byte for byte both ways, except the server's side of a
connection whose request line is `GET /replicate/snapshot` while the relay damages: its
WebSocket frames (RFC 6455 §5.2; the server's are never masked, and no extension is
negotiated, dbsvc/http/ws/server.py rule 1) are read whole and sent on re-encoded, the
damage applied to their payloads:

    "crc"       one byte of the first binary message flipped: the end message's crc32 no
                longer holds (primary.py rule 4)
    "end"       the end message (the second text message) made text that is not JSON
    "rows"      one byte of the snapshot's first line flipped and the end message's size and
                crc32 made good again, so only the line's own CRC shows it (CorruptLog)

Threads: one accepting, two per connection; `close()` shuts every socket, and each
blocking call carries a timeout, so nothing outlives the test by more than TIMEOUT.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import zlib

TIMEOUT = 30.0
MODES = ("crc", "end", "rows")
FLIPPED = 10  # the byte flipped: inside the snapshot's first line ("crc32hex {...")


class Relay:
    """127.0.0.1:`self.port` relayed to 127.0.0.1:`target`, damaging in `mode` until healed."""

    def __init__(self, target: int, mode: str) -> None:
        assert mode in MODES, mode
        self.target, self.mode = target, mode
        self.damaging = threading.Event()
        self.damaging.set()
        self.damaged = 0  # snapshot connections damaged so far
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def heal(self) -> None:
        """Pass every later connection as it comes."""
        self.damaging.clear()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target), timeout=TIMEOUT)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            client.settimeout(TIMEOUT)
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        head = _read_head(client)
        if head is None:
            return _close(client, server)
        damage = head.startswith(b"GET /replicate/snapshot") and self.damaging.is_set()
        server.sendall(head)
        threading.Thread(target=_pump, args=(client, server), daemon=True).start()
        if not damage:
            return _pump(server, client)
        self.damaged += 1
        try:
            response = _read_head(server)
            if response is None:
                return _close(client, server)
            client.sendall(response)
            _Rewriter(self.mode, server, client).run()
        except OSError:
            pass
        _close(client, server)


def _read_head(sock: socket.socket) -> bytes | None:
    """An HTTP head whole (a request, or the 101 answer), up to its blank line; None if the
    peer closed first. Read a byte at a time so nothing after it is taken."""
    data = b""
    while not data.endswith(b"\r\n\r\n"):
        try:
            byte = sock.recv(1)
        except OSError:
            return None
        if not byte:
            return None
        data += byte
    return data


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(1 << 16):
            sink.sendall(chunk)
    except OSError:
        pass
    _close(source, sink)


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _frame(first: int, payload: bytes) -> bytes:
    """A server's frame (RFC 6455 §5.2): its first byte as it was, no mask."""
    n = len(payload)
    if n < 126:
        return bytes([first, n]) + payload
    if n < 1 << 16:
        return bytes([first, 126]) + struct.pack(">H", n) + payload
    return bytes([first, 127]) + struct.pack(">Q", n) + payload


class _Rewriter:
    """The server's frames of one snapshot connection, damaged as `mode` says."""

    def __init__(self, mode: str, server: socket.socket, client: socket.socket) -> None:
        self.mode, self.server, self.client = mode, server, client
        self.texts = 0
        self.flipped = False
        self.sent: list[bytes] = []  # the binary payloads as sent on

    def run(self) -> None:
        while (got := _exactly(self.server, 2)) is not None:
            first, second = got
            n = second & 0x7F
            if n == 126:
                (n,) = struct.unpack(">H", _exactly(self.server, 2) or b"\0\0")
            elif n == 127:
                (n,) = struct.unpack(">Q", _exactly(self.server, 8) or b"\0" * 8)
            assert not second & 0x80, "a server's frame is never masked"
            payload = _exactly(self.server, n)
            if payload is None:
                return
            self.client.sendall(_frame(first, self._damage(first & 0x0F, payload)))

    def _damage(self, opcode: int, payload: bytes) -> bytes:
        if opcode in (0x0, 0x2):  # a binary message (or its continuation)
            if self.mode in ("crc", "rows") and not self.flipped and len(payload) > FLIPPED:
                self.flipped = True
                payload = payload[:FLIPPED] + bytes([payload[FLIPPED] ^ 1]) + payload[FLIPPED + 1 :]
            self.sent.append(payload)
            return payload
        if opcode != 0x1:
            return payload  # close, ping, pong
        self.texts += 1
        if self.texts == 1:
            return payload  # the header
        if self.mode == "end":
            return b"{end" + payload
        if self.mode == "rows":
            data = b"".join(self.sent)
            return json.dumps({"type": "end", "bytes": len(data), "crc32": zlib.crc32(data)}).encode()
        return payload
