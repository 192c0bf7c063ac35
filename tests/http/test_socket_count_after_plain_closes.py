"""SERVICE_MAX_SOCKETS counts upgraded sockets only (hub.py rule 8): plain HTTP connections
that come and go never move the count, so the limit holds after any number of them. A
connection starts as no socket (http/respond.py `Responder.__init__`); one that started as
a socket would be taken off the count when it closes, and each plain close would give an
upgrade a place past the limit (docs/mutation.md, session 15, wt-mpo5). Through a real
server and sockets."""

from __future__ import annotations

import base64
import os

from support.httpkit import Client

PLAIN = 3


def _upgrade_request() -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET /upgrade HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


def test_plain_connections_closed_before_do_not_raise_the_socket_limit(make_server):
    demo = make_server(["--max-connections", "10", "--max-sockets", "1"])
    for _ in range(PLAIN):
        plain: Client = demo.client()
        assert plain.request("GET", "/health", {"Connection": "close"}).status == 200
        assert plain.is_closed()
        plain.close()
    held = demo.client()
    held.send(_upgrade_request())
    assert held.read_response(head_only=True).status == 101
    for _ in range(PLAIN):  # each would have found a place had a plain close freed one
        refused = demo.client()
        refused.send(_upgrade_request())
        assert refused.read_response().status == 503
        refused.close()
