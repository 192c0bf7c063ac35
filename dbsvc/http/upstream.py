"""The client side of HTTP/1.1 for one upstream server: a reader worker forwards writes to its writer.

`serve SCHEMA --workers N` (docs/workers.md) runs one writer and N-1 readers on one port; a
write that reaches a reader is sent on to the writer's private loopback listener by an
`Upstream`, and the writer's answer comes back as a `Response` the reader's own connection
writes, so the client gets the writer's status, headers and body:

    upstream = Upstream("127.0.0.1", 41213, headers=[("Dbsvc-Worker-Key", key)])
    response = await upstream.send(request)     # Request in, Response out
    upstream.close()

Rules:
1. Connections are kept alive and reused, at most `max_idle` idle at once, one request at a
   time each (no pipelining: the answers could not be told apart once one is lost).
2. What is forwarded: the method, the raw target, the body, and the request's headers but
   the hop-by-hop ones (RFC 9110 §7.6.1: Connection and the fields it names, Keep-Alive,
   TE, Transfer-Encoding, Upgrade, Proxy-*) and Content-Length, which is written anew for
   the body as read, and any field `headers` names; the request's id goes as
   `X-Request-Id`, so the upstream logs and answers under the same id; then `headers` (the
   key the writer's listener checks: a client cannot send its own). A request without
   Host (HTTP/1.0) gets the upstream's, as HTTP/1.1 requires one.
3. What comes back: the status, the body, and the headers but those this layer writes on
   every response itself (Content-Length, Date, Server, X-Request-Id, Connection,
   Keep-Alive, Transfer-Encoding); Content-Type becomes `Response.content_type`. Header
   names keep the upstream's spelling (h11's `raw_items`).
4. Failures raise `UpstreamError`: `sent` False when the request cannot have reached the
   upstream (no connection could be made: nothing listens, the writer is down), True when
   it may have (the connection broke, or `timeout` passed, before a whole answer came).
   A connection that fails is closed, and so are the idle ones: they lead to the same
   server, which has most likely gone away. An idle connection the upstream closed (its
   EOF already read by the loop) is never reused.

Imports h11 (this package is its only importer) and dbsvc.errors; nothing of storage or of
the workers that use it.
"""

from __future__ import annotations

import asyncio

import h11

from dbsvc.errors import UpstreamError
from dbsvc.http.types import Request, Response

# Rule 2: request fields never forwarded (RFC 9110 §7.6.1), and Content-Length (written anew).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "content-length",
        "x-request-id",
        "expect",
    }
)
# Rule 3: response fields this layer writes itself (message.response_headers).
OWNED_RESPONSE = frozenset(
    {b"content-length", b"date", b"server", b"x-request-id", b"connection", b"keep-alive", b"transfer-encoding"}
)
READ_CHUNK = 65536


class _Connection:
    """One kept-alive connection to the upstream and its h11 state."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT)

    @property
    def usable(self) -> bool:
        """Idle and still open: the upstream's EOF, if it closed, has not been seen."""
        return not self.reader.at_eof() and not self.writer.is_closing() and self.h11.our_state is h11.IDLE

    def close(self) -> None:
        self.writer.close()

    async def exchange(self, head: h11.Request, body: bytes) -> Response:
        connection = self.h11
        self.writer.write(
            connection.send(head) + connection.send(h11.Data(data=body)) + connection.send(h11.EndOfMessage())
        )
        await self.writer.drain()
        response: h11.Response | None = None
        parts: list[bytes] = []
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await self.reader.read(READ_CHUNK)
                if not data and response is None:  # h11's own words would name its states
                    raise ConnectionError("the upstream closed the connection before it answered")
                connection.receive_data(data)
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
        assert response is not None  # h11 gives the Response before any Data or EndOfMessage
        if connection.our_state is h11.DONE and connection.their_state is h11.DONE:
            connection.start_next_cycle()
        return answer(response, b"".join(parts))


def answer(event: h11.Response, body: bytes) -> Response:
    """Rule 3: the upstream's response as this layer's `Response`."""
    content_type: str | None = None
    headers: list[tuple[str, str]] = []
    for raw_name, lower, value in _raw_headers(event):
        if lower == b"content-type":
            content_type = value.decode("latin-1")
        elif lower not in OWNED_RESPONSE:
            headers.append((raw_name.decode("latin-1"), value.decode("latin-1")))
    return Response(event.status_code, body, headers, content_type)


def _raw_headers(event: h11.Response) -> list[tuple[bytes, bytes, bytes]]:
    """(the name as sent, lower case, value) for each response header."""
    return [(name, name.lower(), value) for name, value in event.headers.raw_items()]


def forwarded_head(request: Request, headers: list[tuple[str, str]], authority: str = "localhost") -> h11.Request:
    """Rule 2: the request line and headers sent upstream for `request`; `authority` is the
    Host of a request that had none (HTTP/1.0)."""
    named = {
        part.strip().lower() for name, value in request.headers if name == "connection" for part in value.split(",")
    }
    named.update(name.lower() for name, _value in headers)  # ours replace a client's
    fields: list[tuple[str, str]] = [
        (name, value)
        for name, value in request.headers
        if name not in HOP_BY_HOP and name not in named and not name.startswith("proxy-")
    ]
    if request.header("host") is None:  # RFC 9112 §3.2: an HTTP/1.1 request has one
        fields.insert(0, ("host", authority))
    fields.append(("content-length", str(len(request.body))))
    if request.request_id:
        fields.append(("x-request-id", request.request_id))
    fields.extend(headers)
    return h11.Request(method=request.method, target=request.target.encode("latin-1"), headers=fields)


class Upstream:
    """Requests to one server at `host`:`port`, over kept-alive connections (rule 1)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        headers: list[tuple[str, str]] | None = None,
        max_idle: int = 32,
        timeout: float = 60.0,
    ) -> None:
        self.host = host
        self.port = port
        self.headers = list(headers or [])
        self.max_idle = max_idle
        self.timeout = timeout
        self._idle: list[_Connection] = []

    async def send(self, request: Request) -> Response:
        """The upstream's answer to `request` (rules 2 and 3); `UpstreamError` (rule 4)."""
        head = forwarded_head(request, self.headers, f"{self.host}:{self.port}")
        connection = self._take_idle()
        if connection is None:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port, limit=READ_CHUNK), self.timeout
                )
            except (OSError, asyncio.TimeoutError) as exc:
                self.close()
                raise UpstreamError(
                    f"cannot connect to {self.host}:{self.port}: {exc or 'timed out'}", sent=False
                ) from exc
            connection = _Connection(reader, writer)
        try:
            response = await asyncio.wait_for(connection.exchange(head, request.body), self.timeout)
        except (OSError, h11.ProtocolError, asyncio.TimeoutError) as exc:
            connection.close()
            self.close()
            why = "no answer within %.0f s" % self.timeout if isinstance(exc, asyncio.TimeoutError) else str(exc)
            raise UpstreamError(f"{self.host}:{self.port} did not answer: {why}", sent=True) from exc
        except BaseException:  # cancelled: the connection is mid-request, never reused
            connection.close()
            raise
        if connection.usable and len(self._idle) < self.max_idle:
            self._idle.append(connection)
        else:
            connection.close()
        return response

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable:
                return connection
            connection.close()
        return None

    def close(self) -> None:
        """Close every idle connection (rule 4, and at shutdown)."""
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
