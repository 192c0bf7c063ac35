"""A follower's front: its own reads, the writer's writes, and read-your-writes between them.

A reader of `serve --workers N` (docs/workers.md) answers every GET, HEAD and OPTIONS from
its own store, which follows the writer's. Any other method is a write (or a refusal of
one) and only the writer may answer it, so `Forwarding` sends the request to the writer's
private port (private.py) with `http/upstream.py` and answers with the writer's response:
its status, headers and body.

Rules:
1. Read-your-writes on every connection: a forwarded answer with a 2xx status and a
   `Dbsvc-Offset` header (every write's answer has it: the offset of its last row) is sent
   only once this reader's store has applied that offset, so the next read on the same
   connection, which this reader answers, sees the write. An answer without the header
   (a refusal: nothing was written) goes back at once.
2. The wait is bounded (`apply_seconds`): a reader that has stopped following (its state
   in `/metrics`) answers the writer's response after that time anyway, with a warning in
   the log: the write happened, and answering an error would invite a duplicate retry.
3. The writer unreachable (killed, being restarted: nothing listens on its port) is 503
   `unavailable` with `Retry-After` (`WriterUnavailable`): the write was not applied. A
   writer lost after the request went out is the same 503 saying the write may or may not
   have been applied (http/upstream.py rule 4): a client reads before it retries.
4. Forwarded requests count on their own request meter (`FORWARDED_ROUTE` in `/metrics`),
   never on the reader's unmatched one; the writer counts them on their routes.
5. Read-your-writes on any connection (`ReadAfter`, also a `--follow` replica's front): a
   GET or HEAD carrying `Dbsvc-After: N` (N the `Dbsvc-Offset` of a write the client saw
   acknowledged) is answered once this store has applied offset N, so a client that sends
   the highest offset it wrote reads its writes whichever worker or replica answers. Not
   applied within the bounded wait (`apply_seconds`): 503 `unavailable` with `Retry-After`
   (`NotCaughtUp`), never an answer that misses the write. A value that is not a decimal
   offset is 400 `bad_request`. A server that applies its writes itself (one process, the
   writer) has applied every offset it acknowledged, and ignores the header.

`AppliedOffsets` is the wait of rules 1 and 5: futures released by the store's change
stream, once a committed group (storage/changes.py rule 4: a replica's group of up to 512
frames, a single write, a batch) is published: a wait ends in the same call as it did when
each event released it, at one call a group; rebound when a bootstrap replaces the store.

Imports errors, interfaces and http; sans storage (the store is a `ServedStore`).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from dbsvc.errors import BadRequest, NotCaughtUp, UpstreamError, WriterUnavailable
from dbsvc.http.types import Meter, Request, Response
from dbsvc.http.upstream import Upstream
from dbsvc.interfaces import ServedStore

log = logging.getLogger("dbsvc.workers")

LOCAL_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
READ_METHODS = frozenset({"GET", "HEAD"})  # rule 5
FORWARDED_ROUTE = "(forwarded to the writer)"
APPLY_SECONDS = 10.0  # rules 2 and 5
AFTER_HEADER = "dbsvc-after"  # rule 5
MAX_AFTER_DIGITS = 18  # an offset is a 63-bit integer
RETRY_AFTER = 1  # seconds (rule 3): the supervisor restarts a writer within about that


class AppliedOffsets:
    """Futures that complete once the store has applied (committed) an offset (rule 1)."""

    def __init__(self, store: ServedStore) -> None:
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._store = store
        self._unsubscribe = store.subscribe_groups(self._on_group)

    def rebind(self, store: ServedStore) -> None:
        """A bootstrap replaced the store: follow the new one's stream."""
        self._unsubscribe()
        self._store = store
        self._unsubscribe = store.subscribe_groups(self._on_group)
        self._release(store.head_offset)

    def wait(self, offset: int) -> asyncio.Future[None] | None:
        """A future that completes once `offset` is applied; None when it is already."""
        if self._store.head_offset >= offset:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (offset, next(self._order), future))
        return future

    def forget(self, future: asyncio.Future[None]) -> None:
        """A wait given up (its time ran out): drop it, so offsets never reached (a
        client's made-up `Dbsvc-After`) leave nothing behind."""
        future.cancel()
        self._waiting = [entry for entry in self._waiting if entry[2] is not future]
        heapq.heapify(self._waiting)

    @property
    def head(self) -> int:
        """The last offset the store has applied."""
        return self._store.head_offset

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def close(self) -> None:
        self._unsubscribe()
        self._release(1 << 62)

    def _on_group(self, events: Sequence[Any], frames: Sequence[bytes]) -> None:
        if self._waiting and self._waiting[0][0] <= events[-1].offset:
            self._release(events[-1].offset)

    def _release(self, head: int) -> None:
        waiting = self._waiting
        while waiting and waiting[0][0] <= head:
            future = heapq.heappop(waiting)[2]
            if not future.done():
                future.set_result(None)


def written_offset(response: Response) -> int | None:
    """Rule 1: the offset a successful write's answer names, else None."""
    if not 200 <= response.status < 300:
        return None
    for name, value in response.headers:
        if name.lower() == "dbsvc-offset":
            return int(value) if value.isdigit() else None
    return None


def after_offset(value: str) -> int:
    """Rule 5: the offset a `Dbsvc-After` value names, or BadRequest."""
    value = value.strip()
    if not (value.isascii() and value.isdigit() and len(value) <= MAX_AFTER_DIGITS):
        raise BadRequest(
            f"Dbsvc-After {value[:40]!r} is not an offset: expected a decimal integer of at most "
            f"{MAX_AFTER_DIGITS} digits, the Dbsvc-Offset of a write's answer"
        )
    return int(value)


async def applied_within(applied: AppliedOffsets, offset: int, seconds: float) -> bool:
    """Whether the store has applied `offset` now or within `seconds` (rules 1 and 5)."""
    future = applied.wait(offset)
    if future is None:
        return True
    done, _pending = await asyncio.wait({future}, timeout=seconds)
    if not done:
        applied.forget(future)
    return bool(done)


class ReadAfter:
    """The application of a follower that answers reads itself: `app`, with rule 5."""

    def __init__(
        self, app: Callable[[Request], Any], applied: AppliedOffsets, *, apply_seconds: float = APPLY_SECONDS
    ) -> None:
        self.app = app
        self.applied = applied
        self.apply_seconds = apply_seconds

    def __call__(self, request: Request) -> Any:
        if request.method in READ_METHODS:
            after = request.header(AFTER_HEADER)
            if after is not None:
                return self.read_after(request, after_offset(after))
        return self.app(request)

    async def read_after(self, request: Request, offset: int) -> Any:
        if not await applied_within(self.applied, offset, self.apply_seconds):
            raise NotCaughtUp(
                f"this server has applied the writes up to offset {self.applied.head} and not offset {offset} "
                f"(Dbsvc-After) within {self.apply_seconds:g} s: retry after {RETRY_AFTER} s, or read from the primary",
                RETRY_AFTER,
            )
        answer = self.app(request)
        return (await answer) if hasattr(answer, "__await__") else answer


class Forwarding(ReadAfter):
    """The reader's application: `app` for reads (with rule 5), the writer for the rest
    (rules 1-4)."""

    def __init__(
        self,
        app: Callable[[Request], Any],
        upstream: Upstream,
        applied: AppliedOffsets,
        meter: Meter,
        *,
        apply_seconds: float = APPLY_SECONDS,
    ) -> None:
        super().__init__(app, applied, apply_seconds=apply_seconds)
        self.upstream = upstream
        self.meter = meter

    def __call__(self, request: Request) -> Any:
        if request.method in LOCAL_METHODS:
            return super().__call__(request)
        request.meter = self.meter
        return self.forward(request)

    async def forward(self, request: Request) -> Response:
        try:
            response = await self.upstream.send(request)
        except UpstreamError as exc:
            if not exc.sent:
                raise WriterUnavailable(
                    "the writer of this server is not reachable (it is being restarted): "
                    f"the {request.method} was not applied; retry after {RETRY_AFTER} s",
                    RETRY_AFTER,
                ) from exc
            raise WriterUnavailable(
                f"the writer of this server went away before it answered the {request.method}: "
                "it may or may not have been applied; read the record before retrying",
                RETRY_AFTER,
            ) from exc
        offset = written_offset(response)
        if offset is not None and not await applied_within(self.applied, offset, self.apply_seconds):
            log.warning(
                "a forwarded %s was applied by the writer at offset %d, which this reader has not "
                "applied within %.0f s (is it following? /metrics says): answering anyway",
                request.method,
                offset,
                self.apply_seconds,
            )
        return response
