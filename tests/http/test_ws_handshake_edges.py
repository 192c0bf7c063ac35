"""Opening handshakes RFC 6455 §4.1 does not allow: refused 400, naming the problem, and
the connection stays usable HTTP (dbsvc/http/ws/server.py `handshake_headers`)."""

from __future__ import annotations

import json

KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def _handshake(version: str, keys: list[str]) -> bytes:
    lines = [
        f"GET /upgrade HTTP/{version}",
        "Host: 127.0.0.1",
        "Connection: Upgrade",
        "Upgrade: websocket",
        "Sec-WebSocket-Version: 13",
        *[f"Sec-WebSocket-Key: {key}" for key in keys],
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def test_two_sec_websocket_keys_are_400_naming_the_header(server):
    client = server.client()
    client.send(_handshake("1.1", [KEY, "AQIDBAUGBwgJCgsMDQ4PEA=="]))
    response = client.read_response()
    assert response.status == 400
    assert json.loads(response.body)["detail"] == "Sec-WebSocket-Key appears 2 times: expected exactly one"
    assert client.request("GET", "/echo").status == 200


def test_the_same_key_twice_is_still_two_keys(server):
    client = server.client()
    client.send(_handshake("1.1", [KEY, KEY]))
    response = client.read_response()
    assert response.status == 400
    assert "Sec-WebSocket-Key appears 2 times" in json.loads(response.body)["detail"]


def test_a_handshake_over_http_1_0_is_400_naming_the_version(server):
    client = server.client()
    client.send(_handshake("1.0", [KEY]))
    response = client.read_response()
    assert response.status == 400
    assert json.loads(response.body)["detail"] == "a WebSocket handshake over HTTP/1.0 is not valid: expected HTTP/1.1"


def test_one_key_over_http_1_1_still_opens(server):
    client = server.client()
    client.send(_handshake("1.1", [KEY]))
    response = client.read_response(head_only=True)
    assert response.status == 101
