"""What a worker of `serve --workers N` adds around its server, as service.py runs it.

    front = run.front(app, worker, follower)   # before the Hub is built
    hub = Hub(front.handler, ...)               # the application the public port serves
    await front.start(app, settings)            # before the public port listens
    ... serve until a signal ...
    await front.stop()                          # after the public port has shut down

- No worker (`serve` without `--workers`, or N = 1): the handler is the application and
  start/stop do nothing: a plain server is unchanged.
- The writer: the handler is the application; `start` opens the private listener
  (private.py) on its port, `stop` closes it once the public side has finished, so writes
  the readers forwarded before the signal are still answered.
- A read replica (`--follow`, no worker): the handler is `ReadAfter` (forward.py rule 5),
  so a read naming the offset of a write the client saw waits until the replica holds it.
- A reader: the handler is `Forwarding` (forward.py); `start` waits until the store has
  caught up with the writer's head as the reader found it at start, so a reader never
  listens, and never answers a read, from a state older than what it joined (a restarted
  reader resumes from its own log, which may be far behind); a follower that stops
  following meanwhile ends the start (exit 1: the supervisor starts it again).

Imports errors and http, replica's follower in annotations only, and this package; a
server that is no worker loads nothing else of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dbsvc.errors import StorageError
from dbsvc.http.types import HttpSettings
from dbsvc.workers.role import KEY_HEADER, WorkerRole

if TYPE_CHECKING:  # a plain server loads no follower (tests/test_import_weight.py)
    from dbsvc.replica.follower import Follower
    from dbsvc.workers.forward import AppliedOffsets

log = logging.getLogger("dbsvc.workers")

CATCH_UP_POLL = 0.01  # seconds between two looks at a starting reader's head
STOP_SECONDS = 15.0  # how long the private listener may take to shut down


class Front:
    """A server that is no worker: the application itself (the module docstring)."""

    def __init__(self, app: Any) -> None:
        self.handler: Callable[..., Any] = app

    async def start(self, app: Any, settings: HttpSettings) -> None:
        return None

    async def stop(self) -> None:
        return None


class WriterFront(Front):
    """The writer: the private listener beside the public port."""

    def __init__(self, app: Any, worker: WorkerRole) -> None:
        super().__init__(app)
        self.worker = worker
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, app: Any, settings: HttpSettings) -> None:
        from dbsvc.http.hub import Hub
        from dbsvc.http.server import bind_sockets, serve
        from dbsvc.workers.private import PrivateRoutes, private_settings

        private = private_settings(settings, self.worker)
        routes = PrivateRoutes(app, app.broker, app.broker.models, app.fingerprint, self.worker.key)
        sockets = bind_sockets(private)
        hub = Hub(routes, private, asyncio.get_running_loop())
        hub.meter = app.meters.meter("(the workers' private port)")
        # No span lines here: the readers' /snapshot polls would add one a second each, and a
        # forwarded write is logged by the reader it reached, under the same request id.
        hub.span_enabled = False
        self._task = asyncio.create_task(serve(routes, private, stop=self._stop, sockets=sockets, hub=hub))
        await asyncio.sleep(0)  # the listener is up before the public port listens

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait({self._task}, timeout=STOP_SECONDS)


class ReplicaFront(Front):
    """A read replica: reads that name an offset wait for it (forward.py rule 5)."""

    def __init__(self, app: Any, follower: Follower) -> None:
        from dbsvc.workers.forward import AppliedOffsets, ReadAfter

        self.applied = AppliedOffsets(app.store)
        super().__init__(ReadAfter(app, self.applied))
        _rebind_on_bootstrap(follower, self.applied)

    async def stop(self) -> None:
        self.applied.close()


class ReaderFront(Front):
    """A reader: writes forwarded, and a catch-up before it listens."""

    def __init__(self, app: Any, worker: WorkerRole, follower: Follower) -> None:
        from dbsvc.http.upstream import Upstream
        from dbsvc.workers.forward import FORWARDED_ROUTE, AppliedOffsets, Forwarding
        from dbsvc.workers.private import PRIVATE_HOST

        self.follower = follower
        self.applied = AppliedOffsets(app.store)
        self.upstream = Upstream(PRIVATE_HOST, worker.private_port, headers=[(KEY_HEADER, worker.key)])
        super().__init__(Forwarding(app, self.upstream, self.applied, app.meters.meter(FORWARDED_ROUTE)))
        _rebind_on_bootstrap(follower, self.applied)

    async def start(self, app: Any, settings: HttpSettings) -> None:
        status = self.follower.status
        target = status.primary_offset
        if app.store.head_offset < target:
            log.info("catching up with the writer: offset %d of %d", app.store.head_offset, target)
        while not status.synced or app.store.head_offset < target:
            if status.state in ("stopped", "diverged"):
                raise StorageError(f"this reader stopped following its writer: {status.error}")
            await asyncio.sleep(CATCH_UP_POLL)

    async def stop(self) -> None:
        self.upstream.close()
        self.applied.close()


def _rebind_on_bootstrap(follower: Follower, applied: AppliedOffsets) -> None:
    """A bootstrap replaces the follower's store: the waits follow the new one."""
    replaced = follower.on_store

    def on_store(store: Any) -> None:
        if replaced is not None:
            replaced(store)
        applied.rebind(store)

    follower.on_store = on_store


def front(app: Any, worker: WorkerRole | None, follower: Follower | None) -> Front:
    """The front of this server: see the module docstring."""
    if worker is None:
        return Front(app) if follower is None else ReplicaFront(app, follower)
    if worker.index == 0:
        return WriterFront(app, worker)
    assert follower is not None  # service.py builds a reader's follower
    return ReaderFront(app, worker, follower)
