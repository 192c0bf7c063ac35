"""`receive_many` (dbsvc/http/ws/client.py, rule C7) hands over the messages already kept
and, once they are taken, what the socket already holds (one poll, never a wait): a
replica's group takes every frame that has arrived, not only those of the read that
brought its first one. test_replica_ws_frames.py's receive_many tests had every byte in
one read, so a poll that never found the socket readable (`select(...)[1]`, the writable
list, always empty) survived them (session 24 mutation pass)."""

from __future__ import annotations

import threading

from dbsvc.http.ws.client import open_websocket
from tests.replica.test_replica_ws_frames import Server, frame


def test_receive_many_takes_what_the_socket_holds_once_the_kept_messages_are_taken():
    kept = [b"first", b"kept"]  # one read: the first is `receive`'s, the second stays kept
    later = [b"b" * 300, b"c" * 40_000, b"d"]  # sent after, and in the client's kernel before the call
    server = Server([b"".join(map(frame, kept)), b"".join(map(frame, later))])
    server.hold = threading.Event()
    try:
        with open_websocket(f"ws://127.0.0.1:{server.port}/", timeout=10) as ws:
            assert ws.receive(timeout=10) == b"first"
            server.hold.set()
            assert server.sent.wait(10)  # every byte of the second piece is in the client's kernel
            assert ws.receive_many(100, 1 << 30, timeout=10) == [b"kept", *later]
    finally:
        server.close()
