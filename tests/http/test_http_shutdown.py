"""Graceful shutdown on SIGTERM: in-flight requests finish, idle connections close, new
connections are refused, the process exits 0."""

from __future__ import annotations

import signal
import socket
import time

from httpkit import build_request


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_sigterm_lets_in_flight_request_finish_and_refuses_new_connections(make_server):
    demo = make_server()
    idle = demo.client()
    assert idle.request("GET", "/echo").status == 200
    busy = demo.client()
    busy.send(build_request("GET", "/slow?ms=1500"))
    time.sleep(0.2)                                       # the request is with the app now
    demo.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 1.0
    while not _refused(demo.port):
        assert time.monotonic() < deadline, "still accepting after SIGTERM"
        time.sleep(0.02)
    assert idle.is_closed(wait=1.0)                       # idle keep-alive closed promptly
    response = busy.read_response()
    assert response.status == 200
    assert response.json()["slept_ms"] == 1500
    assert response.header("connection") == "close"
    assert demo.process.wait(5) == 0


def test_shutdown_timeout_cuts_off_requests_that_run_too_long(make_server):
    demo = make_server(["--shutdown-timeout", "0.5"])
    busy = demo.client()
    busy.send(build_request("GET", "/slow?ms=10000"))
    time.sleep(0.2)
    started = time.monotonic()
    assert demo.terminate(timeout=5) == 0
    assert time.monotonic() - started < 3
    assert busy.is_closed(wait=1.0)


def test_sigterm_waits_for_a_deferred_answer_and_sends_it(make_server):
    demo = make_server()
    busy = demo.client()
    busy.send(build_request("GET", "/deferred?ms=800", {"X-Request-Id": "deferred-at-stop"}))
    time.sleep(0.2)                                       # applied; waiting for its future
    demo.process.send_signal(signal.SIGTERM)
    response = busy.read_response()
    assert response.status == 200
    assert response.json() == {"deferred_ms": 800, "request_id": "deferred-at-stop"}
    assert response.header("connection") == "close"
    assert demo.process.wait(5) == 0
