"""The primary's `/snapshot` asked over one kept-alive connection (dbsvc/replica/primary.py rule
1), against a real primary on a loopback port: a follower asks it every second (follower.py
rule 5), and a new connection each time held its reading thread 70-115 ms while catching up.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dbsvc.replica.consumer import parse_endpoint
from dbsvc.replica.primary import HttpPrimary


def closed_connections(port: int) -> int:
    """TCP connections to or from `port` on this host that were closed lately (state
    TIME_WAIT in /proc/net/tcp: whichever end closed first holds one for about a minute)."""
    hex_port = f":{port:04X}"
    closed = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if state == "06" and (local.endswith(hex_port) or remote.endswith(hex_port)):
            closed += 1
    return closed


def test_the_snapshot_is_asked_again_on_the_connection_the_first_ask_opened(serve):
    server = serve()
    asker = HttpPrimary(parse_endpoint(f"http://127.0.0.1:{server.port}"))
    try:
        before = closed_connections(server.port)  # another process's, on a port used again
        for _ in range(5):
            assert asker.snapshot()["offset"] == 0
        # Five asks, one connection, still open: none was closed (a connection an ask opened
        # and closed would each leave one in TIME_WAIT).
        assert closed_connections(server.port) == before
        asker.close()  # its end reaches TIME_WAIT once the primary has closed its own
        deadline = time.monotonic() + 10
        while closed_connections(server.port) != before + 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert closed_connections(server.port) == before + 1
    finally:
        asker.close()


def test_a_kept_connection_the_primary_closed_is_opened_again_for_the_next_ask(serve, tmp_path):
    server = serve(data_dir=tmp_path / "first")
    asker = HttpPrimary(parse_endpoint(f"http://127.0.0.1:{server.port}"))
    try:
        assert asker.snapshot()["offset"] == 0
        port = server.port
        server.stop()  # its kept connection is closed with it
        again = serve(data_dir=tmp_path / "first", env={"SERVICE_PORT": str(port)})
        assert again.port == port
        assert asker.snapshot()["offset"] == 0  # asked once more, on a new connection
        again.stop()
        with pytest.raises(OSError):  # nothing listens: the new connection's failure is the answer
            asker.snapshot()
    finally:
        asker.close()


def test_a_kept_connection_whose_answer_times_out_is_not_asked_again_at_once(monkeypatch):
    # A primary that answers the first ask, then reads the second and never answers: the
    # ask fails after one timeout, with no second connection (it is asked at the next poll).
    import socket
    import threading

    from dbsvc.replica import primary as primary_module

    monkeypatch.setattr(primary_module, "SNAPSHOT_TIMEOUT", 0.5)
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    answered = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"offset":3}'

    def serve() -> None:
        listener.settimeout(5)
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)
            if len(accepted) == 1:
                conn.recv(4096)
                conn.sendall(answered)
                conn.recv(4096)  # the second ask, never answered

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    asker = HttpPrimary(parse_endpoint(f"http://127.0.0.1:{listener.getsockname()[1]}"))
    try:
        assert asker.snapshot() == {"offset": 3}
        with pytest.raises(OSError, match="timed out"):
            asker.snapshot()
        assert len(accepted) == 1
    finally:
        asker.close()
        listener.close()
        thread.join(5)
        for conn in accepted:
            conn.close()
