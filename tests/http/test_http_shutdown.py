"""Graceful shutdown on SIGTERM: in-flight requests finish, idle connections close, new
connections are refused, the process exits 0.

Waits are generous (a loaded 2-core machine) and the in-flight requests run long enough that
SIGTERM surely lands while they are with the app; a round trip on a second connection after
sending a request is the sign that the server has read it (one event loop, bytes sent first),
once the busy connection has been accepted and read from: its own first round trip shows that
(`_busy_client`). Without it the server may accept the connection in the same turn as it answers
the other one, and read the request only after the shutdown began.
"""

from __future__ import annotations

import socket
import time

from support.httpkit import build_request

RELAXED = ["--idle-timeout", "120", "--header-timeout", "30", "--shutdown-timeout", "60"]


def _refused(port: int) -> bool:
    """Not accepting: refused, or reset when the listening socket closed with this connection
    still in its backlog."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    return False


def _busy_client(demo):
    client = demo.client(timeout=30)
    assert client.request("GET", "/echo").status == 200
    return client


def test_sigterm_lets_in_flight_request_finish_and_refuses_new_connections(make_server):
    # Idle and header deadlines far away: the idle connection can only close because of SIGTERM.
    demo = make_server(RELAXED)
    idle = demo.client(timeout=30)
    assert idle.request("GET", "/echo").status == 200
    busy = _busy_client(demo)
    busy.send(build_request("GET", "/slow?ms=3000"))
    assert idle.request("GET", "/echo").status == 200  # the slow request is with the app now
    demo.begin_shutdown()
    deadline = time.monotonic() + 30
    while not _refused(demo.port):
        assert time.monotonic() < deadline, "still accepting after SIGTERM"
        time.sleep(0.02)
    assert idle.is_closed(wait=30)  # idle keep-alive closed, not kept
    response = busy.read_response()
    assert response.status == 200
    assert response.json()["slept_ms"] == 3000
    assert response.header("connection") == "close"
    assert demo.wait(30) == 0


def test_shutdown_timeout_cuts_off_requests_that_run_too_long(make_server):
    demo = make_server(["--shutdown-timeout", "0.5", "--header-timeout", "30"])
    busy = _busy_client(demo)
    busy.send(build_request("GET", "/slow?ms=120000"))
    assert demo.client(timeout=30).request("GET", "/echo").status == 200  # the slow request is with the app
    # Exiting within 30 s of a 120 s request: the shutdown timeout cut it off.
    assert demo.terminate(timeout=30) == 0
    assert busy.is_closed(wait=30)


def test_sigterm_waits_for_a_deferred_answer_and_sends_it(make_server):
    demo = make_server(RELAXED)
    busy = _busy_client(demo)
    busy.send(build_request("GET", "/deferred?ms=3000", {"X-Request-Id": "deferred-at-stop"}))
    assert demo.client(timeout=30).request("GET", "/echo").status == 200  # applied; waiting for its future
    demo.begin_shutdown()
    response = busy.read_response()
    assert response.status == 200
    assert response.json() == {"deferred_ms": 3000, "request_id": "deferred-at-stop"}
    assert response.header("connection") == "close"
    assert demo.wait(30) == 0
