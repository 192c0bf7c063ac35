"""WebSocket helpers for black-box tests, over the `websockets` package (an independent client).

Tests are plain functions; each drives its sockets inside `run(coroutine)` with a deadline.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import socket
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

TIMEOUT = 10.0


def run(coroutine: Any, timeout: float = 60.0) -> Any:
    """Run one test's async body with an overall deadline."""
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


def url(server: Any, path: str) -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


def open_ws(server: Any, path: str, **kwargs: Any) -> Any:
    """`async with open_ws(server, "/subscribe/user") as ws:` (compression is offered by
    default, as browsers do; the server declines it)."""
    kwargs.setdefault("open_timeout", TIMEOUT)
    kwargs.setdefault("max_size", 16 * 1024 * 1024)
    return connect(url(server, path), **kwargs)


async def recv_json(ws: ClientConnection, timeout: float = TIMEOUT) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def recv_n(ws: ClientConnection, n: int, timeout: float = TIMEOUT) -> list[dict]:
    return [await recv_json(ws, timeout) for _ in range(n)]


async def nothing_within(ws: ClientConnection, seconds: float) -> bool:
    """True when no message arrives within `seconds`."""
    try:
        message = await asyncio.wait_for(ws.recv(), seconds)
    except asyncio.TimeoutError:
        return True
    raise AssertionError(f"unexpected message: {message!r}")


async def refusal(server: Any, path: str, **kwargs: Any) -> tuple[int, dict, dict]:
    """(status, problem body, headers) of an upgrade the server refuses before the 101."""
    try:
        async with open_ws(server, path, **kwargs):
            pass
    except InvalidStatus as exc:
        response = exc.response
        return response.status_code, json.loads(response.body or b"{}"), dict(response.headers)
    raise AssertionError(f"{path} was upgraded")


async def closed_with(ws: ClientConnection, timeout: float = TIMEOUT) -> tuple[int, str]:
    """Read until the server closes; (code, reason) of its close frame."""
    try:
        while True:
            await asyncio.wait_for(ws.recv(), timeout)
    except ConnectionClosed as exc:
        assert exc.rcvd is not None, f"no close frame received ({exc})"
        return exc.rcvd.code, exc.rcvd.reason


def post(server: Any, path: str, body: dict, **kw: Any) -> Any:
    """A write from a worker thread (http.client), so the loop keeps reading sockets."""
    return asyncio.to_thread(server.post, path, body, **kw)


def request(server: Any, method: str, path: str, body: Any = None, **kw: Any) -> Any:
    return asyncio.to_thread(server.request, method, path, body, **kw)


def raw_websocket(port: int, path: str, rcvbuf: int | None = None) -> socket.socket:
    """A client that completes the handshake by hand and then does what the test says."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # before connect, so the TCP window stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, "closed during the handshake"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 4.2.2: the accept key's suffix


def switching_protocols(request: bytes) -> bytes:
    """The 101 head a WebSocket server answers the client handshake `request` (its head's
    bytes) with, for tests that play the server by hand."""
    key = next(
        line.split(b":", 1)[1].strip()
        for line in request.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(opcode, payload) of each whole unmasked frame a server sent, as a `raw_websocket`
    reads them; a frame cut short at the end is left out."""
    frames, i = [], 0
    while i + 2 <= len(data):
        opcode, n = data[i] & 0x0F, data[i + 1] & 0x7F
        i += 2
        if n == 126:
            n, i = int.from_bytes(data[i : i + 2], "big"), i + 2
        elif n == 127:
            n, i = int.from_bytes(data[i : i + 8], "big"), i + 8
        if i + n > len(data):
            break
        frames.append((opcode, data[i : i + n]))
        i += n
    return frames
