"""DNS rebinding: a request must name the server by a Host it is known by (dbsvc/http/hosts.py,
http/hub.py rule 9, service.host_check). Through real servers; the policy's table as units."""

from __future__ import annotations

import base64
import os
import socket

import pytest

from dbsvc.config import load_config
from dbsvc.errors import ConfigError
from dbsvc.http.hosts import LOOPBACK_NAMES, SEEN_LIMIT, HostPolicy
from dbsvc.service import host_check


def test_a_rebound_name_is_403_on_a_loopback_bind_with_the_guard_off(serve):
    server = serve()  # 127.0.0.1, no guard: the explorer's default
    reply = server.get("/api/user", headers={"Host": f"evil.example:{server.port}"})
    assert reply.status == 403
    assert reply.json["code"] == "forbidden"
    assert reply.json["detail"] == (
        f"host 'evil.example:{server.port}' is not allowed: expected one of "
        "localhost, 127.0.0.1, [::1] (SERVICE_ALLOWED_HOSTS)"
    )
    for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", "LOCALHOST", f"[::1]:{server.port}"):
        assert server.get("/api/user", headers={"Host": host}).status == 200, host
    assert server.get("/health", headers={"Host": "evil.example"}).status == 200  # probes are exempt
    assert server.get("/_/", headers={"Host": "evil.example"}).status == 403  # the explorer too


def test_a_rebound_page_cannot_open_a_websocket(serve):
    server = serve()
    evil = f"evil.example:{server.port}"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                f"GET /subscribe/user HTTP/1.1\r\nHost: {evil}\r\nOrigin: http://{evil}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                f"Sec-WebSocket-Key: {key}\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
    assert head.startswith(b"HTTP/1.1 403 "), head


def test_service_allowed_hosts_replaces_the_default(serve):
    server = serve(env={"SERVICE_ALLOWED_HOSTS": "api.example.com,.example.org"})
    assert server.get("/api/user", headers={"Host": "api.example.com"}).status == 200
    assert server.get("/api/user", headers={"Host": "a.b.example.org:8080"}).status == 200
    assert server.get("/api/user", headers={"Host": "localhost"}).status == 403
    assert server.get("/api/user", headers={"Host": "example.com"}).status == 403


@pytest.mark.parametrize(
    "host, allowed",
    [
        ("localhost", True),
        ("localhost:3000", True),
        ("LocalHost.", True),
        ("127.0.0.1:1", True),
        ("[::1]:3000", True),
        ("[::1]", True),
        ("::1", False),
        ("localhost.evil.example", False),
        ("127.0.0.1.nip.io", False),
        ("evil.example", False),
        ("", False),
        (None, True),
    ],
)
def test_the_loopback_names_match_any_port_and_case(host, allowed):
    assert HostPolicy(LOOPBACK_NAMES).permits(host) is allowed


def test_an_empty_list_or_a_star_allows_any_host():
    assert HostPolicy(()).permits("anything.example")
    assert HostPolicy(("*",)).permits("anything.example")
    assert HostPolicy(("a.example",)).enabled


@pytest.mark.parametrize(
    "env, guarded, expected",
    [
        ({}, False, ("localhost", "127.0.0.1", "[::1]")),  # docs/security.md's list, not the constant
        ({}, True, ()),  # the guard protects it
        ({"SERVICE_HOST": "0.0.0.0"}, False, ()),  # as today: any host
        ({"SERVICE_ALLOWED_HOSTS": "db.example"}, False, ("db.example",)),
        ({"SERVICE_HOST": "0.0.0.0", "SERVICE_ALLOWED_HOSTS": "db.example"}, True, ("db.example",)),
    ],
)
def test_which_hosts_a_server_answers(env, guarded, expected):
    assert host_check(load_config(env), guarded).http.allowed_hosts == expected


def test_a_malformed_allowed_host_is_a_config_error():
    with pytest.raises(ConfigError, match="SERVICE_ALLOWED_HOSTS: 'http://x' is not a host name"):
        load_config({"SERVICE_ALLOWED_HOSTS": "a.example, http://x"})


def test_a_host_asked_again_gets_the_same_answer_and_the_remembered_ones_are_bounded():
    """A permitted Host is remembered (one set lookup on later requests); a refused one is
    judged again each time, and no more than SEEN_LIMIT are kept."""
    policy = HostPolicy(("localhost",))
    for _ in range(2):
        assert policy.permits("LocalHost:3000") is True
        assert policy.permits("evil.example:3000") is False
    for port in range(SEEN_LIMIT + 10):
        assert policy.permits(f"localhost:{port}")
    assert policy.permits("evil.example") is False
    assert len(policy.remembered) == SEEN_LIMIT
