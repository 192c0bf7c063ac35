"""Request/response behaviour of the protocol layer over real sockets: keep-alive,
pipelining, HEAD, request decoding, request ids, application errors, upgrade hand-off."""

from __future__ import annotations

import json

import pytest

from support.httpkit import build_request


def test_keep_alive_serves_several_requests_on_one_connection(server):
    client = server.client()
    ids = set()
    for n in range(5):
        response = client.request("GET", f"/echo?n={n}")
        assert response.status == 200
        assert response.json()["query"] == [["n", str(n)]]
        ids.add(response.header("x-request-id"))
    assert len(ids) == 5


def test_hundred_pipelined_requests_in_one_write_are_answered_in_order(server):
    client = server.client()
    routes = ["/echo", "/async-echo", "/slow?ms=1", "/deferred?ms=1"]
    data = b"".join(
        build_request("GET", f"{routes[n % 4]}{'&' if n % 4 >= 2 else '?'}n={n}", {"X-Request-Id": f"pipe-{n}"})
        for n in range(100)
    )
    client.send(data)
    for n in range(100):
        response = client.read_response()
        assert response.status == 200
        assert response.header("x-request-id") == f"pipe-{n}"


@pytest.mark.parametrize(
    "last, status",
    [
        (b"THIS IS NOT HTTP\r\n\r\n", 400),
        (b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999\r\n\r\n", 413),
        (b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", 200),
    ],
)
def test_held_responses_leave_before_a_closing_response(server, last, status):
    # Responses on a kept-alive connection are held to the end of the loop's turn; a
    # response that closes the connection must still come after them, and all of them arrive.
    client = server.client()
    client.send(b"".join(build_request("GET", f"/echo?n={n}", {"X-Request-Id": f"held-{n}"}) for n in range(5)) + last)
    for n in range(5):
        response = client.read_response()
        assert response.status == 200
        assert response.header("x-request-id") == f"held-{n}"
    assert client.read_response().status == status
    assert client.is_closed()


def test_deferred_answer_is_sent_when_its_future_completes(server):
    client = server.client()
    response = client.request("GET", "/deferred?ms=50", {"X-Request-Id": "late-1"})
    assert response.status == 200
    assert response.json() == {"deferred_ms": 50, "request_id": "late-1"}
    assert client.request("GET", "/echo").status == 200  # the connection goes on


@pytest.mark.parametrize("kind, status, code", [("bad", 400, "bad_request"), ("boom", 500, "internal")])
def test_deferred_whose_future_fails_answers_the_error_and_serving_continues(server, kind, status, code):
    client = server.client()
    response = client.request("GET", f"/deferred-error?kind={kind}")
    assert response.status == status
    problem = response.json()
    assert problem["code"] == code and problem["request_id"] == response.header("x-request-id")
    assert "never" not in response.body.decode()
    assert client.request("GET", "/echo").status == 200


def test_standard_headers_are_added(server):
    response = server.get("/echo")
    assert response.header("server") == "dbsvc"
    assert response.header("date").endswith(" GMT")
    assert int(response.header("content-length")) == len(response.body)
    assert response.header("content-type") == "application/json"


def test_head_sends_get_content_length_and_no_body(server):
    client = server.client()
    response = client.request("HEAD", "/big?n=1234")
    assert response.status == 200
    assert response.header("content-length") == "1234"
    follow = client.request("GET", "/big?n=7")  # no stray body bytes in between
    assert follow.body == b"xxxxxxx"


def test_app_sees_head_as_head(server):
    client = server.client()
    client.request("HEAD", "/echo")
    assert client.request("GET", "/echo").status == 200


def test_path_is_percent_decoded_and_query_keeps_blanks(server):
    body = server.get("/echo?name=a%20b&flag=&x&name=%C3%A9").json()
    assert body["path"] == "/echo"
    assert body["query"] == [["name", "a b"], ["flag", ""], ["x", ""], ["name", "é"]]
    assert server.get("/%65cho").json()["path"] == "/echo"


def test_header_names_reach_the_app_in_lower_case(server):
    body = server.get("/echo", {"X-Custom-Thing": "Value"}).json()
    assert ["x-custom-thing", "Value"] in body["headers"]


def test_chunked_request_body_is_assembled(server):
    client = server.client()
    client.send(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    assert client.read_response().json()["body"] == "hello world"


@pytest.mark.parametrize("incoming", ["abc-123", "A.b_C-9", "x" * 128])
def test_sane_request_id_is_echoed(server, incoming):
    response = server.get("/echo", {"X-Request-Id": incoming})
    assert response.header("x-request-id") == incoming
    assert response.json()["request_id"] == incoming


@pytest.mark.parametrize("incoming", ["x" * 129, "has space", "semi;colon", "quote\"d", "é"])
def test_insane_request_id_is_replaced(server, incoming):
    response = server.get("/echo", {"X-Request-Id": incoming})
    chosen = response.header("x-request-id")
    assert chosen and chosen != incoming
    assert response.json()["request_id"] == chosen


@pytest.mark.parametrize("route", ["/error", "/async-error", "/none", "/bad-header"])
def test_app_failure_is_500_problem_with_the_request_id_and_serving_continues(server, route):
    client = server.client()
    response = client.request("GET", route, {"X-Request-Id": "fail-1"})
    assert response.status == 500
    assert response.header("content-type") == "application/problem+json"
    assert response.header("x-request-id") == "fail-1"
    problem = response.json()
    assert problem["code"] == "internal" and problem["status"] == 500
    assert problem["request_id"] == "fail-1"
    assert client.request("GET", "/echo").status == 200  # same connection still works
    assert server.get("/echo").status == 200


def test_request_error_from_app_is_its_problem_response(server):
    response = server.get("/bad")
    assert response.status == 400
    problem = response.json()
    assert problem["code"] == "bad_request"
    assert problem["detail"] == "this route always refuses"
    assert problem["request_id"] == response.header("x-request-id")


def _client_frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame (RFC 6455 §5.2), payload under 126 bytes."""
    mask = b"\x01\x02\x03\x04"
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes((0x80 | opcode, 0x80 | len(payload))) + mask + masked


WS_HEADERS = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


def test_upgrade_hands_over_transport_and_trailing_bytes(server):
    client = server.client()
    client.send(build_request("GET", "/upgrade", WS_HEADERS) + _client_frame(0x1, b"early"))
    response = client.read_response(head_only=True)
    assert response.status == 101
    assert response.header("upgrade") == "websocket"
    # RFC 6455 §1.3's worked example of the accept token
    assert response.header("sec-websocket-accept") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    assert response.header("sec-websocket-extensions") is None
    assert client.reader.read(7) == b"\x81\x05early"
    client.send(_client_frame(0x2, b"later"))
    assert client.reader.read(7) == b"\x82\x05later"


def test_upgrade_route_without_handshake_is_426_and_stays_http(server):
    client = server.client()
    client.send(build_request("GET", "/upgrade", {}))
    response = client.read_response()
    assert response.status == 426
    assert response.header("upgrade") == "websocket"
    assert response.header("sec-websocket-version") == "13"
    assert json.loads(response.body)["detail"].startswith("/upgrade is a WebSocket route")
    assert client.request("GET", "/echo").status == 200  # same connection still works


def test_upgrade_with_bad_key_is_400(server):
    client = server.client()
    client.send(build_request("GET", "/upgrade", {**WS_HEADERS, "Sec-WebSocket-Key": "short"}))
    response = client.read_response()
    assert response.status == 400
    assert "Sec-WebSocket-Key 'short' is not valid" in json.loads(response.body)["detail"]


def test_http_1_0_request_is_answered_and_closed(server):
    client = server.client()
    client.send(b"GET /echo HTTP/1.0\r\n\r\n")
    response = client.read_response()
    assert response.status == 200
    assert json.loads(response.body)["path"] == "/echo"
    assert client.is_closed()
