"""What the kept `/snapshot` connection sends and how its failures read (dbsvc/replica/primary.py
`KeptSnapshot`, rule 1): TLS for an `https://` (or `wss://`) primary, plain HTTP otherwise and
when the caller says nothing (the workers' `WriterPrimary` asks its primary over loopback that
way), the caller's headers on the request, and an error that says which ask failed and how.

Why: every other test of the kept connection asks a plain `http://` primary with no header of
its own and checks only that a failure is an OSError, so a connection opened in plain HTTP for
an https primary, in TLS by default, without its headers, or a failure's message lost, passed
them all (mutation testing, docs/mutation.md, session 25). Here a loopback listener reads the
first bytes the ask sends and answers only a plain request: a TLS ClientHello opens with a
handshake record, content type 22 (RFC 8446 §5.1); a plain ask opens with its request line
(RFC 9112 §3).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from dbsvc.replica.consumer import parse_endpoint
from dbsvc.replica.primary import HttpPrimary, KeptSnapshot

ANSWER = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"offset":3}'
TLS_HANDSHAKE = 22  # RFC 8446 §5.1, ContentType handshake


@contextmanager
def first_bytes(answer: bytes = ANSWER) -> Iterator[tuple[int, list[bytes]]]:
    """A listener on a loopback port that accepts one connection and notes the bytes the
    asker sent first: a plain request is answered, anything else is closed unanswered."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    seen: list[bytes] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 5:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            if data.startswith(b"GET "):
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                seen.append(data)
                conn.sendall(answer)
            else:
                seen.append(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], seen
    finally:
        listener.close()
        thread.join(10)


def asked(ask: Callable[[], object]) -> object:
    """The ask's answer, or the OSError it raised."""
    try:
        return ask()
    except OSError as exc:
        return exc


@pytest.mark.parametrize("scheme", ["https", "wss"])
def test_an_https_primary_is_asked_its_snapshot_over_tls(scheme):
    with first_bytes() as (port, seen):
        primary = HttpPrimary(parse_endpoint(f"{scheme}://127.0.0.1:{port}"))
        try:
            answer = asked(primary.snapshot)
        finally:
            primary.close()
    # The listener closed the handshake unanswered: the ask fails, as rule 1 says.
    assert isinstance(answer, OSError)
    assert str(answer).startswith("GET /snapshot failed")
    assert len(seen) == 1
    assert seen[0][:1] == bytes([TLS_HANDSHAKE]), seen[0][:16]


def test_an_http_primary_is_asked_its_snapshot_in_plain_http():
    with first_bytes() as (port, seen):
        primary = HttpPrimary(parse_endpoint(f"http://127.0.0.1:{port}/db"))
        try:
            assert primary.snapshot() == {"offset": 3}
        finally:
            primary.close()
    assert seen[0].startswith(b"GET /db/snapshot HTTP/1.1\r\n")


def test_a_kept_snapshot_told_nothing_of_its_scheme_asks_in_plain_http_with_its_headers():
    # The workers' WriterPrimary makes one so: a netloc, a path and its key header.
    with first_bytes() as (port, seen):
        kept = KeptSnapshot(f"127.0.0.1:{port}", "/snapshot", headers={"X-Dbsvc-Test": "k1"})
        try:
            assert kept.ask() == {"offset": 3}
        finally:
            kept.close()
    assert seen[0].startswith(b"GET /snapshot HTTP/1.1\r\n")
    assert b"\r\nX-Dbsvc-Test: k1\r\n" in seen[0]


def test_a_kept_connection_dropped_with_its_primary_gone_fails_naming_the_ask_and_the_cause():
    # Answered once on a connection the listener then closes: the next ask finds the kept
    # connection closed, asks once more on a new one, and nothing listens any more.
    with first_bytes() as (port, _seen):
        kept = KeptSnapshot(f"127.0.0.1:{port}", "/snapshot")
        assert kept.ask() == {"offset": 3}
    try:
        with pytest.raises(OSError, match=r"^GET /snapshot failed: ConnectionRefusedError"):
            kept.ask()
    finally:
        kept.close()


def test_an_answer_other_than_200_fails_naming_its_status():
    refused = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
    with first_bytes(refused) as (port, _seen):
        kept = KeptSnapshot(f"127.0.0.1:{port}", "/snapshot")
        try:
            with pytest.raises(OSError, match=r"^GET /snapshot answered 503$"):
                kept.ask()
        finally:
            kept.close()
