"""A response's bytes in one step (`Wire.encode`), and a request that came whole.

`FastWire.encode` writes the common response (a final status, headers of printable ASCII, no
CORS headers, no close) from a head made once per status and header names, and anything else
through `message.encode_response`, the generic path: for every response below both give the
same bytes, the same body size, the same `closing`, or the same refusal. A head whose body is
all in the buffer (a GET, a POST that came in one segment) says so (`Head.complete`), so the
connection skips the body's intake; its END still follows.
"""

from __future__ import annotations

import time
from email.utils import formatdate

import h11
import pytest

from dbsvc.http.fastpath import FastWire
from dbsvc.http.message import Head, RequestIds, encode_response
from dbsvc.http.types import Response
from dbsvc.http.wire import END, HAND_OVER, NEED_DATA, H11Wire
from support.clock import within_one_second

GET = b"GET /api/post/1 HTTP/1.1\r\nHost: t\r\n\r\n"
HEAD = b"HEAD /api/post/1 HTTP/1.1\r\nHost: t\r\n\r\n"
CLOSING = b"GET /api/post/1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
READ_HEADERS = [("Dbsvc-Watermark", "20000"), ("Dbsvc-Offset", "20100")]
CORS = [(b"access-control-allow-origin", b"https://a.example"), (b"vary", b"Origin")]

# name: (request bytes, response, extra headers, close)
CASES = {
    "get": (GET, Response(200, b'{"id":1}', [*READ_HEADERS, ("ETag", '"7"')]), None, False),
    "list_with_link": (
        GET,
        Response(200, b'{"data":[]}', [*READ_HEADERS, ("Link", '</api/post?cursor=x>; rel="next"')]),
        None,
        False,
    ),
    "head": (HEAD, Response(200, b'{"id":1}', READ_HEADERS), None, False),
    "created": (GET, Response(201, b"{}", [("Location", "/api/post/1"), ("ETag", '"3"')]), None, False),
    "no_content": (GET, Response(204, b"", [], None), None, False),
    "no_content_with_type": (GET, Response(204, b""), None, False),
    "not_modified": (GET, Response(304, b"", [("ETag", '"3"')], None), None, False),
    "not_modified_with_body": (GET, Response(304, b"ignored", [("ETag", '"3"')]), None, False),
    "problem": (GET, Response(404, b"{}", [], "application/problem+json"), None, False),
    "no_content_type": (GET, Response(200, b"hi", [], None), None, False),
    "no_headers": (GET, Response(200, b"{}"), None, False),
    "unknown_status": (GET, Response(599, b"{}"), None, False),
    "bytearray_body": (GET, Response(200, bytearray(b"{}")), None, False),
    "percent_in_name": (GET, Response(200, b"{}", [("X%d", "1")]), None, False),
    "percent_in_value": (GET, Response(200, b"{}", [("X-A", "%s%d%%")]), None, False),
    "tab_inside_value": (GET, Response(200, b"{}", [("X-A", "a\tb")]), None, False),
    "latin1_value": (GET, Response(200, b"{}", [("X-A", "caf\xe9")]), None, False),
    "spaces_inside_value": (GET, Response(200, b"{}", [("X-A", "a:  b  c")]), None, False),
    "empty_value": (GET, Response(200, b"{}", [("X-A", "")]), None, False),
    "same_names_twice": (GET, Response(200, b"{}", [("Vary", "A"), ("Vary", "B")]), None, False),
    "cors_extra": (GET, Response(200, b"[]", READ_HEADERS), CORS, False),
    "closing": (GET, Response(503, b"{}", [("Retry-After", "1")], "application/problem+json"), None, True),
    # a HEAD's body is dropped on every way to the generic path, its Content-Length kept
    "head_cors": (HEAD, Response(200, b'{"id":1}', READ_HEADERS), CORS, False),
    "head_tab_value": (HEAD, Response(200, b'{"id":1}', [("X-A", "a\tb")]), None, False),
    "head_spaces_inside": (HEAD, Response(200, b'{"id":1}', [("X-A", "a:  b")]), None, False),
    "head_int_value": (HEAD, Response(200, b'{"id":1}', [("X-A", 5)]), None, False),  # type: ignore[list-item]
    "no_content_with_body": (GET, Response(204, b"ignored", [], None), None, False),
    "reset_content_with_body": (GET, Response(205, b"x", [], None), None, False),
    "client_asked_close": (CLOSING, Response(200, b"{}", READ_HEADERS), None, False),
    # refused, by both paths alike
    "leading_space": (GET, Response(200, b"{}", [("X-A", " a")]), None, False),
    "trailing_space": (GET, Response(200, b"{}", [("X-A", "a ")]), None, False),
    "crlf_in_value": (GET, Response(200, b"{}", [("X-A", "a\r\nSet-Cookie: x=1")]), None, False),
    "nul_in_value": (GET, Response(200, b"{}", [("X-A", "a\x00")]), None, False),
    "bad_content_type": (GET, Response(200, b"{}", [], "text/plain\r\nX: 1"), None, False),
    "owned_header": (GET, Response(200, b"{}", [("Content-Length", "5")]), None, False),
    "bad_name": (GET, Response(200, b"{}", [("X A", "1")]), None, False),
    "status_99": (GET, Response(99, b""), None, False),
    "status_1000": (GET, Response(1000, b""), None, False),
    "status_float": (GET, Response(200.0, b"{}"), None, False),  # type: ignore[arg-type]
    "status_bool": (GET, Response(True, b"{}"), None, False),  # type: ignore[arg-type]
    "str_body": (GET, Response(200, "{}"), None, False),  # type: ignore[arg-type]
    "int_value": (GET, Response(200, b"{}", [("X-A", 5)]), None, False),  # type: ignore[list-item]
}


def _read(request: bytes) -> tuple[FastWire, Head]:
    wire = FastWire(RequestIds(), None)
    wire.receive(request)
    head = wire.next_event()
    assert isinstance(head, Head)
    assert wire.next_event() is END
    return wire, head


def _outcome(encode) -> tuple:
    try:
        data, size = encode()
    except Exception as exc:  # the refusal itself is what is compared
        return ("refused", type(exc).__name__, str(exc))
    return (data, size)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fast_wire_encodes_a_response_as_the_generic_path_does(name):
    request, response, extra, close = CASES[name]

    def both() -> tuple:  # on fresh wires each time, so within_one_second may make it again
        fast_wire, head = _read(request)
        generic_wire, _same = _read(request)
        rid = "rid-7"
        fast = _outcome(lambda: fast_wire.encode(response, head.request, rid, extra, close))
        generic = _outcome(lambda: encode_response(generic_wire.respond, response, head.request, rid, extra, close))
        return fast, generic, fast_wire.closing, generic_wire.closing

    for _twice in range(2):  # the second time from the head made the first time
        fast, generic, fast_closing, generic_closing = within_one_second(both)
        assert fast == generic
        assert fast_closing == generic_closing


def test_fast_wire_encodes_an_answer_to_no_request_as_the_generic_path_does():
    response = Response(503, b"{}", [], "application/problem+json")
    fast, generic = within_one_second(
        lambda: (
            FastWire(RequestIds(), None).encode(response, None, "rid-1", None, True),
            encode_response(FastWire(RequestIds(), None).respond, response, None, "rid-1", None, True),
        )
    )
    assert fast == generic


def test_h11_wire_encodes_through_h11():
    wire = H11Wire(RequestIds(), None)
    wire.receive(GET)
    head = wire.next_event()
    assert wire.next_event() is END
    data, size = wire.encode(Response(200, b'{"id":1}', READ_HEADERS), head.request, "rid-1", None, False)
    assert data.startswith(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nDbsvc-Watermark: 20000\r\n")
    assert data.endswith(b"x-request-id: rid-1\r\n\r\n" + b'{"id":1}') and size == 8


def _imf_now() -> str:
    """The IMF-fixdate of the clock's second now (RFC 9110 §5.6.7), made apart from message.py."""
    return formatdate(time.time(), usegmt=True)


def _fast_date() -> tuple[str, str, str]:
    """The clock's date just before a fast head is encoded, the head's Date, and the clock's
    date just after."""
    wire, head = _read(GET)
    before = _imf_now()
    data, _size = wire.encode(Response(200, b"{}"), head.request, "rid-1", None, False)
    after = _imf_now()
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="GET", target="/", headers=[("Host", "t")]))
    client.receive_data(data)
    answer = client.next_event()
    assert isinstance(answer, h11.Response)
    (value,) = [v for k, v in answer.headers if k == b"date"]
    return before, value.decode("ascii"), after


def test_the_fast_head_follows_the_date():
    # The head is made once per status and header names, its Date filled in at each encode:
    # it is the clock's second at the encode, and a later second once the clock has moved.
    # The clock is read on both sides of the encode, and the turn of the second is waited
    # for (a poll with a deadline): compared with one date read after the encode, the test
    # failed whenever the second turned in between (under load, session 22).
    before, first, after = _fast_date()
    assert first in (before, after)
    deadline = time.monotonic() + 5
    while _imf_now() == first:  # the event: the clock's second turns
        assert time.monotonic() < deadline, "the clock's second did not turn in 5 s"
        time.sleep(0.01)
    before, second, after = _fast_date()
    assert second in (before, after)
    assert second != first


@pytest.mark.parametrize(
    "request_bytes",
    [
        GET,
        b"POST /api/post HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}",
        b"DELETE /api/post/1 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    ],
)
def test_a_request_whose_body_is_all_there_is_complete_and_its_end_follows(request_bytes):
    wire = FastWire(RequestIds(), None)
    wire.receive(request_bytes)
    head = wire.next_event()
    assert isinstance(head, Head) and head.complete
    assert wire.next_event() is END
    assert wire.next_event() is NEED_DATA


def test_a_request_whose_body_is_still_coming_is_not_complete():
    wire = FastWire(RequestIds(), None)
    wire.receive(b"POST /api/post HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\n{}")
    head = wire.next_event()
    assert isinstance(head, Head) and not head.complete
    assert wire.next_event() == b"{}"
    assert wire.next_event() is NEED_DATA
    wire.receive(b"[]")
    assert wire.next_event() == b"[]"
    assert wire.next_event() is END


def test_h11_heads_are_never_complete():
    # the h11 wire reads bodies in pieces: the connection always takes them in
    wire = H11Wire(RequestIds(), None)
    wire.receive(GET)
    head = wire.next_event()
    assert isinstance(head, Head) and not head.complete


# -- a connection's header lines, read once while they repeat

BLOCKS = [
    b"Host: t\r\n\r\n",
    b"Host: t\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n",
    b"Host: t\r\nConnection: close\r\n\r\n",
    b"Host: t\r\nOrigin: https://a.example\r\nX-Request-Id: mine-1\r\n\r\n",
    b"Host: t\r\nContent-Length: 2\r\n\r\n{}",
    b"Host: t\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n",  # handed over
    b"Host: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",  # handed over
    b"Host: t\r\nHost: u\r\n\r\n",  # handed over
]
LINES = [b"GET /api/post/1 HTTP/1.1\r\n", b"GET /api/post?limit=2 HTTP/1.1\r\n", b"POST /api/post HTTP/1.1\r\n"]


def _facts(head: Head) -> tuple:
    request = head.request
    return (
        request.method,
        request.target,
        request.path,
        request.query,
        request.headers,
        bytes(request.body),
        request.request_id == "mine-1",
        request.client,
        head.content_length,
        head.chunked,
        head.expects_continue,
        head.origin,
        head.preflight_method,
        head.preflight_headers,
    )


def _h11_facts(data: bytes) -> tuple:
    """What h11, the parser of record, reads of one request (its body from the pieces)."""
    wire = H11Wire(RequestIds(), ("127.0.0.1", 9))
    wire.receive(data)
    head = wire.next_event()
    assert isinstance(head, Head)
    body = b""
    while (event := wire.next_event()) is not END:
        body += event  # type: ignore[operator]
    head.request.body = body
    return _facts(head)


@pytest.mark.parametrize(
    "block",
    [
        BLOCKS[1],
        b"Host: t\r\nOrigin: https://a.example\r\nX-Request-Id: mine-1\r\nAccess-Control-Request-Method: PUT\r\n"
        b"Access-Control-Request-Headers: x-a\r\n\r\n",
        b"Host: t\r\nContent-Length: 2\r\nAuthorization: Bearer a\r\n\r\n{}",
        b"Host: t\r\nIf-None-Match: \"3\"\r\nX-Request-Id: mine-1\r\nReferer: /x\r\n\r\n",
        b"Host: t\r\nConnection: close,keep-alive\r\n\r\n",
    ],
)
def test_the_fast_path_reads_a_head_and_its_repeats_as_h11_does(block):
    wire = FastWire(RequestIds(), ("127.0.0.1", 9))
    for line in LINES * 2:
        wire.receive(line + block)
        head = wire.next_event()
        assert isinstance(head, Head)
        assert wire.next_event() is END
        assert _facts(head) == _h11_facts(line + block)
        reference = H11Wire(RequestIds(), None)
        reference.receive(line + block)
        while reference.next_event() is not END:
            pass
        data, _size = wire.encode(Response(200, b"{}"), head.request, "rid", None, False)
        assert (
            data.split(b"\r\ndate:")[0]
            == reference.encode(Response(200, b"{}"), None, "rid", None, False)[0].split(b"\r\ndate:")[0]
        )
        assert wire.closing == reference.closing
        if wire.closing:
            wire = FastWire(RequestIds(), ("127.0.0.1", 9))
        else:
            wire.start_next_cycle()


def test_the_same_request_twice_in_a_row_is_read_twice_by_the_fast_path():
    wire = FastWire(RequestIds(), None)
    for _ in range(3):
        wire.receive(GET)
        head = wire.next_event()
        assert isinstance(head, Head) and head.request.target == "/api/post/1"
        assert wire.next_event() is END
        wire.encode(Response(200, b"{}"), head.request, "rid", None, False)
        wire.start_next_cycle()


def _requests(stream: list[bytes]) -> list[tuple]:
    """What a fresh FastWire per request and one FastWire for the whole stream read: each
    request's facts, or where the stream was handed over."""
    seen = []
    wire = FastWire(RequestIds(), None)
    for data in stream:
        wire.receive(data)
        event = wire.next_event()
        if not isinstance(event, Head):
            seen.append(("not read here", event))
            wire = FastWire(RequestIds(), None)
            continue
        request = event.request
        seen.append(
            (
                request.method,
                request.target,
                request.query,
                request.headers,
                request.body,
                request.request_id == "mine-1",
                event.content_length,
                event.origin,
                event.complete,
            )
        )
        while wire.next_event() is not END:
            pass
        data, _size = wire.encode(Response(200, b"{}"), request, "rid", None, False)
        seen.append(("closing", wire.closing))
        if wire.closing:
            wire = FastWire(RequestIds(), None)
        else:
            wire.start_next_cycle()
    return seen


@pytest.mark.parametrize("block", BLOCKS)
def test_a_repeated_header_block_reads_as_it_did_the_first_time(block):
    stream = [line + block for line in LINES * 2]
    fresh = []
    for data in stream:
        fresh.extend(_requests([data]))
    assert _requests(stream) == fresh


def test_a_changed_header_block_is_read_again():
    stream = [LINES[0] + BLOCKS[0], LINES[0] + BLOCKS[1], LINES[0] + BLOCKS[0], LINES[0] + BLOCKS[3]]
    fresh = []
    for data in stream:
        fresh.extend(_requests([data]))
    assert _requests(stream) == fresh


def test_a_request_line_the_fast_path_refuses_is_handed_over_even_after_its_block_was_read():
    for line in (b"GET /a b HTTP/1.1\r\n", b"CONNECT /x HTTP/1.1\r\n", b"GET /x HTTP/1.0\r\n", b"GET x HTTP/1.1\r\n"):
        wire = FastWire(RequestIds(), None)
        wire.receive(LINES[0] + BLOCKS[0])
        assert isinstance(wire.next_event(), Head)
        assert wire.next_event() is END
        wire.encode(Response(200, b"{}"), None, "rid", None, False)
        wire.start_next_cycle()
        wire.receive(line + BLOCKS[0])
        assert wire.next_event() is HAND_OVER, line
