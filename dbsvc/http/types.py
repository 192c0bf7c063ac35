"""The values that cross the seam between the protocol layer and the application.

The protocol layer (`dbsvc.http.server`) turns bytes into `Request`s and `Response`s into
bytes; the application is a callable `app(request) -> Response | Deferred | Upgrade |
Awaitable[Response]`. A synchronous return is answered at once, on the same turn of the
event loop (the fast path for reads); a `Deferred` is answered when its future completes
(a write: applied now, acknowledged after its fsync); an awaitable is run as a task. Later
pipelined requests wait for either, so responses always leave in request order. Neither side knows the other's internals, and
nothing here knows about storage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(slots=True)
class Request:
    """One complete HTTP request, body included (bounded by HttpSettings.max_body)."""

    method: str                              # upper case; HEAD arrives as HEAD
    target: str                              # raw request target, "/api/user?x=1"
    path: str                                # percent-decoded path, "/api/user"
    query: list[tuple[str, str]]             # decoded pairs in order, blanks kept
    headers: list[tuple[str, str]]           # lower-case names, latin-1 decoded values
    body: bytes = b""
    request_id: str = ""
    client: tuple[str, int] | None = None

    def header(self, name: str) -> str | None:
        """The first value of header `name` (lower case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(slots=True)
class Response:
    """What the application answers. The protocol layer adds Content-Length, Date,
    Server, X-Request-Id and CORS headers itself."""

    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str | None = "application/json"


@dataclass(slots=True)
class Deferred:
    """An answer known now and sent once `future` completes: `response` when the future
    succeeds, the future's exception otherwise, turned into a problem response as if the
    application had raised it.

    Cheaper than a coroutine for the common case of "the work is done, wait for one
    event": no task, no coroutine frame, one callback when the future completes.
    """

    future: asyncio.Future[Any]
    response: Response


@dataclass(slots=True)
class Upgrade:
    """Returned by the application to take over the connection after a 101 (WebSocket).

    `accept(transport, request, trailing_data)` is called once the request is complete and
    h11 has been left; from then on the protocol layer forwards `data_received` and
    `connection_lost` to the object `accept` returns (anything with those two methods).

    `response`, when given, is the 101 the protocol layer sends (through h11, plus its
    Date/Server/X-Request-Id headers) before calling `accept`; when None, `accept` writes
    the 101 itself. The returned object may also define `eof_received()`,
    `pause_writing()` / `resume_writing()` (write back-pressure) and `shutdown()` (called
    once when the server starts a graceful shutdown); each is forwarded when present.
    """

    accept: Callable[[Any, Request, bytes], Any]
    response: Response | None = None


AppResult = Union[Response, Deferred, Upgrade, Awaitable[Union[Response, Upgrade]]]
App = Callable[[Request], AppResult]


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """Protocol-level limits and behaviour, filled from the environment by `dbsvc.config`."""

    host: str = "127.0.0.1"
    port: int = 3000
    max_body: int = 1_048_576
    max_connections: int = 1024
    header_timeout: float = 10.0             # seconds to receive a complete request head
    idle_timeout: float = 60.0               # keep-alive idle time before the server closes
    shutdown_timeout: float = 10.0
    cors_origins: tuple[str, ...] = ()
