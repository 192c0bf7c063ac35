"""The fast path's bodies: one that came whole with its head goes in the request, END next;
one still arriving comes in pieces, as h11 gives them (fastpath.py, "A body that arrived
whole"). Sans-IO: a FastWire fed bytes, its events read back."""

from __future__ import annotations

import pytest

from dbsvc.errors import BadRequest
from dbsvc.http.fastpath import FastWire
from dbsvc.http.message import Head, RequestIds
from dbsvc.http.wire import END, HAND_OVER, NEED_DATA

BODY = b'{"title":"a post","body":"' + b"lorem ipsum " * 25 + b'"}'
HEAD = b"POST /api/blog-post HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
REQUEST = HEAD % len(BODY) + BODY


def _events(wire: FastWire, limit: int = 10) -> list:
    events = []
    for _ in range(limit):
        event = wire.next_event()
        events.append(event)
        if event is END or event is NEED_DATA:
            return events
    return events


def test_a_body_whole_with_its_head_is_in_the_request_and_end_follows():
    wire = FastWire(RequestIds(), None)
    wire.receive(REQUEST)
    head, end = _events(wire)
    assert type(head) is Head and head.content_length == len(BODY)
    assert bytes(head.request.body) == BODY
    assert end is END


def test_a_body_still_arriving_comes_in_pieces():
    wire = FastWire(RequestIds(), None)
    wire.receive(REQUEST[:-10])
    head, piece, need = _events(wire)
    assert type(head) is Head and head.request.body == b""
    assert bytes(piece) == BODY[:-10] and need is NEED_DATA
    wire.receive(REQUEST[-10:])
    assert [bytes(e) if type(e) is not type(END) else e for e in _events(wire)] == [BODY[-10:], END]


@pytest.mark.parametrize("extra", [b"", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"GET / HT"])
def test_the_bytes_after_a_whole_body_are_the_next_request(extra):
    wire = FastWire(RequestIds(), None)
    wire.receive(REQUEST + extra)
    head, end = _events(wire)
    assert bytes(head.request.body) == BODY and end is END
    wire.respond(201, b"Created", [(b"content-length", b"0")], b"", False)
    wire.start_next_cycle()
    following = wire.next_event()
    if extra.endswith(b"\r\n\r\n"):
        assert type(following) is Head and following.request.method == "GET" and following.request.body == b""
    else:
        assert following is NEED_DATA


def test_an_end_of_input_inside_a_body_is_still_h11s_400():
    wire = FastWire(RequestIds(), None)
    wire.receive(REQUEST[:-1])
    _events(wire)
    wire.receive(b"")
    with pytest.raises(BadRequest, match=f"received {len(BODY) - 1} bytes, expected {len(BODY)}"):
        wire.next_event()


def _write(body: bytes, length: bytes | None = None, extra: bytes = b"") -> bytes:
    """A POST of `body` whose header lines are HEAD's but for its Content-Length value
    (`length`, by default the body's size) and `extra` lines."""
    value = str(len(body)).encode() if length is None else length
    return (
        b"POST /api/blog-post HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
        + value
        + b"\r\n"
        + extra
        + b"\r\n"
        + body
    )


def _next_head(wire: FastWire, data: bytes):
    wire.receive(data)
    event = wire.next_event()
    if type(event) is Head:
        assert wire.next_event() is END
        wire.respond(201, b"Created", [(b"content-length", b"0")], b"", False)
        wire.start_next_cycle()
    return event


def test_writes_whose_header_lines_differ_only_by_length_each_read_right():
    """A client's writes repeat their header lines but for Content-Length (fastpath.py
    `_same_but_length`): every head still has its own length, body and header value."""
    wire = FastWire(RequestIds(), None)
    for body in (b"{}", b'{"a":1}', b'{"title":"' + b"x" * 95 + b'"}', b'{"b":2}', BODY, b"[]"):
        head = _next_head(wire, _write(body))
        assert type(head) is Head and head.content_length == len(body)
        assert bytes(head.request.body) == body
        assert head.request.header("content-length") == str(len(body))
        assert head.request.headers == [
            ("host", "x"),
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
        ]


@pytest.mark.parametrize(
    ("length", "extra"),
    [
        (b"\xb92", b""),  # SUPERSCRIPT ONE: a digit to str.isdigit, not to HTTP
        (b"1" * 19, b""),  # more digits than the fast path reads
        (b"+2", b""),
        (b"2", b"Transfer-Encoding: chunked\r\n"),
    ],
)
def test_a_length_the_fast_path_refuses_is_handed_over_after_a_write_read_before(length, extra):
    wire = FastWire(RequestIds(), None)
    assert type(_next_head(wire, _write(b"{}"))) is Head
    assert _next_head(wire, _write(b"{}", length, extra)) is HAND_OVER


def test_a_write_with_other_header_lines_is_read_afresh():
    wire = FastWire(RequestIds(), None)
    assert type(_next_head(wire, _write(b"{}"))) is Head
    head = _next_head(wire, _write(b'{"a":1}', extra=b"X-Request-Id: abc-123\r\n"))
    assert type(head) is Head and head.request.request_id == "abc-123" and head.content_length == 7
    head = _next_head(wire, _write(b"{}"))
    assert type(head) is Head and head.request.request_id != "abc-123" and head.content_length == 2


def _head_of(lines: bytes, body: bytes) -> bytes:
    """A PUT of `body` with the header lines `lines` (LENGTH there is its Content-Length)."""
    return b"PUT /api/blog-post/7 HTTP/1.1\r\n" + lines.replace(b"LENGTH", str(len(body)).encode()) + b"\r\n" + body


def test_the_same_write_twice_is_read_twice():
    wire = FastWire(RequestIds(), None)
    for _ in range(2):
        head = _next_head(wire, _write(b'{"a":1}'))
        assert type(head) is Head and head.request.method == "POST" and head.request.path == "/api/blog-post"
        assert bytes(head.request.body) == b'{"a":1}' and head.content_length == 7


def test_header_lines_after_the_length_stay_and_a_change_there_is_read():
    wire = FastWire(RequestIds(), None)
    lines = b"Content-Length: LENGTH\r\nHost: x\r\nX-Tag: a\r\n"
    for body in (b"{}", b'{"b":22}', b"[1]"):
        head = _next_head(wire, _head_of(lines, body))
        assert type(head) is Head and head.request.method == "PUT" and bytes(head.request.body) == body
        assert head.request.headers == [("content-length", str(len(body))), ("host", "x"), ("x-tag", "a")]
    # the same length, a value after it changed (same size): read afresh
    head = _next_head(wire, _head_of(b"Content-Length: LENGTH\r\nHost: x\r\nX-Tag: b\r\n", b"[1]"))
    assert type(head) is Head and head.request.header("x-tag") == "b"


def test_a_change_before_the_length_at_the_same_size_is_read():
    wire = FastWire(RequestIds(), None)
    assert _next_head(wire, _head_of(b"Host: x\r\nContent-Length: LENGTH\r\n", b"{}")).request.header("host") == "x"
    head = _next_head(wire, _head_of(b"Host: y\r\nContent-Length: LENGTH\r\n", b"{}"))
    assert type(head) is Head and head.request.header("host") == "y"
