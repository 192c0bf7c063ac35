"""The 503 of a WebSocket upgrade past SERVICE_MAX_SOCKETS (http/respond.py `Responder._upgrade`,
hub.py rule 8) is a problem like every other: its body names the request it answers, the id
the client sent in X-Request-Id and the response's header carries (docs/mutation.md, session
14, wt-mpo4: a `request_id` of None in that body passed every earlier test). Through a real
server and sockets."""

from __future__ import annotations

import base64
import json
import os

from support.httpkit import Client


def _upgrade_request(request_id: str | None = None) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    named = f"X-Request-Id: {request_id}\r\n" if request_id else ""
    return (
        f"GET /upgrade HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{named}\r\n"
    ).encode()


def test_the_503_past_max_sockets_names_the_request_it_refuses(make_server):
    demo = make_server(["--max-connections", "10", "--max-sockets", "1"])
    held: Client = demo.client()
    held.send(_upgrade_request())
    assert held.read_response(head_only=True).status == 101
    refused = demo.client()
    refused.send(_upgrade_request("ws-past-the-limit-7"))
    response = refused.read_response()
    assert response.status == 503
    assert response.header("x-request-id") == "ws-past-the-limit-7"
    body = json.loads(response.body)
    assert (body["status"], body["request_id"]) == (503, "ws-past-the-limit-7")
