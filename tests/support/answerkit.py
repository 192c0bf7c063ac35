"""An in-process server whose answers are read byte for byte, for
tests/http/test_http_conn_responses.py: the demo app plus the answers those tests need (any
status, a WebSocket session that records its close codes, an application bug that no answer
can carry), the server with its log and its side of a connection read on its own loop, and
readers of a raw answer (its head with the Date masked, everything up to the close, rule 8's
last words).
"""

from __future__ import annotations

import json
import os
import re

from dbsvc.http.connection import Phase
from dbsvc.http.types import HttpSettings, Request, Response, Upgrade
from support.demo_app import app as demo_app
from support.httpkit import Client
from support.inprocess import WAIT, InProcessServer, lab_settings

MAX_BODY = 1024
ORIGIN = "https://app.example"
PARSER = os.environ.get("SERVICE_HTTP_PARSER", "fast")  # tests/http/conftest.py
HANDSHAKE = (
    "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
)
ACCEPT = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 §1.3's example key
SECRET = "client data that must not reach the log"  # a bug's message
DATE = re.compile(rb"\r\ndate: [A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT\r\n")


class RecordingSession:
    """A WebSocket session that echoes text and remembers the close codes it was told."""

    def __init__(self) -> None:
        self.channel = None
        self.closes: list[int] = []

    def on_open(self, channel) -> None:
        self.channel = channel

    def on_message(self, data) -> None:
        self.channel.send_text(data)

    def on_writable(self) -> None:
        pass

    def on_close(self, code: int) -> None:
        self.closes.append(code)


class App:
    """The demo app, plus answers these tests need."""

    def __init__(self) -> None:
        self.sessions: list[RecordingSession] = []

    def __call__(self, request: Request):
        query = dict(request.query)
        if request.path == "/status":  # any status, any body
            return Response(int(query["code"]), query.get("body", "").encode())
        if request.path == "/socket":
            session = RecordingSession()
            self.sessions.append(session)
            return Upgrade(session, subprotocol=query.get("protocol"))
        if request.path == "/renamed":
            # An application bug: a request id no header can carry, so neither the answer
            # nor the 500 replacing it can be rendered.
            request.request_id = "r\u00e9q"
            return Response(200, b"{}")
        return demo_app(request)


class Served(InProcessServer):
    def client(self) -> Client:
        return Client(self.port, timeout=WAIT)

    def mark(self) -> int:
        return len(self.log.lines)

    def records(self, since: int) -> list[str]:
        """The log records written since `mark()` returned `since`, each with its traceback."""
        return self.log.lines[since:]

    def spans(self, since: int, having: str) -> list[str]:
        """The span lines written since `since` that contain `having`, from `method=` on (a
        WebSocket another test closed may log its own meanwhile)."""
        return [
            line.partition(" dbsvc.http.request: request ")[2]
            for line in self.records(since)
            if " dbsvc.http.request: request " in line and having in line
        ]

    def connection_state(self, client: Client) -> list[tuple[Phase, float]]:
        """(phase, seconds to its deadline) of the server's side of `client`, if it still holds it."""
        me = client.sock.getsockname()[:2]

        def look() -> list[tuple[Phase, float]]:
            now = self.hub.loop.time()
            return [(c.phase, c.deadline - now) for c in self.hub.connections if c.peer == me]

        return self.call(look)  # type: ignore[return-value]


def settings(parser: str, **overrides) -> HttpSettings:
    return lab_settings(MAX_BODY, cors_origins=(ORIGIN,), http_parser=parser, **overrides)


def read_head(client: Client) -> bytes:
    """The raw head of the next response, its Date value replaced by `<date>`."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = client.reader.readline()
        if not line:
            raise ConnectionError(f"the server closed the connection after {head!r}")
        head += line
    return DATE.sub(b"\r\ndate: <date>\r\n", head)


def read_to_end(client: Client) -> bytes:
    """Everything the server sends until it closes (FIN or reset)."""
    data = b""
    try:
        while chunk := client.reader.read1(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def problem(status: int, title: str, code: str, detail: str, request_id: str, **more) -> dict:
    return {
        "type": "about:blank",
        "title": title,
        "status": status,
        "code": code,
        "detail": detail,
        "request_id": request_id,
        **more,
    }


def last_words(request_id: str) -> bytes:
    """Rule 8's fixed 500, as a crashed connection writes it."""
    body = json.dumps(problem(500, "Internal Server Error", "internal", "internal server error", request_id)).encode()
    return (
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/problem+json\r\n"
        b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )


def error_records(records: list[str], start: str) -> list[str]:
    return [r for r in records if f" ERROR dbsvc.http: {start}" in r.partition("\n")[0]]
