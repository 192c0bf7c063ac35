"""The fast path's own promises (dbsvc/http/fastpath.py): responses byte for byte as h11
writes them, the setting that turns it off, and a real connection moving to h11 at a
request boundary without losing a byte. The request side is held equal to h11 by
test_http_fastpath_differential.py."""

from __future__ import annotations

import asyncio
import threading

import h11
import pytest

from dbsvc.config import load_config
from dbsvc.errors import ConfigError
from dbsvc.http.connection import HttpConnection
from dbsvc.http.fastpath import FastWire
from dbsvc.http.hub import Hub
from dbsvc.http.message import RequestIds, response_headers
from dbsvc.http.types import HttpSettings, Request, Response
from dbsvc.http.wire import END, H11Wire
from support.clock import within_one_second
from support.httpkit import Client

WAIT = 30.0


def _answer(wire, request: bytes, response: Response, extra=None, close: bool = False) -> tuple[bytes, bool]:
    """Read one request on `wire`, then render `response` to it as the connection does."""
    wire.receive(request)
    head = wire.next_event()
    while wire.next_event() is not END:  # the body, if any
        pass
    headers = response_headers(response, "rid-1", extra, close)
    body = b"" if head.request.method == "HEAD" or response.status in (204, 304) else response.body
    return wire.respond(response.status, b"Reason", headers, body, close), wire.closing


RESPONSES = {
    "json": (b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n", Response(200, b'{"a":1}'), None, False),
    "created_with_location": (
        b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}",
        Response(201, b"{}", [("Location", "/x/1"), ("ETag", '"3"')]),
        None,
        False,
    ),
    "no_content": (b"DELETE /x/1 HTTP/1.1\r\nHost: t\r\n\r\n", Response(204, b""), None, False),
    "not_modified": (b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n", Response(304, b"", [("ETag", '"3"')]), None, False),
    "head": (b"HEAD /x HTTP/1.1\r\nHost: t\r\n\r\n", Response(200, b'{"a":1}'), None, False),
    "problem_closing": (
        b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n",
        Response(503, b"{}", [("Retry-After", "1")], "application/problem+json"),
        None,
        True,
    ),
    "client_asked_close": (
        b"GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        Response(200, b"{}"),
        None,
        False,
    ),
    "both_close": (
        b"GET /x HTTP/1.1\r\nHost: t\r\nConnection: Keep-Alive, close\r\n\r\n",
        Response(200, b"{}"),
        None,
        True,
    ),
    "cors_extra": (
        b"GET /x HTTP/1.1\r\nHost: t\r\nOrigin: https://a.example\r\n\r\n",
        Response(200, b"[]"),
        [(b"access-control-allow-origin", b"https://a.example"), (b"vary", b"Origin")],
        False,
    ),
    "no_content_type": (b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n", Response(200, b"hi", [], None), None, False),
    "unknown_status": (b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n", Response(599, b"{}"), None, False),
}


@pytest.mark.parametrize("name", sorted(RESPONSES))
def test_fast_path_writes_the_bytes_h11_writes(name):
    request, response, extra, close = RESPONSES[name]
    fast, reference = within_one_second(
        lambda: (
            _answer(FastWire(RequestIds(), None), request, response, extra, close),
            _answer(H11Wire(RequestIds(), None), request, response, extra, close),
        )
    )
    assert fast == reference


@pytest.mark.parametrize("status", [99, 100, 101, 1000])
def test_fast_path_refuses_the_statuses_h11_refuses(status):
    for wire in (FastWire(RequestIds(), None), H11Wire(RequestIds(), None)):
        wire.receive(b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
        wire.next_event()
        wire.next_event()
        with pytest.raises(h11.LocalProtocolError, match="status_code"):
            wire.respond(status, b"", [(b"content-length", b"0")], b"", False)
        assert wire.can_respond  # nothing was sent: an error answer still can be


@pytest.mark.parametrize("name", ["Connection", "content-length", "Transfer-Encoding", "Host", "Keep-Alive"])
def test_application_may_not_set_headers_the_protocol_layer_owns(name):
    # h11 acts on them (Connection: close ends the connection) or rewrites them; the fast
    # path would not, so neither path lets an application set them.
    with pytest.raises(h11.LocalProtocolError, match="set by the protocol layer"):
        response_headers(Response(200, b"{}", [(name, "close")]), "rid", None, False)


def test_a_101_still_carries_connection_upgrade():
    headers = response_headers(
        Response(101, b"", [("Upgrade", "websocket"), ("Connection", "Upgrade")], None), "rid", None, False
    )
    assert (b"Connection", b"Upgrade") in headers


def test_a_status_that_is_not_an_int_is_refused():
    with pytest.raises(h11.LocalProtocolError, match="not an int"):
        response_headers(Response(200.0, b"{}"), "rid", None, False)  # type: ignore[arg-type]


def test_service_http_parser_setting():
    assert load_config({}).http.http_parser == "fast"
    assert load_config({"SERVICE_HTTP_PARSER": "H11"}).http.http_parser == "h11"
    with pytest.raises(ConfigError, match="SERVICE_HTTP_PARSER='picohttp' is not valid: expected one of fast, h11"):
        load_config({"SERVICE_HTTP_PARSER": "picohttp"})


# -- on a real socket -------------------------------------------------------------------------


def _echo(request: Request) -> Response:
    return Response(
        200,
        b"%s %s %d:%s" % (request.method.encode(), request.target.encode(), len(request.body), bytes(request.body)),
        [],
        "text/plain",
    )


class Served:
    """`HttpConnection`s on a real listening socket, with the loop in a thread, so a test can
    see which wire each connection ended on."""

    def __init__(self, parser: str) -> None:
        self.connections: list[HttpConnection] = []
        self.port = 0
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._hub = Hub(_echo, HttpSettings(port=0, http_parser=parser), self._loop)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(WAIT)

    def _connection(self) -> HttpConnection:
        connection = HttpConnection(self._hub)
        self.connections.append(connection)
        return connection

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(self._loop.create_server(self._connection, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(WAIT)

    def wires(self) -> list[str]:
        return [type(c.wire).__name__ for c in self.connections]


@pytest.mark.parametrize("parser", ["fast", "h11"])
def test_a_connection_moves_to_h11_at_the_first_request_it_hands_over(parser):
    served = Served(parser)
    try:
        client = Client(served.port, timeout=WAIT)
        # Two fast-path requests, a chunked one (h11's), then two more: one write, so the
        # hand-over happens with pipelined bytes waiting behind it.
        client.send(
            b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\none"
            b"GET /b?x=1 HTTP/1.1\r\nHost: t\r\n\r\n"
            b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
            b"POST /d HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nfour"
            b"GET /e HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        bodies = [client.read_response().body for _ in range(5)]
        assert bodies == [b"POST /a 3:one", b"GET /b?x=1 0:", b"POST /c 3:abc", b"POST /d 4:four", b"GET /e 0:"]
        assert client.is_closed()
        client.close()
        assert served.wires() == ["H11Wire"]  # h11 from the chunked request on
    finally:
        served.stop()


@pytest.mark.parametrize("parser, wire", [("fast", "FastWire"), ("h11", "H11Wire")])
def test_the_setting_picks_the_wire(parser, wire):
    served = Served(parser)
    try:
        client = Client(served.port, timeout=WAIT)
        client.send(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n")
        assert client.read_response().body == b"GET /a 0:"
        client.close()
        assert served.wires() == [wire]
    finally:
        served.stop()
