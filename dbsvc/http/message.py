"""Translation between h11 events and the seam's `Request` / `Response`, plus the headers
the protocol layer owns.

Job:
- `read_head(event)` turns an `h11.Request` into a `Head`: the application's `Request`
  (percent-decoded path, decoded query pairs, lower-case header names) and the few header
  facts the connection loop needs before the body (framing, `Expect`, `Origin`, preflight).
- `response_headers(...)` builds the header list handed to h11 for a response: the app's
  headers, then Content-Length, Date, Server, X-Request-Id.
- `RequestIds` hands out request ids: a sane incoming `X-Request-Id` is kept, anything else
  is replaced by a per-process random prefix plus a counter (no syscall, no uuid per request).
- `http_date()` is the Date header value, formatted at most once per second.

Imports h11 (this package is the only h11 importer) and nothing from dbsvc outside
`dbsvc.http` and `dbsvc.errors`.

Invariants:
- Header names in a `Request` are lower case (h11 already lower-cases them, RFC 9110 §5.1),
  values latin-1 decoded (RFC 9110 §5.5: field values are octets; latin-1 is lossless).
- The path never carries the query string; the query is split as
  `urllib.parse.parse_qsl(keep_blank_values=True)` splits it, so `?a=&b` keeps both keys.
- Path and query are percent-decoded as strict UTF-8: invalid bytes (`%ff`) are a 400, in
  the query as in the path, never a silent U+FFFD that a filter would then match.
- A request line naming an HTTP major version other than 1 is refused (505): h11 parses
  any `HTTP/d.d` and would serve `HTTP/2.0` as 1.1.
- The asterisk target (`*`) is kept only for OPTIONS (RFC 9112 §3.2.4); any other method
  with it is a 400.
- At most one `Authorization` header: two are a 400, so no layer can read one while
  another layer reads the other.
- Every header value we add is ASCII without CR/LF, so h11 validation cannot fail on them.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from urllib.parse import parse_qsl, unquote

import h11

from dbsvc.errors import BadRequest, VersionNotSupported
from dbsvc.http.types import Request, Response

SERVER_NAME = b"dbsvc"

# A client-chosen request id is echoed only when it is short and boring: it ends up in
# logs and response headers, so anything that could smuggle structure is replaced.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


class RequestIds:
    """Request ids: keep a sane incoming one, else `<random prefix>-<counter>` in hex.
    `prefix` replaces the random one: two wires given the same prefix and fed the same
    requests choose the same ids (the fast path's differential test compares them)."""

    __slots__ = ("_prefix", "_counter")

    def __init__(self, prefix: str | None = None) -> None:
        self._prefix = os.urandom(6).hex() + "-" if prefix is None else prefix
        self._counter = itertools.count(1)

    def choose(self, incoming: str | None) -> str:
        if incoming is not None and _SANE_REQUEST_ID.fullmatch(incoming):
            return incoming
        return f"{self._prefix}{next(self._counter):x}"


_date_second = -1
_date_value = b""
_date_text = ""


# Reason phrases as RFC 9110 §15 names them, whatever the Python: 3.13's `HTTPStatus` took up
# the RFC's names for these four, 3.11 and 3.12 still say "Request Entity Too Large", so the
# same server wrote other status lines under another interpreter (problem titles, errors.py,
# are RFC 9110's already).
REASONS = {status.value: status.phrase.encode("ascii") for status in HTTPStatus}
REASONS.update(
    {413: b"Content Too Large", 414: b"URI Too Long", 416: b"Range Not Satisfiable", 422: b"Unprocessable Content"}
)


def http_date() -> bytes:
    """The IMF-fixdate of now (RFC 9110 §5.6.7), recomputed only when the second changes."""
    now = time.time()
    if int(now) != _date_second:
        _new_date(now)
    return _date_value


def http_date_text() -> str:
    """`http_date()` as text, for a response head formatted as text (fastpath.py)."""
    now = time.time()
    if int(now) != _date_second:
        _new_date(now)
    return _date_text


def _new_date(now: float) -> None:
    global _date_second, _date_value, _date_text
    _date_text = formatdate(now, usegmt=True)
    _date_value = _date_text.encode("ascii")
    _date_second = int(now)


@dataclass(slots=True)
class Head:
    """A parsed request head and the facts about it the connection loop acts on."""

    request: Request
    content_length: int | None  # declared Content-Length, None when absent
    chunked: bool  # Transfer-Encoding present (h11 only accepts chunked)
    expects_continue: bool  # `Expect: 100-continue` (RFC 9110 §10.1.1)
    origin: str | None  # `Origin`, for CORS
    preflight_method: str | None  # `Access-Control-Request-Method` (CORS preflight)
    preflight_headers: str | None  # `Access-Control-Request-Headers`
    asterisk: bool = False  # `OPTIONS *`: answered by the protocol layer itself
    # The wire holds the whole request, body included (fastpath.py): no body piece follows,
    # only END, so the connection takes no body in (connection.py, `_on_head`).
    complete: bool = False


def split_target(target: str) -> tuple[str, list[tuple[str, str]]]:
    """Percent-decoded path and decoded query pairs of a request target.

    >>> split_target("/api/user%20x?name=a%20b&flag=&x")
    ('/api/user x', [('name', 'a b'), ('flag', ''), ('x', '')])

    The absolute form (RFC 9112 §3.2.2) is accepted and reduced to its path.
    """
    if target[0] != "/":
        if target == "*":  # RFC 9112 §3.2.4, OPTIONS *
            return "*", []
        scheme, sep, rest = target.partition("://")
        if not sep or scheme.lower() not in ("http", "https"):
            raise BadRequest(f"request target {target[:64]!r} is not a path")
        slash = rest.find("/")
        target = rest[slash:] if slash >= 0 else "/"
    path, question, query = target.partition("?")
    if "%" in path:
        path = unquote(path, errors="strict")
    if not question:
        return path, []
    if "%" in query or "+" in query:
        return path, parse_qsl(query, keep_blank_values=True, errors="strict")
    # Nothing to decode: the split parse_qsl would make, for much less (the figure: bench/README.md).
    return path, [(name, value) for name, _eq, value in (part.partition("=") for part in query.split("&") if part)]


def read_head(event: h11.Request, request_id_source: RequestIds, client: tuple[str, int] | None) -> Head:
    """The `Head` of an h11 request event; raises BadRequest for an unusable target or a
    repeated Authorization, VersionNotSupported for an HTTP major version other than 1."""
    if event.http_version[:2] != b"1.":
        raise VersionNotSupported(
            f"http version {event.http_version.decode('ascii')!r} is not supported: expected 1.0 or 1.1"
        )
    try:
        target = event.target.decode("ascii")
        path, query = split_target(target)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(
            f"request target {event.target[:64].decode('latin-1')!r} is not valid: "
            "expected ascii, percent-encoding utf-8"
        ) from exc
    method = event.method.decode("ascii")
    asterisk = path == "*"
    if asterisk and method != "OPTIONS":
        raise BadRequest(f"request target '*' is only for OPTIONS, not {method!r}")
    headers: list[tuple[str, str]] = []
    content_length: int | None = None
    chunked = expects = False
    origin = preflight_method = preflight_headers = incoming_id = authorization = None
    for raw_name, raw_value in event.headers.raw_items():  # a plain list: cheaper than iterating Headers
        name = raw_name.lower().decode("latin-1")
        value = raw_value.decode("latin-1")
        headers.append((name, value))
        # A handful of names matter to us; one dict-free chain of compares is cheapest.
        if name[0] in "cteoax":
            if name == "content-length":
                content_length = int(value)  # h11 has validated the digits
            elif name == "transfer-encoding":
                chunked = True
            elif name == "expect":
                expects = value.lower() == "100-continue"
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
                    raise BadRequest("request has two authorization headers: expected at most one")
                authorization = value
    request = Request(
        method=method,
        target=target,
        path=path,
        query=query,
        headers=headers,
        request_id=request_id_source.choose(incoming_id),
        client=client,
        http_version=event.http_version.decode("ascii"),
    )
    return Head(request, content_length, chunked, expects, origin, preflight_method, preflight_headers, asterisk)


# RFC 9110 §5.1 (field-name = token) and §5.5 (field-value: visible octets, spaces and
# tabs inside, none at the ends; no CR, LF or NUL): the same rules h11 applies.
_FIELD_NAME = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_FIELD_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff](?:[ \t\x21-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?")


def response_headers(
    response: Response, request_id: str, extra: list[tuple[bytes, bytes]] | None, close: bool
) -> list[tuple[bytes, bytes]]:
    """The header list h11 sends for `response`, already validated.

    Content-Length is the body's length, also for HEAD (RFC 9110 §9.3.2: the same header
    fields as GET; sending no body is the caller's job); 1xx, 204 and 304 carry none
    (RFC 9110 §8.6). `close` adds `Connection: close` (RFC 9112 §9.6).

    Only the application's own headers are checked here (our own are known-good), so the
    caller may hand the list to h11 with validation skipped. Raises h11.LocalProtocolError
    for a header h11 would refuse (e.g. CR/LF in a value: response splitting), for a status
    that is not an int, and, on a final response, for a header this layer owns
    (`_OWNED`: framing and connection management, which h11 would rewrite or act on), so
    that the fast path (fastpath.py) writes the very bytes h11 would.
    """
    status = response.status
    if not isinstance(status, int):
        raise h11.LocalProtocolError(f"response status {status!r} is not an int")
    headers: list[tuple[bytes, bytes]] = []
    if response.content_type is not None and response.status != 204:
        headers.append((b"content-type", _checked(b"content-type", response.content_type)))
    for name, value in response.headers:
        raw_name = _VALID_NAMES.get(name)
        if raw_name is None:
            raw_name = _checked_name(name, status)
        headers.append((raw_name, _checked(raw_name, value)))
    if status >= 200 and status != 204 and status != 304:
        headers.append((b"content-length", str(len(response.body)).encode("ascii")))
    headers.append((b"date", http_date()))
    headers.append((b"server", SERVER_NAME))
    headers.append((b"x-request-id", request_id.encode("ascii")))
    if extra:
        headers.extend(extra)
    if close:
        headers.append((b"connection", b"close"))
    return headers


# Header names an application uses are few and fixed: each is checked once, then remembered
# (bounded, in case an application makes names up per request).
_VALID_NAMES: dict[str, bytes] = {}
_VALID_NAMES_MAX = 256
# Set by this layer alone on a final response: h11 acts on them (Connection: close ends the
# connection) or rewrites them (Content-Length, Transfer-Encoding, Host goes first). A 101
# carries `Connection: Upgrade` (websocket.handshake_headers).
_OWNED = frozenset({b"connection", b"content-length", b"transfer-encoding", b"host", b"keep-alive"})


def header_name(name: str, status: int) -> bytes:
    """`name` as a response of `status` may carry it, checked as `response_headers` checks
    it; raises h11.LocalProtocolError where that would."""
    raw_name = _VALID_NAMES.get(name)
    return raw_name if raw_name is not None else _checked_name(name, status)


def _checked_name(name: str, status: int) -> bytes:
    raw_name = name.encode("latin-1")
    if not _FIELD_NAME.fullmatch(raw_name):
        raise h11.LocalProtocolError(f"illegal header name {name!r}")
    if raw_name.lower() in _OWNED:
        if status >= 200:
            raise h11.LocalProtocolError(f"header {name!r} is set by the protocol layer, not the application")
    elif len(_VALID_NAMES) < _VALID_NAMES_MAX:
        _VALID_NAMES[name] = raw_name
    return raw_name


def _checked(name: bytes, value: str) -> bytes:
    # Printable ASCII (0x20-0x7e) with no space at either end is a valid field value
    # (RFC 9110 §5.5: visible characters, spaces only inside): told by str methods in C,
    # where the regex below cost ~0.5 us on a list's `Link` (bench/README.md, "A page of
    # 20 made afresh"). Anything else (a tab, latin-1, CR/LF) is decided by the regex.
    if value.isascii() and value.isprintable() and value[:1] != " " and value[-1:] != " ":
        return value.encode("ascii")
    raw = value.encode("latin-1")
    if not _FIELD_VALUE.fullmatch(raw):
        raise h11.LocalProtocolError(f"illegal value for header {name.decode()!r}: {value!r}")
    return raw


def encode_response(
    respond: Callable[[int, bytes, list[tuple[bytes, bytes]], bytes | bytearray, bool], bytes],
    response: Response,
    request: Request | None,
    request_id: str,
    extra: list[tuple[bytes, bytes]] | None,
    close: bool,
) -> tuple[bytes, int]:
    """The bytes of one complete response to `request` (`respond`: the wire's) and its body's
    size. No body for HEAD, 204 and 304. Raises for a response that must not be sent: a 2xx
    to CONNECT (h11 would take it for a tunnel opened), a body that is not bytes, a header
    that does not validate (connection.py rule 8 answers 500 instead)."""
    status = response.status
    if request is not None and request.method == "CONNECT" and 200 <= status < 300:
        raise ValueError(f"a {status} answer to CONNECT would open a tunnel: this server has none")
    headers = response_headers(response, request_id, extra, close)
    body = response.body
    if not isinstance(body, (bytes, bytearray)):
        raise TypeError(f"response body is {type(body).__name__}, expected bytes")
    if (request is not None and request.method == "HEAD") or status == 204 or status == 304:
        body = b""
    return respond(status, REASONS.get(status, b""), headers, body, close), len(body)
