"""Hardening of the protocol layer (issue 14), each case over real sockets against the real
server (`demo_app.py` in a subprocess): error bodies that always render, a last-resort 500,
slow and unfinished bodies, log lines a client cannot forge, a head limit independent of
segmentation, strict query decoding, fairness between pipelining and other clients, and
the request-line / header / timeout corner cases. After each refusal the server still
answers a fresh request correctly (nothing is left broken)."""

from __future__ import annotations

import json
import math
import select
import socket
import time

import pytest

from dbsvc.config import load_config
from dbsvc.errors import ConfigError
from dbsvc.http.connection import ASTERISK_ALLOW
from dbsvc.routes import ALL_METHODS
from support.httpkit import Client, build_request

WAIT = 15.0  # generous: a loaded 2-core machine


def wait_for(predicate, timeout: float = WAIT, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def still_serves(demo) -> None:
    """A fresh connection gets a correct answer: the refusal broke nothing."""
    response = demo.get("/echo?after=refusal")
    assert response.status == 200
    assert response.json()["query"] == [["after", "refusal"]]


def read_all(client: Client, timeout: float = WAIT) -> bytes:
    """Everything the server sends until it closes."""
    client.sock.settimeout(timeout)
    chunks = []
    while True:
        try:
            chunk = client.sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


# -- 1. error bodies always render; rule 8 holds for every exception ---------------------


def test_lone_surrogate_in_an_error_detail_is_escaped_not_fatal(make_server):
    demo = make_server()
    client = demo.client()
    response = client.request("POST", "/echo-error", body=b'{"v": "\\ud800 and \\udfff"}')
    assert response.status == 422
    response.body.decode("utf-8")  # strict: valid UTF-8 on the wire
    problem = response.json()
    assert problem["errors"][0]["message"] == "got the string \ud800 and \udfff"
    assert problem["request_id"] == response.header("x-request-id")
    assert client.request("GET", "/echo").status == 200  # the same connection goes on
    log = demo.log()
    assert "Traceback" not in log and "Fatal error" not in log


def test_error_that_cannot_be_rendered_gets_a_canned_500_and_logs_no_client_data(make_server):
    demo = make_server()
    client = demo.client()
    response = client.request("GET", "/unrenderable?v=CLIENT-SECRET-1")
    assert response.status == 500
    assert response.header("content-type") == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "internal" and problem["status"] == 500
    assert problem["request_id"] == response.header("x-request-id")
    assert client.request("GET", "/echo").status == 200
    log = wait_for(lambda: "TypeError" in demo.log() and demo.log(), what="the error log line")
    assert "CLIENT-SECRET-1" not in log
    assert "Fatal error" not in log


@pytest.mark.parametrize("route", ["/bad-body", "/bad-status"])
def test_a_response_h11_cannot_send_becomes_a_500(make_server, route):
    demo = make_server()
    client = demo.client()
    response = client.request("GET", route)
    assert response.status == 500
    assert response.json()["code"] == "internal"
    assert client.request("GET", "/echo").status == 200
    assert "Fatal error" not in demo.log()


def test_unhandled_error_is_logged_with_frames_and_type_but_not_its_message(make_server):
    demo = make_server()
    client = demo.client()
    response = client.request("POST", "/leaky-error", body=b"CLIENT-BODY-77")
    assert response.status == 500
    log = wait_for(lambda: "RuntimeError" in demo.log() and demo.log(), what="the error log line")
    assert "unhandled error in POST /leaky-error" in log
    assert "demo_app.py" in log  # the frames are there
    assert "CLIENT-BODY-77" not in log


def test_a_bug_in_the_protocol_layer_is_logged_and_the_connection_closed(make_server):
    demo = make_server()
    client = demo.client()
    client.send(
        build_request(
            "GET",
            "/bad-upgrade",
            {
                "Connection": "Upgrade",
                "Upgrade": "websocket",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            },
        )
    )
    assert client.read_response().status == 101  # then the WebSocket layer fails
    assert client.is_closed()
    log = wait_for(lambda: "internal error in the http layer" in demo.log() and demo.log(), what="the error log line")
    assert "TypeError" in log and "Fatal error" not in log
    still_serves(demo)


# -- 2. slow bodies, and the memory of unfinished bodies -------------------------------

SLOW = [
    "--body-grace",
    "1",
    "--min-body-rate",
    "240",
    "--max-body",
    "200000",
    "--idle-timeout",
    "30",
    "--header-timeout",
    "30",
]


def test_body_slower_than_the_minimum_rate_is_408_after_the_grace(make_server):
    demo = make_server(SLOW)
    client = demo.client(timeout=WAIT)
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n")
    client.sock.settimeout(0.3)
    answer = b""
    deadline = time.monotonic() + WAIT
    while not answer and time.monotonic() < deadline:  # 1 byte every 0.3 s: ~3 bytes/s
        try:
            client.sock.sendall(b"x")
            answer = client.sock.recv(65536)
        except socket.timeout:
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
    answer += read_all(client)  # the rest, up to the server's FIN
    head = answer.split(b"\r\n", 1)[0]
    assert head == b"HTTP/1.1 408 Request Timeout", answer[:200]
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["status"] == 408 and body["code"] == "bad_request"
    assert b"connection: close" in answer.lower()
    still_serves(demo)


def test_body_at_a_decent_rate_is_served_past_the_grace(make_server):
    demo = make_server(SLOW)
    client = demo.client()
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 6000\r\n\r\n")
    for _ in range(10):  # 600 bytes every 0.15 s: 4000 bytes/s, for
        client.send(b"y" * 600)  # 1.5 s: past the 1 s grace
        time.sleep(0.15)
    response = client.read_response()
    assert response.status == 200
    assert response.json()["body_len"] == 6000


def test_dripping_bodies_cannot_hold_every_connection_slot(make_server):
    demo = make_server([*SLOW, "--max-connections", "3"])
    drips = [demo.client() for _ in range(3)]
    for drip in drips:
        drip.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n")

    def served() -> bool:
        for drip in drips:
            if not select.select([drip.sock], [], [], 0)[0]:
                drip.sock.send(b"z")  # dripping until answered: the idle timer never fires
        try:
            client = Client(demo.port, timeout=WAIT)
            try:
                return client.request("GET", "/echo").status == 200
            finally:
                client.close()
        except (OSError, ConnectionError):
            return False

    wait_for(served, what="a free connection slot")
    for drip in drips:
        assert drip.read_response().status == 408


def _hold_body(demo, declared: int, sent: int) -> Client:
    client = demo.client()
    client.send(f"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {declared}\r\n\r\n".encode() + b"h" * sent)
    return client


def test_bodies_past_the_memory_budget_get_503_and_the_held_ones_complete(make_server):
    demo = make_server(["--max-body", "4000", "--body-memory", "10000", "--idle-timeout", "30"])
    holders = [_hold_body(demo, 4000, 3000) for _ in range(3)]
    wait_for(lambda: demo.get("/echo").status == 200, what="the holders to be read")
    time.sleep(0.3)  # let the server read the held bytes
    refused = demo.client()
    refused.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2000\r\n\r\n")
    response = refused.read_response()
    assert response.status == 503
    assert response.json()["code"] == "unavailable"
    assert refused.is_closed()
    chunked = demo.client()  # no declared length: refused when it crosses
    chunked.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunked.send(b"7d0\r\n" + b"c" * 2000 + b"\r\n")
    assert chunked.read_response().status == 503
    for holder in holders:  # the bodies in progress are intact
        holder.send(b"h" * 1000)
        response = holder.read_response()
        assert response.status == 200
        assert response.json()["body"] == "h" * 4000
    response = demo.client().request("POST", "/echo", body=b"n" * 4000)
    assert response.status == 200 and response.json()["body_len"] == 4000


def test_unfinished_bodies_do_not_grow_server_memory_past_the_budget(make_server):
    mib = 1 << 20
    demo = make_server(
        [
            "--max-body",
            str(mib),
            "--body-memory",
            str(4 * mib),
            "--idle-timeout",
            "60",
            "--header-timeout",
            "60",
            "--max-connections",
            "200",
        ],
        child=True,
    )  # its RSS
    assert demo.get("/echo").status == 200
    before = demo.rss_kib()
    clients = []
    for _ in range(40):  # 40 x 900 KiB unfinished: 35 MiB unbounded
        client = demo.client()
        try:
            client.send(
                f"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {mib}\r\n\r\n".encode() + b"m" * (900 * 1024)
            )
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused (503) and closed: fine
        clients.append(client)
    wait_for(lambda: demo.get("/echo").status == 200, what="the server to read the bodies")
    time.sleep(0.5)
    growth_mib = (demo.rss_kib() - before) / 1024
    assert growth_mib < 24, f"server grew by {growth_mib:.1f} MiB"
    still_serves(demo)


# -- 3. log lines a client cannot forge ------------------------------------------------

FORGED = "/x%0A2026-11-23T07:00:00.000Z%20ERROR%20dbsvc.storage:%20FORGED%1B[31m%C2%9B%E2%80%A8"


def test_text_log_escapes_control_characters_in_the_path(make_server):
    demo = make_server()
    assert demo.get(FORGED).status == 404
    client = demo.client()
    assert client.request("GET", "/leaky-error" + FORGED).status == 500
    log = wait_for(lambda: demo.log().count("FORGED") >= 3 and demo.log(), what="the log lines")
    assert "\x1b" not in log and "\x9b" not in log and "\u2028" not in log
    for line in log.splitlines():
        assert not line.startswith("2026-11-23T07:00:00.000Z"), line
        assert "ERROR dbsvc.storage" not in line.split("FORGED")[0][-40:] or "\\n" in line, line
    span = next(line for line in log.splitlines() if "dbsvc.http.request" in line and "FORGED" in line)
    assert 'path="/x\\n2026-11-23T07:00:00.000Z ERROR dbsvc.storage: FORGED\\x1b[31m\\x9b\\u2028"' in span


# -- 6. the head limit does not depend on segmentation ---------------------------------


def _head_of(size: int) -> bytes:
    filler = "".join(f"X-Filler-{n}: {'v' * 90}\r\n" for n in range(size // 106))
    return f"GET /echo HTTP/1.1\r\nHost: t\r\n{filler}\r\n".encode()


@pytest.mark.parametrize("piece", [None, 1000])
def test_a_60_kb_head_is_431_whatever_the_segmentation(server, piece):
    data = _head_of(60_000)
    client = server.client()
    try:
        if piece is None:
            client.send(data)
        else:
            for start in range(0, len(data), piece):
                client.send(data[start : start + piece])
                time.sleep(0.001)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may stop reading early
    response = client.read_response()
    assert response.status == 431
    assert client.is_closed()
    still_serves(server)


@pytest.mark.parametrize("piece", [None, 1000])
def test_a_15_kb_head_is_served_whatever_the_segmentation(server, piece):
    data = _head_of(15_000)
    assert 14_000 < len(data) < 16 * 1024
    client = server.client()
    for start in range(0, len(data), piece or len(data)):
        client.send(data[start : start + (piece or len(data))])
    assert client.read_response().status == 200


def test_head_limit_counts_each_pipelined_head_on_its_own(server):
    one = _head_of(10_000)
    client = server.client()
    client.send(one * 5)  # 50 KB in one write: five heads under the limit
    assert [client.read_response().status for _ in range(5)] == [200] * 5


# -- 8. invalid UTF-8 in the query ----------------------------------------------------


@pytest.mark.parametrize("query", ["name=%ff", "%ff=x", "name=%C3", "name=%ED%A0%80"])
def test_invalid_utf8_in_the_query_is_400(server, query):
    client = server.client()
    response = client.request("GET", f"/echo?{query}")
    assert response.status == 400
    assert response.json()["code"] == "bad_request"
    still_serves(server)


def test_valid_utf8_in_the_query_is_decoded(server):
    assert server.get("/echo?name=%C3%A9t%C3%A9").json()["query"] == [["name", "été"]]


# -- 10. fairness between a pipelining connection and everyone else -------------------


def test_a_pipelined_flood_does_not_starve_another_connection(make_server):
    demo = make_server(["--idle-timeout", "30", "--header-timeout", "30"])
    flood = demo.client()
    other = demo.client()
    batch = b"".join(build_request("GET", f"/echo?n={n}", {"X-Request-Id": f"flood-{n}"}) for n in range(2000))
    flood.send(batch)
    other.send(build_request("GET", "/echo", {"X-Request-Id": "other-1"}))
    assert other.read_response().status == 200
    for _ in range(2000):
        assert flood.read_response().status == 200
    log = wait_for(lambda: "request_id=flood-1999" in demo.log() and demo.log(), what="the span lines")
    ids = [line.rsplit("request_id=", 1)[1] for line in log.splitlines() if "request_id=" in line]
    position = ids.index("other-1")
    assert position < 1000, f"the other connection was served after {position} flood requests"


# -- 11. request line, headers, timeouts ----------------------------------------------


@pytest.mark.parametrize("version", [b"HTTP/2.0", b"HTTP/3.0", b"HTTP/0.9"])
def test_an_http_version_other_than_1_is_505(server, version):
    client = server.client()
    client.send(b"GET /echo " + version + b"\r\nHost: t\r\n\r\n")
    response = client.read_response()
    assert response.status == 505
    assert response.json()["code"] == "bad_request"
    assert client.is_closed()
    still_serves(server)


def test_http_1_0_is_still_served(server):
    client = server.client()
    client.send(b"GET /echo HTTP/1.0\r\n\r\n")
    assert client.read_response().status == 200


def test_options_asterisk_is_204_with_allow(server):
    client = server.client()
    client.send(b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n")
    response = client.read_response()
    assert response.status == 204
    assert (
        response.header("allow") == "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"
    )  # docs/security.md's text, not the constant
    assert client.request("GET", "/echo").status == 200  # keep-alive goes on


def test_asterisk_allow_names_every_method_the_routes_answer():
    assert ASTERISK_ALLOW.split(", ") == list(ALL_METHODS)


def test_asterisk_target_with_another_method_is_400(server):
    client = server.client()
    client.send(b"GET * HTTP/1.1\r\nHost: t\r\n\r\n")
    response = client.read_response()
    assert response.status == 400
    assert response.json()["code"] == "bad_request"
    still_serves(server)


def test_two_authorization_headers_are_400(server):
    client = server.client()
    client.send(b"GET /echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n")
    response = client.read_response()
    assert response.status == 400
    assert "authorization" in response.json()["detail"]
    still_serves(server)


def still_open_after(client: Client, wait: float) -> bool:
    """True when the server neither sent nor closed anything for `wait` seconds."""
    client.sock.settimeout(wait)
    try:
        return client.sock.recv(1, socket.MSG_PEEK) != b""
    except socket.timeout:
        return True
    finally:
        client.sock.settimeout(WAIT)


def test_timeouts_of_zero_are_off_on_a_real_server(make_server):
    demo = make_server(["--header-timeout", "0", "--idle-timeout", "0"])
    silent = demo.client()
    half = demo.client()
    half.send(b"GET /echo HTTP/1.1\r\n")
    assert still_open_after(silent, 1.5)  # 0 would have meant "at once"
    assert still_open_after(half, 0.5)
    half.send(b"Host: t\r\n\r\n")
    assert half.read_response().status == 200
    assert silent.request("GET", "/echo").status == 200


@pytest.mark.parametrize("name", ["SERVICE_HEADER_TIMEOUT", "SERVICE_IDLE_TIMEOUT", "SERVICE_SHUTDOWN_TIMEOUT"])
def test_timeout_variables_accept_zero_and_refuse_negatives(name):
    field = name.removeprefix("SERVICE_").lower()
    assert getattr(load_config({name: "0"}).http, field) == 0
    assert getattr(load_config({name: "2.5"}).http, field) == 2.5
    for bad in ("-1", "nan", "inf", "soon"):
        with pytest.raises(ConfigError, match=name):
            load_config({name: bad})


def test_body_rate_and_memory_variables():
    http = load_config({"SERVICE_MIN_BODY_RATE": "0", "SERVICE_BODY_MEMORY": "1048576"}).http
    assert http.min_body_rate == 0 and http.body_memory == 1 << 20
    defaults = load_config({}).http
    assert defaults.min_body_rate == 240 and defaults.body_memory == 64 << 20
    assert not math.isinf(defaults.header_timeout)
    for name, bad in (("SERVICE_MIN_BODY_RATE", "-5"), ("SERVICE_BODY_MEMORY", "0")):
        with pytest.raises(ConfigError, match=name):
            load_config({name: bad})
