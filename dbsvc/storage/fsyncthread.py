"""The commit queue's fsync thread (commit.py): one long-lived thread per queue that runs
the log's fsync when told and tells the event loop once it returned.

Hand-over, one fsync in flight at a time::

    loop thread (the committer)                 fsync thread
    ----------------------------------          ----------------------------------------
    start(loop, done) -> the job in the slot,   blocked on `_go`
      `_go` released                       ->   takes the job, fsync()
    (serves other requests meanwhile)           the slot emptied
    done(error) runs on the loop           <-   loop.call_soon_threadsafe(done, error)

Why not `loop.run_in_executor(ThreadPoolExecutor(1), fsync)`, as before: each call made a
`concurrent.futures.Future`, a work item on the executor's queue, an asyncio future chained
to it and that chain's callbacks, for one system call a group; a thread of its own woken by a
lock it blocks on costs about half as much CPU a call (bench/README.md, session 10 wt-wr6
and session 11 wt-wr7). `_go` is a lock used as a signal: the thread blocks acquiring it and
`start` or `close` releases it; the committer starts one fsync at a time and `close` runs
once, so the lock is never released twice in a row.

`use(factory)` is the seam for a run that must be one thread of control (the power-loss
tests run each fsync on the loop at its next turn, in an order fixed by their seed): inside
the block, commit queues started make their syncer with `factory` instead of `FsyncThread`.

Imports nothing of dbsvc: it runs a callable and reports how it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

Done = Callable[[BaseException | None], object]  # told how the fsync ended: None, or its error
THREAD_NAME = "dbsvc-fsync"  # seen in py-spy dumps and threading.enumerate()


class Syncer(Protocol):
    """What a commit queue asks of its fsync runner."""

    def start(self, loop: asyncio.AbstractEventLoop, done: Done) -> None:
        """Run one fsync, then have `loop` call `done(error)`; never `done` inside this call."""

    def close(self) -> None:
        """Wait for an fsync in flight, then stop; idempotent."""


class FsyncThread:
    """Runs `fsync` in a thread of its own, one call at a time (module docstring)."""

    def __init__(self, fsync: Callable[[], None]) -> None:
        self._fsync = fsync
        self._go = threading.Lock()
        self._go.acquire()  # held until there is a job or the thread is to stop
        self._job: tuple[asyncio.AbstractEventLoop, Done] | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def start(self, loop: asyncio.AbstractEventLoop, done: Done) -> None:
        assert self._job is None and not self._closed, "one fsync in flight at a time"
        self._job = (loop, done)
        self._go.release()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._job is None:  # the thread waits for a job, or is about to: let it see `_closed`
            self._go.release()
        self._thread.join()

    def _serve(self) -> None:
        while True:
            self._go.acquire()
            job = self._job
            if job is None:  # released by `close`
                return
            loop, done = job
            error: BaseException | None = None
            try:
                self._fsync()
            except BaseException as exc:  # noqa: BLE001 - handed to the committer, as a future would
                error = exc
            self._job = None  # before telling: `done` may start the next fsync at once
            try:
                loop.call_soon_threadsafe(done, error)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for this fsync any more
            if self._closed:
                return


_factory: Callable[[Callable[[], None]], Syncer] = FsyncThread


def start_syncer(fsync: Callable[[], None]) -> Syncer:
    """A commit queue's fsync runner: an `FsyncThread`, or what `use` put in its place."""
    return _factory(fsync)


@contextlib.contextmanager
def use(factory: Callable[[Callable[[], None]], Syncer]) -> Iterator[None]:
    """Inside the block, `start_syncer` makes its runners with `factory` (tests only, like
    `files.use`)."""
    global _factory
    previous, _factory = _factory, factory
    try:
        yield
    finally:
        _factory = previous
