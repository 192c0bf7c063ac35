"""Bytes in, responses out: the real protocol layer on one end of a socketpair, in process.

`Wire(app)` keeps one event loop and one `Hub` for the whole run; `exchange(data)` opens
a fresh connection (`HttpConnection` on an accepted AF_UNIX socket, the same transport
asyncio gives a TCP connection), writes `data`, half-closes, and reads until the server
closes. Nothing of the protocol layer is replaced; the sweeper is not running, so the
connection ends by the client's EOF, never by a deadline.

`check_exchange` holds the answer to the layer's promises:
1. nothing escaped the connection: no exception reached the event loop's handler;
2. the server closed the connection after the client's EOF;
3. the output is a sequence of whole responses (status line, headers, a body of exactly
   Content-Length bytes, none for HEAD, 204 and 304), 100s in between, and nothing after a
   `Connection: close` response; a 101 ends the HTTP part (the rest is WebSocket frames);
4. never two responses for one request: the i-th final response answers the i-th request
   head (as an independent h11 parse of the input finds them); only the last response may
   be unpaired (the error for bytes that never made a request head);
5. no connection is left tracked by the hub afterwards.
"""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import dataclass, field
from typing import Any

import h11

from dbsvc.http.connection import MAX_HEAD, HttpConnection
from dbsvc.http.hub import Hub
from dbsvc.http.types import App, HttpSettings

EXCHANGE_TIMEOUT = 20.0
_STATUS_LINE = re.compile(rb"HTTP/1\.1 ([1-5][0-9][0-9]) [ -~]*")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Exchange:
    sent: bytes
    received: bytes
    closed: bool
    loop_errors: list[dict[str, Any]] = field(default_factory=list)


class Wire:
    def __init__(self, app: App, settings: HttpSettings) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(self._on_loop_error)
        self.hub = Hub(app, settings, self.loop)
        self._errors: list[dict[str, Any]] = []

    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self._errors.append(context)

    def exchange(self, data: bytes) -> Exchange:
        self._errors = []
        received, closed = self.loop.run_until_complete(self._exchange(data))
        return Exchange(data, received, closed, self._errors)

    async def _exchange(self, data: bytes) -> tuple[bytes, bool]:
        loop = self.loop
        server, client = socket.socketpair()
        client.setblocking(False)
        await loop.connect_accepted_socket(lambda: HttpConnection(self.hub), server)
        chunks: list[bytes] = []
        closed = False
        deadline = loop.time() + EXCHANGE_TIMEOUT
        try:
            try:
                await asyncio.wait_for(loop.sock_sendall(client, data), EXCHANGE_TIMEOUT)
                client.shutdown(socket.SHUT_WR)
            except (ConnectionError, BrokenPipeError):
                pass  # the server closed before reading it all
            while loop.time() < deadline:
                try:
                    chunk = await asyncio.wait_for(loop.sock_recv(client, 1 << 16), deadline - loop.time())
                except ConnectionError:
                    closed = True  # a reset is a close too
                    break
                except asyncio.TimeoutError:
                    break
                if not chunk:
                    closed = True
                    break
                chunks.append(chunk)
        finally:
            client.close()
            for _ in range(3):  # connection_lost and turn-end callbacks
                await asyncio.sleep(0)
        return b"".join(chunks), closed


def request_methods(data: bytes) -> list[str]:
    """The methods of the request heads in `data`, in order, as a plain h11 server reads
    them (each answered with an empty 200 so h11 goes on to the next)."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    conn.receive_data(data)
    conn.receive_data(b"")
    methods: list[str] = []
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError:
            return methods
        if isinstance(event, h11.Request):
            methods.append(event.method.decode("ascii"))
        elif isinstance(event, h11.EndOfMessage):
            try:
                conn.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
                conn.send(h11.EndOfMessage())
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return methods
        elif not isinstance(event, h11.Data):
            return methods  # NEED_DATA, PAUSED, ConnectionClosed


def split_responses(data: bytes, methods: list[str]) -> tuple[list[Answer], bytes]:
    """The final responses in `data` (100s skipped) and the bytes after a 101."""
    answers: list[Answer] = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\r\n\r\n", pos)
        assert end >= 0, f"truncated response head: {data[pos : pos + 200]!r}"
        lines = data[pos:end].split(b"\r\n")
        match = _STATUS_LINE.fullmatch(lines[0])
        assert match, f"bad status line {lines[0]!r}"
        status = int(match.group(1))
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            assert colon and name and name.strip() == name, f"bad header line {line!r}"
            key = name.decode("ascii").lower()
            assert key not in headers or key == "set-cookie", f"header {key!r} twice"
            headers[key] = value.strip().decode("latin-1")
        pos = end + 4
        if status == 101:
            answers.append(Answer(status, headers, b""))
            return answers, data[pos:]
        if status < 200:
            continue
        index = len(answers)
        method = methods[index] if index < len(methods) else None
        if status == 204:  # RFC 9110 §8.6: no Content-Length
            assert "content-length" not in headers, "Content-Length in a 204 response"
            body = b""
        elif method == "HEAD" or status == 304:
            assert "content-length" in headers, f"no Content-Length in {status} response"
            body = b""
        else:
            assert "content-length" in headers, f"no Content-Length in {status} response"
            length = int(headers["content-length"])
            body = data[pos : pos + length]
            assert len(body) == length, f"body of {len(body)} bytes, Content-Length {length}"
            pos += length
        answers.append(Answer(status, headers, body))
        if headers.get("connection", "").lower() == "close":
            assert pos == len(data), f"bytes after a Connection: close response: {data[pos : pos + 200]!r}"
    return answers, b""


def check_exchange(wire: Wire, exchange: Exchange) -> list[Answer]:
    """The promises of the module docstring; the responses for a harness's own checks."""
    assert not exchange.loop_errors, [(c.get("message"), repr(c.get("exception"))) for c in exchange.loop_errors]
    assert exchange.closed, f"connection still open after the client's EOF; got {exchange.received[:300]!r}"
    methods = request_methods(exchange.sent)
    answers, _frames = split_responses(exchange.received, methods)
    assert len(answers) <= len(methods) + 1, f"{len(answers)} responses to {len(methods)} requests"
    assert not wire.hub.connections, "a connection is still tracked after it closed"
    return answers
