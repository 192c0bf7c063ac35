"""The request parser behind one small interface, and h11 as the parser of record.

A connection (`connection.py`) reads requests and writes responses through a *wire*: a
sans-IO object fed the socket's bytes, which hands back one event at a time and turns a
response into the bytes to write. There are two:

    FastWire  (fastpath.py)  a strict parser for the requests this service nearly always
                             gets; anything else it hands over (`HAND_OVER`)
    H11Wire   (here)         h11, for everything: odd, hostile and rare traffic

A connection starts on a FastWire (unless `HttpSettings.http_parser` is "h11") and, at the
first request the fast path is unsure of, moves for good to an H11Wire built from every
byte the FastWire has not consumed (`FastWire.hand_over`). That happens only at a request
boundary, where h11 starts in its IDLE state, so a fresh `h11.Connection` sees exactly the
bytes it would have seen had it served the connection from the start.

Events of `next_event()`:

    Head        a request head (message.py), read and checked (rule 3 of connection.py);
                `Head.complete`: the body came whole with it (FastWire), only END follows
    bytes       a piece of the request body
    END         the request is complete
    NEED_DATA   feed more bytes (`receive`), or b"" for the end of input
    PAUSED      nothing more until the current response is sent (h11's PAUSED)
    CLOSED      the client closed cleanly between requests
    HAND_OVER   (FastWire only) replace this wire by `wire.hand_over()`, then continue

A request the client got wrong raises a `RequestError` (400, 414, 431, 505 ...): the connection
answers it if `can_respond`, and closes.

Imports h11, and nothing from dbsvc outside `dbsvc.http` and `dbsvc.errors`.
"""

from __future__ import annotations

import enum
from typing import Protocol, Union

import h11

from dbsvc.errors import BadRequest, HeadersTooLarge, UriTooLong
from dbsvc.http.message import Head, RequestIds, encode_response, read_head
from dbsvc.http.types import Request, Response

MAX_HEAD = 16 * 1024  # the largest request head, in bytes (rule 3 of connection.py)
_LINE_FRAME = len(b"  HTTP/1.1\r\n")  # a request line's bytes besides its method and target
# One message whether h11 refused the line unfinished or the wire measured it whole, so the
# answer does not depend on how the bytes were segmented.
_LINE_TOO_LONG = f"request line is over the limit of {MAX_HEAD} bytes for a request head: its target is too long"


class Signal(enum.Enum):
    NEED_DATA = "need data"
    PAUSED = "paused"
    END = "end"
    CLOSED = "closed"
    HAND_OVER = "hand over"


NEED_DATA, PAUSED, END, CLOSED, HAND_OVER = (
    Signal.NEED_DATA,
    Signal.PAUSED,
    Signal.END,
    Signal.CLOSED,
    Signal.HAND_OVER,
)

Event = Union[Head, bytes, bytearray, Signal]


class Wire(Protocol):
    """What a connection needs of a request parser and response writer."""

    @property
    def closing(self) -> bool:
        """The last response ended the connection (`Connection: close` either way)."""

    @property
    def can_respond(self) -> bool:
        """A response to the current request may still be sent."""

    @property
    def switch_proposed(self) -> bool:
        """The current request asked to switch protocols (`Upgrade`) and is complete."""

    def receive(self, data: bytes | bytearray) -> None:
        """Bytes from the socket; b"" is the end of input."""

    def next_event(self) -> Event: ...

    def respond(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], body: bytes | bytearray, close: bool
    ) -> bytes:
        """The bytes of one complete response. Raises h11.LocalProtocolError, before any
        state changes, for a response h11 would refuse (a status outside [200, 1000))."""

    def encode(
        self,
        response: Response,
        request: Request | None,
        request_id: str,
        extra: list[tuple[bytes, bytes]] | None,
        close: bool,
    ) -> tuple[bytes, int]:
        """`message.encode_response(self.respond, ...)`: the bytes of one complete response
        and its body's size, or its refusal (the fast path's in one step)."""

    def informational(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
        """The bytes of a 1xx response (100 Continue, 101 Switching Protocols)."""

    def expects_100(self) -> bool:
        """The client waits for `100 Continue` before it sends the body."""

    def start_next_cycle(self) -> None:
        """The response went out and the connection stays open: read the next request."""

    def trailing_data(self) -> bytes:
        """Bytes received after a request that switched protocols."""


class H11Wire:
    """h11 behind the `Wire` interface, plus rule 3's measure of a head that arrived whole."""

    __slots__ = ("_conn", "_ids", "_peer", "_fed", "_head_start")

    def __init__(
        self, ids: RequestIds, peer: tuple[str, int] | None, data: bytes | bytearray = b"", eof: bool = False
    ) -> None:
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self._ids = ids
        self._peer = peer
        self._fed = 0  # bytes handed to h11 so far
        self._head_start = 0  # where the current head began, in _fed
        if data:
            self.receive(data)
        if eof:
            self.receive(b"")

    @property
    def closing(self) -> bool:
        return self._conn.our_state is h11.MUST_CLOSE

    @property
    def can_respond(self) -> bool:
        return self._conn.our_state in (h11.IDLE, h11.SEND_RESPONSE)

    @property
    def switch_proposed(self) -> bool:
        return self._conn.their_state is h11.MIGHT_SWITCH_PROTOCOL

    def receive(self, data: bytes | bytearray) -> None:
        self._fed += len(data)
        self._conn.receive_data(data)  # type: ignore[arg-type]  # h11 takes any buffer

    def next_event(self) -> Event:
        conn = self._conn
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            if exc.error_status_hint == 431:
                if b"\n" not in bytes(conn._receive_buffer).lstrip(b"\r\n"):
                    raise UriTooLong(_LINE_TOO_LONG) from exc
                raise HeadersTooLarge(f"request head is over the limit of {MAX_HEAD} bytes") from exc
            raise BadRequest(f"malformed request: {exc}") from exc
        kind = type(event)
        if kind is h11.Data:
            return event.data  # type: ignore[union-attr, no-any-return]
        if kind is h11.Request:
            return self._read_head(event)  # type: ignore[arg-type]
        if kind is h11.EndOfMessage:
            self._head_start = self._fed - len(conn._receive_buffer)
            return END
        if event is h11.NEED_DATA:
            return NEED_DATA
        if kind is h11.ConnectionClosed:
            return CLOSED
        return PAUSED

    def _read_head(self, event: h11.Request) -> Head:
        # Rule 3: h11 refuses an incomplete head past MAX_HEAD, but a head that arrived
        # whole is measured here: the bytes h11 consumed since the previous request ended.
        if self._fed - self._head_start > MAX_HEAD:
            size = self._fed - len(self._conn._receive_buffer) - self._head_start
            if len(event.method) + len(event.target) + _LINE_FRAME > MAX_HEAD:
                raise UriTooLong(_LINE_TOO_LONG)
            if size > MAX_HEAD:
                raise HeadersTooLarge(f"request head of {size} bytes is over the limit of {MAX_HEAD} bytes")
        return read_head(event, self._ids, self._peer)

    def respond(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], body: bytes | bytearray, close: bool
    ) -> bytes:
        conn = self._conn
        # message.response_headers has validated every header as h11 would, so h11's own
        # per-header regex pass is skipped (`_parsed=True`, the flag h11 uses for headers it
        # parsed). h11 sees `close` in the headers themselves.
        data = conn.send(h11.Response(status_code=status, reason=reason, headers=headers, _parsed=True))
        if body:
            data += conn.send(h11.Data(data=body))  # type: ignore[operator, arg-type]
        return data + conn.send(h11.EndOfMessage())  # type: ignore[operator, no-any-return]

    def encode(
        self,
        response: Response,
        request: Request | None,
        request_id: str,
        extra: list[tuple[bytes, bytes]] | None,
        close: bool,
    ) -> tuple[bytes, int]:
        return encode_response(self.respond, response, request, request_id, extra, close)

    def informational(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
        return self._conn.send(
            h11.InformationalResponse(  # type: ignore[return-value]
                status_code=status, reason=reason, headers=headers
            )
        )

    def expects_100(self) -> bool:
        return self._conn.they_are_waiting_for_100_continue

    def start_next_cycle(self) -> None:
        self._conn.start_next_cycle()

    def trailing_data(self) -> bytes:
        return bytes(self._conn.trailing_data[0])
