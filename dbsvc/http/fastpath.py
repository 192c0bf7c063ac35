"""The HTTP fast path: a strict parser for the requests this service nearly always gets.

h11 is the parser of record (wire.py); it also costs most of a small request's CPU. This
module reads the common request itself and hands everything else to h11, at the request
boundary, with every byte not yet consumed (`HAND_OVER`, then `hand_over()`), so odd,
hostile and rare traffic keeps h11's verdicts and the rules of connection.py.

Accepted here, and nothing else (RFC 9112 §2-§6; each is a subset of what h11 accepts):

    request line   token SP origin-form SP "HTTP/1.1" CRLF      (not CONNECT)
    header lines   token ":" OWS visible-ASCII [SP/HT visible-ASCII ...] OWS CRLF
    head           ends at the first CRLF CRLF, at most MAX_HEAD bytes, CRLF line ends only
    headers        exactly one Host; at most one Content-Length of 1-18 plain digits; no
                   Transfer-Encoding, Upgrade or Expect; at most one Authorization
    target         ASCII percent-encoding of UTF-8 (message.split_target)

For such a request every value is what h11 gives: names lower-cased, values with OWS
stripped, the body framed by Content-Length (none: empty), keep-alive unless a
`Connection` header lists `close` (h11's `_keep_alive`). Anything else, anything
incomplete that h11 would already refuse (a first byte below 0x21, a bare LF, a buffer
over MAX_HEAD) or an end of input inside a head, is handed over. Only inside a body, which
h11 would read the same way, does the fast path speak for itself: an end of input there
is h11's 400, word for word.

A body that arrived whole with its head (Content-Length known, every byte in the buffer:
nearly every POST, PUT and PATCH) is put in the head's request and no body piece follows,
only END: the connection then has no piece to take in (`BodyIntake.take`, connection.py
rule 11), since nothing of the body is still to come. A body that is not all there yet
comes in pieces, as h11 gives them.

Responses are assembled here as bytes, exactly as h11 writes them: `HTTP/1.1 <status>
<reason>`, the headers in order as given (message.response_headers, which refuses the
framing headers h11 would rewrite), and, for a client that asked to close, h11's own
`Connection: close` in place of ours. tests/http/test_http_fastpath.py compares the bytes.

Imports h11 only for its LocalProtocolError; nothing from dbsvc outside `dbsvc.http` and
`dbsvc.errors`.
"""

from __future__ import annotations

import enum
import re

import h11

from dbsvc.errors import BadRequest
from dbsvc.http.message import (
    REASONS,
    SERVER_NAME,
    Head,
    RequestIds,
    encode_response,
    header_name,
    http_date_text,
    split_target,
)
from dbsvc.http.types import Request, Response
from dbsvc.http.wire import CLOSED, END, HAND_OVER, MAX_HEAD, NEED_DATA, PAUSED, Event, H11Wire

_TOKEN = r"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
# The whole head, as latin-1 text: the request line, then header lines of token names and
# values of visible ASCII, spaces and tabs (RFC 9110 §5.5 without obs-text or controls).
_HEAD = re.compile(rf"({_TOKEN}) (/[\x21-\x7e]*) HTTP/1\.1\r\n((?:{_TOKEN}:[\t\x20-\x7e]*\r\n)*)\r\n")
_LINE = re.compile(rf"({_TOKEN}) (/[\x21-\x7e]*) HTTP/1\.1\r\n")  # _HEAD's request line alone
# One header line of a head _HEAD matched: the name and the value without its OWS, which is
# h11's field-content (RFC 9110 §5.5); possessive, so the regex never backtracks.
_FIELD = re.compile(rf"({_TOKEN}):[ \t]*+((?:[\x21-\x7e]++(?:[ \t]++[\x21-\x7e]++)*+)?+)[ \t]*+\r\n")
_FIELD_LINE = b"%s: %s\r\n"
# The Content-Length value of a header block _HEAD matched (one line, at a line start).
_LENGTH = re.compile(r"(?:^|\r\n)content-length:[ \t]*+([0-9]++)[ \t]*+\r\n", re.IGNORECASE)
_MAX_LENGTH_DIGITS = 18  # past that h11 decides (and int() stays cheap)
# Response heads as %-templates of their values, one per (status, content type or not, the
# app's header names): `encode` fills one in; None where the generic path must decide (a
# name it refuses). Bounded, in case an application makes names up per response.
_HEADS: dict[tuple[int, bool, tuple[str, ...]], str | None] = {}
_HEADS_MAX = 512


class _State(enum.Enum):
    IDLE = "idle"  # between requests: the next bytes are a head
    BODY = "body"  # `_remaining` body bytes still to come
    DONE = "done"  # the request is complete; its response is pending


_IDLE, _BODY, _DONE = _State.IDLE, _State.BODY, _State.DONE


class FastWire:
    """The fast path behind the `wire.Wire` interface."""

    __slots__ = ("_ids", "_peer", "_buf", "_state", "_remaining", "_length", "_eof", "_client_close", "closing",
                 "_block", "_fields", "_around")  # fmt: skip

    def __init__(self, ids: RequestIds, peer: tuple[str, int] | None) -> None:
        self._ids = ids
        self._peer = peer
        self._buf: bytes | bytearray = b""  # received, not yet consumed
        self._state = _State.IDLE
        self._remaining = 0
        self._length = 0
        self._eof = False
        self._client_close = False  # the request said `Connection: close`
        self.closing = False
        # The header lines (the text after the request line) of the last head read, and what
        # they say: a keep-alive client sends the same ones again and again.
        self._block = ""
        self._fields: _Fields | None = None
        # `_block` around its Content-Length value: the text before it, the text after it,
        # and that header's place in `_fields`' pairs; None without one. A client's writes
        # repeat the header lines but for that value (`_same_but_length`).
        self._around: tuple[str, str, int] | None = None

    @property
    def can_respond(self) -> bool:
        return not self.closing

    @property
    def switch_proposed(self) -> bool:
        return False  # an Upgrade is always handed over

    def receive(self, data: bytes | bytearray) -> None:
        if not data:
            self._eof = True
            return
        buf = self._buf
        if not buf:
            self._buf = data
        elif type(buf) is bytearray:
            buf += data
        else:
            grown = self._buf = bytearray(buf)
            grown += data

    def hand_over(self) -> H11Wire:
        """The h11 wire that takes the connection from this request boundary on."""
        assert self._state is _State.IDLE, "hand-over only between requests"
        return H11Wire(self._ids, self._peer, self._buf, self._eof)

    def next_event(self) -> Event:
        state = self._state
        if state is _IDLE:
            if not self._buf:  # between requests, nothing yet (`_read_head`'s first case)
                return CLOSED if self._eof else NEED_DATA
            return self._read_head()
        if state is _BODY:
            if not self._remaining:  # the body is all read (`_read_body`'s first case)
                self._state = _DONE
                return END
            return self._read_body()
        if self._buf:
            return PAUSED
        return CLOSED if self._eof else NEED_DATA

    def _read_body(self) -> Event:
        remaining = self._remaining
        if not remaining:
            self._state = _State.DONE
            return END
        buf = self._buf
        if not buf:
            if self._eof:  # h11's words (_readers.ContentLengthReader)
                raise BadRequest(
                    "malformed request: peer closed connection without sending complete "
                    f"message body (received {self._length - remaining} bytes, "
                    f"expected {self._length})"
                )
            return NEED_DATA
        if len(buf) <= remaining:
            piece = buf
            self._buf = b""
        else:
            piece = buf[:remaining]
            self._consume(remaining)
        self._remaining = remaining - len(piece)
        return piece

    def _consume(self, size: int) -> None:
        buf = self._buf
        if size == len(buf):
            self._buf = b""
        elif type(buf) is bytearray:
            del buf[:size]
        else:
            self._buf = buf[size:]

    def _read_head(self) -> Event:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:  # (an empty buffer never comes here: `next_event` answers it)
            # h11 would refuse these at once, or find a head in them (bare LF line ends).
            if self._eof or len(buf) > MAX_HEAD or buf[0] < 0x21 or buf.count(b"\n") != buf.count(b"\r\n"):
                return HAND_OVER
            return NEED_DATA
        size = end + 4
        if size > MAX_HEAD:
            return HAND_OVER
        text = buf[:size].decode("latin-1")
        line_end = text.find("\r\n") + 2
        block = text[line_end:]
        if block == self._block:
            # The header lines of the previous request again, byte for byte (a keep-alive
            # client's usual case): read then, and checked by _HEAD; only the line is new.
            match = _LINE.fullmatch(text, 0, line_end)
            fields = self._fields
        elif self._around is not None and (fields := self._same_but_length(block)) is not None:
            # A write's usual case: the same header lines but for the body's length.
            match = _LINE.fullmatch(text, 0, line_end)
            self._block, self._fields = block, fields
        else:
            match = _HEAD.fullmatch(text)
            fields = None
        if match is None:
            return HAND_OVER
        method, target = match.group(1, 2)
        if method == "CONNECT":  # h11 treats it as a protocol switch
            return HAND_OVER
        if fields is None:
            fields = _read_fields(_FIELD.findall(text, match.start(3), match.end(3)))
            if fields is None:
                return HAND_OVER
            self._block, self._fields = block, fields
            self._around = _around_length(block, fields)
        head = self._head(method, target, fields)
        if head is None:
            return HAND_OVER
        length = head.content_length
        self._state = _State.BODY
        if length and len(buf) >= size + length:
            # The body came whole with its head (a write's usual case): it goes with the
            # head, in the request, and END follows at once; no piece goes through the
            # connection's body intake.
            head.request.body = buf[size : size + length]  # type: ignore[assignment]  # maybe a bytearray
            head.complete = True
            self._consume(size + length)
            self._length = length
            self._remaining = 0
            return head
        self._consume(size)
        if not length:
            head.complete = True  # no body: END follows
            self._remaining = self._length = 0
            return head
        self._remaining = self._length = length
        return head

    def _same_but_length(self, block: str) -> _Fields | None:
        """What `block` says, when it is the last block read but for the digits of its
        Content-Length value (of at most _MAX_LENGTH_DIGITS plain ASCII digits, as
        `_read_fields` takes them), else None. Such a block matches _HEAD as the last one
        did: digits are field content, and nothing else differs."""
        assert self._around is not None and self._fields is not None
        before, after, at = self._around
        end = len(block) - len(after)
        if end <= len(before) or not block.startswith(before) or not block.endswith(after):
            return None
        value = block[len(before) : end]
        if len(value) > _MAX_LENGTH_DIGITS or not (value.isascii() and value.isdigit()):
            return None
        headers, _length, *rest = self._fields
        headers = (*headers[:at], (headers[at][0], value), *headers[at + 1 :])
        return (headers, int(value), *rest)  # type: ignore[return-value]

    def _head(self, method: str, target: str, fields: _Fields) -> Head | None:
        """The `Head` of a well-formed head whose header lines are `fields`, or None when its
        target is not fast-path material."""
        headers, length, client_close, origin, preflight_method, preflight_headers, incoming_id = fields
        try:
            path, query = split_target(target)
        except (UnicodeDecodeError, ValueError):
            return None
        self._client_close = client_close
        request = Request(method, target, path, query, list(headers), b"", self._ids.choose(incoming_id), self._peer)
        return Head(request, length, False, False, origin, preflight_method, preflight_headers)

    def respond(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], body: bytes | bytearray, close: bool
    ) -> bytes:
        """The response as h11 writes it, given headers as message.response_headers builds
        them: validated, framed by Content-Length (h11 would add chunked framing otherwise)."""
        if not 200 <= status < 1000:  # h11.Response's own check
            raise h11.LocalProtocolError(f"Response status_code should be in range [200, 1000), not {status}")
        if self._client_close:
            # h11 drops every Connection header and appends its own, title case (h11's
            # set_comma_header), when the client asked to close.
            headers = [pair for pair in headers if pair[0].lower() != b"connection"]
            headers.append((b"Connection", b"close"))
            close = True
        self.closing = close
        # `name: value` lines formatted and joined in C: no Python frame per header.
        fields = b"".join(map(_FIELD_LINE.__mod__, headers))
        return b"HTTP/1.1 %d %s\r\n%s\r\n%s" % (status, reason, fields, body)

    def encode(
        self,
        response: Response,
        request: Request | None,
        request_id: str,
        extra: list[tuple[bytes, bytes]] | None,
        close: bool,
    ) -> tuple[bytes, int]:
        """`message.encode_response(self.respond, ...)` in one step for the common response:
        a final status, header values of printable ASCII without a space at either end, no
        extra (CORS) headers and no close on either side. Its head is a template made once per
        status and header names (`_HEADS`) and filled in with the values, checked together;
        anything else goes the generic way, which writes or refuses it.
        tests/http/test_http_response_encoding.py holds the two equal."""
        status = response.status
        body = response.body
        if (
            extra
            or close
            or self._client_close
            or type(status) is not int
            or not 200 <= status < 1000
            or (type(body) is not bytes and type(body) is not bytearray)
            or (request is not None and request.method == "CONNECT")
        ):
            return encode_response(self.respond, response, request, request_id, extra, close)
        typed = response.content_type is not None and status != 204
        try:
            names, values = zip(*response.headers) if response.headers else ((), ())
            if typed:
                values = (response.content_type, *values)
            text = "".join(values)
            key = (status, typed, names)
            template = _HEADS.get(key)
        except (TypeError, ValueError):  # not pairs of str: the generic path says what
            return encode_response(self.respond, response, request, request_id, extra, close)
        if template is None and key not in _HEADS and len(_HEADS) < _HEADS_MAX:
            template = _HEADS[key] = _head_template(status, typed, names)
        # Printable ASCII (0x20-0x7e) is a field value, but for a space at either end, which
        # shows in the head as ":  " or " \r\n" (RFC 9110 §5.5; message._checked).
        if template is None or not (text.isascii() and text.isprintable()):
            return encode_response(self.respond, response, request, request_id, extra, close)
        if status == 204 or status == 304:
            head = template % (*values, http_date_text(), request_id)
        else:
            head = template % (*values, len(body), http_date_text(), request_id)
        if ":  " in head or " \r\n" in head or not request_id.isascii():
            return encode_response(self.respond, response, request, request_id, extra, close)
        self.closing = False
        if status == 204 or status == 304 or (request is not None and request.method == "HEAD"):
            return head.encode("ascii"), 0
        return head.encode("ascii") + body, len(body)

    def informational(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
        raise AssertionError("the fast path never sends a 1xx: Expect and Upgrade are handed over")

    def expects_100(self) -> bool:
        return False

    def start_next_cycle(self) -> None:
        assert self._state is _State.DONE and not self.closing
        self._state = _State.IDLE
        self._client_close = False

    def trailing_data(self) -> bytes:
        return b""


# What a head's header lines say: the (name, value) pairs, lower-case names; Content-Length;
# `Connection: close`; Origin; the preflight's method and headers; X-Request-Id.
_Fields = tuple[tuple[tuple[str, str], ...], "int | None", bool, "str | None", "str | None", "str | None", "str | None"]


def _read_fields(pairs: list[tuple[str, str]]) -> _Fields | None:
    """The facts of a head's header lines, or None when they are not fast-path material."""
    headers: list[tuple[str, str]] = []
    length: int | None = None
    hosts = 0
    client_close = False
    origin = preflight_method = preflight_headers = incoming_id = authorization = None
    for raw_name, value in pairs:
        name = raw_name.lower()
        headers.append((name, value))
        # A handful of names matter; one dict-free chain of compares is cheapest.
        if name[0] not in "chteoaux":
            continue
        if name == "host":
            hosts += 1
        elif name == "content-length":
            if length is not None or not value.isdigit() or len(value) > _MAX_LENGTH_DIGITS:
                return None
            length = int(value)
        elif name == "connection":
            # h11's _keep_alive: `close` among the comma-separated tokens, any case.
            if "close" in [token.strip() for token in value.lower().split(",")]:
                client_close = True
        elif name in ("transfer-encoding", "upgrade", "expect"):
            return None
        elif name == "origin":
            origin = value
        elif name == "x-request-id":
            incoming_id = value
        elif name == "access-control-request-method":
            preflight_method = value
        elif name == "access-control-request-headers":
            preflight_headers = value
        elif name == "authorization":
            if authorization is not None:
                return None  # h11's path answers the 400 (message.py)
            authorization = value
    if hosts != 1:
        return None
    return (tuple(headers), length, client_close, origin, preflight_method, preflight_headers, incoming_id)


def _around_length(block: str, fields: _Fields) -> tuple[str, str, int] | None:
    """`FastWire._around` of a header block `_read_fields` read as `fields`: the text before
    and after its one Content-Length value and that header's index among the pairs, or None
    without a Content-Length."""
    headers = fields[0]
    if fields[1] is None:
        return None
    found = _LENGTH.search(block)
    assert found is not None, "a Content-Length _read_fields took is a line _LENGTH matches"
    at = next(i for i, (name, _value) in enumerate(headers) if name == "content-length")
    return block[: found.start(1)], block[found.end(1) :], at


def _head_template(status: int, typed: bool, names: tuple[str, ...]) -> str | None:
    """The head `FastWire.encode` fills in for a final `status`, with a content type or not,
    and the app's header `names`, in the order `message.response_headers` writes them; None
    for a name it refuses (the generic path then raises its error)."""
    try:
        raw = [header_name(name, status) for name in names]
    except (h11.LocalProtocolError, AttributeError, TypeError):
        return None
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, b'').decode('latin-1')}\r\n".replace("%", "%%")]
    if typed:
        lines.append("content-type: %s\r\n")
    lines.extend(name.decode("latin-1").replace("%", "%%") + ": %s\r\n" for name in raw)
    if status != 204 and status != 304:
        lines.append("content-length: %d\r\n")
    lines.append(f"date: %s\r\nserver: {SERVER_NAME.decode('ascii')}\r\nx-request-id: %s\r\n\r\n")
    return "".join(lines)
