"""systemd's readiness protocol (dbsvc/notify.py) through a real server: a unix datagram socket
stands where systemd's would be, NOTIFY_SOCKET names it, and the server must say READY=1 once
it serves and STOPPING=1 when SIGTERM stops it. A bad NOTIFY_SOCKET never stops the server."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dbsvc.notify import notify
from support.deploykit import receive_notification as receive
from support.server import ROOT, start_server

BLOG = ROOT / "schemas" / "blog.dbs"


@pytest.fixture
def socket_path() -> Iterator[Path]:
    """A short directory for the socket: AF_UNIX paths are limited to 108 bytes."""
    with tempfile.TemporaryDirectory(prefix="dbsvc-notify-") as directory:
        yield Path(directory) / "notify"


@pytest.fixture
def listener(socket_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(socket_path))
    yield sock
    sock.close()


def test_server_says_ready_once_it_serves_and_stopping_on_sigterm(listener, socket_path, tmp_path):
    server = start_server(BLOG, tmp_path / "data", {"NOTIFY_SOCKET": str(socket_path)})
    try:
        ready = receive(listener)
        assert ready["READY"] == "1"
        assert ready["STATUS"] == f"listening on 127.0.0.1:{server.port} (tenant default)"
        assert server.get("/ready").json == {"status": "ready"}
        assert server.post("/api/user", {"email": "n@x.io", "name": "N"}).status == 201
    finally:
        status = server.stop()
    assert receive(listener) == {"STOPPING": "1", "STATUS": "stopping"}
    assert status == 0


def test_abstract_socket_name_is_honoured(tmp_path):
    name = f"dbsvc-test-{secrets.token_hex(8)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        server = start_server(BLOG, tmp_path / "data", {"NOTIFY_SOCKET": "@" + name})
        try:
            assert receive(sock)["READY"] == "1"
        finally:
            assert server.stop() == 0
        assert receive(sock)["STOPPING"] == "1"


def test_server_with_a_dead_notify_socket_still_serves_and_says_why(tmp_path, socket_path):
    server = start_server(BLOG, tmp_path / "data", {"NOTIFY_SOCKET": str(socket_path)})  # nobody bound it
    try:
        assert server.post("/api/user", {"email": "d@x.io", "name": "D"}).status == 201
        assert server.get("/api/user").json["total"] == 1
    finally:
        assert server.stop() == 0
    assert any(
        f"could not notify the service manager at NOTIFY_SOCKET={str(socket_path)!r}" in line for line in server.log
    ), "".join(server.log)


def test_notify_without_socket_sends_nothing():
    assert notify(["READY=1"], environ={}) is False
    assert notify(["READY=1"], environ={"NOTIFY_SOCKET": ""}) is False


@pytest.mark.parametrize("address", ["vsock:2:1234", "relative/notify"])
def test_unsupported_address_is_logged_not_raised(address, caplog):
    with caplog.at_level(logging.WARNING, logger="dbsvc"):
        assert notify(["READY=1"], environ={"NOTIFY_SOCKET": address}) is False
    assert f"NOTIFY_SOCKET={address!r} is not supported" in caplog.text


def test_notify_sends_lines_as_one_datagram(listener, socket_path):
    assert notify(["READY=1", "STATUS=x y"], environ={"NOTIFY_SOCKET": str(socket_path)}) is True
    assert receive(listener) == {"READY": "1", "STATUS": "x y"}


def test_notify_reads_the_process_environment_by_default(listener, socket_path, monkeypatch):
    monkeypatch.setitem(os.environ, "NOTIFY_SOCKET", str(socket_path))
    from dbsvc.notify import notify_ready

    assert notify_ready("up") is True
    assert receive(listener) == {"READY": "1", "STATUS": "up"}
