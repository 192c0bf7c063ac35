"""The write side of the log: frames gathered on the loop thread, one write and one fsync
per batch.

Protocol (group commit, `sync="full"`)::

    write coroutine (loop thread)              committer task (loop) + fsync thread
    ---------------------------------          -----------------------------------------
    check constraints, build the frame
    hold(frame)            -> its offset and byte position in the log are fixed
    apply to memory, queue (end, future)  ->  wake
    await future                               write every held frame with one write call
                                               target = bytes written so far
                                               fsync(log) in the fsync thread (one in
                                                 flight, fsyncthread.py)
                                               every queued write with end <= target:
                                                 resolve its future, publish its event
                                               loop while anything is queued

A batch (`submit_group`: batchwrite.py, a follower's group) holds all its frames at once:
one write call, one fsync, one `Pending` (its frames, events and undos in lists), and
acknowledged and published in one `_acknowledge`, or all rolled back (rule 3). A run of
single writes (`submit_run`: a turn's inserts, writes.py rule 7) is held the same way,
each write keeping its own completion callback.

Completions: a write is told it is durable either by its future (`submit` with no `done`)
or by its completion callback `done(error)` (`done=`: the HTTP application's writes, through
`Store.insert_then` and its kin): the callbacks of a group `_acknowledge` or `_fail_pending`
settles are called in one loop callback, in the writes' order, after the group's futures are
resolved and before its events' subscribers run what they schedule; never inside `submit`. A
future costs a write its own future and a loop handle for its callback; a group's callbacks
cost one handle (bench/README.md, session 9).

So N writers arriving during one fsync share the next write and the next fsync: one
system call each per batch, where a write call per frame cost a measurable share of a
durable POST's throughput at 64 connections (bench/README.md has the figure). `sync="off"` writes each frame at
once and resolves after it reached the page cache (at once, inside `submit`, when no
earlier write is queued). Online compaction reads the log file from a thread, so it has
the held frames written first (`write_held`).

Failure rules (a write or fsync that raised OSError is never acknowledged, and a write
is never written a second time):

1. The log stops taking writes: every later write raises `Unavailable` (`health()` says
   why, and the server's `/ready` answers 503). A failed batch write fails every write
   of the batch: none of them was acknowledged.
2. Writes covered by an fsync that succeeded before the failure are acknowledged as usual.
3. Every other queued write is rolled back in memory in reverse order (the store's
   `rollback`), the log is truncated to the end of the last acknowledged frame and fsynced
   (best effort, logged), and each waiting writer gets `Unavailable`.
4. Fail-stop, or refused until there is room (`WriteState`):
   - FAILED (fail-stop, until a restart): a failed fsync. Linux may report it only once and
     may already have dropped the dirty pages, so the page cache no longer tells what
     reached the disk and nothing written since can be trusted (PostgreSQL's "fsyncgate",
     2018, after which it panics on any fsync error). Likewise any write error other than
     lack of space, a failed cut-back (rule 3), and a compaction failing after its commit
     point (online.py). Reads go on from memory, which holds exactly the acknowledged
     writes; a restart reads the log back from disk.
   - REFUSING: a write that failed for lack of space (ENOSPC, EDQUOT), so before any fsync
     covered it, once the cut-back succeeded. The log is then exactly its acknowledged
     end, durable. At most once per RETRY_INTERVAL, a write or a `health(retry=True)` call
     (the server's `/ready`) probes for room: it appends PROBE_BYTES of zeros and cuts
     them off again (a crash in between leaves a zero tail, which opening cuts as torn).
     When the probe succeeds the state is OK again and writes resume, with no restart.

After a restart the log therefore holds exactly the acknowledged writes, plus at most a tail
that a failed truncate left behind; such a tail is only ever unacknowledged writes and is
kept if its frames are whole (they were valid writes that simply were not confirmed).
Readers can observe a write between its apply and its fsync; if its batch's write or fsync
fails, that write vanishes again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from dbsvc.errors import Unavailable
from dbsvc.storage.fsyncthread import Syncer, start_syncer
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.loghealth import ROOM_ERRORS, LogHealth
from dbsvc.storage.logwriter import LogWriter

log = logging.getLogger("dbsvc.storage")

Done = Callable[[BaseException | None], object]  # a write's completion callback ("Completions")


@dataclass(slots=True)
class Pending:
    """A written, not yet acknowledged write."""

    end: int  # file size after its frame
    future: asyncio.Future[None] | None  # None: `done` is told instead
    event: Any  # ChangeEvent, published on commit
    undo: Any  # opaque to this module; handed to `rollback`
    applied: bool = True
    frame: bytes = b""  # the frame written, published with the event
    frames: list[bytes] | None = None  # a group's (`submit_group`): `event`, `undo` are lists
    done: Done | None = None  # the completion callback (module docstring, "Completions")
    dones: list[Done] | None = None  # a run's (`submit_run`): one callback per frame


def _settle(callbacks: list[Done], error: BaseException | None) -> None:
    """Tell each write of a settled group its outcome, in order ("Completions"). One
    callback that raises is logged, as the loop logs a failing future callback, and keeps
    no other write from its outcome."""
    for done in callbacks:
        try:
            done(error)
        except Exception:  # noqa: BLE001 - a caller's bug; the others still hear
            log.exception("a write's completion callback raised")


def _resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    """An fsync's outcome into the committer's future, unless the committer was cancelled
    meanwhile (`shutdown`)."""
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class CommitQueue(LogHealth):
    """Group commit for one `LogWriter`; see the module docstring. Whether the log takes
    writes (rules 1 and 4) is its base's (loghealth.py)."""

    def __init__(
        self,
        writer: LogWriter,
        *,
        sync: bool,
        publish: Callable[[Any, bytes], None],
        rollback: Callable[[Any], None],
        publish_group: Callable[[list[Any], list[bytes]], None] | None = None,
    ) -> None:
        super().__init__(writer, sync=sync)
        self.publish = publish
        # A group's events in one call (changes.py rule 4), else one `publish` each.
        self.publish_group = publish_group or (lambda events, frames: deque(map(publish, events, frames), 0))
        self.rollback = rollback
        self._pending: list[Pending] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._syncer: Syncer | None = None  # the fsync thread (fsyncthread.py), made with the task
        self._switch: tuple[Callable[[], None], asyncio.Future[None]] | None = None
        self._thread = 0  # the thread `_loop` was found running on

    def _ensure_task(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        # The common case first, with no system call: the committer's loop is running on
        # this thread, so it is the running loop (a thread runs one loop at a time).
        # `asyncio.get_running_loop()` compares the process id with getpid(), a system call
        # per write (glibc does not cache it).
        if loop is not None and self._thread == threading.get_ident() and loop.is_running():
            task = self._task
            if task is not None and not task.done():
                return loop
        loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        if self._loop is not loop or self._task is None or self._task.done():
            assert not self._pending, "writes pending on another event loop"
            self._loop = loop
            self._wake = asyncio.Event()
            if self._syncer is None:
                self._syncer = start_syncer(self.writer.fsync)
            self._task = loop.create_task(self._run(), name="dbsvc-committer")
        return loop

    def submit(
        self, frame: bytes, event: Any, apply: Callable[[], Any], done: Done | None = None
    ) -> asyncio.Future[None] | None:
        """Log `frame` (held for the committer's next write under `sync="full"`, written
        now under "off"), then `apply()` it to memory; the future resolves once durable,
        or, given `done`, no future is made and `done(error)` is called ("Completions").
        Called on the loop thread with no await in between, so order is log order."""
        loop = self._ensure_task()
        future = None if done is not None else loop.create_future()
        if self.sync:
            end = self.writer.hold(frame)
        else:
            try:
                end = self.writer.append(frame)
            except OSError as exc:
                self._write_failed(exc)
                self._pending.append(Pending(self.writer.written, future, event, None, applied=False, done=done))
                assert self._wake is not None
                self._wake.set()
                return future
        undo = apply()
        self._pending.append(Pending(end, future, event, undo, frame=frame, done=done))
        if not self.sync and len(self._pending) == 1 and self._switch is None:
            # Nothing to wait for: acknowledge now and spare two loop iterations.
            self._acknowledge(1)
            return future
        assert self._wake is not None
        self._wake.set()
        return future

    def submit_group(self, frames: list[bytes], events: list[Any], undos: list[Any]) -> asyncio.Future[None]:
        """Log the frames of one batch (already applied to memory: `undos[i]` undoes the
        i-th) as `submit` logs one: held together, so one write call and one fsync cover
        them all, or written at once in one call under "off". One future, resolved when the
        last is durable; they are acknowledged and published in one `_acknowledge`, or all
        rolled back (rule 3). The lists become the queue's, not copied: both callers drop
        theirs once handed over (follow.py starts new ones, batchwrite.py's batch is closed)."""
        loop = self._ensure_task()
        done: asyncio.Future[None] = loop.create_future()
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        end = self.writer.written + len(data)
        # One entry, one future: one `_acknowledge` (or `_fail_pending`) settles the group.
        if len(frames) == 1:
            self._log_held(data, Pending(end, done, events[0], undos[0], frame=frames[0]))
        else:
            self._log_held(data, Pending(end, done, events, undos, frames=frames))
        return done

    def submit_run(self, frames: list[bytes], events: list[Any], undos: list[Any], dones: list[Done]) -> None:
        """Log the frames of a run of single writes (writes.py rule 7: a turn's inserts,
        already applied to memory, `undos[i]` undoing the i-th) as `submit_group` logs a
        batch's: one hand-over, one `Pending`, acknowledged and published together or all
        rolled back; each write is told by its own `dones[i]`, in order ("Completions")."""
        self._ensure_task()
        data = b"".join(frames)
        self._log_held(data, Pending(self.writer.written + len(data), None, events, undos, frames=frames, dones=dones))

    def _log_held(self, data: bytes, pending: Pending) -> None:
        """The one hand-over of a group's or a run's frames (`data`, already applied to
        memory): held as one chunk for the committer's next write under "full", written now
        under "off"; then `pending` queued, and acknowledged at once when nothing is ahead
        of it under "off", else the committer woken."""
        failed = False
        if self.sync:
            self.writer.hold(data)  # one chunk: the frames go out together in the next write
        else:
            try:
                self.writer.append(data)
            except OSError as exc:
                self._write_failed(exc)
                failed = True
        self._pending.append(pending)
        if not self.sync and not failed and len(self._pending) == 1 and self._switch is None:
            self._acknowledge(1)
            return
        assert self._wake is not None
        self._wake.set()

    def write_held(self) -> None:
        """Have the held frames written now, on the loop thread: online compaction reads the
        log file up to `writer.written` from a thread. Raise `Unavailable` if the write
        failed; the committer then fails the queued writes as after any failed write."""
        if not self._write_held():
            if self._wake is not None:
                self._wake.set()
            raise Unavailable(f"write not stored: {self.health().detail}")

    @property
    def switch_requested(self) -> bool:
        """A log switch waits for the committer (`run_between_fsyncs`)."""
        return self._switch is not None

    def run_between_fsyncs(self, switch: Callable[[], None]) -> asyncio.Future[None]:
        """Run `switch()` in the committer task at a point where no fsync is in flight
        (online compaction swaps the log there, compact.py). When it returns, every queued
        write counts as durable (the switch made the new files durable) and is acknowledged
        at once. The future resolves to None, or to `switch`'s exception; a `switch` that
        leaves the log unusable calls `fail_stop` before raising, so the queue fails as
        after an I/O error."""
        loop = self._ensure_task()
        future = loop.create_future()
        if self.failed is not None:
            future.set_exception(Unavailable(self.health().detail))
            return future
        assert self._switch is None, "one log switch at a time"
        self._switch = (switch, future)
        assert self._wake is not None
        self._wake.set()
        return future

    def map_pending_events(self, fn: Callable[[Any], Any]) -> None:
        """Replace each queued write's event by `fn(event)` (online compaction renumbers
        the watermarks of writes carried into a new epoch), and its published frame with
        it (the new log holds the renumbered frame)."""
        for p in self._pending:
            if p.frames is not None:  # a group's entry: each of its events
                for at, one in enumerate(p.event):
                    event = fn(one)
                    if event is not one:
                        p.event[at] = event
                        p.frames[at] = encode_frame(event.offset, event.payload())
                continue
            event = fn(p.event)
            if event is not p.event:
                p.event = event
                p.frame = encode_frame(event.offset, event.payload())

    def _run_switch(self) -> None:
        assert self._switch is not None
        switch, future = self._switch
        self._switch = None
        try:
            switch()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting task
            if not future.done():
                future.set_exception(exc)
            return
        # The new log is durable and acknowledged to its end, queued writes or not: a later
        # cut-back (rule 3) or room probe must truncate to the new log's end, not the old one's.
        self.writer.durable = self.writer.acked = self.writer.written
        self._acknowledge(len(self._pending), self.writer.written)
        if not future.done():
            future.set_result(None)

    async def _run(self) -> None:
        try:
            await self._commit_loop()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            # Not an I/O error (the loop handles those): a bug, or the process going down.
            # Queued writes must not wait forever, nor later ones queue behind a dead task.
            log.error(
                "the commit task of %s stopped: %r; the store is now read-only", self.writer.path, exc, exc_info=exc
            )
            self.fail_stop(OSError(f"the commit task stopped: {exc!r}"))
            self._fail_pending()
            if not isinstance(exc, Exception):
                raise

    async def _commit_loop(self) -> None:
        assert self._wake is not None and self._loop is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.failed is None:
                if self._switch is not None:
                    if self._write_held():  # the switch copies the log file's frames
                        self._run_switch()
                    continue
                if not self._pending or not self._write_held():
                    break
                target = self.writer.written
                count = len(self._pending)  # every queued frame ends at or before `target`
                if self.sync:
                    try:
                        await self._fsync()
                    except OSError as exc:
                        log.error("fsync of %s failed: %s; the store is now read-only", self.writer.path, exc)
                        self.fail_stop(exc)
                        break
                    self.stats.fsyncs += 1
                    self.writer.durable = target
                self._acknowledge(count)
            if self.failed is not None:
                self._fail_pending()
                return

    def _fsync(self) -> asyncio.Future[None]:
        """The log's fsync in the fsync thread; the future resolves (or fails with its
        error) on the loop once it returned."""
        assert self._loop is not None and self._syncer is not None
        future = self._loop.create_future()
        self._syncer.start(self._loop, partial(_resolve, future))
        return future

    def _acknowledge(self, count: int, end: int | None = None) -> None:
        done, self._pending = self._pending[:count], self._pending[count:]
        if not done:
            return
        self.writer.acked = done[-1].end if end is None else end
        self.stats.count_batch(sum(1 if p.frames is None else len(p.frames) for p in done))
        # Futures first: their callbacks (the writers' responses) are then queued on the
        # loop ahead of anything a subscriber schedules from `publish`; both happen in this
        # one call, so no callback sees a resolved write whose event is unpublished. The
        # completion callbacks of the group go in one handle queued with them.
        callbacks: list[Done] | None = None
        for p in done:
            future = p.future
            if future is not None:
                if not future.done():
                    future.set_result(None)
            elif p.done is not None:
                if callbacks is None:
                    callbacks = [p.done]
                else:
                    callbacks.append(p.done)
            elif p.dones is not None:
                if callbacks is None:
                    callbacks = list(p.dones)
                else:
                    callbacks += p.dones
        if callbacks is not None:
            self._call_soon(callbacks, None)
        publish = self.publish
        for p in done:
            if p.frames is None:
                publish(p.event, p.frame)
            else:
                self.publish_group(p.event, p.frames)

    def _fail_pending(self) -> None:
        failed, self._pending = self._pending, []
        self.stats.failures += sum(1 if p.frames is None else len(p.frames) for p in failed)
        for p in reversed(failed):
            if p.frames is not None:
                deque(map(self.rollback, reversed(p.undo)), 0)
            elif p.applied:
                self.rollback(p.undo)
        if self.writer.truncate_to_acked() and self._room_error:
            self._refuse_until_room()
        else:
            assert self.failed is not None
            self.fail_stop(self.failed)
        error = Unavailable(f"write not stored: {self.health().detail}")
        if self._switch is not None:
            _switch, future = self._switch
            self._switch = None
            if not future.done():
                future.set_exception(error)
        callbacks = []
        for p in failed:
            if p.future is None:
                if p.done is not None:
                    callbacks.append(p.done)
                elif p.dones is not None:
                    callbacks += p.dones
            elif not p.future.done():
                p.future.set_exception(error)
                # Retrieve it so an abandoned future does not log "exception never retrieved".
                p.future.exception()
        if callbacks:
            self._call_soon(callbacks, error)

    def _call_soon(self, callbacks: list[Done], error: BaseException | None) -> None:
        """One loop callback settling `callbacks` ("Completions"); at once when the loop is
        closed already (a `close()` after it)."""
        loop = self._loop
        try:
            assert loop is not None
            loop.call_soon(_settle, callbacks, error)
        except RuntimeError:
            _settle(callbacks, error)

    def append_batch(self, chunks: Iterable[bytes], count: int) -> None:
        """Write `chunks` (whole frames, `count` of them) and make them durable with one
        fsync, synchronously: the batch path of offline tools (`Store.insert_batch`), for
        a queue with nothing in flight; the caller applies the batch to memory only after
        this returned. A failure cuts the log back to its acknowledged end and follows
        rules 1 and 4 (out of space before the fsync: REFUSING; anything else: FAILED);
        an OSError becomes `Unavailable`."""
        assert not self._pending and self._switch is None, "a batch needs an idle commit queue"
        self.check_writable()
        synced = False
        try:
            for chunk in chunks:
                self.writer.append(chunk)
            if self.sync:
                synced = True
                self.writer.fsync()
                self.stats.fsyncs += 1
        except BaseException as exc:
            cut = self.writer.truncate_to_acked()
            if not isinstance(exc, OSError):
                if not cut:
                    self.fail_stop(OSError(f"the log could not be cut back after {exc!r}"))
                raise
            log.error("batch write to %s failed: %s", self.writer.path, exc)
            if cut and not synced and exc.errno in ROOM_ERRORS:
                self.failed, self._room_error = exc, True
                self._refuse_until_room()
            else:
                self.fail_stop(exc)
            self.stats.failures += count
            raise Unavailable(f"batch not stored: {self.health().detail}") from exc
        self.writer.durable = self.writer.acked = self.writer.written
        if count:
            self.stats.count_batch(count)

    def flush(self) -> None:
        """Synchronous final commit for `close()`: fsync, then acknowledge everything."""
        if self.failed is not None:
            return
        if self._pending or self.writer.written > self.writer.durable:
            if not self._write_held():
                self._fail_pending()
                return
            if self.sync:
                try:
                    self.writer.fsync()
                except OSError as exc:
                    log.error("final fsync of %s failed: %s", self.writer.path, exc)
                    self.fail_stop(exc)
                    self._fail_pending()
                    return
                self.writer.durable = self.writer.written
            self._acknowledge(len(self._pending))

    def shutdown(self) -> None:
        if self._task is not None and not self._task.done():
            try:
                self._task.cancel()
            except RuntimeError:
                pass  # its loop is already closed
        self._task = None
        if self._syncer is not None:
            self._syncer.close()
            self._syncer = None

    @property
    def pending(self) -> int:
        return len(self._pending)
