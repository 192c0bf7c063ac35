"""The Store: a tenant's records in memory, made durable by one append-only log.

The API the application is written against (docs/architecture.md, "storage")::

    store = Store.open(directory, models, description, sync="full", replication=False,
                       readonly=False, ring_capacity=1024, compact_bytes=64 << 20,
                       retain_bytes=0)
    record, watermark          = store.get("User", 7, as_of=None)
    records, total, watermark  = store.list("User", query)
    store.watermarks(), store.live_counts(), store.head_offset, store.epoch, store.oldest_offset
    health             = store.health(retry=False)             # WriteHealth: state, detail
    record             = await store.insert("User", record)     # id None: max ever used + 1
    previous, record   = await store.replace("User", 7, record)
    previous           = await store.delete("User", 7)
    record, durable    = store.apply_insert("User", record)     # and apply_replace, apply_delete:
                                                                # applied now, `durable` resolves
                                                                # (or fails) as the await would
    records            = store.insert_batch([("User", record), ...])   # offline: checked as a set,
                                                                # one fsync (batch.py)
    unsubscribe        = store.subscribe(callback)              # callback(ChangeEvent, frame)
    for event in store.events_after(offset): ...                # ring, or the log if replication
    for frame in store.frames_after(offset): ...                # retained segment, then the log
    task               = store.compact_now()                    # online compaction now (online.py)
    store.close()

Rules:

1. A write checks its constraints (primary key and @unique: `UniqueViolation`; @ref:
   `ForeignKeyViolation` on insert/replace, `Referenced` with the child count on delete),
   writes its frame and applies itself to memory before its first `await`, so under asyncio
   it is atomic: a refused write changed nothing, in memory or on disk.
2. It returns only once its frame is durable (commit.py: group commit, one fsync in flight).
   An I/O error fails it with `Unavailable` and stops writes (commit.py rules): until a
   restart after an fsync error (fail-stop), until there is room again after a write that
   found no space; `health()` tells which.
   `apply_*` are the same writes without the coroutine: they return at once with the
   result and a future that resolves when the write is durable, or fails as the await
   would. The HTTP application answers writes this way (no task per write).
3. Reads never block and see every applied write, including one whose fsync is still in
   flight; if that fsync fails the write disappears again. `head_offset` is the offset of the
   last *acknowledged* row, so a client that reads and then subscribes with `after=head`
   misses nothing (it may see a row twice).
4. Events reach subscribers on the loop after their commit, in offset order, each with its
   log frame (the bytes just made durable: the `/replicate` message); without
   replication, the ring keeps the last `ring_capacity` committed events (after a
   restart, the log's last rows).
5. `events_after(offset)`: `OffsetOutOfRange` beyond the head; `OffsetGone` when the offset
   is older than what the ring holds, or, with replication, what `frames_after` holds:
   the log since the last compaction plus the retained segment before it (retain.py: the
   newest rows compactions removed, within `retain_bytes`; 0 keeps none), so `OffsetGone`
   before `oldest_offset`. It reads lazily in 1 MiB chunks, gap-free, up to the
   acknowledged end (replay.py).

6. Memory: every live record, held as a tuple of its values in field order and handed
   out as a dict (the same dict for a version read again while it is among the last
   65,536 handed out: the application caches encodings by identity; table.py), plus its
   indexes, and the epoch's history (table.py: ~80 bytes per row after the snapshot, plus
   superseded versions). History is bounded by
   online compaction (online.py): past `compact_bytes` of log (64 MiB) holding more than
   twice as many rows as live records, or more than twice the snapshot's bytes
   (recovery.py `needs_compaction`), the store cuts a snapshot, writes it in a thread
   and switches to a fresh log in a new epoch (pauses: the cut's id lists and the
   switch's file steps, each well under 20 ms at 1M records; `compaction_pauses`;
   `compact_now()` starts one whatever the rule says). `stats()["history_rows"]` reports the size.

Recommended feed pattern: subscribe first (buffering), then replay `events_after(after)`,
then drain the buffer skipping offsets already sent.
"""

from __future__ import annotations

import asyncio
import builtins
import gc
import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dbsvc.errors import (
    ConstraintViolation,
    EpochChanged,
    ForeignKeyViolation,
    NotFound,
    OffsetGone,
    OffsetOutOfRange,
    Referenced,
    RequestError,
    StreamError,
    Unavailable,
    UniqueViolation,
)
from dbsvc.runtime import INT64_MAX, CompiledModel, Filters, Query
from dbsvc.storage import batch, compact, files, online, recovery, replay, retain
from dbsvc.storage.commit import CommitQueue, LogWriter, WriteHealth, WriteState
from dbsvc.storage.events import ChangeEvent, EventKind, decode_event
from dbsvc.storage.files import FaultPlan
from dbsvc.storage.lock import WriterLock
from dbsvc.storage.compact import SNAPSHOT_NAME
from dbsvc.storage.logfile import FRAME_HEADER_SIZE, encode_frame
from dbsvc.storage.snapshot import ModelImage, SnapshotImage, encode_snapshot
from dbsvc.storage.query import list_live, list_state, live_ids
from dbsvc.storage.rows import Values, unpack
from dbsvc.storage.table import Table

log = logging.getLogger("dbsvc.storage")

Callback = Callable[[ChangeEvent, bytes], None]


class Store:
    """One open tenant. Construct with `Store.open`."""

    def __init__(self, directory: str, loaded: recovery.Loaded, lock: WriterLock | None, *,
                 sync: bool, replication: bool, ring_capacity: int, faults: FaultPlan,
                 compact_bytes: int = recovery.AUTO_COMPACT_BYTES, retain_bytes: int = 0) -> None:
        self.directory = directory
        self.readonly = lock is None
        self.replication = replication
        self._lock = lock
        self._tables: dict[str, Table] = loaded.tables
        self._epoch = loaded.epoch
        self._log_path = loaded.log_path
        self._log_base = loaded.log_base
        self._retained = loaded.retained
        self._retain_bytes = retain_bytes
        self._head = loaded.head_offset
        self._next_offset = loaded.head_offset + 1
        self._checkpoints = loaded.checkpoints
        self.recovered_tail = loaded.damage
        self.compacted_on_open = loaded.compacted
        self._ring: deque[ChangeEvent] = deque((decode_event(p) for p in loaded.recent), maxlen=ring_capacity)
        self._subscribers: list[Callback] = []
        self._referrers: dict[str, list[tuple[Table, str]]] = {name: [] for name in self._tables}
        for table in self._tables.values():
            for f, parent in table.model.refs:
                self._referrers[parent].append((table, f))
        self._commit: CommitQueue | None = None
        self._readonly_end = loaded.log_size
        self._faults = faults
        self.checkpoint_every = recovery.CHECKPOINT_EVERY
        self._compact_bytes = compact_bytes
        self._snapshot_bytes = loaded.snapshot_bytes
        self._compaction: asyncio.Task | None = None
        self._compaction_progress: online.Progress | None = None
        # While a compaction's snapshot thread reads the records as of its cut, each write
        # notes the record it replaces here first (online.TableCut).
        self._cut: dict[str, online.TableCut] | None = None
        self._compact_not_before = 0.0
        self.compactions = 0
        # (cut seconds, switch seconds) of the last online compactions: the loop's pauses.
        self.compaction_pauses: deque[tuple[float, float]] = deque(maxlen=32)
        if lock is not None:
            fd = files.ops.open(self._log_path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            writer = LogWriter(self._log_path, fd, loaded.log_size, faults)
            self._commit = CommitQueue(writer, sync=sync, publish=self._publish, rollback=self._rollback)

    @classmethod
    def open(cls, directory: str, models: Sequence[CompiledModel], description: dict, *,
             sync: str = "full", replication: bool = False, readonly: bool = False,
             ring_capacity: int = 1024, compact_bytes: int = recovery.AUTO_COMPACT_BYTES,
             retain_bytes: int = 0, lock: WriterLock | None = None) -> Store:
        """Open (and recover) a tenant directory; see recovery.py for the steps.
        `compact_bytes`: the log size past which compaction is considered (at open and
        while serving, online.py); tests use small values, a follower a huge one (its
        epochs are the primary's). `lock`: a writer lock already held (handed over by
        `close(keep_lock=True)`), so a follower re-bootstraps without letting go of it.
        `retain_bytes`: how much of a compacted log each compaction keeps for `frames_after`
        (retain.py; 0 keeps none and removes a segment left from before)."""
        if sync not in ("full", "off"):
            raise ValueError(f"sync must be 'full' or 'off', got {sync!r}")
        if replication:
            # `events_after` reads the log then (`frames_after`): a ring would only hold
            # the last events' records once more, never read.
            ring_capacity = 0
        faults = FaultPlan.from_env()
        if not readonly and lock is None:
            lock = WriterLock.acquire(directory)
        try:
            loaded = recovery.load(directory, models, description, readonly=readonly,
                                   ring_capacity=ring_capacity, faults=faults, compact_bytes=compact_bytes,
                                   retain_bytes=retain_bytes)
            return cls(directory, loaded, lock, sync=sync == "full", replication=replication,
                       ring_capacity=ring_capacity, faults=faults, compact_bytes=compact_bytes,
                       retain_bytes=retain_bytes)
        except BaseException:
            if lock is not None:
                lock.release()
            raise

    # -- reads -----------------------------------------------------------------------------

    def _table(self, model: str) -> Table:
        try:
            return self._tables[model]
        except KeyError:
            raise NotFound(f"unknown model {model!r}") from None

    def get(self, model: str, id: Any, as_of: int | None = None) -> tuple[dict | None, int]:
        table = self._table(model)
        if as_of is None or as_of >= table.watermark:
            stored = table.live.get(id)
            return (None if stored is None else table.shown(id, stored)), table.watermark
        past = table.get_as_of(id, max(as_of, 0))
        return (None if past is None else table.model.decode(unpack(past))), as_of

    def list(self, model: str, query: Query) -> tuple[list[dict], int, int]:
        table = self._table(model)
        as_of = query.as_of
        if as_of is None or as_of >= table.watermark:
            records, total = list_live(table, query)
            return records, total, table.watermark
        records, total = list_state(table.state_as_of(max(as_of, 0)), table, query)
        return records, total, as_of

    def live_ids(self, model: str, filters: Filters) -> builtins.list[Any]:
        """Every live id matching `filters`, in id order, at `applied_offset`: no record
        is read (a live query's Init, realtime/init.py)."""
        return live_ids(self._table(model), Query(filters=filters, limit=INT64_MAX))

    def watermarks(self) -> dict[str, int]:
        return {name: t.watermark for name, t in self._tables.items()}

    def live_counts(self) -> dict[str, int]:
        return {name: len(t.live) for name, t in self._tables.items()}

    @property
    def head_offset(self) -> int:
        return self._head

    @property
    def applied_offset(self) -> int:
        """Offset of the last row applied to memory (>= head_offset: its fsync may be in
        flight). A read reflects exactly the rows up to here."""
        return self._next_offset - 1

    @property
    def epoch(self) -> str:
        return self._epoch

    @property
    def oldest_offset(self) -> int:
        """The oldest `after` that `frames_after` serves (the retained segment's base, else the log's)."""
        return self._retained.base if self._retained is not None else self._log_base

    def stats(self) -> dict[str, Any]:
        """Counters for /metrics and the bench."""
        c = self._commit
        return {
            "fsyncs": c.stats.fsyncs if c else 0,
            "commits": c.stats.commits if c else 0,
            "failed_writes": c.stats.failures if c else 0,
            "read_only": self.readonly or (c is not None and c.failed is not None),
            "write_state": self.health().state.value,
            "torn_tail_bytes": (self.recovered_tail.size - self.recovered_tail.position)
            if self.recovered_tail else 0,
            "history_rows": sum(len(t.rows) for t in self._tables.values()),
            "log_bytes": c.writer.written if c else self._readonly_end,
            "retained_bytes": self._retained.size if self._retained is not None else 0,
            "compactions": self.compactions,
        }

    def health(self, retry: bool = False) -> WriteHealth:
        """Whether the store takes writes, and if not why and what to do (commit.py rule 4):
        OK; REFUSING after a write found no space (resumes by itself once there is room);
        FAILED, fail-stop, after an fsync or other I/O error (until a restart). `retry`:
        while REFUSING, probe for room now if a probe is due (the server's `/ready` does;
        `/health` does not touch the disk)."""
        if self._commit is None:
            return WriteHealth(WriteState.READ_ONLY, "the store was opened read-only")
        if retry and self._commit.failed is not None:
            try:
                self._commit.check_writable()
            except Unavailable:
                pass
        return self._commit.health()

    # -- writes ----------------------------------------------------------------------------

    def _writable(self) -> CommitQueue:
        if self._commit is None:
            raise Unavailable("the store was opened read-only")
        self._commit.check_writable()
        return self._commit

    def _check_refs(self, table: Table, record: dict, previous: dict | None) -> None:
        for f, parent in table.model.refs:
            value = record[f]
            if value is None or (previous is not None and previous[f] == value):
                continue
            if value not in self._tables[parent].live:
                raise ForeignKeyViolation(
                    f"{f} {value!r} does not match any {self._tables[parent].model.kebab}", field=f)

    def _check_unique(self, table: Table, values: Values, record: dict) -> None:
        clash = table.unique_clash(values)
        if clash is not None:
            f, other = clash
            raise UniqueViolation(f"{f} {record[f]!r} is already used by {table.model.kebab} {other!r}", field=f)

    def _write(self, commit: CommitQueue, table: Table, kind: EventKind, id_: Any,
               record: dict | None, previous: dict | None, apply: Callable[[], object]) -> asyncio.Future:
        offset = self._next_offset
        shown = record if record is not None else previous       # a delete shows the last record
        assert shown is not None
        event = ChangeEvent(kind, table.name, offset, table.watermark + 1, id_, shown,
                            previous if kind is EventKind.UPDATE else None)
        return self._submit(commit, table, offset, encode_frame(offset, event.payload()), event, apply)

    def _submit(self, commit: CommitQueue, table: Table, offset: int, frame: bytes, event: ChangeEvent,
                apply: Callable[[], object]) -> asyncio.Future:
        max_id = table.max_id

        def applied() -> tuple[Table, int, int]:
            if self._cut is not None:
                self._cut[table.name].note_write(event.id)
            apply()
            self._next_offset = offset + 1
            return table, max_id, offset

        future = commit.submit(frame, event, applied)
        if offset % recovery.CHECKPOINT_EVERY == 0 and self._next_offset > offset:
            self._checkpoints.append((offset, commit.writer.written - len(frame)))
        if commit.writer.written > self._compact_bytes and self._compaction is None:
            self._maybe_compact(commit)
        # The commit queue never needs the future back, so a writer that stops waiting for
        # it (a cancelled await) leaves its write to be committed, or rolled back, like any other.
        return future

    # -- online compaction (online.py) -----------------------------------------------------

    def _maybe_compact(self, commit: CommitQueue) -> None:
        if commit.failed is not None or time.monotonic() < self._compact_not_before:
            return
        live = sum(len(t.live) for t in self._tables.values())
        if recovery.needs_compaction(commit.writer.written, self._next_offset - 1 - self._log_base, live,
                                     self._snapshot_bytes,
                                     self._compact_bytes):
            self.compact_now()

    def compact_now(self) -> asyncio.Task:
        """Start an online compaction whatever the size rule says (a bench, an operator),
        or return the one running; its task finishes once the new epoch is in place, or
        the attempt failed and was logged."""
        if self._compaction is None:
            progress = online.Progress()
            self._compaction_progress = progress
            self._compaction = asyncio.get_running_loop().create_task(self._compact(progress),
                                                                      name="dbsvc-compaction")
        return self._compaction

    async def _compact(self, progress: online.Progress) -> None:
        try:
            await self._compact_steps(progress)
        finally:
            self._cut = None
            self._compaction = None
            self._compaction_progress = None

    async def _compact_steps(self, progress: online.Progress) -> None:
        """One online compaction: online.py's file steps, in the order of its docstring."""
        commit = self._commit
        assert commit is not None
        directory, faults, every, log_path = self.directory, self._faults, self.checkpoint_every, self._log_path
        try:
            # Threads read the log file up to the cut (write_retained) and past it
            # (start_log): the frames held for the next group commit are written first.
            commit.write_held()
        except Unavailable as exc:
            self._compaction_failed(exc)
            return
        cut = online.take_cut(self._tables, self._next_offset - 1, commit.writer.written)
        self._cut = {tc.table.name: tc for tc in cut.tables}
        # The cut's id lists and the epoch's history are long-lived and acyclic: frozen, so
        # that the collections the snapshot thread's allocations trigger do not walk them
        # (docs/decisions.md, "Pauses").
        gc.freeze()
        keep = retain.plan(self._retain_bytes, self._epoch, self._retained, log_path, cut.position,
                           self._log_base, cut.head)
        new: online.NewLog | None = None
        pending: retain.Segment | None = None
        old_rows: builtins.list[builtins.list[Any]] = []
        held: builtins.list[int] = []               # old files, freed after the switch
        old_fds: builtins.list[int] = []
        switched = [0.0]

        def switch() -> None:
            assert new is not None
            start = time.perf_counter()
            writer = commit.writer
            online.finish_log(log_path, writer.written, new, cut, every, faults)
            try:
                segment = compact.install_pair(directory, faults, pending, progress.committed)
            except OSError as exc:
                if progress.committed[0]:
                    log.error("%s: compaction failed after its commit point: %s; the store is now read-only "
                              "(the next open finishes the switch)", directory, exc)
                    commit.fail_stop(exc)
                raise
            old_fds.append(writer.fd)
            writer.fd, new.fd = new.fd, -1
            writer.written = new.size
            old_rows.extend(self._enter_epoch(cut, new.checkpoints, segment))
            switched[0] = time.perf_counter() - start

        try:
            await online.in_thread(progress, online.write_snapshot, directory, cut, progress, faults)
            self._cut = None
            online.end_cut(self._tables)
            pending = await online.in_thread(progress, online.write_retained, directory, keep, progress, faults)
            commit.check_writable()
            commit.write_held()
            new = await online.in_thread(progress, online.start_log, directory, log_path, cut,
                                         commit.writer.written, every, progress)
            held.extend(await online.in_thread(progress, online.hold_old_files, directory))
            await commit.run_between_fsyncs(switch)
        except BaseException as exc:
            self._cut = None
            online.release_files(held, old_fds)
            progress.cancelled = True
            progress.idle.wait(60)                  # a thread step stops at its next chunk
            online.end_cut(self._tables)            # no thread reads the cut's sublists now
            if new is not None and new.fd >= 0:
                files.ops.close(new.fd)
                new.fd = -1
            if not progress.committed[0] and self._lock is not None:
                online.discard(directory)
            if not isinstance(exc, Exception):
                raise
            self._compaction_failed(exc)
            return
        self.compaction_pauses.append((cut.took, switched[0]))
        log.info("%s: compacted online at offset %d: %d live records, new epoch %s (pauses %.1f ms + %.1f ms)",
                 directory, cut.head, sum(tc.count for tc in cut.tables), cut.epoch,
                 cut.took * 1e3, switched[0] * 1e3)
        await online.in_thread(progress, online.release_files, held, old_fds)
        await online.in_thread(progress, online.drop_slowly, old_rows)
        # What the new epoch keeps (the snapshot's id lists, the surviving history) is
        # long-lived and acyclic, like what `recovery.load` froze at open: out of the
        # cyclic GC's way too (docs/decisions.md, "Pauses").
        gc.freeze()

    def _compaction_failed(self, exc: Exception) -> None:
        """Log why (a compaction cancelled by `close()` is not a failure to report) and
        wait RETRY_AFTER before the size rule may start another."""
        if not isinstance(exc, online.Cancelled):
            log.error("%s: online compaction failed: %s", self.directory, exc)
        self._compact_not_before = time.monotonic() + online.RETRY_AFTER

    def _enter_epoch(self, cut: online.Cut, checkpoints: builtins.list[tuple[int, int]],
                     retained: retain.Segment | None) -> builtins.list[Any]:
        """The switch of an online compaction, in memory: history restarts at the cut.
        Returns the old history and id lists, for the caller to free off the loop."""
        old = []
        deltas = cut.deltas()
        for tc in cut.tables:
            table = tc.table
            old.append(table.rows)
            old.append(table.base_ids)
            table.rows = table.rows[tc.rows:]
            table.base_ids = tc.base_ids
        head = cut.head
        self._epoch, self._log_base, self._checkpoints = cut.epoch, head, checkpoints
        self._snapshot_bytes = cut.snapshot_bytes
        self._retained = retained

        def renumber(event: ChangeEvent) -> ChangeEvent:
            if event.offset <= head:
                return event
            return event._replace(watermark=event.watermark + deltas[event.model])

        self._ring = deque((renumber(e) for e in self._ring if e.offset > head), maxlen=self._ring.maxlen)
        assert self._commit is not None
        self._commit.map_pending_events(renumber)
        self.compactions += 1
        return old

    def _rollback(self, undo: tuple[Table, int, int]) -> None:
        table, max_id, offset = undo
        table.undo_last(max_id)
        self._next_offset = offset
        while self._checkpoints and self._checkpoints[-1][0] >= offset:
            self._checkpoints.pop()

    async def insert(self, model: str, record: dict) -> dict:
        stored, durable = self.apply_insert(model, record)
        await durable
        return stored

    async def replace(self, model: str, id: Any, record: dict) -> tuple[dict, dict]:
        previous, stored, durable = self.apply_replace(model, id, record)
        await durable
        return previous, stored

    async def delete(self, model: str, id: Any) -> dict:
        previous, durable = self.apply_delete(model, id)
        await durable
        return previous

    def apply_insert(self, model: str, record: dict) -> tuple[dict, asyncio.Future]:
        commit = self._writable()
        table = self._table(model)
        m = table.model
        id_ = record.get(m.id_field)
        if id_ is None:
            if m.id_type != "int":
                raise ConstraintViolation([{"field": m.id_field, "message": "is required"}])
            if table.max_id >= INT64_MAX:
                # Ids are signed 64-bit (docs/guide/schema.md#types); one past the top would be stored
                # but could never be parsed back from a path.
                raise ConstraintViolation([{"field": m.id_field, "message":
                    f"no automatic id is left: the largest id ever used is {table.max_id}; "
                    "give an unused id explicitly"}])
            record = dict(record)
            record[m.id_field] = id_ = table.max_id + 1
        if id_ in table.live:
            raise UniqueViolation(f"{m.id_field} {id_!r} is already used by {m.kebab} {id_!r}", field=m.id_field)
        values = m.row(record)
        self._check_unique(table, values, record)
        self._check_refs(table, record, None)

        def apply() -> None:
            table.prime(id_, table.insert(values), record)

        return record, self._write(commit, table, EventKind.INSERT, id_, record, None, apply)

    def apply_replace(self, model: str, id: Any, record: dict) -> tuple[dict, dict, asyncio.Future]:
        commit = self._writable()
        table = self._table(model)
        m = table.model
        current = table.live.get(id)
        if current is None:
            raise NotFound(f"{m.kebab} {id!r} not found")
        previous = table.shown(id, current)
        if record.get(m.id_field) != id:
            record = dict(record)
            record[m.id_field] = id
        values = m.row(record)
        self._check_unique(table, values, record)
        self._check_refs(table, record, previous)

        def apply() -> None:
            table.prime(id, table.replace(current, values, m.row(previous)), record)

        return previous, record, self._write(commit, table, EventKind.UPDATE, id, record, previous, apply)

    def apply_delete(self, model: str, id: Any) -> tuple[dict, asyncio.Future]:
        commit = self._writable()
        table = self._table(model)
        current = table.live.get(id)
        if current is None:
            raise NotFound(f"{table.model.kebab} {id!r} not found")
        previous = table.shown(id, current)
        children = sum(child.refs[f].get(id, 0) for child, f in self._referrers[table.name])
        if children:
            names = sorted({child.name for child, f in self._referrers[table.name] if child.refs[f].get(id)})
            raise Referenced(f"{table.model.kebab} {id!r} is referenced by {children} record(s) of "
                             f"{', '.join(names)}", count=children)
        return previous, self._write(commit, table, EventKind.DELETE, id, None, previous,
                                     lambda: table.delete(id, current))

    def check_batch(self, rows: Sequence[tuple[str, dict]]) -> None:
        """`BatchRejected` if `insert_batch(rows)` would refuse them; works on a read-only
        store too, so a tool can judge a batch before it opens the tenant for writing."""
        batch.plan(self._tables, rows)

    def insert_batch(self, rows: Sequence[tuple[str, dict]]) -> builtins.list[dict]:
        """Insert (model name, record) rows as one durable batch (batch.py): checked as a
        set (`BatchRejected` lists every bad row, nothing written), written with one fsync,
        then applied; returns the stored records (automatic ids filled in). Synchronous,
        for offline tools (`dbsvc import`) with no write in flight; subscribers get the
        events as usual. The next open compacts if the log has grown past the rule."""
        commit = self._writable()
        planned = batch.plan(self._tables, rows)
        if not planned:
            return []
        first = self._next_offset
        checkpoints: builtins.list[tuple[int, int]] = []
        commit.append_batch(batch.frames(planned, first, commit.writer.written, recovery.CHECKPOINT_EVERY,
                                         checkpoints), len(planned))
        by_table: dict[str, builtins.list[Values]] = {}
        for table, record in planned:
            by_table.setdefault(table.name, []).append(table.model.row(record))
        for name, records in by_table.items():
            self._tables[name].insert_many(records)
        self._next_offset = first + len(planned)
        self._checkpoints.extend(checkpoints)
        self._publish_batch(planned, first)
        return [record for _t, record in planned]

    def _publish_batch(self, planned: builtins.list[tuple[Table, dict]], first: int) -> None:
        """The batch's events, after its commit: to the subscribers, if any, all of them;
        otherwise only the ring's last `maxlen`, so a million-row import builds no events."""
        self._head = first + len(planned) - 1
        keep = len(planned) if self._subscribers else min(len(planned), self._ring.maxlen or 0)
        watermarks = {t.name: t.watermark for t, _r in planned}
        events = []
        for offset in range(self._head, self._head - keep, -1):          # newest first
            table, record = planned[offset - first]
            events.append(ChangeEvent(EventKind.INSERT, table.name, offset, watermarks[table.name],
                                      record[table.id_field], record))
            watermarks[table.name] -= 1
        for event in reversed(events):
            if self._subscribers:
                self._publish(event, event.frame())
            else:
                self._ring.append(event)

    # -- following a primary (dbsvc/replica) ---------------------------------------------

    def apply_replicated(self, frame: bytes) -> asyncio.Future:
        """Apply one frame of a primary's `/replicate` stream with the primary's offset and
        watermark, as the primary wrote it: the frame bytes go to this log unchanged, so a
        follower's log, offsets and `as_of` history are the primary's. The frame was checked
        by the stream reader (CRC, continuity); this checks that it fits this store:
        `StreamError` for a frame out of sequence, an unknown model, a record of other
        fields, or a row that contradicts the state (insert of a present id, update or
        delete of an absent one, a record whose values the model's validator refuses);
        `EpochChanged` when its watermark is not the next one
        (the primary compacted). Nothing is applied when it raises."""
        commit = self._writable()
        offset = int.from_bytes(frame[:8], "big")              # FRAME's first field
        if offset != self._next_offset:
            raise StreamError(offset, f"expected offset {self._next_offset}")
        try:
            event = decode_event(memoryview(frame)[FRAME_HEADER_SIZE:])
        except (ValueError, KeyError, TypeError) as exc:
            raise StreamError(offset, f"payload is not a change event: {exc}") from None
        table = self._tables.get(event.model)
        if table is None:
            raise StreamError(offset, f"unknown model {event.model!r}")
        if event.offset != offset:
            raise StreamError(offset, f"payload says offset {event.offset}")
        if list(event.record) != list(table.model.fields):
            raise StreamError(offset, f"{event.model} record has fields {list(event.record)}, "
                                      f"expected {list(table.model.fields)}")
        if event.watermark != table.watermark + 1:
            raise EpochChanged(offset, f"{event.model} watermark {event.watermark} follows "
                                       f"{table.watermark} here: the primary started a new epoch")
        record, kind = event.record, event.kind
        if kind is not EventKind.DELETE:
            _check_replicated_record(table, offset, event)
        try:
            current = table.live.get(event.id)
        except TypeError:                                   # an unhashable id
            raise StreamError(offset, f"{event.model} id {event.id!r} is not an id value") from None
        if kind is EventKind.INSERT:
            if current is not None:
                raise StreamError(offset, f"insert of {event.model} {event.id!r}, which exists here")
            values = table.model.row(record)
            return self._submit(commit, table, offset, frame, event, lambda: table.insert(values))
        if current is None:
            raise StreamError(offset, f"{kind.value} of {event.model} {event.id!r}, which does not exist here")
        if kind is EventKind.UPDATE:
            values = table.model.row(record)
            return self._submit(commit, table, offset, frame, event, lambda: table.replace(current, values))
        return self._submit(commit, table, offset, frame, event, lambda: table.delete(event.id, current))

    def epoch_snapshot(self) -> tuple[str, int, Iterator[bytes]]:
        """What a follower bootstraps from: the current epoch's id, its base offset (the
        offset its snapshot stands at), and the snapshot file's bytes in chunks, read
        lazily from a file descriptor opened now (a later compaction renames a new file
        over it without disturbing this one). An epoch that began without a snapshot
        (base 0) is an empty image. Raises `Unavailable` in the instant of an online
        compaction's switch, when the file already belongs to the next epoch."""
        path = os.path.join(self.directory, SNAPSHOT_NAME)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            if self._log_base != 0:
                raise Unavailable("the epoch's snapshot file is missing; try again") from None
            image = SnapshotImage(self._epoch, 0, [ModelImage(t.name, list(t.model.fields), [], 0, t.key_fields)
                                                   for t in self._tables.values()])
            return self._epoch, 0, encode_snapshot(image)
        try:
            first = os.pread(fd, 1 << 16, 0).split(b"\n", 1)[0]
            header = json.loads(first[9:])
        except (OSError, ValueError) as exc:
            os.close(fd)
            raise Unavailable(f"the snapshot could not be read: {exc}") from None
        if header.get("epoch") != self._epoch or header.get("head_offset") != self._log_base:
            os.close(fd)
            raise Unavailable("a compaction is switching epochs; try again in a moment")
        return self._epoch, self._log_base, _read_chunks(fd)

    # -- change stream ---------------------------------------------------------------------

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            try:
                self._subscribers.remove(callback)
            except ValueError:
                pass

        return unsubscribe

    def _publish(self, event: ChangeEvent, frame: bytes) -> None:
        self._head = event.offset
        self._ring.append(event)
        for callback in tuple(self._subscribers):
            try:
                callback(event, frame)
            except Exception:
                log.exception("change-stream subscriber %r failed on offset %d", callback, event.offset)

    def events_after(self, offset: int) -> Iterator[ChangeEvent]:
        """Committed events with offsets > `offset`, oldest first (rule 5)."""
        return (decode_event(frame[FRAME_HEADER_SIZE:]) for frame in self.frames_after(offset)) \
            if self.replication else iter(self._ring_after(offset))

    def _check_offset(self, offset: int) -> None:
        if offset < 0 or offset > self._head:
            raise OffsetOutOfRange(f"offset {offset} is ahead of the head offset {self._head}",
                                   head=self._head)

    def _ring_after(self, offset: int) -> builtins.list[ChangeEvent]:
        self._check_offset(offset)
        if offset == self._head:
            return []
        if offset < self._log_base:
            raise OffsetGone(f"offset {offset} was compacted away; the epoch starts after {self._log_base}",
                             oldest=self._log_base)
        if not self._ring or offset < self._ring[0].offset - 1:
            oldest = self._ring[0].offset - 1 if self._ring else self._head
            raise OffsetGone(f"offset {offset} is no longer retained; the oldest retained is {oldest}",
                             oldest=oldest)
        return [e for e in self._ring if e.offset > offset]

    def frames_after(self, offset: int) -> Iterator[bytes]:
        """Committed log frames (the `/replicate` messages) after `offset`, read lazily:
        the retained segment's, then the log's (rule 5, replay.py)."""
        return replay.frames_after(self, offset)

    # -- shutdown --------------------------------------------------------------------------

    def close(self, keep_lock: bool = False) -> WriterLock | None:
        """Stop a running compaction (its `.new` files are discarded), acknowledge what is
        written (one last fsync), stop the committer, unlock (or, with `keep_lock`, return
        the still-held lock for the next `open`)."""
        progress, task = self._compaction_progress, self._compaction
        if progress is not None and not progress.committed[0]:
            progress.cancelled = True
            progress.idle.wait(60)
            if task is not None and not task.done():
                try:
                    task.cancel()
                except RuntimeError:
                    pass                # its loop is already closed
            online.discard(self.directory)
        if self._commit is not None:
            self._commit.flush()
            self._commit.shutdown()
            files.ops.close(self._commit.writer.fd)
            self._commit = None
        lock, self._lock = self._lock, None
        if lock is not None and not keep_lock:
            lock.release()
            return None
        return lock

    async def aclose(self) -> None:
        """Wait for a running compaction and for queued writes to commit, then `close()`."""
        task = self._compaction
        if task is not None:
            try:
                await task
            except asyncio.CancelledError:
                pass
        while self._commit is not None and self._commit.pending and self._commit.failed is None:
            await asyncio.sleep(0.001)
        self.close()


def _read_chunks(fd: int, size: int = 256 * 1024) -> Iterator[bytes]:
    """The whole file behind `fd` in chunks; closes it at the end (or when abandoned)."""
    try:
        position = 0
        while True:
            chunk = os.pread(fd, size, position)
            if not chunk:
                return
            position += len(chunk)
            yield chunk
    finally:
        os.close(fd)


def _check_replicated_record(table: Table, offset: int, event: ChangeEvent) -> None:
    """A replicated record must be one this schema could have stored: the model's generated
    replace validator accepts it under its own id. A frame can pass its CRC and still hold
    values of other types (a bad primary, a proxy rewriting payloads), and such a value
    would fail inside the indexes, half applied."""
    model = table.model
    record = event.record
    if record.get(model.id_field) != event.id:
        raise StreamError(offset, f"{event.model} event id {event.id!r} differs from the record's "
                                  f"{model.id_field} {record.get(model.id_field)!r}")
    try:
        model.validate_replace(record, event.id)
    except RequestError as exc:
        raise StreamError(offset, f"{event.model} {event.id!r} does not fit the schema: {exc}") from None
