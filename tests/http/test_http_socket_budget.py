"""Budgets of the listening side (dbsvc/http/hub.py rules 7-8): upgraded WebSockets count
against `max_sockets`, not the HTTP connection cap, and the probes still get an answer at
that cap. Through real servers and sockets."""

from __future__ import annotations

import pytest

from dbsvc.config import load_config
from dbsvc.errors import ConfigError
from dbsvc.http.hub import PROBE_RESERVE


def test_upgraded_sockets_leave_the_http_connection_count(make_server):
    demo = make_server(["--max-connections", "2", "--max-sockets", "10"])
    sockets = []
    for _ in range(5):  # one at a time: each leaves the count
        sockets.append(demo.client())
        assert sockets[-1].upgrade().status == 101
    held = [demo.client() for _ in range(2)]
    for client in held:
        assert client.request("GET", "/echo").status == 200
    sockets[0].send(b"\x81\x82abcd" + bytes(b ^ k for b, k in zip(b"hi", b"ab")))
    assert sockets[0].reader.read(4) == b"\x81\x02hi"  # the sockets still work


def test_an_upgrade_past_max_sockets_is_503_before_the_101(make_server):
    demo = make_server(["--max-connections", "10", "--max-sockets", "2"])
    sockets = [demo.client() for _ in range(2)]
    for client in sockets:
        assert client.upgrade().status == 101
    refused = demo.client()
    response = refused.upgrade()
    assert response.status == 503
    assert response.json()["detail"] == "WebSocket limit of 2 reached"
    assert refused.request("GET", "/echo").status == 200  # the connection stays HTTP
    sockets[0].close()
    assert demo.get("/echo").status == 200


def test_the_probes_answer_at_the_connection_cap_and_nothing_else_does(make_server):
    demo = make_server(["--max-connections", "2"])
    held = [demo.client() for _ in range(2)]
    for client in held:
        assert client.request("GET", "/echo").status == 200
    probe = demo.client()
    assert probe.request("GET", "/health").status == 200
    assert probe.request("GET", "/health").status == 200  # keep-alive on the reserve
    other = demo.client()
    response = other.request("GET", "/echo")
    assert response.status == 503
    assert response.json()["detail"] == "connection limit of 2 reached: only /health and /ready are answered past it"
    assert other.is_closed()


def test_the_reserve_is_bounded(make_server):
    demo = make_server(["--max-connections", "1"])
    held = demo.client()
    assert held.request("GET", "/echo").status == 200
    reserve = [demo.client() for _ in range(PROBE_RESERVE)]
    for client in reserve:
        assert client.request("GET", "/health").status == 200
    past = demo.client()
    response = past.read_response()  # refused at the accept, as before
    assert response.status == 503
    assert response.json()["detail"] == "connection limit of 1 reached"


def test_service_max_sockets_is_read_and_checked():
    assert load_config({}).http.max_sockets == 1024
    assert load_config({"SERVICE_MAX_SOCKETS": "5000"}).http.max_sockets == 5000
    with pytest.raises(ConfigError, match="SERVICE_MAX_SOCKETS='0' is not valid: expected an integer of at least 1"):
        load_config({"SERVICE_MAX_SOCKETS": "0"})
