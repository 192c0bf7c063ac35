"""What one server's hub (dbsvc/http/hub.py) counts and bounds, watched from both ends: the
client's answers, and the hub's counts read on the server's loop. A timeout of 0 is no
deadline (rule 2), the connection cap's probe reserve fills and empties (rule 7), upgraded
sockets leave the HTTP count and come back off it when they close (rule 8), and the hub is
busy only while a connection is in a working phase (rule 6).

Each test serves the demo app in this process (support/inprocess.py) and stops it itself,
with no pytest fixture, so `bench/mutation_inprocess.py` runs them in seconds where the
fixture tests of tests/http cost a minute a surviving mutant (session 17, wt-mpo7)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

from dbsvc.http.hub import PROBE_RESERVE, Hub
from dbsvc.http.types import HttpSettings
from support.demo_app import app as demo_app
from support.httpkit import Client
from support.inprocess import WAIT, InProcessServer


def serving(**settings: object) -> InProcessServer:
    return InProcessServer(demo_app, dataclasses.replace(HttpSettings(port=0), **settings)).start()


def hub_of(server: InProcessServer) -> Hub:
    assert server.hub is not None
    return server.hub


def on_loop(server: InProcessServer, fn: Callable[[Hub], object]) -> object:
    return server.call(lambda: fn(hub_of(server)))


SETTLE = 10.0  # counts settle within milliseconds; generous for a loaded machine


def wait_for(server: InProcessServer, fn: Callable[[Hub], object], what: str) -> None:
    deadline = time.monotonic() + SETTLE
    while not on_loop(server, fn):
        assert time.monotonic() < deadline, f"the hub never reached: {what}"
        time.sleep(0.01)


def test_timeouts_of_zero_set_no_deadline_on_a_slow_head_or_an_idle_connection():
    server = serving(header_timeout=0, idle_timeout=0, min_body_rate=0)
    client = Client(server.port, timeout=WAIT)
    try:
        client.send(b"GET /echo HTTP/1.1\r\n")  # half a head
        wait_for(server, lambda hub: hub.connections, "the connection")
        time.sleep(0.05)
        on_loop(server, lambda hub: hub.sweep())
        assert on_loop(server, lambda hub: [c.deadline for c in hub.connections]) == [math.inf]
        client.send(b"Host: t\r\n\r\n")
        assert client.read_response().status == 200
        time.sleep(0.05)
        on_loop(server, lambda hub: hub.sweep())  # now idle between requests
        assert on_loop(server, lambda hub: [c.deadline for c in hub.connections]) == [math.inf]
        assert client.request("GET", "/echo").status == 200
    finally:
        client.close()
        server.stop()


def test_a_header_timeout_under_a_second_is_a_deadline_that_closes_a_slow_head():
    server = serving(header_timeout=0.3)
    client = Client(server.port, timeout=WAIT)
    try:
        client.send(b"GET /echo HTTP/1.1\r\n")
        wait_for(server, lambda hub: hub.connections, "the connection")
        [deadline] = on_loop(server, lambda hub: [c.deadline - hub.clock() for c in hub.connections])  # type: ignore[misc]
        assert 0 < deadline <= 0.3
        assert client.is_closed()
        wait_for(server, lambda hub: not hub.connections and hub.counted == 0, "the slow head forgotten")
    finally:
        client.close()
        server.stop()


def test_a_body_waits_for_its_first_byte_as_long_as_the_idle_timeout_or_the_rate_grace_allows():
    for settings, wait in (
        ({"idle_timeout": 7.0, "min_body_rate": 0}, 7.0),
        ({"idle_timeout": 7.0, "min_body_rate": 100.0, "body_rate_grace": 2.0}, 2.0),
        ({"idle_timeout": 1.5, "min_body_rate": 100.0, "body_rate_grace": 2.0}, 1.5),
    ):
        server = serving(**settings)
        try:
            assert on_loop(server, lambda hub: (hub.body_wait, hub.body_bytes)) == (wait, 0)
        finally:
            server.stop()


def test_the_parser_setting_picks_the_wire_connections_start_on():
    for parser, fast in (("fast", True), ("h11", False)):
        server = serving(http_parser=parser)
        try:
            assert on_loop(server, lambda hub: hub.fast_path) is fast
            assert server.call(lambda: None) is None
            client = Client(server.port, timeout=WAIT)
            assert client.request("GET", "/echo").status == 200
            client.close()
        finally:
            server.stop()


def counts(hub: Hub) -> tuple[int, int, int, int]:
    return len(hub.connections), hub.counted, hub.reserved, hub.sockets


def test_the_probes_reserve_fills_to_its_bound_and_every_place_is_given_back():
    server = serving(max_connections=2)
    clients: list[Client] = []
    try:
        for _ in range(2):
            clients.append(Client(server.port, timeout=WAIT))
            assert clients[-1].request("GET", "/echo").status == 200
        assert on_loop(server, counts) == (2, 2, 0, 0)
        for n in range(PROBE_RESERVE):
            clients.append(Client(server.port, timeout=WAIT))
            # both probes pass the reserve's refusal; the demo app itself has no /ready (404)
            path, status = ("/health", 200) if n % 2 else ("/ready", 404)
            assert clients[-1].request("GET", path).status == status
            assert on_loop(server, counts) == (3 + n, 2, 1 + n, 0)
        past = Client(server.port, timeout=WAIT)
        response = past.read_response()  # past the reserve: refused at the accept
        assert response.status == 503 and response.json()["detail"] == "connection limit of 2 reached"
        assert past.is_closed()
        past.close()
        clients.pop().close()  # a reserve place given back ...
        wait_for(server, lambda hub: counts(hub) == (9, 2, PROBE_RESERVE - 1, 0), "a reserve place freed")
        again = Client(server.port, timeout=WAIT)  # ... is taken again, by a probe only
        response = again.request("GET", "/echo")
        assert response.status == 503
        assert response.json()["detail"] == (
            "connection limit of 2 reached: only /health and /ready are answered past it"
        )
        again.close()
        clients.pop(0).close()  # a counted place given back is counted again
        wait_for(server, lambda hub: hub.counted == 1, "a counted place freed")
        clients.append(Client(server.port, timeout=WAIT))
        assert clients[-1].request("GET", "/echo").status == 200
        assert on_loop(server, lambda hub: (hub.counted, hub.reserved)) == (2, PROBE_RESERVE - 1)
        for client in clients:
            client.close()
        wait_for(server, lambda hub: counts(hub) == (0, 0, 0, 0), "every place given back")
    finally:
        for client in clients:
            client.close()
        server.stop()


def test_an_upgraded_socket_leaves_the_http_count_and_is_given_back_when_it_closes():
    server = serving(max_connections=1, max_sockets=2)
    sockets: list[Client] = []
    try:
        for n in range(2):
            sockets.append(Client(server.port, timeout=WAIT))
            assert sockets[-1].upgrade().status == 101
            wait_for(server, lambda hub, n=n: counts(hub) == (n + 1, 0, 0, n + 1), "the socket counted")
        third = Client(server.port, timeout=WAIT)
        assert third.upgrade().status == 503  # max_sockets: refused before the 101, counted as HTTP
        assert on_loop(server, counts) == (3, 1, 0, 2)
        third.close()
        sockets.pop().close()
        wait_for(server, lambda hub: counts(hub) == (1, 0, 0, 1), "a socket given back")
        sockets.append(Client(server.port, timeout=WAIT))
        assert sockets[-1].upgrade().status == 101
        for client in sockets:
            client.close()
        wait_for(server, lambda hub: counts(hub) == (0, 0, 0, 0), "every socket given back")
    finally:
        for client in sockets:
            client.close()
        server.stop()


def test_the_hub_is_busy_while_a_connection_is_open_and_idle_once_it_is_gone():
    server = serving()
    try:
        assert on_loop(server, lambda hub: hub.busy()) is False
        client = Client(server.port, timeout=WAIT)
        assert client.request("GET", "/echo").status == 200
        assert on_loop(server, lambda hub: hub.busy()) is True  # keep-alive: IDLE
        client.close()
        wait_for(server, lambda hub: not hub.connections, "the connection gone")
        assert on_loop(server, lambda hub: hub.busy()) is False
    finally:
        server.stop()


def test_a_body_a_websocket_echo_and_the_request_span_go_through_the_hubs_shared_parts():
    server = serving()
    client = Client(server.port, timeout=WAIT)
    socket_ = Client(server.port, timeout=WAIT)
    try:
        response = client.request("POST", "/echo", body=b'{"a": 1}')  # the bodies' shared budget
        assert response.status == 200
        assert socket_.upgrade().status == 101
        socket_.send(b"\x81\x82abcd" + bytes(b ^ k for b, k in zip(b"hi", b"abcd")))
        assert socket_.reader.read(4) == b"\x81\x02hi"  # WebSocket output: the held pass (rule 10)
        assert any("request method=POST path=/echo status=200" in line for line in server.log.lines)
        assert client.request("GET", "/async-echo").status == 200  # an app coroutine: the hub's task
        wait_for(server, lambda hub: not hub.tasks, "the app task forgotten")
        assert not [line for line in server.log.lines if " ERROR " in line]
    finally:
        client.close()
        socket_.close()
        server.stop()


def ask(client: Client, path: str, host: str):
    client.send(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    return client.read_response()


def test_a_host_the_server_is_not_known_by_is_refused_but_the_probes_are_not():
    server = serving(allowed_hosts=("api.example", "b.example"))
    client = Client(server.port, timeout=WAIT)
    other = Client(server.port, timeout=WAIT)
    try:
        refused = ask(client, "/echo", "evil.example")
        assert refused.status == 403
        assert refused.json()["detail"] == (
            "host 'evil.example' is not allowed: expected one of api.example, b.example (SERVICE_ALLOWED_HOSTS)"
        )
        assert ask(other, "/health", "evil.example").status == 200
        assert ask(other, "/echo", "api.example").status == 200
    finally:
        client.close()
        other.close()
        server.stop()
