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
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol, Union


class Meter(Protocol):
    """Counts one response: its request's method, the status, the seconds it took."""

    def observe(self, method: str, status: int, seconds: float) -> None: ...


@dataclass(slots=True)
class Request:
    """One complete HTTP request, body included (bounded by HttpSettings.max_body)."""

    method: str  # upper case; HEAD arrives as HEAD
    target: str  # raw request target, "/api/user?x=1"
    path: str  # percent-decoded path, "/api/user"
    query: list[tuple[str, str]]  # decoded pairs in order, blanks kept
    headers: list[tuple[str, str]]  # lower-case names, latin-1 decoded values
    body: bytes = b""
    request_id: str = ""
    client: tuple[str, int] | None = None
    http_version: str = "1.1"  # "1.0" or "1.1" (the fast path reads 1.1 only)
    # The route's request meter (dbsvc/metrics.py), which the application sets once it knows
    # the route; the protocol layer counts the response on it (account.py), or on the hub's
    # meter of unmatched requests while it is None.
    meter: Meter | None = None

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


class Completion:
    """A one-shot outcome for a `Deferred`, settled by a call: `settle(None)` when the work
    succeeded, `settle(error)` when it failed. The work's owner settles many at once (the
    store settles a committed group's writes in one loop callback), where each asyncio
    future would cost its own loop handle to run its callback. It answers what the
    connection asks of a future (`add_done_callback`, `exception`, `cancelled`, `done`,
    `result`) and can be awaited.

    Callbacks added before the outcome run inside `settle`, in the order added; one added
    after it runs on the loop's next turn (as asyncio's do), never inside the call."""

    __slots__ = ("_callbacks", "_error", "_settled")

    def __init__(self) -> None:
        self._callbacks: list[Callable[[Completion], object]] | None = None
        self._error: BaseException | None = None
        self._settled = False

    def settle(self, error: BaseException | None) -> None:
        """The outcome: None, or the error the waiting side answers with; once."""
        assert not self._settled, "a completion is settled once"
        self._settled, self._error = True, error
        callbacks, self._callbacks = self._callbacks, None
        if callbacks is not None:
            for callback in callbacks:
                callback(self)

    def add_done_callback(self, callback: Callable[[Completion], object]) -> None:
        if self._settled:
            asyncio.get_running_loop().call_soon(callback, self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    def done(self) -> bool:
        return self._settled

    def cancelled(self) -> bool:
        return False

    def exception(self) -> BaseException | None:
        return self._error

    def result(self) -> None:
        if self._error is not None:
            raise self._error

    def __await__(self) -> Generator[Any, None, None]:
        if not self._settled:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def wake(_completion: Completion) -> None:
                if not future.done():
                    future.set_result(None)

            self.add_done_callback(wake)
            yield from future.__await__()
        return self.result()


@dataclass(slots=True)
class Deferred:
    """An answer known now and sent once `future` completes: `response` when the future
    succeeds, the future's exception otherwise, turned into a problem response as if the
    application had raised it.

    Cheaper than a coroutine for the common case of "the work is done, wait for one
    event": no task, no coroutine frame, one callback when the future completes.
    """

    future: asyncio.Future[Any] | Completion
    response: Response


class Channel(Protocol):
    """An open WebSocket as a `Session` sees it; `dbsvc.http.ws.server` implements it.

    Sends never block and never fail: after the socket closed they do nothing. `writable`
    is False while the transport's write buffer is over its high-water mark (or the socket
    is closing); a session that produces data faster than the peer reads keeps its own
    bounded queue and waits for `Session.on_writable`.
    """

    @property
    def writable(self) -> bool: ...

    def send_frame(self, frame: bytes) -> None:
        """Send one complete server frame built by `dbsvc.http.frames` (shared bytes:
        the same object may go to many sockets)."""

    def send_frames(self, data: bytes, count: int) -> None:
        """Send `count` complete server frames joined in `data`, in one write now (a
        fan-out's batch, shared by many sockets): no later than anything sent before."""

    def send_text(self, text: str) -> None: ...

    def send_bytes(self, data: bytes) -> None: ...

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Start the closing handshake (RFC 6455 §7.1.2); later sends are dropped."""


class Session(Protocol):
    """What an application plugs into an accepted WebSocket (the realtime feeds, an echo).

    The WebSocket layer calls `on_open` once after the 101 is written, `on_message` for each
    complete data message, `on_writable` when the transport drained below its low-water
    mark, and `on_close` exactly once with the close code (1006 when the TCP connection
    ended without a close frame, or when the upgrade never happened), whatever ended it.
    """

    def on_open(self, channel: Channel) -> None: ...

    def on_message(self, data: str | bytes) -> None: ...

    def on_writable(self) -> None: ...

    def on_close(self, code: int) -> None: ...


class Upgraded(Protocol):
    """What the protocol layer forwards an upgraded connection's transport events to."""

    def data_received(self, data: bytes) -> None: ...

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...

    def shutdown(self) -> None:
        """The server began a graceful shutdown (close with 1001)."""


@dataclass(slots=True)
class Upgrade:
    """Returned by the application to accept a WebSocket on this request (RFC 6455 §4.2.2).

    The application has already checked everything of its own (route, token, query,
    origin); the protocol layer then checks the handshake itself (a request that is not a
    valid WebSocket opening handshake is answered 426 or 400 and `session.on_close(1006)`
    is called), writes the 101 (with `Sec-WebSocket-Protocol: <subprotocol>` when given)
    and runs the socket for `session`.

    `route` names the socket in its span log line. `close_at` is `(unix time, code,
    reason)`: the socket is closed with that code then, by a timer (a token's expiry).
    `max_message`: a data message longer than this closes the socket with 1009.
    """

    session: Session
    subprotocol: str | None = None
    route: str = ""
    close_at: tuple[float, int, str] | None = None
    max_message: int = 64 * 1024


AppResult = Union[Response, Deferred, Upgrade, Awaitable[Union[Response, Upgrade]]]
App = Callable[[Request], AppResult]


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """Protocol-level limits and behaviour, filled from the environment by `dbsvc.config`.

    A timeout of 0 turns that deadline off (as in Go's `http.Server` and Node's `http`),
    and so does a `min_body_rate` of 0.
    """

    host: str = "127.0.0.1"
    port: int = 3000
    max_body: int = 1_048_576
    max_connections: int = 1024  # HTTP connections (hub.py rule 7: plus a probes' reserve)
    max_sockets: int = 1024  # upgraded WebSockets, counted apart (hub.py rule 8)
    header_timeout: float = 10.0  # seconds to receive a complete request head
    idle_timeout: float = 60.0  # keep-alive idle time; also the longest pause in a body
    shutdown_timeout: float = 10.0
    min_body_rate: float = 240.0  # bytes/s a body must average once the grace is over
    body_rate_grace: float = 5.0  # seconds from the head before min_body_rate applies
    body_memory: int = 64 << 20  # bytes all unfinished request bodies may hold together
    cors_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()  # Host names answered (hosts.py); empty: any
    ws_ping_interval: float = 30.0  # idle seconds before a WebSocket ping
    ws_pong_timeout: float = 30.0  # seconds a pinged peer has to answer
    ws_close_timeout: float = 5.0  # seconds to wait for the peer's close frame
    http_parser: str = "fast"  # "fast": the fast path, h11 for the rest; "h11": h11 only
    # SO_REUSEPORT on the listening sockets: the processes of `serve --workers N` each bind
    # the public port and the kernel spreads connections among them (docs/workers.md)
    reuse_port: bool = False
