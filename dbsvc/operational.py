"""The operational routes: `/health`, `/ready`, `/metrics`, `/api/` (the index), `/`,
`/openapi.json`, `/asyncapi.json` and `/snapshot` (docs/guide/operations.md), open without a
token (routes.py `OPERATIONAL`).

A base of `dbsvc.app.Application`, apart because they share nothing with the model routes
but the store and the counters: each reads what the application holds (the attributes
declared below, set by `Application.__init__`) and never writes it. None touches the disk
but `/ready`, which asks the store for a read and whether it takes writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from dbsvc import __version__
from dbsvc.errors import Unavailable
from dbsvc.explorer import ExplorerPage
from dbsvc.http.types import Request, Response
from dbsvc.index import root_redirect
from dbsvc.interfaces import ServedStore
from dbsvc.metrics import TEXT_TYPE, Meters, render_text, wants_text
from dbsvc.realtime.broker import Broker
from dbsvc.replica.status import ReplicaStatus
from dbsvc.rules import Refusals
from dbsvc.runtime import json_bytes


def served_openapi(document: str, *, guarded: bool) -> bytes:
    """The OpenAPI document as this server serves it. Generated per schema, it declares the
    bearer scheme and requires it nowhere; a server running the guard requires every scheme
    the document declares at the top level (the operational routes keep their own
    `security: []`), so the document never asks for a token the server ignores."""
    if not guarded:
        return document.encode("utf-8")
    doc = json.loads(document)
    schemes = doc.get("components", {}).get("securitySchemes", {})
    doc["security"] = [{scheme: []} for scheme in schemes]
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def worker_info(worker: dict[str, Any]) -> bytes:
    """The Prometheus text lines naming the worker that answered (`serve --workers N`)."""
    labels = f'worker="{worker["label"]}",role="{worker["role"]}",pid="{worker["pid"]}"'
    return (
        b"# HELP dbsvc_worker_info Which worker of serve --workers N answered.\n"
        b"# TYPE dbsvc_worker_info gauge\n" + f"dbsvc_worker_info{{{labels}}} 1\n".encode("ascii")
    )


class OperationalRoutes:
    """`/health`, `/ready`, `/metrics`, the index, `/`, the two documents and `/snapshot`."""

    store: ServedStore
    replica: ReplicaStatus | None
    accepting: bool
    broker: Broker
    fingerprint: str
    meters: Meters
    refusals: Refusals
    rules: bool
    replication: bool
    explorer: ExplorerPage | None
    connections: Callable[[], dict[str, int]]
    list_cache: Callable[[], tuple[int, int]]  # the kept list answers' (entries, bytes): readcache.py
    # `serve --workers N`: which worker answers (WorkerRole.describe; docs/workers.md), else None
    worker: dict[str, Any] | None = None
    _index: bytes
    _openapi: bytes
    _asyncapi: bytes

    def health(self, request: Request | None = None) -> Response:
        """Liveness: never touches the disk. The process is alive even when its store
        refuses writes, so this stays 200 and only names the degraded state
        (docs/security.md, "Storage failures")."""
        health = self.store.health()
        # `status` first (docs/guide/rest.md); then which build answers: the dbsvc version and the
        # schema's fingerprint (the one a read replica compares), as `--version` prints them.
        body: dict[str, Any] = {"status": "ok", "version": __version__, "schema": self.fingerprint}
        if self.worker is not None:
            body["worker"] = self.worker
        if self.replica is not None:
            # Which primary, the state (`diverged`: alive, serving, no longer following) and
            # whether it is ready or what it waits for (docs/replication.md, "Readiness").
            body["replica"] = self.replica.health()
        if health.writable:
            return Response(200, json_bytes(body))
        return Response(200, json_bytes({**body, "storage": health.state.value, "detail": health.detail}))

    def ready(self, request: Request | None = None) -> Response:
        """Readiness: the server is not shutting down, a read replica has bootstrapped, the
        store answers a read and takes writes; while it refuses them for lack of space, this
        is what probes for room."""
        if not self.accepting:
            raise Unavailable("the server is shutting down")
        waiting = self.replica.waiting_for() if self.replica is not None else None
        if waiting is not None:  # an empty replica would answer empty lists (follower.py rule 8)
            raise Unavailable(f"not ready: this read replica waits for {waiting}")
        self.store.watermarks()
        health = self.store.health(retry=True)
        if not health.writable:
            raise Unavailable(f"not ready: {health.detail}")
        return Response(200, b'{"status":"ready"}')

    def metrics(self, request: Request | None = None) -> Response:
        """Row counts and counters in JSON, or the Prometheus text format when the request
        asks for it (dbsvc/metrics.py; docs/guide/operations.md, "Monitoring")."""
        counts = self.store.live_counts()
        if request is not None and wants_text(request.query, request.header("accept")):
            replica = None
            if self.replica is not None:
                replica = {**self.replica.report(self.store.head_offset), "ready": self.replica.synced}
            text = render_text(
                version=__version__,
                fingerprint=self.fingerprint,
                rows=counts,
                meters=self.meters,
                store=self.store.stats(),
                realtime=self.broker.metrics(),
                connections=self.connections(),
                refused=dict(self.refusals.counts) if self.rules else None,
                replica=replica,
                list_cache=self.list_cache(),
            )
            if self.worker is not None:
                text += worker_info(self.worker)
            return Response(200, text, content_type=TEXT_TYPE)
        body = {
            "model_count": len(counts),
            "rows_per_model": counts,
            "total_rows": sum(counts.values()),
            "realtime": self.broker.metrics(),
        }
        if self.rules:
            body["refused"] = dict(self.refusals.counts)
        if self.replica is not None:
            body["replica"] = self.replica.report(self.store.head_offset)
        if self.worker is not None:
            body["worker"] = self.worker
        return Response(200, json_bytes(body))

    def index(self, request: Request | None = None) -> Response:
        """`/api/`: the models, their routes and the documents (dbsvc/index.py)."""
        return Response(200, self._index)

    def root(self, request: Request | None = None) -> Response:
        """`/`: to the explorer when it is on, else to the index."""
        return root_redirect(self.explorer is not None)

    def openapi(self, request: Request | None = None) -> Response:
        """The service's own OpenAPI document, generated with the handlers (a public contract,
        like PostgREST's root document: no token needed to read it), as this server runs it:
        with the guard, the bearer requirement `served_openapi` adds."""
        return Response(200, self._openapi)

    def asyncapi(self, request: Request | None = None) -> Response:
        """The AsyncAPI 3.0 document of the WebSocket routes, generated with the handlers."""
        return Response(200, self._asyncapi)

    def snapshot(self, request: Request | None = None) -> Response:
        body = {
            "watermarks": self.store.watermarks(),
            "epoch": self.store.epoch,
            "replication": self.replication,
            "offset": self.store.head_offset,
            "fingerprint": self.fingerprint,
            "history": self.store.history_json,
        }
        if self.replica is not None:
            body["replica"] = self.replica.report(self.store.head_offset)
        return Response(200, json_bytes(body))
