"""Limits and hostile clients, over real sockets: body and header bounds, framing conflicts,
malformed requests, 100-continue, timeouts, the connection cap, EMFILE, pipelined floods.

Deadline tests assert a lower bound only (a connection closed before its deadline is a bug);
how late a loaded machine closes it is left to generous waits, never asserted.
"""

from __future__ import annotations

import select
import socket
import time

from support.httpkit import Client, build_request


def test_content_length_over_limit_is_413_without_reading_the_body(server):
    client = server.client()
    # Not one body byte is sent: an answer at all shows the server did not wait for them.
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000000\r\n\r\n")
    response = client.read_response()
    assert response.status == 413
    assert response.json()["code"] == "payload_too_large"
    assert response.header("connection") == "close"
    assert client.is_closed()


def test_chunked_body_growing_past_the_limit_is_413_and_close(server):
    client = server.client()
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(3):  # 3 x 400 bytes > max_body 1024
        client.send(b"190\r\n" + b"a" * 400 + b"\r\n")
    response = client.read_response()
    assert response.status == 413
    assert client.is_closed()


def test_body_at_the_limit_is_accepted(server):
    client = server.client()
    response = client.request("POST", "/echo", body=b"b" * 1024)
    assert response.status == 200
    assert response.json()["body_len"] == 1024


def test_64_kib_of_headers_is_431(server):
    client = server.client()
    headers = "".join(f"X-Filler-{n}: {'v' * 100}\r\n" for n in range(640))
    try:
        client.send(f"GET /echo HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode())
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may stop reading early
    response = client.read_response()
    assert response.status == 431
    assert response.header("content-type") == "application/problem+json"
    assert client.is_closed()


def test_content_length_with_transfer_encoding_is_400_and_close(server):
    client = server.client()
    client.send(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    )
    response = client.read_response()
    assert response.status == 400
    assert response.json()["code"] == "bad_request"
    assert client.is_closed()


def test_malformed_request_line_is_400_problem_and_close(server):
    client = server.client()
    client.send(b"THIS IS NOT HTTP\r\n\r\n")
    response = client.read_response()
    assert response.status == 400
    problem = response.json()
    assert problem["code"] == "bad_request"
    assert problem["request_id"] == response.header("x-request-id")
    assert client.is_closed()


def test_expect_100_continue_gets_100_then_the_response(server):
    client = server.client()
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
    interim = client.read_response()
    assert interim.status == 100
    client.send(b"hello")
    assert client.read_response().json()["body"] == "hello"


def test_expect_100_continue_over_the_limit_gets_413_and_no_100(server):
    client = server.client()
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n")
    assert client.read_response().status == 413


def _closed_within(sock: socket.socket, wait: float) -> bool:
    """True once the peer has closed (EOF or reset) within `wait` seconds; no bytes expected."""
    if not select.select([sock], [], [], wait)[0]:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_slowloris_is_closed_at_the_header_deadline_while_others_are_served(server):
    """One header line every 0.1 s does not push the deadline back: the connection is cut
    while it is still dripping (header_timeout is 1 s, counted from the first byte)."""
    slow = server.client(timeout=30)
    started = time.monotonic()
    slow.send(b"GET /echo HTTP/1.1\r\nHost: t\r\n")
    closed = False
    while not closed and time.monotonic() - started < 60:
        assert server.get("/echo").status == 200
        try:
            slow.send(b"X-Drip: 1\r\n")
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        else:
            closed = _closed_within(slow.sock, 0.1)
    assert closed, "a dripping header kept the connection open for 60 s"
    assert time.monotonic() - started > 0.9
    assert server.get("/echo").status == 200


def test_silent_connection_is_closed_at_the_header_deadline(server):
    started = time.monotonic()
    client = server.client(timeout=30)
    assert _closed_within(client.sock, 30)
    assert time.monotonic() - started > 0.9  # header_timeout is 1 s


def test_idle_keep_alive_connection_is_closed_after_idle_timeout(server):
    client = server.client(timeout=30)
    assert client.request("GET", "/echo").status == 200
    started = time.monotonic()
    assert client.is_closed(wait=30)
    assert time.monotonic() - started > 1.9  # idle_timeout is 2 s


def test_connection_cap_answers_503_and_service_resumes(make_server):
    demo = make_server(["--max-connections", "3"])
    held = [demo.client() for _ in range(3)]
    for client in held:
        assert client.request("GET", "/echo").status == 200
    extra = demo.client()  # past the cap: a probes' place (hub.py rule 7)
    response = extra.request("GET", "/echo")
    assert response.status == 503
    assert response.json()["code"] == "unavailable"
    assert extra.is_closed()
    held[0].close()
    deadline = time.monotonic() + 30
    while True:
        fresh = demo.client(timeout=30)
        response = fresh.request("GET", "/echo")
        if response.status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert response.status == 200


def test_accept_survives_emfile(make_server):
    demo = make_server(["--nofile", "40", "--max-connections", "1000"], child=True)
    hogs = []
    try:
        for _ in range(60):  # well past 40 descriptors
            hogs.append(socket.create_connection(("127.0.0.1", demo.port), timeout=30))
        time.sleep(0.3)
    finally:
        for sock in hogs:
            sock.close()
    deadline = time.monotonic() + 30  # asyncio retries accept after 1 s
    while True:
        try:
            client = Client(demo.port, timeout=10)
            if client.request("GET", "/echo").status == 200:
                client.close()
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "accept loop did not recover from EMFILE"
        time.sleep(0.1)
    assert "out of system resource" in demo.log()


def test_pipelined_flood_does_not_grow_server_memory(make_server):
    demo = make_server(["--idle-timeout", "10", "--header-timeout", "10"], child=True)  # its RSS
    assert demo.get("/big?n=10").status == 200
    before = demo.rss_kib()
    client = demo.client()
    client.sock.setblocking(False)
    chunk = build_request("GET", "/big?n=65536") * 2000  # each request answers 64 KiB
    sent = 0
    stalled_since = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sent < 512 * 1024 * 1024:
        try:
            sent += client.sock.send(chunk)
            stalled_since = None
        except BlockingIOError:
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 1.0:
                break
            time.sleep(0.01)
    assert stalled_since is not None, f"server kept reading: {sent} bytes accepted"
    growth_mib = (demo.rss_kib() - before) / 1024
    assert sent < 64 * 1024 * 1024, f"{sent} bytes accepted"
    assert growth_mib < 32, f"server grew by {growth_mib:.1f} MiB"
