"""The fast path's bodies: one that came whole with its head goes in the request, END next;
one still arriving comes in pieces, as h11 gives them (fastpath.py, "A body that arrived
whole"). Sans-IO: a FastWire fed bytes, its events read back."""

from __future__ import annotations

import pytest

from dbsvc.errors import BadRequest
from dbsvc.http.fastpath import FastWire
from dbsvc.http.message import Head, RequestIds
from dbsvc.http.wire import END, NEED_DATA

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
