"""WebSocket helpers for black-box tests, over the `websockets` package (an independent client).

Tests are plain functions; each drives its sockets inside `run(coroutine)` with a deadline.
"""

from __future__ import annotations

import asyncio
import json
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
