"""The generated Python client's `Dbsvc-After` (clients/py_rest.py `Transport`, the text every
generated client carries; docs/guide/clients.md) against a scripted server on a loopback
port: which requests carry it, and which answers move it. Hand mutations of session 8
(docs/mutation.md) found that the end-to-end test over a real server could not tell a HEAD
without it, the latest offset from the highest, or a read's offset counted as a write's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dbsvc.clients.py_rest import ApiError, Transport


class Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next (status, Dbsvc-Offset or None) of the script and
    records (method, the Dbsvc-After it carried)."""

    protocol_version = "HTTP/1.1"
    script: list[tuple[int, str | None]] = []
    seen: list[tuple[str, str | None]] = []

    def answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.seen.append((self.command, self.headers.get("Dbsvc-After")))
        status, offset = self.script.pop(0)
        body = b"{}" if status < 400 else b'{"status":409,"code":"conflict","detail":"taken"}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if status < 400 else "application/problem+json")
        if offset is not None:
            self.send_header("Dbsvc-Offset", offset)
        bodiless = self.command == "HEAD" or status == 204
        self.send_header("Content-Length", str(0 if bodiless else len(body)))
        self.end_headers()
        if not bodiless:
            self.wfile.write(body)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = answer

    def log_message(self, format: str, *args: object) -> None:
        return None


@contextmanager
def scripted(script: list[tuple[int, str | None]]) -> Iterator[tuple[Transport, list]]:
    handler = type("Handler", (Scripted,), {"script": list(script), "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    transport = Transport(f"http://127.0.0.1:{server.server_address[1]}", timeout=10)
    try:
        yield transport, handler.seen
    finally:
        transport.close()
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_reads_carry_the_highest_offset_a_write_was_answered_with_and_nothing_else_moves_it():
    script = [
        (200, "3"),  # GET: a read's offset is the server's head, not this client's write
        (201, "9"),  # POST
        (200, "40"),  # HEAD
        (200, "7"),  # PUT answered with a lower offset (another thread's write landed first)
        (200, "5"),  # GET
        (409, "12"),  # PATCH refused
        (204, None),  # DELETE with no offset
        (200, "11"),  # PATCH
        (200, None),  # GET
    ]
    with scripted(script) as (transport, seen):
        transport.request("GET", "/api/user")
        transport.request("POST", "/api/user", body={"name": "a"})
        transport.request("HEAD", "/api/user/1")
        transport.request("PUT", "/api/user/1", body={"name": "b"})
        transport.request("GET", "/api/user/1")
        with pytest.raises(ApiError):
            transport.request("PATCH", "/api/user/1", body={"name": "c"})
        transport.request("DELETE", "/api/user/2")
        transport.request("PATCH", "/api/user/1", body={"name": "d"})
        transport.request("GET", "/api/user")
    assert seen == [
        ("GET", None),  # nothing written yet: no header
        ("POST", None),  # a write never carries it
        ("HEAD", "9"),
        ("PUT", None),
        ("GET", "9"),  # the highest, not the latest
        ("PATCH", None),
        ("DELETE", None),
        ("PATCH", None),
        ("GET", "11"),  # the highest: 11 over 9 and 7; never the read's 3 or 40, nor the refusal's 12
    ]
