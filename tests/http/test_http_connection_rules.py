"""The connection rules 1-8 of dbsvc/http/connection.py against a server running in this
test process (its loop in a thread, a real socket on 127.0.0.1, port 0), one test per
behaviour. The other tests in tests/http drive demo_app.py in a child process; these run
the same app in-process so that mutation testing, which only sees its own process, can
tell which of them covers which line (docs/mutation.md)."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest

from dbsvc.errors import HeadersTooLarge, UriTooLong
from dbsvc.http.connection import MAX_HEAD
from support.demo_app import app
from support.httpkit import Client, assert_one_layer_crash
from support.inprocess import WAIT, InProcessServer, lab_settings

MAX_BODY = 1024


class Served(InProcessServer):
    def client(self) -> Client:
        return Client(self.port, timeout=WAIT)


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    settings = lab_settings(MAX_BODY)
    server = Served(app, settings).start()
    yield server
    server.stop()


def _request(target: str, body: bytes = b"", extra: str = "") -> bytes:
    length = f"Content-Length: {len(body)}\r\n" if body else ""
    return f"POST {target} HTTP/1.1\r\nHost: t\r\n{length}{extra}\r\n".encode() + body


def _send_in_pieces(client: Client, head: bytes, pieces: int, pause: float = 0.0) -> None:
    """`head` in `pieces` writes, `pause` seconds apart; the server may stop reading early."""
    step = -(-len(head) // pieces)
    try:
        for i in range(0, len(head), step):
            client.send(head[i : i + step])
            if pause:
                time.sleep(pause)
    except (BrokenPipeError, ConnectionResetError):
        pass


def test_rule_1_pipelined_requests_are_answered_in_request_order(served):
    client = served.client()
    # The first answer is the slowest one: it must still come first.
    client.send(_request("/slow?ms=100") + _request("/echo", b"two") + _request("/async-echo", b"three"))
    first, second, third = (client.read_response() for _ in range(3))
    assert first.status == second.status == third.status == 200
    assert second.json()["body"] == "two"
    assert third.json()["body"] == "three"
    assert [r.json()["path"] for r in (second, third)] == ["/echo", "/async-echo"]
    client.close()


def test_rule_2_a_body_larger_than_one_feed_arrives_whole(served):
    # More than FEED_SIZE in one write is fed to h11 in pieces, none lost or reordered.
    client = served.client()
    body = bytes(range(256)) * 3
    client.send(_request("/echo", body[:MAX_BODY]) + _request("/echo", b"after"))
    assert client.read_response().json()["body_len"] == len(body[:MAX_BODY])
    assert client.read_response().json()["body"] == "after"
    client.close()


def test_rule_3_a_head_over_the_limit_is_431_whole_or_in_pieces(served):
    filler = "".join(f"X-Filler-{n}: {'v' * 100}\r\n" for n in range(MAX_HEAD // 100 + 8))
    head = f"GET /echo HTTP/1.1\r\nHost: t\r\n{filler}\r\n".encode()
    for pieces in (1, 7):
        client = served.client()
        _send_in_pieces(client, head, pieces)
        response = client.read_response()
        assert response.status == 431
        assert response.json()["code"] == HeadersTooLarge.code
        assert client.is_closed(WAIT)
        client.close()


@pytest.mark.parametrize("pieces", [1, 7])
@pytest.mark.parametrize("headers", ["", "X-Small: 1\r\n"])
def test_rule_3_a_request_line_over_the_limit_is_414_whole_or_in_pieces(served, pieces, headers):
    # A query string of many filter values: the target is what the client has to shorten,
    # so 414 says so where 431 would send it looking at its headers. In pieces (apart in
    # time, so the server reads them apart), h11 refuses the unfinished line; whole, the
    # wire measures it.
    target = "/echo?" + "&".join(f"name=value{n}" for n in range(MAX_HEAD // 7))  # about twice the limit
    head = f"GET {target} HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode()
    assert len(target) > MAX_HEAD
    client = served.client()
    _send_in_pieces(client, head, pieces, pause=0.005)
    response = client.read_response()
    assert response.status == 414
    assert response.json()["title"] == "URI Too Long" and response.json()["code"] == UriTooLong.code
    assert response.json()["detail"] == (
        f"request line is over the limit of {MAX_HEAD} bytes for a request head: its target is too long"
    )
    assert client.is_closed(WAIT)
    client.close()
    assert served.client().request("GET", "/echo").status == 200


def test_rule_3_a_line_under_the_limit_with_headers_past_it_is_431(served):
    # The line ends inside the limit (h11 sees its CRLF in what it refuses): the headers are
    # what is too large, whatever their share.
    target = "/echo?q=" + "v" * (MAX_HEAD // 2)
    filler = "".join(f"X-Filler-{n}: {'v' * 100}\r\n" for n in range(MAX_HEAD // 200 + 8))
    for pieces in (1, 7):
        head = f"GET {target} HTTP/1.1\r\nHost: t\r\n{filler}\r\n".encode()
        client = served.client()
        _send_in_pieces(client, head, pieces, pause=0.005)
        assert client.read_response().status == 431
        client.close()


def test_rule_3_a_head_just_under_the_limit_is_served(served):
    filler = "X-Filler: " + "v" * (MAX_HEAD - 200) + "\r\n"
    client = served.client()
    client.send(f"GET /echo HTTP/1.1\r\nHost: t\r\n{filler}\r\n".encode())
    assert client.read_response().status == 200
    # A second request on the same connection is measured from its own start.
    client.send(f"GET /echo HTTP/1.1\r\nHost: t\r\n{filler}\r\n".encode())
    assert client.read_response().status == 200
    client.close()


def test_rule_4_content_length_with_transfer_encoding_is_400_and_close(served):
    client = served.client()
    client.send(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    )
    response = client.read_response()
    assert response.status == 400
    assert response.json()["detail"] == "request has both content-length and transfer-encoding"
    assert response.header("connection") == "close"
    assert client.is_closed(WAIT)


def test_rule_5_a_declared_length_over_the_limit_is_413_before_any_body_byte(served):
    client = served.client()
    client.send(f"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode())
    response = client.read_response()
    assert response.status == 413
    problem = response.json()
    assert problem["code"] == "payload_too_large"
    assert problem["detail"] == f"request body of {MAX_BODY + 1} bytes is over the limit of {MAX_BODY} bytes"
    assert problem["limit"] == MAX_BODY
    assert client.is_closed(WAIT)


def test_rule_5_a_body_at_the_limit_is_accepted(served):
    client = served.client()
    assert client.request("POST", "/echo", body=b"b" * MAX_BODY).json()["body_len"] == MAX_BODY
    client.close()


def test_rule_5_a_chunked_body_crossing_the_limit_is_413_and_close(served):
    client = served.client()
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    client.send(b"200\r\n" + b"a" * 512 + b"\r\n" + b"200\r\n" + b"a" * 512 + b"\r\n")
    client.send(b"1\r\na\r\n")  # byte 1025
    response = client.read_response()
    assert response.status == 413
    assert response.json()["detail"] == f"request body is over the limit of {MAX_BODY} bytes"
    assert response.json()["limit"] == MAX_BODY
    assert client.is_closed(WAIT)


def test_rule_6_100_continue_only_for_a_head_that_passed(served):
    client = served.client()
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
    assert client.read_response().status == 100
    client.send(b"hello")
    assert client.read_response().json()["body"] == "hello"
    client.close()
    refused = served.client()
    refused.send(
        f"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {MAX_BODY + 1}\r\nExpect: 100-continue\r\n\r\n".encode()
    )
    assert refused.read_response().status == 413  # no 100 first
    assert refused.is_closed(WAIT)


def test_rule_7_an_error_answer_is_readable_although_the_client_sent_more(served):
    client = served.client()
    # The refused request's body follows at once; the server must not reset before the
    # client has read the 413 (it lingers, discarding the input).
    client.send(
        f"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {MAX_BODY * 8}\r\n\r\n".encode() + b"x" * (MAX_BODY * 8)
    )
    response = client.read_response()
    assert response.status == 413
    assert response.json()["code"] == "payload_too_large"
    assert client.is_closed(WAIT)


@pytest.mark.parametrize(
    "route", ["/error", "/async-error", "/none", "/bad-header", "/bad-body", "/bad-status", "/deferred-error?kind=boom"]
)
def test_rule_8_an_application_failure_is_a_500_problem_and_the_connection_goes_on(served, route, caplog):
    client = served.client()
    with caplog.at_level(logging.ERROR, logger="dbsvc.http"):
        response = client.request("GET", route, {"X-Request-Id": "fail-1"})
        assert client.request("GET", "/echo").status == 200
    assert response.status == 500
    assert response.header("content-type") == "application/problem+json"
    assert response.json() == {
        "type": "about:blank",
        "title": "Internal Server Error",
        "status": 500,
        "code": "internal",
        "detail": "internal server error",
        "request_id": "fail-1",
    }
    # One log line naming the request, with the exception's type and frames but never its
    # message; the 500 itself rendered (no "could not be rendered" fallback).
    path = route.partition("?")[0]
    [record] = [r for r in caplog.records if r.name == "dbsvc.http"]
    assert record.getMessage() == f"unhandled error in GET {path} (request_id=fail-1)"
    assert record.exc_info is not None and record.exc_info[1] is not None
    assert getattr(record, "exc_messages", None) is False
    client.close()


def test_a_head_answer_has_no_body_and_the_connection_goes_on(served):
    client = served.client()
    response = client.request("HEAD", "/echo")
    assert response.status == 200 and int(response.header("content-length")) > 0
    assert client.request("GET", "/echo?after=head").json()["query"] == [["after", "head"]]
    client.close()


def test_options_asterisk_is_204_with_allow_and_the_connection_goes_on(served):
    client = served.client()
    client.send(b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n")
    response = client.read_response()
    assert response.status == 204 and response.body == b""
    assert (
        response.header("allow") == "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"
    )  # docs/security.md's text, not the constant
    assert client.request("GET", "/echo?after=options").json()["query"] == [["after", "options"]]
    client.close()


@pytest.mark.parametrize("route, status", [("/bad", 400), ("/deferred-error?kind=bad", 400)])
def test_rule_8_a_request_error_from_the_application_is_its_own_problem(served, route, status):
    client = served.client()
    response = client.request("GET", route)
    assert response.status == status
    problem = response.json()
    assert problem["code"] == "bad_request"
    assert problem["request_id"] == response.header("x-request-id")
    assert client.request("GET", "/echo").status == 200
    client.close()


def test_rule_1_responses_held_back_by_a_client_that_does_not_read_all_arrive_in_order(served):
    # 32 pipelined requests for 1 MB answers, unread: the server's socket buffer fills,
    # writing pauses (no further request is parsed), and resumes as the client reads.
    client = served.client()
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # a slow reader
    sizes = [1_000_000 + i for i in range(32)]
    client.send(b"".join(f"GET /big?n={n} HTTP/1.1\r\nHost: t\r\n\r\n".encode() for n in sizes))
    got = []
    for _ in sizes:
        response = client.read_response()
        assert response.status == 200
        got.append(len(response.body))
    assert got == sizes
    assert client.request("GET", "/echo").status == 200
    client.close()


@pytest.mark.parametrize("garbage", [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n"])
def test_rule_8_bytes_that_are_not_http_get_400_and_close(served, garbage):
    client = served.client()
    client.send(garbage)
    response = client.read_response()
    assert response.status == 400
    assert response.json()["code"] == "bad_request"
    assert response.header("connection") == "close"
    assert client.is_closed(WAIT)
    assert served.client().request("GET", "/echo").status == 200


def test_rule_8_a_bug_in_this_layer_is_logged_without_its_message_and_the_connection_closed(served, caplog):
    # The demo's /bad-upgrade hands the WebSocket layer a close time that is not a number:
    # an exception of the protocol layer's own after the 101.
    client = served.client()
    with caplog.at_level(logging.ERROR, logger="dbsvc.http"):
        client.send(
            b"GET /bad-upgrade HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"X-Request-Id: crash-1\r\n\r\n"
        )
        assert client.read_response().status == 101
        assert client.is_closed(WAIT)
    assert_one_layer_crash(caplog.records, "upgraded", "crash-1", TypeError)
    assert served.client().request("GET", "/echo").status == 200
