"""The writer's private listener, and how a reader reaches it.

Of the workers of `serve --workers N` (docs/workers.md) the writer alone holds the tenant's
lock and writes; besides the public port it listens on 127.0.0.1 at a port the supervisor
chose (`WorkerRole.private_port`). The readers use that port for two things:

    GET  /snapshot, /replicate?after=N, /replicate/snapshot    following (replica/follower.py)
    POST, PUT, PATCH, DELETE on /api/..., POST /batch           a write forwarded (forward.py)

Rules:
1. Every request carries `Dbsvc-Worker-Key` with the supervisor's key (role.py rule 3),
   compared in constant time; any other is 403 `forbidden` and touches nothing.
2. `/replicate` and `/replicate/snapshot` are served here without the token guard, access
   rules or `[runtime] replication`: a reader needs the whole stream whatever the schema
   says of public replication (the key stands in for the token). The public port keeps
   every check.
3. Everything else goes to the writer's application as it is, token and all: a forwarded
   write is checked by the guard and the access rules with the client's own token, and
   answered as the public port would answer it.
4. The listener has no CORS (the reader's port adds its own) and no Host check (the
   forwarded Host is the client's, already checked by the reader), and keeps idle
   connections open: the readers' pools reuse them (http/upstream.py rule 1).

`WriterPrimary` is replica/primary.py's `Primary` for this port: the follower's requests
with the key, over loopback with `http.client` (no proxy variable can divert them).
"""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from dbsvc.errors import Forbidden, MethodNotAllowed
from dbsvc.http.types import Deferred, HttpSettings, Request, Response, Upgrade
from dbsvc.http.ws.client import open_websocket
from dbsvc.realtime.broker import Broker
from dbsvc.realtime.routes import RealtimeRoutes
from dbsvc.replica.primary import HANDSHAKE_TIMEOUT, KeptSnapshot, Stream
from dbsvc.routes import REPLICATE_PATH, REPLICATE_SNAPSHOT_PATH, SOCKET_METHODS
from dbsvc.runtime import CompiledModel
from dbsvc.workers.role import KEY_HEADER, WorkerRole

PRIVATE_HOST = "127.0.0.1"

Answer = Response | Deferred | Upgrade | Awaitable[Response | Upgrade]


def private_settings(public: HttpSettings, role: WorkerRole) -> HttpSettings:
    """The private listener's settings: the public limits, on loopback, rule 4."""
    return dataclasses.replace(
        public,
        host=PRIVATE_HOST,
        port=role.private_port,
        reuse_port=True,  # the supervisor holds the port between two writers (supervisor.py)
        cors_origins=(),
        allowed_hosts=(),
        idle_timeout=0.0,
    )


class PrivateRoutes:
    """The application of the writer's private port (rules 1-3)."""

    def __init__(
        self,
        app: Callable[[Request], Answer],
        broker: Broker,
        models_by_name: Mapping[str, CompiledModel],
        fingerprint: str,
        key: str,
    ) -> None:
        self.app = app
        self.key = key.encode("ascii")
        # rule 2: the follower's streams, with no guard and no rules
        self.streams = RealtimeRoutes(broker, models_by_name, fingerprint=fingerprint)

    def __call__(self, request: Request) -> Answer:
        offered = (request.header(KEY_HEADER.lower()) or "").encode("latin-1")
        if not hmac.compare_digest(offered, self.key):
            raise Forbidden(f"this port serves the workers of one server only: {KEY_HEADER} is missing or wrong")
        if request.path == REPLICATE_PATH or request.path == REPLICATE_SNAPSHOT_PATH:
            if request.method not in SOCKET_METHODS:
                raise MethodNotAllowed(
                    f"method {request.method!r} is not allowed on {request.path!r}", list(SOCKET_METHODS)
                )
            if request.path == REPLICATE_PATH:
                return self.streams.replicate(request)
            return self.streams.replicate_snapshot(request)
        return self.app(request)


class WriterPrimary:
    """The writer's private port as a follower's `Primary` (replica/primary.py)."""

    def __init__(self, port: int, key: str) -> None:
        self.port = port
        self.headers = [(KEY_HEADER, key)]
        self.ws_base = f"ws://{PRIVATE_HOST}:{port}"
        self._snapshot = KeptSnapshot(f"{PRIVATE_HOST}:{port}", "/snapshot", headers=dict(self.headers))

    def snapshot(self) -> Any:
        """GET /snapshot on one kept connection (primary.py rule 1: OSError or ValueError)."""
        return self._snapshot.ask()

    def close(self) -> None:
        self._snapshot.close()

    def replicate(self, after: int) -> Stream:
        url = f"{self.ws_base}/replicate?after={after}"
        return open_websocket(url, headers=self.headers, timeout=HANDSHAKE_TIMEOUT)

    def epoch_snapshot(self) -> Stream:
        return open_websocket(f"{self.ws_base}/replicate/snapshot", headers=self.headers, timeout=HANDSHAKE_TIMEOUT)
