"""The online compaction driver: when a serving store compacts, and the steps in order.

online.py holds the steps (cut, snapshot thread, retained segment, new log, the switch's
file steps) and their rules; this module runs them for one store::

    compactor = Compactor(host, commit, faults=..., compact_bytes=..., retain_bytes=...)
    compactor.after_write(commit)     # the size rule (recovery.needs_compaction), after a write
    task = compactor.compact_now()    # start one whatever the rule says, or the running one
    task = compactor.compact_at(epoch, head, recent)   # a follower, at its primary's cut
    compactor.cut                     # {model: online.TableCut} while the snapshot thread reads
    compactor.at_switch               # True while the running one waits for its switch (invariant 2)
    compactor.settling                # the heap's collapse after the last switch, while it runs
    compactor.stop()                  # close(): cancel a compaction before its commit point

Invariants:

1. One compaction at a time (`task`); after a failure the size rule waits
   `online.RETRY_AFTER` seconds before it starts another (`compact_now` does not wait).
2. The switch runs inside the committer between two fsyncs (commit.py
   `run_between_fsyncs`) and ends with ONE `host.install_epoch`: the new `Epoch`, the
   change stream's ring and the queued writes renumbered, together.
3. Before the commit point a failure removes the `.new` files and the store serves on;
   after it the store turns read-only (commit.py `fail_stop`) and the next open finishes.
4. A follower compacts only at its primary's cut (`compact_at`, docs/replication.md
   "The primary compacts"): the primary's new epoch id and cut offset H, so that its
   snapshot holds the primary's state at H, and its new log the rows after H renumbered
   as the primary's new log holds them. The cut may lie behind the applied offset (rows
   the primary committed between its cut and its switch reach a follower in the old
   epoch): `past_cut` puts back what those rows replaced, from the history and the
   follower's own record of them (follow.py); the steps after the cut are the same.
5. The heap's huge-page collapse after a switch (`settle`) is not a step: the compaction's
   task marks the heap and ends, and the collapse runs after it in its own task, a piece at
   a time with a pause after each (heap.py `collapse_in_pieces`). Nothing waits for it: the
   next compaction abandons it at its start (its next pause answers True), and `stop()`
   ends it. Paced inside the compaction's task it kept the size rule from starting the
   next compaction for the collapse's whole length (docs/decisions.md, "The heap's collapse
   after a compaction back to one call").

Talks to the store through `Host` (a protocol the Store implements); never imports
store.py, replay.py or changes.py.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import time
from bisect import insort
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dbsvc.errors import Unavailable
from dbsvc.storage import compact, files, freeing, online, recovery, retain
from dbsvc.storage.commit import CommitQueue
from dbsvc.storage.epoch import Epoch
from dbsvc.storage.events import ChangeEvent
from dbsvc.storage.files import FaultPlan
from dbsvc.storage.heap import COLLAPSE_GAP, collapse_in_pieces, mark_heap
from dbsvc.storage.table import Table

log = logging.getLogger("dbsvc.storage")

# A row a follower applied (follow.py): its offset, its model, the model's max id before
# it, and the byte position of its frame in the log.
Applied = tuple[int, str, int, int]
TakeCut = Callable[[dict[str, Table], int, int], online.Cut]


class Host(Protocol):
    """What the compaction driver reads and replaces of a store (store.py implements it)."""

    @property
    def directory(self) -> str: ...

    @property
    def tables(self) -> Mapping[str, Table]: ...

    @property
    def epoch_state(self) -> Epoch: ...

    @property
    def applied_offset(self) -> int: ...

    @property
    def holds_lock(self) -> bool: ...

    def install_epoch(self, epoch: Epoch, renumbered: Callable[[ChangeEvent], ChangeEvent]) -> None: ...


class Compactor:
    """The online compaction of one store (module docstring)."""

    def __init__(
        self, host: Host, commit: CommitQueue | None, *, faults: FaultPlan, compact_bytes: int, retain_bytes: int
    ) -> None:
        self._host = host
        self._commit = commit
        # Read when a compaction starts, so a test can hold one at a fault step.
        self.faults = faults
        # The log size past which the size rule is considered (recovery.AUTO_COMPACT_BYTES
        # by default; tests use small values, a follower a huge one).
        self.compact_bytes = compact_bytes
        self.retain_bytes = retain_bytes
        self.checkpoint_every = recovery.CHECKPOINT_EVERY
        # After each switch the heap is advised for huge pages (heap.py), unless the
        # operator turned it off (SERVICE_HUGE_PAGES=off, set by service.py).
        self.huge_pages = True
        self.task: asyncio.Task[None] | None = None
        self.progress: online.Progress | None = None
        # The running compaction's switch, asked of the committer (`at_switch`), or None.
        self._switch: asyncio.Future[None] | None = None
        # While a compaction's snapshot thread reads the records as of its cut, each write
        # notes the record it replaces here first (online.TableCut).
        self.cut: dict[str, online.TableCut] | None = None
        self._not_before = 0.0
        self.count = 0
        # (cut seconds, switch seconds) of the last online compactions: the loop's pauses.
        self.pauses: deque[tuple[float, float]] = deque(maxlen=32)
        # How the replaced files of the last online compactions were freed (freeing.py).
        self.releases: deque[freeing.Release] = deque(maxlen=32)
        # The heap's collapse after the last switch while it runs (invariant 5), and its task.
        self.settling: online.Progress | None = None
        self.settle_task: asyncio.Task[int] | None = None

    @property
    def at_switch(self) -> bool:
        """Whether the running compaction waits for its switch (invariant 2): every step
        before it done (snapshot, retained segment, new log caught up, old files held) and
        the committer asked to run it between two fsyncs (commit.py `run_between_fsyncs`),
        which it has not done yet (a group's fsync is in flight, say). Read on the loop."""
        return self._switch is not None and not self._switch.done()

    def after_write(self, commit: CommitQueue) -> None:
        """The size rule, checked after a write took the log past `compact_bytes`."""
        if self.task is not None or commit.failed is not None or time.monotonic() < self._not_before:
            return
        host = self._host
        live = sum(len(t.live) for t in host.tables.values())
        epoch = host.epoch_state
        if recovery.needs_compaction(
            commit.writer.written, host.applied_offset - epoch.log_base, live, epoch.snapshot_bytes, self.compact_bytes
        ):
            self.compact_now()

    def compact_now(self) -> asyncio.Task[None]:
        """Start an online compaction whatever the size rule says (a bench, an operator),
        or return the one running; its task finishes once the new epoch is in place, or
        the attempt failed and was logged."""
        if self.task is None:
            self._start(online.take_cut)
        assert self.task is not None
        return self.task

    def compact_at(self, epoch: str, head: int, recent: Iterable[Applied]) -> asyncio.Task[None]:
        """A follower's compaction at its primary's cut (invariant 4): the new epoch is
        `epoch`, its snapshot the state at offset `head`, which may lie behind the applied
        offset when `recent` (the rows applied last, oldest first) holds every row after
        it. `ValueError` (nothing started) when a compaction runs, or `head` is not a cut
        this store can make."""
        if self.task is not None:
            raise ValueError("a compaction is running")
        host = self._host
        applied, base = host.applied_offset, host.epoch_state.log_base
        if not base <= head <= applied:
            raise ValueError(f"the cut at offset {head} is outside this epoch's rows ({base}, {applied}]")
        after = [row for row in recent if row[0] > head]
        if [row[0] for row in after] != list(range(head + 1, applied + 1)):
            raise ValueError(f"the rows after offset {head} are not all known here (restarted since?)")

        def take(tables: dict[str, Table], applied: int, written: int) -> online.Cut:
            cut = online.take_cut(tables, applied, written) if not after else past_cut(tables, head, after)
            cut.epoch = epoch
            return cut

        return self._start(take)

    def _start(self, take: TakeCut) -> asyncio.Task[None]:
        if self.settling is not None:
            self.settling.cancel()  # invariant 5: the collapse stops at its next pause
        progress = online.Progress()
        self.progress = progress
        self.task = asyncio.get_running_loop().create_task(self._compact(progress, take), name="dbsvc-compaction")
        return self.task

    def stop(self) -> None:
        """`close()`: a compaction before its commit point stops in its thread step and its
        `.new` files are discarded; one past it is left to finish (or to the next open).
        A collapse after a switch stops at its next pause, waited for: the piece's madvise
        in flight, if any (its pause, woken by `Progress.cancel`, ends at once)."""
        settling, settle_task = self.settling, self.settle_task
        self.settling = self.settle_task = None
        if settling is not None:
            settling.cancel()
            _wait_then_cancel(settling, settle_task)
        progress, task = self.progress, self.task
        if progress is None:
            return
        progress.cancel()
        if progress.committed[0]:
            # Past the commit point only the release may still run: it frees the rest of
            # the old files whole at its next piece (freeing.py rule 4) instead of pacing.
            return
        _wait_then_cancel(progress, task)
        online.discard(self._host.directory)

    async def _compact(self, progress: online.Progress, take: TakeCut) -> None:
        try:
            await self._compact_steps(progress, take)
        finally:
            self.cut = None
            self.task = None
            self.progress = None
            self._switch = None

    async def _compact_steps(self, progress: online.Progress, take: TakeCut) -> None:
        """One online compaction: online.py's file steps, in the order of its docstring."""
        commit = self._commit
        assert commit is not None
        host = self._host
        directory, faults, every = host.directory, self.faults, self.checkpoint_every
        old = host.epoch_state
        tables = dict(host.tables)
        try:
            # Threads read the log file up to the cut (write_retained) and past it
            # (start_log): the frames held for the next group commit are written first.
            commit.write_held()
        except Unavailable as exc:
            self._failed(exc)
            return
        cut = take(tables, host.applied_offset, commit.writer.written)
        self.cut = {tc.table.name: tc for tc in cut.tables}
        # The cut's id lists and the epoch's history are long-lived and acyclic: frozen, so
        # that the collections the snapshot thread's allocations trigger do not walk them
        # (docs/decisions.md, "Pauses").
        freeze_live(0)  # the loop waits on it: at 1M after 100k writes gen 1 took 9.8 ms of CPU, gen 0 1.6
        keep = retain.plan(self.retain_bytes, old.id, old.retained, old.log_path, cut.position, old.log_base, cut.head)
        new: online.NewLog | None = None
        pending: retain.Segment | None = None
        old_rows: list[list[Any]] = []
        held: list[int] = []  # old files, freed after the switch
        old_fds: list[int] = []
        switched = [0.0, 0.0]  # the switch's seconds, and the bytes it copied

        def switch() -> None:
            assert new is not None
            start = time.perf_counter()
            writer = commit.writer
            switched[1] = writer.written - new.copied
            online.finish_log(old.log_path, writer.written, new, cut, every, faults)
            try:
                segment = compact.install_pair(directory, faults, pending, progress.committed)
                old_fds.append(writer.fd)
                writer.fd, new.fd = new.fd, -1
                writer.written = new.size
                old_rows.extend(
                    self._enter_epoch(
                        cut, Epoch(cut.epoch, old.log_path, cut.head, new.checkpoints, segment, cut.snapshot_bytes)
                    )
                )
            except Exception as exc:
                # Past the commit point the new pair is the store's, whatever failed: a write
                # taken on the old log's descriptor now would be lost at the next open.
                if progress.committed[0]:
                    log.error(
                        "%s: compaction failed after its commit point: %s; the store is now read-only "
                        "(the next open finishes the switch)",
                        directory,
                        exc,
                    )
                    cause = exc if isinstance(exc, OSError) else OSError(errno.EIO, f"compaction's switch: {exc!r}")
                    commit.fail_stop(cause)
                raise
            switched[0] = time.perf_counter() - start

        try:
            await online.in_thread(progress, online.write_snapshot, directory, cut, progress, faults)
            self.cut = None
            online.end_cut(tables)
            pending = await online.in_thread(progress, online.write_retained, directory, keep, progress, faults)
            commit.check_writable()
            commit.write_held()
            new = await online.in_thread(
                progress, online.start_log, directory, old.log_path, cut, commit.writer.written, every, progress
            )
            caught_up = await self._catch_up(progress, old.log_path, new, cut)
            held.extend(await online.in_thread(progress, online.hold_old_files, directory))
            self._switch = commit.run_between_fsyncs(switch)
            await self._switch
        except BaseException as exc:
            self.cut = None
            progress.cancel()
            online.release_files(held, old_fds, progress)  # on the loop: whole, no pauses
            progress.idle.wait(60)  # a thread step stops at its next chunk
            online.end_cut(tables)  # no thread reads the cut's sublists now
            if new is not None and new.fd >= 0:
                files.ops.close(new.fd)
                new.fd = -1
            if not progress.committed[0] and host.holds_lock:
                online.discard(directory)
            if not isinstance(exc, Exception):
                raise
            self._failed(exc)
            return
        self.pauses.append((cut.took, switched[0]))
        log.info(
            "%s: compacted online at offset %d: %d live records, new epoch %s (pauses %.1f ms + %.1f ms; "
            "%d bytes of log left to the switch after %d catch-ups)",
            directory,
            cut.head,
            sum(tc.count for tc in cut.tables),
            cut.epoch,
            cut.took * 1e3,
            switched[0] * 1e3,
            switched[1],
            caught_up,
        )
        self.releases.extend(await online.in_thread(progress, online.release_files, held, old_fds, progress, faults))
        await online.in_thread(progress, online.drop_slowly, old_rows)
        # What the new epoch keeps (the snapshot's id lists, the surviving history) is
        # long-lived and acyclic, like what `recovery.load` froze at open: out of the
        # cyclic GC's way too (docs/decisions.md, "Pauses").
        freeze_live(1)
        # the new epoch's objects sit in mappings the open's advice never saw (heap.py): marked
        # here, collapsed after this task ends (invariant 5)
        if self.huge_pages:
            ranges = await online.in_thread(progress, mark_heap)
            if ranges:
                self.settle(ranges)

    def settle(self, ranges: list[tuple[int, int]]) -> asyncio.Task[int]:
        """Collapse `ranges` of the heap into huge pages in a task of its own, a piece at a
        time with a `WallPacer` pause after each, at least heap.py's COLLAPSE_GAP
        (invariant 5); its task answers the pieces
        collapsed, or -1 when a call failed (logged; advice only, the store serves on).
        `DBSVC_FAULT=collapse:N` fails or kills in its Nth pause."""
        progress = online.Progress()
        self.settling = progress
        self.settle_task = asyncio.get_running_loop().create_task(self._settle(progress, ranges), name="dbsvc-collapse")
        return self.settle_task

    async def _settle(self, progress: online.Progress, ranges: list[tuple[int, int]]) -> int:
        pause = online.WallPacer(progress, self.faults, "collapse", floor=COLLAPSE_GAP)
        try:
            # `in_thread` clears `idle` in the thread, so `stop()` waits for a collapse
            # under way and never for one not begun (an executor that runs its calls on the
            # loop, as the power-loss tests' does, would never begin it while `stop()`
            # blocks the loop); one not begun by then is Cancelled and collapses nothing.
            pieces: int = await online.in_thread(progress, collapse_in_pieces, ranges, pause)
        except online.Cancelled:
            pieces = 0
        except asyncio.CancelledError:
            # The task cancelled (`asyncio.run`'s end cancels every task, then waits for the
            # executor's threads): the thread stops at its next pause, woken, instead of
            # collapsing the rest of the heap a gap at a time while the loop's end waits.
            progress.cancel()
            raise
        except Exception as exc:  # advice only: a failure costs huge pages, never data
            log.warning("%s: the heap's collapse after a compaction stopped: %s", self._host.directory, exc)
            pieces = -1
        finally:
            if self.settling is progress:
                self.settling, self.settle_task = None, None
        return pieces

    async def _catch_up(self, progress: online.Progress, old_log: str, new: online.NewLog, cut: online.Cut) -> int:
        """Copy into log.new, in paced thread steps (`online.catch_up`), what the loop wrote
        while the paced steps before ran, until at most `online.SWITCH_BYTES` are left for
        the switch to copy on the loop: without it a slow `start_log` leaves the switch the
        frames of its whole run. Returns how many steps ran (at most `online.CATCH_UPS`)."""
        commit = self._commit
        assert commit is not None
        for step in range(online.CATCH_UPS):
            commit.write_held()
            stop = commit.writer.written
            if stop - new.copied <= online.SWITCH_BYTES:
                return step
            await online.in_thread(progress, online.catch_up, old_log, new, cut, stop, self.checkpoint_every, progress)
        return online.CATCH_UPS

    def _failed(self, exc: Exception) -> None:
        """Log why (a compaction cancelled by `close()` is not a failure to report) and
        wait RETRY_AFTER before the size rule may start another."""
        if not isinstance(exc, online.Cancelled):
            log.error("%s: online compaction failed: %s", self._host.directory, exc)
        self._not_before = time.monotonic() + online.RETRY_AFTER

    def _enter_epoch(self, cut: online.Cut, epoch: Epoch) -> list[Any]:
        """The switch of an online compaction, in memory: history restarts at the cut, and
        the store takes the new epoch (invariant 2). Returns the old history and id lists,
        for the caller to free off the loop. `DBSVC_FAULT=epoch:N:...` fails or kills at its
        start: past the commit point, with the new log's descriptor already the writer's."""
        self.faults.check("epoch")
        old = []
        deltas = cut.deltas()
        for tc in cut.tables:
            table = tc.table
            old.append(table.rows)
            old.append(table.base_ids)
            table.rows = table.rows[tc.rows :]
            table.prior = table.prior[tc.rows :]  # beside the rows (table.py)
            table.base_ids = tc.base_ids
        head = cut.head

        def renumbered(event: ChangeEvent) -> ChangeEvent:
            if event.offset <= head:
                return event
            return event._replace(watermark=event.watermark + deltas[event.model])

        self._host.install_epoch(epoch, renumbered)
        self.count += 1
        return old


def _wait_then_cancel(progress: online.Progress, task: asyncio.Task[Any] | None) -> None:
    """`stop()`'s end of one background task (a compaction's steps or a collapse): wait
    for its thread step in flight (`idle`, at most 60 s), then cancel the task, unless its
    loop is already closed."""
    progress.idle.wait(60)
    if task is not None and not task.done():
        try:
            task.cancel()
        except RuntimeError:
            pass  # its loop is already closed


def freeze_live(generation: int) -> None:
    """`gc.freeze()` what the collector's generations hold, once the garbage of the young
    ones up to `generation` is collected: a freeze keeps what it moves for good, and in a
    serving process the young generations hold the cycles of the requests, tasks and
    connections just finished (a served primary froze ~380 such objects more at every
    compaction). Never a full collection: it walks every object made since the last freeze
    (~150 ms of CPU at 1,000,000 records after 100,000 writes); a cycle old enough to sit in
    the oldest generation is left to the full collections that run anyway
    (docs/decisions.md, "The collector's freezes", wt-gcf)."""
    gc.collect(generation)
    gc.freeze()


@dataclass(slots=True)
class PastTableCut(online.TableCut):
    """A model at a cut behind the applied offset (`past_cut`): the live ids less those
    inserted since (`added`), plus those deleted since (`removed`)."""

    added: set[Any] = field(default_factory=set)
    removed: list[Any] = field(default_factory=list)

    def gather_ids(self) -> list[Any]:
        ids = self.base_ids
        assert not ids, "the ids of a cut are gathered once"
        added = self.added
        for sub in self.pk_lists:
            ids += [i for i in sub if i not in added] if added else sub
        for id_ in self.removed:
            insort(ids, id_)
        assert len(ids) == self.count, f"{self.table.name}: {len(ids)} ids at the cut, {self.count} records"
        return ids


def past_cut(tables: dict[str, Table], head: int, after: Sequence[Applied]) -> online.Cut:
    """The cut at offset `head` of a store that has applied the rows `after` since (every
    row after `head`, oldest first; invariant 4): each model's image is its live records
    with the records those rows replaced put back (`before`, from the history's previous
    records), its counters taken back by its rows among them, and its max id the one
    before the first of them. The log's position is where the first of them starts."""
    start = time.perf_counter()
    counts = Counter(row[1] for row in after)
    max_ids: dict[str, int] = {}
    for _offset, name, max_id, _position in after:
        max_ids.setdefault(name, max_id)
    cuts: list[online.TableCut] = []
    for t in tables.values():
        later = counts[t.name]
        rows = len(t.rows) - later
        before: dict[Any, Any] = {}
        versions: dict[Any, int] = {}
        for j in range(rows, len(t.rows)):
            id_, _record, previous = t.rows[j]
            if id_ not in before:
                before[id_] = previous
                versions[id_] = t.prior[j]
        live = t.live
        added = {i for i, previous in before.items() if previous is None and i in live}
        removed = sorted(i for i, previous in before.items() if previous is not None and i not in live)
        cuts.append(
            PastTableCut(
                t,
                live,
                t.pk.share(),
                len(live) - len(added) + len(removed),
                rows,
                t.watermark - later,
                max_ids.get(t.name, t.max_id),
                before,
                versions,
                added=added,
                removed=removed,
            )
        )
    return online.Cut(compact.new_epoch(), head, after[0][3], cuts, time.perf_counter() - start)
