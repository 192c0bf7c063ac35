"""The primary over HTTP and WebSocket (dbsvc/replica/primary.py `HttpPrimary`), against a
`websockets` server on a loopback port: GET /snapshot without the token, the streams with it,
and a follower given no primary reaching its endpoint that way.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from dbsvc.errors import ConfigError
from dbsvc.replica.consumer import parse_endpoint
from support.follower_kit import EPOCH_A, FINGERPRINT, OTHER, body

# -- primary.py: the primary over HTTP and WebSocket --------------------------------------------


def test_the_http_primary_asks_snapshot_without_a_token_and_the_streams_with_it():
    from websockets.sync.server import serve

    from dbsvc.replica.primary import HttpPrimary

    seen: list[tuple[str, str | None]] = []

    def http(connection, request):
        seen.append((request.path, request.headers.get("Authorization")))
        if request.path == "/db/snapshot":
            return connection.respond(200, json.dumps({"offset": 7, "epoch": EPOCH_A}))
        if request.path == "/gone/snapshot":
            return connection.respond(404, "no such path")
        return None

    def handle(connection) -> None:
        connection.send(b"frame" if connection.request.path.startswith("/db/replicate?") else "header")

    with serve(handle, "127.0.0.1", 0, process_request=http) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.socket.getsockname()[1]
        primary = HttpPrimary(parse_endpoint(f"http://127.0.0.1:{port}/db"), "tok")
        assert primary.snapshot() == {"offset": 7, "epoch": EPOCH_A}
        with primary.replicate(7) as stream:
            assert stream.receive(5) == b"frame"
        with primary.epoch_snapshot() as stream:
            assert stream.receive(5) == "header"
        with pytest.raises(OSError):
            HttpPrimary(parse_endpoint(f"http://127.0.0.1:{port}/gone")).snapshot()
        with HttpPrimary(parse_endpoint(f"ws://127.0.0.1:{port}/db")).replicate(0) as stream:
            assert stream.receive(5) == b"frame"
        server.shutdown()
    assert seen == [
        ("/db/snapshot", None),
        ("/db/replicate?after=7", "Bearer tok"),
        ("/db/replicate/snapshot", "Bearer tok"),
        ("/gone/snapshot", None),
        ("/db/replicate?after=0", None),
    ]


def test_a_follower_without_a_primary_given_reaches_its_endpoint_over_http_with_its_token(replica):
    from websockets.sync.server import serve

    answer: dict[str, Any] = {}
    asked: list[tuple[str, str | None]] = []
    done = threading.Event()

    def http(connection, request):
        asked.append((request.path, request.headers.get("Authorization")))
        if request.path == "/snapshot":
            return connection.respond(200, json.dumps(answer))
        return None

    def handle(connection) -> None:
        done.wait(10)

    with serve(handle, "127.0.0.1", 0, process_request=http) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.socket.getsockname()[1]
        node = replica(None, url=f"http://127.0.0.1:{port}", token="tok")  # the default primary
        answer.update(body(node.store.epoch, 0, fingerprint=OTHER))
        try:
            with pytest.raises(ConfigError):  # it asked the endpoint's /snapshot
                node.follower.prepare()
            answer.update(fingerprint=FINGERPRINT)
            node.follower.start(node.loop)
            node.wait("the stream asked", lambda: ("/replicate?after=0", "Bearer tok") in asked)
        finally:
            done.set()
            node.close()
            server.shutdown()
    assert asked[0] == ("/snapshot", None)
