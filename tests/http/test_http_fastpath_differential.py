"""The fast path against h11, the parser of record: the same byte streams, split at random
points, fed to a FastWire (handing over to h11 when it refuses) and to an H11Wire.

For every stream both must give the same requests (method, target, path, query, headers,
framing facts, request id), the same bodies, the same responses byte for byte, the same
refusals (status and message) and the same connection fate (kept alive, closed by either
side, waiting for bytes). For every request the fast path refuses, the test also checks
that it handed over rather than answering: the smuggling and malformed corpus below must
never be read by the fast path.

The driver is the connection's loop reduced to what the wires decide: feed bytes while the
wire asks for them, then the end of input; answer each complete request at once, with
`Connection: close` every third request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbsvc.errors import RequestError
from dbsvc.http.fastpath import FastWire
from dbsvc.http.message import Head, RequestIds
from dbsvc.http.wire import CLOSED, END, HAND_OVER, MAX_HEAD, NEED_DATA, PAUSED, H11Wire
from support.clock import within_one_second

PEER = ("127.0.0.1", 4242)
BODY = b'{"ok":true}'


def _ids() -> RequestIds:
    return RequestIds("diff-")  # the same id sequence on both sides


@dataclass
class Outcome:
    events: list[tuple] = field(default_factory=list)
    fast_requests: int = 0  # requests the fast path read itself
    handed_over_at: int | None = None  # index of the request at which it handed over


def drive(wire, chunks: list[bytes]) -> Outcome:
    outcome = Outcome()
    pending = list(chunks)
    eof_sent = False
    body = bytearray()
    requests = 0
    method = ""
    while True:
        try:
            event = wire.next_event()
        except RequestError as exc:
            outcome.events.append(("refused", exc.status, exc.code, str(exc), wire.can_respond))
            return outcome
        if event is HAND_OVER:
            assert outcome.handed_over_at is None, "a second hand-over"
            outcome.handed_over_at = requests
            wire = wire.hand_over()
            continue
        if type(event) is Head:
            request = event.request
            method = request.method
            requests += 1
            if type(wire) is FastWire:
                outcome.fast_requests += 1
            outcome.events.append(
                (
                    "head",
                    request.method,
                    request.target,
                    request.path,
                    request.query,
                    request.headers,
                    request.request_id,
                    request.client,
                    event.content_length,
                    event.chunked,
                    event.expects_continue,
                    event.origin,
                    event.preflight_method,
                    event.preflight_headers,
                    event.asterisk,
                )
            )
            body.clear()
        elif event is END:
            close = requests % 3 == 0
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(BODY)),
                (b"x-request", b"%d" % requests),
            ]
            if close:
                headers.append((b"connection", b"close"))
            try:
                # As the connection does: no body for HEAD (RFC 9110 §9.3.2).
                data = wire.respond(200, b"OK", headers, b"" if method == "HEAD" else BODY, close)
            except h11.LocalProtocolError as exc:  # a 2xx to CONNECT: h11 switched protocols
                outcome.events.append(("cannot respond", str(exc)))
                return outcome
            # The fast path puts a body that came whole with its head in the request itself.
            outcome.events.append(("end", bytes(body) or bytes(request.body), data, wire.closing))
            if wire.closing:
                return outcome
            wire.start_next_cycle()
        elif event is NEED_DATA:
            if pending:
                wire.receive(pending.pop(0))
            elif not eof_sent:
                eof_sent = True
                outcome.events.append(("end of input",))  # what was decided before it, and after
                wire.receive(b"")
            else:
                outcome.events.append(("waiting",))
                return outcome
        elif event is CLOSED or event is PAUSED:
            outcome.events.append((event.name,))
            return outcome
        else:
            body += event


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(data[start:point])
        start = point
    pieces.append(data[start:])
    return [p for p in pieces if p]


def compare(data: bytes, cuts: list[int]) -> tuple[Outcome, Outcome]:
    chunks = split(data, cuts)
    fast, reference = within_one_second(
        lambda: (drive(FastWire(_ids(), PEER), chunks), drive(H11Wire(_ids(), PEER), chunks))
    )
    assert fast.events == reference.events  # the answers' bytes too, Date included
    return fast, reference


def req(
    method: str = "GET",
    target: str = "/api/user/1",
    headers: list[str] | None = None,
    body: bytes = b"",
    version: str = "HTTP/1.1",
    eol: str = "\r\n",
) -> bytes:
    lines = [f"{method} {target} {version}"] + (["Host: t"] if headers is None else headers)
    if body and headers is None:
        lines.append(f"Content-Length: {len(body)}")
    return (eol.join(lines) + eol + eol).encode("latin-1") + body


# -- the corpus: each must be handed over, never read by the fast path -----------------------

REFUSED = {
    "cl_and_te": req("POST", "/x", ["Host: t", "Content-Length: 5", "Transfer-Encoding: chunked"], b"0\r\n\r\n"),
    "te_and_cl": req("POST", "/x", ["Host: t", "Transfer-Encoding: chunked", "Content-Length: 5"], b"0\r\n\r\n"),
    "te_chunked": req("POST", "/x", ["Host: t", "Transfer-Encoding: chunked"], b"3\r\nabc\r\n0\r\n\r\n"),
    "te_identity": req("POST", "/x", ["Host: t", "Transfer-Encoding: identity"], b""),
    "cl_plus": req("POST", "/x", ["Host: t", "Content-Length: +5"], b"hello"),
    "cl_minus": req("POST", "/x", ["Host: t", "Content-Length: -1"], b""),
    "cl_hex": req("POST", "/x", ["Host: t", "Content-Length: 0x5"], b"hello"),
    "cl_empty": req("POST", "/x", ["Host: t", "Content-Length:"], b""),
    "cl_list_same": req("POST", "/x", ["Host: t", "Content-Length: 5, 5"], b"hello"),
    "cl_list_diff": req("POST", "/x", ["Host: t", "Content-Length: 5, 6"], b"hello"),
    "cl_duplicate_same": req("POST", "/x", ["Host: t", "Content-Length: 5", "Content-Length: 5"], b"hello"),
    "cl_duplicate_diff": req("POST", "/x", ["Host: t", "Content-Length: 5", "Content-Length: 4"], b"hello"),
    "cl_huge": req("POST", "/x", ["Host: t", "Content-Length: " + "9" * 30], b""),
    "obs_fold": req("GET", "/x", ["Host: t", "X-A: one", " two"]),
    "obs_fold_tab": req("GET", "/x", ["Host: t", "X-A: one", "\ttwo"]),
    "bare_lf": req("GET", "/x", eol="\n"),
    "bare_lf_one_line": b"GET /x HTTP/1.1\r\nHost: t\nX-A: b\r\n\r\n",
    "lf_cr_lf_end": b"GET /x HTTP/1.1\r\nHost: t\n\r\n",
    "nul_in_value": req("GET", "/x", ["Host: t", "X-A: a\x00b"]),
    "cr_in_value": req("GET", "/x", ["Host: t", "X-A: a\rb"]),
    "cr_at_value_end": req("GET", "/x", ["Host: t", "X-A: ab\r"]),
    "vt_in_value": req("GET", "/x", ["Host: t", "X-A: a\x0bb"]),
    "del_in_value": req("GET", "/x", ["Host: t", "X-A: a\x7fb"]),
    "obs_text_value": req("GET", "/x", ["Host: t", "X-A: caf\xe9"]),
    "space_before_colon": req("GET", "/x", ["Host: t", "X-A : b"]),
    "space_in_name": req("GET", "/x", ["Host: t", "X A: b"]),
    "empty_name": req("GET", "/x", ["Host: t", ": b"]),
    "no_colon": req("GET", "/x", ["Host: t", "X-A b"]),
    "absolute_form": req("GET", "http://evil.example/x"),
    "authority_form": req("CONNECT", "evil.example:443"),
    "connect_origin_form": req("CONNECT", "/x"),
    "asterisk": req("OPTIONS", "*"),
    "asterisk_get": req("GET", "*"),
    "http_1_0": req("GET", "/x", version="HTTP/1.0"),
    "http_1_0_no_host": req("GET", "/x", [], version="HTTP/1.0"),
    "http_2_0": req("GET", "/x", version="HTTP/2.0"),
    "http_0_9": b"GET /x\r\n\r\n",
    "lowercase_version": req("GET", "/x", version="http/1.1"),
    "no_host": req("GET", "/x", []),
    "two_hosts": req("GET", "/x", ["Host: a", "Host: b"]),
    "upgrade": req(
        "GET",
        "/ws",
        [
            "Host: t",
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version: 13",
        ],
    ),
    "upgrade_empty": req("GET", "/x", ["Host: t", "Upgrade:"]),
    "expect_continue": req("POST", "/x", ["Host: t", "Expect: 100-continue", "Content-Length: 2"], b"hi"),
    "expect_other": req("POST", "/x", ["Host: t", "Expect: teapot", "Content-Length: 2"], b"hi"),
    "two_authorizations": req("GET", "/x", ["Host: t", "Authorization: Bearer a", "Authorization: Bearer b"]),
    "leading_crlf": b"\r\n" + req(),
    "leading_space": b" " + req(),
    "double_space": b"GET  /x HTTP/1.1\r\nHost: t\r\n\r\n",
    "tab_separator": b"GET\t/x HTTP/1.1\r\nHost: t\r\n\r\n",
    "trailing_space_version": b"GET /x HTTP/1.1 \r\nHost: t\r\n\r\n",
    "bad_method": b"G(T /x HTTP/1.1\r\nHost: t\r\n\r\n",
    "space_in_target": b"GET /a b HTTP/1.1\r\nHost: t\r\n\r\n",
    "non_ascii_target": b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: t\r\n\r\n",
    "bad_percent_path": req("GET", "/x%ff"),
    "bad_percent_query": req("GET", "/x?a=%ff"),
    "head_too_big": req("GET", "/x", ["Host: t", "X-Filler: " + "v" * MAX_HEAD]),
    "head_never_ends": b"GET /x HTTP/1.1\r\nHost: t\r\n" + b"X-Filler: vvvvvvvvvv\r\n" * (MAX_HEAD // 20),
    "garbage": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    "truncated_head_then_eof": b"GET /x HTTP/1.1\r\nHost: t\r\n",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_fast_path_hands_over_what_it_is_not_sure_of(name):
    fast, _reference = compare(REFUSED[name], [])
    assert fast.fast_requests == 0
    assert fast.handed_over_at == 0


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_request_after_good_ones_is_handed_over_at_its_boundary(name):
    # Two pipelined good requests first: the fast path reads them, then hands the rest,
    # every unread byte, to h11 at the boundary.
    good = req("POST", "/a", body=b"one") + req("GET", "/b?x=1&y=%20")
    fast, _reference = compare(good + REFUSED[name], [])
    assert fast.fast_requests == 2
    assert fast.handed_over_at == 2


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_every_split_of_a_refused_stream_gives_h11_verdict(name):
    data = req("GET", "/a") + REFUSED[name]
    for cut in range(0, len(data) + 1, max(1, len(data) // 60)):
        compare(data, [cut, cut * 7 + 3])


# -- what the fast path accepts: the same as h11 ---------------------------------------------

ACCEPTED = {
    "get": req(),
    "post_body": req("POST", "/api/blog-post", body=b'{"title": "x"}'),
    "zero_length": req("POST", "/x", ["Host: t", "Content-Length: 0"]),
    "leading_zeros": req("POST", "/x", ["Host: t", "Content-Length: 0003"], b"abc"),
    "ows_and_case": req("GET", "/x", ["hOsT:t", "X-A: \t spaced  value \t", "X-Empty:", "X-Tab:\tv"]),
    "connection_close": req("GET", "/x", ["Host: t", "Connection: close"]),
    "connection_close_list": req("GET", "/x", ["Host: t", "Connection: keep-alive, CLOSE , te"]),
    "connection_keep_alive": req("GET", "/x", ["Host: t", "Connection: keep-alive"]),
    "lowercase_method": req("get", "/x"),
    "odd_method": req("M-SEARCH", "/x"),
    "query": req("GET", "/api/user?name=a%20b&flag=&x&sort=-score&limit=20"),
    "plus_in_query": req("GET", "/x?q=a+b"),
    "double_slash": req("GET", "//x/../y"),
    "cors": req(
        "OPTIONS",
        "/x",
        [
            "Host: t",
            "Origin: https://app.example",
            "Access-Control-Request-Method: POST",
            "Access-Control-Request-Headers: content-type",
        ],
    ),
    "request_id": req("GET", "/x", ["Host: t", "X-Request-Id: abc-123"]),
    "insane_request_id": req("GET", "/x", ["Host: t", "X-Request-Id: a b;c"]),
    "authorization": req("GET", "/x", ["Host: t", "Authorization: Bearer abc.def.ghi"]),
    "head_method": req("HEAD", "/x"),
    "head_at_limit": req("GET", "/x", ["Host: t", "X-Filler: " + "v" * (MAX_HEAD - 50)]),
    "pipelined": req("GET", "/a") + req("POST", "/b", body=b"xyz") + req("DELETE", "/c"),
    "pipelined_close": req("GET", "/a", ["Host: t", "Connection: close"]) + req("GET", "/b"),
    "body_then_eof": req("POST", "/x", ["Host: t", "Content-Length: 10"], b"abc"),
    "partial_head_then_eof": req("GET", "/a") + b"GET /b HTTP/1.1\r\nHo",
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_fast_path_reads_what_h11_reads(name):
    fast, _reference = compare(ACCEPTED[name], [])
    assert fast.fast_requests >= 1


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_every_split_point_gives_the_same_result(name):
    data = ACCEPTED[name]
    for cut in range(0, len(data) + 1, max(1, len(data) // 200)):
        compare(data, [cut])


def test_body_cut_short_by_end_of_input_is_h11s_400():
    fast, _reference = compare(ACCEPTED["body_then_eof"], [30])
    assert fast.events[-1][:2] == ("refused", 400)
    assert "received 3 bytes, expected 10" in fast.events[-1][3]


# -- hypothesis: streams of mostly good requests, with damage ------------------------------

_GOOD_NAME = st.sampled_from(
    [
        "Accept",
        "Content-Type",
        "X-A",
        "Origin",
        "X-Request-Id",
        "Connection",
        "Cookie",
        "te",
        "Keep-Alive",
        "user-AGENT",
        "Access-Control-Request-Method",
    ]
)
_ODD_NAME = st.sampled_from(
    ["Host", "host", "Content-Length", "Transfer-Encoding", "Upgrade", "Expect", "Authorization", "X A", "X-A ", ""]
)
_GOOD_VALUE = st.one_of(
    st.sampled_from(
        [
            "t",
            "0",
            "close",
            "keep-alive",
            "Close, x",
            "application/json",
            "",
            " x ",
            "a\tb",
            "Bearer x.y.z",
            "abc-123",
            "a b;c",
        ]
    ),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
)
_ODD_VALUE = st.one_of(
    st.sampled_from(["5", "05", "+5", "5, 5", "chunked", "websocket", "100-continue"]),
    st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=12),
)
_GOOD_TARGET = st.one_of(
    st.sampled_from(
        [
            "/",
            "/api/user/1",
            "/api/blog-post?published=true&sort=-score&limit=20",
            "/x?a=%20&b",
            "/%e2%82%ac",
            "/x?q=a+b&r=%2B",
        ]
    ),
    # no `%`: "/%80" is printable but no UTF-8 escape, refused as it should be (the odd targets
    # and the sampled ones above cover percent-encoding)
    st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="%"), max_size=10).map(
        lambda t: "/" + t
    ),
)
_ODD_TARGET = st.sampled_from(["/%ff", "*", "http://h/x", "/a b", "", "/caf\xe9"])


def _mostly(draw, good, odd, odds: int = 8):
    """`good` most of the time, `odd` one time in `odds` (never while `_GOOD_ONLY` is set)."""
    if _GOOD_ONLY[0]:
        return draw(good)
    return draw(odd) if draw(st.integers(0, odds - 1)) == 0 else draw(good)


_GOOD_ONLY = [False]


# The strategies a request is drawn from, built once: a strategy made inside a draw is built,
# validated and checked for emptiness on every example, a third of the drawing's CPU (and
# most of this file's time is drawing; bench/README.md, session 18, wt-suite7).
_METHOD = st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"])
_ODD_METHOD = st.sampled_from(["get", "CONNECT", "M-SEARCH", "G(T", ""])
_VERSION = st.just("HTTP/1.1")
_ODD_VERSION = st.sampled_from(["HTTP/1.0", "HTTP/2.0", "HTTP/1.1 ", "HTTP/1"])
_HOST = st.just(("Host: t",))
_ODD_HOST = st.sampled_from([(), ("Host: a", "Host: b"), ("Host:",)])
_HEADER_COUNT = st.integers(0, 4)
_SEP = st.sampled_from([": ", ":", ":\t", ":  "])
_ODD_SEP = st.sampled_from([" : ", " :", ""])
_BODY = st.binary(max_size=20)
_SKEW = st.just(0)
_ODD_SKEW = st.sampled_from([1, -1])
_CRLF = st.just("\r\n")
_LF = st.just("\n")
_EDITS = st.just(0)
_ODD_EDITS = st.integers(1, 2)
_EDIT_BYTE = st.sampled_from([0, 9, 10, 13, 32, 58, 127, 255, 65])
_EDIT_KIND = st.integers(0, 2)


@st.composite
def _request(draw) -> bytes:
    method = _mostly(draw, _METHOD, _ODD_METHOD)
    version = _mostly(draw, _VERSION, _ODD_VERSION)
    headers = list(_mostly(draw, _HOST, _ODD_HOST))
    for _ in range(draw(_HEADER_COUNT)):
        name = _mostly(draw, _GOOD_NAME, _ODD_NAME)
        value = _mostly(draw, _GOOD_VALUE, _ODD_VALUE)
        sep = _mostly(draw, _SEP, _ODD_SEP)
        headers.append(f"{name}{sep}{value}")
    body = draw(_BODY)
    if body or draw(st.booleans()):
        skew = _mostly(draw, _SKEW, _ODD_SKEW)
        headers.append(f"Content-Length: {len(body) + skew}")
    eol = _mostly(draw, _CRLF, _LF, odds=16)
    return req(method, _mostly(draw, _GOOD_TARGET, _ODD_TARGET), headers, body, version, eol)


_REQUESTS = st.lists(_request(), min_size=1, max_size=4)


@st.composite
def _stream(draw) -> bytes:
    data = b"".join(draw(_REQUESTS))
    for _ in range(_mostly(draw, _EDITS, _ODD_EDITS, odds=4)):  # a byte inserted, dropped or changed
        at = draw(st.integers(0, len(data) - 1))
        byte = bytes([draw(_EDIT_BYTE)])
        kind = draw(_EDIT_KIND)
        data = data[:at] + (byte if kind != 1 else b"") + data[at + (kind != 0) :]
    return data


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_stream(), st.lists(st.integers(0, 10_000), max_size=6))
def test_fast_path_equals_h11_on_random_streams(data, cuts):
    compare(data, cuts)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(st.integers(0, 10_000), max_size=6))
def test_fast_path_reads_good_streams_as_h11_does(data, cuts):
    _GOOD_ONLY[0] = True
    try:
        stream = data.draw(_REQUESTS.map(b"".join))
    finally:
        _GOOD_ONLY[0] = False
    fast, _reference = compare(stream, cuts)
    assert fast.fast_requests >= 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.lists(st.integers(0, 10_000), max_size=4))
def test_fast_path_equals_h11_on_arbitrary_bytes(data, cuts):
    compare(req() + data, cuts)
