"""The blocking WebSocket client (http/ws/client.py) over TLS (`wss://`), rule C3: once its
time is spent, `receive` still reads what the socket holds, and never waits for more.

Over TLS the bytes a `select` sees are records, not messages: a record that has arrived in
part makes the socket readable, yet its plaintext cannot come until the rest does. The one
read past the deadline is bounded (`_POLL_READ`): it neither fails on the half record (a
non-blocking read raises SSLWantReadError, which would read as a lost connection) nor waits
for the rest. Records that have arrived whole are read one by one, a message over several
of them included (OpenSSL without read-ahead takes one record from the kernel per read, and
a record's plaintext, at most 16 KiB, always fits the client's read, so nothing decrypted is
ever left in the SSL object where `select` cannot see it: `pending()` stays 0).
`receive_many` (rule C7) polls the same way after its first message, a half record held
to be no message.

The server is real TLS on a loopback port: a plain socket whose TLS is an `ssl.SSLObject`
over memory BIOs, so a test holds the encrypted bytes and chooses where they are cut. Its
certificate is self-signed (support/tlskit.py), trusted through SSL_CERT_FILE (rule C1)."""

from __future__ import annotations

import fcntl
import socket
import ssl
import struct
import termios
import threading
import time

import pytest

from dbsvc.errors import WebSocketClosed
from dbsvc.http.ws.client import open_websocket
from support.tlskit import self_signed
from support.wskit import switching_protocols


def frame(payload: bytes) -> bytes:
    """One unmasked binary frame (payloads under 64 KiB)."""
    size = len(payload)
    head = bytes([0x82, size]) if size < 126 else bytes([0x82, 126]) + size.to_bytes(2, "big")
    return head + payload


class TlsServer:
    """Accepts one client on 127.0.0.1 and completes the TLS and WebSocket handshakes in a
    thread, and ends TCP when the client sends its close; meanwhile the test encrypts what it wants sent (`records`) and sends the encrypted
    bytes in the pieces it chooses (`send`)."""

    def __init__(self, cert: str, key: str) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.ready = threading.Event()
        self.conn: socket.socket | None = None
        self.thread = threading.Thread(target=self._handshake, daemon=True)
        self.thread.start()

    def _handshake(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(10)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = self.context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                conn.sendall(self.outgoing.read())
                self.incoming.write(conn.recv(65536))
        conn.sendall(self.outgoing.read())
        request = b""
        while b"\r\n\r\n" not in request:
            try:
                request += self.tls.read(65536)
            except ssl.SSLWantReadError:
                self.incoming.write(conn.recv(65536))
        self.send(self.records(switching_protocols(request)), conn)
        self.conn = conn
        self.ready.set()
        try:  # the client's first bytes from now on are its close: TCP ends (RFC 6455 7.1.1)
            conn.recv(65536)
        except OSError:
            pass
        conn.close()

    def records(self, plaintext: bytes) -> bytes:
        """`plaintext` encrypted: one TLS record per 16 KiB of it."""
        self.tls.write(plaintext)
        return self.outgoing.read()

    def send(self, raw: bytes, conn: socket.socket | None = None) -> None:
        """Send encrypted bytes and wait (bounded) until the client's kernel holds them."""
        conn = conn or self.conn
        assert conn is not None
        conn.sendall(raw)
        deadline = time.monotonic() + 5
        while fcntl.ioctl(conn.fileno(), termios.TIOCOUTQ, b"\0\0\0\0") != b"\0\0\0\0":  # not all acked
            assert time.monotonic() < deadline, "loopback bytes not delivered within 5 s"
            time.sleep(0.001)

    def end(self) -> None:
        """End TCP now: no close frame, no TLS close_notify."""
        assert self.conn is not None
        self.conn.shutdown(socket.SHUT_RDWR)  # wakes the thread's recv
        self.thread.join(5)

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.shutdown(socket.SHUT_RDWR)  # wakes the thread's recv
            except OSError:  # ended already
                pass
        self.listener.close()
        self.thread.join(5)


@pytest.fixture
def tls_server(tmp_path, monkeypatch):
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    server = TlsServer(str(cert), str(key))
    yield server
    server.close()


def test_a_tls_record_half_arrived_is_not_waited_for_past_the_deadline_nor_taken_for_a_lost_connection(tls_server):
    with open_websocket(f"wss://127.0.0.1:{tls_server.port}/replicate", timeout=10) as ws:
        assert tls_server.ready.wait(10)
        record = tls_server.records(frame(b"hello"))
        rest_sent = threading.Lock()

        def rest() -> None:  # sent once: by the test, or by the timer if receive(0) waits for it
            if rest_sent.acquire(blocking=False):
                tls_server.send(record[9:])

        timer = threading.Timer(3, rest)
        tls_server.send(record[:9])  # the record's header and a few bytes: readable, not decryptable
        timer.start()
        try:
            started = time.monotonic()
            assert ws.receive(timeout=0) is None  # no message has come whole, and none is waited for
            assert time.monotonic() - started < 0.8  # one bounded read (50 ms), not the rest's 3 s
            rest()
            assert ws.receive(timeout=5) == b"hello"  # the connection lives: the record completed
        finally:
            timer.cancel()


def test_receive_many_hands_over_what_came_whole_and_never_waits_for_a_record_half_arrived(tls_server):
    # Rule C7 over TLS, the twin of the case above: after its first message, `receive_many`
    # polls what the socket holds (C3), and a record there in part is not a message. Both
    # records' bytes are in the client's kernel before the call: "one" whole, then the
    # header and a few bytes of "two", whose rest only the timer sends (a bound, never
    # reached unless the call waits). A call that waits for that rest hands over both.
    with open_websocket(f"wss://127.0.0.1:{tls_server.port}/replicate", timeout=10) as ws:
        assert tls_server.ready.wait(10)
        whole, record = tls_server.records(frame(b"one")), tls_server.records(frame(b"two"))
        rest_sent = threading.Lock()

        def rest() -> None:  # sent once: by the test, or by the timer if receive_many waits for it
            if rest_sent.acquire(blocking=False):
                tls_server.send(record[9:])

        timer = threading.Timer(3, rest)
        tls_server.send(whole + record[:9])
        timer.start()
        try:
            assert ws.receive_many(16, 1 << 20, timeout=5) == [b"one"]  # "two" had not come whole
            rest()
            assert ws.receive_many(16, 1 << 20, timeout=5) == [b"two"]  # the connection lives
        finally:
            timer.cancel()


def test_messages_in_several_tls_records_that_have_arrived_are_all_read_with_no_time_left(tls_server):
    with open_websocket(f"wss://127.0.0.1:{tls_server.port}/replicate", timeout=10) as ws:
        assert tls_server.ready.wait(10)
        large = bytes(range(256)) * 160  # 40 KiB: three records
        raw = tls_server.records(frame(large)) + tls_server.records(frame(b"b")) + tls_server.records(frame(b"c"))
        tls_server.send(raw)
        got = [ws.receive(timeout=0) for _ in range(4)]
        assert got == [large, b"b", b"c", None]
        assert ws.sock.pending() == 0  # nothing decrypted is left where select cannot see it


def test_a_tls_connection_ended_without_a_close_frame_is_reported_as_1006(tls_server):
    with open_websocket(f"wss://127.0.0.1:{tls_server.port}/replicate", timeout=10) as ws:
        assert tls_server.ready.wait(10)
        tls_server.send(tls_server.records(frame(b"last")))
        assert ws.receive(timeout=5) == b"last"
        tls_server.end()
        with pytest.raises(WebSocketClosed) as info:
            ws.receive(timeout=5)
        assert (info.value.code, info.value.reason) == (1006, "connection closed without a close frame")


def test_receive_waits_its_timeout_and_with_none_waits_until_the_idle_limit(tls_server):
    # Rule C4: nothing from the server for `idle_timeout` seconds ends the socket as dead;
    # a receive with a timeout returns None at its own deadline well before that.
    opened = time.monotonic()
    with open_websocket(f"wss://127.0.0.1:{tls_server.port}/replicate", timeout=10, idle_timeout=1.5) as ws:
        assert tls_server.ready.wait(10)
        started = time.monotonic()
        assert ws.receive(timeout=0.2) is None
        assert time.monotonic() - started < 1.2  # its own deadline, not the idle limit
        with pytest.raises(WebSocketClosed) as info:
            ws.receive()  # no timeout: until a message, or the idle limit
        assert (info.value.code, info.value.reason) == (1006, "nothing received for 1.5 s")
        assert 1.4 <= time.monotonic() - opened < 8  # the idle limit, not the server's end (10 s)


def test_a_connection_reset_is_reported_as_lost_with_1006():
    # Over plain TCP: over TLS, Python's ssl reads a reset as an EOF without close_notify
    # (suppress_ragged_eofs), answered as the close above.
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        conn.settimeout(10)
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(4096)
        conn.sendall(switching_protocols(request))
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # a reset

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with open_websocket(f"ws://127.0.0.1:{listener.getsockname()[1]}/", timeout=10) as ws:
            thread.join(5)
            with pytest.raises(WebSocketClosed) as info:
                ws.receive(timeout=5)
            assert info.value.code == 1006
            assert info.value.reason.startswith("connection lost: ") and "reset" in info.value.reason
            with pytest.raises(WebSocketClosed):  # and it stays ended
                ws.receive(timeout=0)
    finally:
        listener.close()
