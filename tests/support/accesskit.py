"""Access rules over a real server: keys and tokens made in the test, a server started with
the guard on, bearers of those tokens, and sockets read by a loop of their own.

- `keypair(directory)`: an ES256 key made here, its public PEM written for the server.
- `start_ruled_server(schema, key_path, data_root)`: `dbsvc serve` with the guard on for
  tenant `acme` (a schema with rules refuses to start without one).
- `Bearer`: one token's requests (`bearer("GET", "/api/note")`), signed by PyJWT, an
  independent library, with the claims the test gives (none of `sub`, `role`... implied).
- `SocketHub`: WebSocket clients (the `websockets` package) on an event loop in a thread of
  their own, so a synchronous test (a hypothesis state machine) opens sockets at any step
  and each socket's reader keeps every frame, in arrival order, while the test goes on
  writing. `LiveSocket.wait_until(test, deadline)` waits on a condition the reader
  notifies (no sleeps); `LiveSocket.barrier()` is a ping answered by a pong, after which
  every frame the server wrote before its pong has been read.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from websockets.exceptions import ConnectionClosed, InvalidStatus

from support.server import Server, start_server
from support.wskit import open_ws

TENANT = "acme"


def keypair(directory: Path) -> tuple[Any, Path]:
    """(private key, path of its public PEM) for ES256 tokens."""
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    path = directory / "idp.pem"
    path.write_bytes(pem)
    return private, path


def guard_env(key_path: Path) -> dict[str, str]:
    return {"SERVICE_JWT_PUBKEY": str(key_path), "SERVICE_JWT_ALG": "ES256", "SERVICE_TENANT": TENANT}


def start_ruled_server(schema: Path, key_path: Path, data_root: Path, env: dict | None = None) -> Server:
    """A server of `schema` for tenant `acme` (created here) with the token guard on."""
    (data_root / TENANT).mkdir(parents=True, exist_ok=True)
    return start_server(schema, data_root, {**guard_env(key_path), **(env or {})})


class Bearer:
    """A token's bearer: requests to the server with `Authorization` set."""

    def __init__(self, server: Server, private: Any, lifetime: int = 900, **claims: Any) -> None:
        body = {"exp": int(time.time()) + lifetime, "tenant": TENANT, **claims}
        self.server = server
        self.claims = claims
        self.token = jwt.encode(body, private, algorithm="ES256")
        self.auth = {"Authorization": f"Bearer {self.token}"}

    def __call__(self, method: str, path: str, body: Any = None, headers: dict | None = None):
        return self.server.request(method, path, body=body, headers={**self.auth, **(headers or {})})


class LiveSocket:
    """One open socket: `frames` (decoded JSON, in arrival order) filled by its reader task;
    `closed` the (code, reason) of the server's close, once it came."""

    def __init__(self, hub: SocketHub, ws: Any, path: str) -> None:
        self.hub = hub
        self.ws = ws
        self.path = path
        self.frames: list[dict] = []
        self.closed: tuple[int, str] | None = None
        self.changed = threading.Condition()

    async def read(self) -> None:
        try:
            async for message in self.ws:
                with self.changed:
                    self.frames.append(json.loads(message))
                    self.changed.notify_all()
        except ConnectionClosed:
            pass
        finally:
            rcvd = self.ws.close_rcvd
            with self.changed:
                self.closed = (rcvd.code, rcvd.reason) if rcvd is not None else (1006, "")
                self.changed.notify_all()

    def wait_until(self, test: Callable[[list[dict]], bool], timeout: float = 10.0) -> bool:
        """Wait until `test(frames)` holds or the socket closed; False at the deadline."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not test(self.frames):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed is not None:
                    return test(self.frames)
                self.changed.wait(left)
            return True

    def barrier(self, timeout: float = 10.0) -> None:
        """A ping and its pong: the frames written before the pong are then in `frames`."""
        if self.closed is None:
            self.hub.call(self._ping(), timeout)

    async def _ping(self) -> None:
        try:
            pong = await self.ws.ping()
            await pong
        except ConnectionClosed:
            return
        for _ in range(8):  # the reader task takes what arrived before the pong
            await asyncio.sleep(0)

    def close(self) -> None:
        if self.closed is None:
            self.hub.call(self.ws.close(), 10.0)


class SocketHub:
    """An event loop in a daemon thread holding every socket a test opened."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sockets: list[LiveSocket] = []
        self.tasks: list[Any] = []

    def call(self, coroutine: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def open(self, server: Server, path: str, headers: dict) -> LiveSocket | tuple[int, dict]:
        """An open socket, or (status, problem) of an upgrade the server refused."""

        async def connect() -> LiveSocket | tuple[int, dict]:
            try:
                ws = await open_ws(server, path, additional_headers=headers).__aenter__()
            except InvalidStatus as exc:
                return exc.response.status_code, json.loads(exc.response.body or b"{}")
            socket = LiveSocket(self, ws, path)
            self.tasks.append(asyncio.ensure_future(socket.read()))
            return socket

        opened = self.call(connect())
        if isinstance(opened, LiveSocket):
            self.sockets.append(opened)
        return opened

    def close_all(self) -> None:
        for socket in self.sockets:
            socket.close()
        self.sockets.clear()

    def stop(self) -> None:
        self.close_all()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
