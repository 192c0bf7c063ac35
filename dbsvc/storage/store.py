"""The Store: a tenant's records in memory, made durable by one append-only log.

The API the application is written against (docs/architecture.md, "storage")::

    store = Store.open(directory, models, description, sync="full", replication=False,
                       readonly=False, ring_capacity=1024, compact_bytes=64 << 20,
                       retain_bytes=0, max_payload=MAX_PAYLOAD)
    record, watermark          = store.get("User", 7, as_of=None)
    record, watermark, version = store.get_versioned("User", 7, as_of=None)
    version                    = store.version("User", 7)   # offset of its last write, 0: none
    records, total, watermark  = store.list_records("User", query)
    store.watermarks(), store.live_counts(), store.head_offset, store.epoch, store.oldest_offset
    store.watermarks_at("BlogPost", 5)                          # every model then (instants.py)
    health             = store.health(retry=False)             # WriteHealth: state, detail
    record             = await store.insert("User", record)     # id None: max ever used + 1
    previous, record   = await store.replace("User", 7, record)
    previous           = await store.delete("User", 7)
    record, durable    = store.apply_insert("User", record)     # and apply_replace, apply_delete:
                                                                # applied now, `durable` resolves
                                                                # (or fails) as the await would
    batch              = store.begin_batch()               # POST /batch: batch.insert(...),
                                                                # .replace, .delete, then
                                                                # .commit() -> durable, or .abort()
    records            = store.insert_batch([("User", record), ...])   # offline: checked as a set,
                                                                # one fsync (batch.py)
    unsubscribe        = store.subscribe(callback)              # callback(ChangeEvent, frame)
    for event in store.events_after(offset): ...                # ring, or the log if replication
    for frame in store.frames_after(offset): ...                # retained segment, then the log
    durable            = store.apply_replicated(frame)          # a follower (follow.py)
    durable            = store.apply_replicated_frames(frames)  # ... a group: one write, one fsync
    epoch, base, chunks = store.epoch_snapshot()                # what a follower bootstraps from
    task               = store.compact_now()                    # online compaction now (compactor.py)
    task               = store.compact_at(epoch, head)          # a follower, at its primary's cut
    store.close()
    store.table("User"), store.tables, store.epoch_state        # read-only views (tests, tools)

The Store is a facade over named parts, each in its own module:

    epoch.py       `Epoch`: the current epoch's id, log path and base, checkpoints,
                   retained segment and snapshot size, as one frozen value
    changes.py     `ChangeStream`: subscribers, the ring, the head, events/frames after
    replay.py      reading frames back (through `replay.LogSource`, which Store implements)
    follow.py      the follower side: applying a primary's frames, the epoch's snapshot
    compactor.py   `Compactor`: when and how an online compaction runs (steps: online.py)
    writeapi.py    `TableWrites`, the Store's base: its tables and the write calls
                   (insert, replace, delete, apply_*, batches, health)
    writes.py      `WritePath`: the write path (the checks of constraints.py, the event,
                   the frame, the commit, the undo) and the next offset
    commit.py      the group commit; batch.py the offline batch; table.py one model's
                   records, history and indexes; recovery.py the open

It keeps the reads; its base `TableWrites` hands each write to `WritePath`. The parts never import store.py
(replay.py, follow.py and compactor.py see it through protocols: `LogSource`, `Replicated`,
`Host`; writes.py is handed what it needs).

Rules:

1. A write checks its constraints (primary key and @unique: `UniqueViolation`; @ref:
   `ForeignKeyViolation` on insert/replace, `Referenced` with the child count on delete),
   writes its frame and applies itself to memory before its first `await`, so under asyncio
   it is atomic: a refused write changed nothing, in memory or on disk. Its frame must fit
   (events.py "Sizes": a record at most `record_limit(max_payload)` bytes of JSON, a frame
   at most `max_payload`): else `PayloadTooLarge`, so what is acknowledged always reopens.
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
   restart, the log's last rows). changes.py.
5. `events_after(offset)` and `frames_after(offset)` (changes.py, replay.py): committed events
   after `offset`, gap-free, up to the acknowledged end; `OffsetOutOfRange` beyond the head,
   `OffsetGone` before what the ring holds or, with replication, what the log since the last
   compaction and the retained segment (retain.py) hold (`oldest_offset`).
6. Memory: every live record (table.py: its values, handed out as a dict shared while it is
   among the last handed out), its indexes, and the epoch's history, which online compaction
   bounds (compactor.py: when, by recovery.py's `needs_compaction`; online.py: the steps and
   the loop's short pauses, `compaction_pauses`). `compact_now()` starts one whatever the
   rule says; `stats()["history_rows"]` reports the history's size.

Recommended feed pattern: subscribe first (buffering), then replay `events_after(after)`,
then drain the buffer skipping offsets already sent.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dbsvc.runtime import INT64_MAX, CompiledModel, Filters, Query
from dbsvc.storage import files, follow, history, instants, recovery, retain
from dbsvc.storage.changes import Callback, ChangeStream, GroupCallback
from dbsvc.storage.commit import CommitQueue
from dbsvc.storage.compact import SNAPSHOT_NAME
from dbsvc.storage.compactor import Compactor
from dbsvc.storage.epoch import Epoch
from dbsvc.storage.events import HEAD_RESERVE, ChangeEvent
from dbsvc.storage.files import FaultPlan
from dbsvc.storage.freeing import Release
from dbsvc.storage.history import History
from dbsvc.storage.lock import WriterLock
from dbsvc.storage.logfile import MAX_PAYLOAD
from dbsvc.storage.loghealth import BATCH_BOUNDS
from dbsvc.storage.logwriter import LogWriter
from dbsvc.storage.query import list_page, live_ids, page_as_of
from dbsvc.storage.rows import sent, unpack
from dbsvc.storage.table import Table
from dbsvc.storage.writeapi import TableWrites
from dbsvc.storage.writes import WritePath

__all__ = ["Callback", "Store"]


@dataclass(frozen=True, slots=True)
class Options:
    """How a store was opened (`Store.open`'s keywords, checked), handed to its parts."""

    sync: bool
    replication: bool
    ring_capacity: int
    faults: FaultPlan
    compact_bytes: int
    retain_bytes: int
    max_payload: int


class Store(TableWrites):
    """One open tenant. Construct with `Store.open`."""

    def __init__(self, directory: str, loaded: recovery.Loaded, lock: WriterLock | None, options: Options) -> None:
        self._directory = directory
        self.max_payload = options.max_payload
        self.readonly = lock is None
        self.replication = options.replication
        self._lock = lock
        self._tables: dict[str, Table] = loaded.tables
        # Replaced whole by a compaction's switch (install_epoch); epoch.py.
        self._epoch: Epoch = loaded.epoch
        self._history = loaded.history
        self.recovered_tail = loaded.damage
        self.held_frames: list[tuple[bytes, ChangeEvent]] = []  # a follower's unfinished batch (follow.py rule 4)
        # A follower's last rows applied (follow.py rule 6), for a compaction at its primary's cut.
        self.applied_rows = follow.AppliedRows()
        self.compacted_on_open = loaded.compacted
        self._changes = ChangeStream(
            self, loaded.recent, options.ring_capacity, loaded.head_offset, replication=options.replication
        )
        self._readonly_end = loaded.log_size
        writer = None
        if lock is not None:
            log_path = self._epoch.log_path
            fd = files.ops.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            writer = LogWriter(log_path, fd, loaded.log_size, options.faults)
            if options.sync:
                try:
                    writer.sync_opened()  # what a process left unsynced, paid before serving
                except BaseException:
                    files.ops.close(fd)
                    raise
        self._writes = WritePath(
            self._tables,
            writer,
            sync=options.sync,
            next_offset=loaded.head_offset + 1,
            max_payload=options.max_payload,
            epoch_of=lambda: self._epoch,
            changes=self._changes,
        )
        self.compactor = Compactor(
            self,
            self._writes.commit,
            faults=options.faults,
            compact_bytes=options.compact_bytes,
            retain_bytes=options.retain_bytes,
        )
        self._writes.compactor = self.compactor

    @classmethod
    def open(
        cls,
        directory: str,
        models: Sequence[CompiledModel],
        description: dict,
        *,
        sync: str = "full",
        replication: bool = False,
        readonly: bool = False,
        ring_capacity: int = 1024,
        compact_bytes: int = recovery.AUTO_COMPACT_BYTES,
        retain_bytes: int = 0,
        lock: WriterLock | None = None,
        max_payload: int = MAX_PAYLOAD,
    ) -> Store:
        """Open (and recover) a tenant directory; see recovery.py for the steps.
        `compact_bytes`: the log size past which compaction is considered (at open and
        while serving, online.py); tests use small values, a follower a huge one (its
        epochs are the primary's). `lock`: a writer lock already held (handed over by
        `close(keep_lock=True)`), so a follower re-bootstraps without letting go of it.
        `retain_bytes`: how much of a compacted log each compaction keeps for `frames_after`
        (retain.py; 0 keeps none and removes a segment left from before). `max_payload`: the
        largest frame payload this store writes (events.py "Sizes"); at most logfile's
        MAX_PAYLOAD, what every reader takes; tests use small values."""
        if sync not in ("full", "off"):
            raise ValueError(f"sync must be 'full' or 'off', got {sync!r}")
        if not 4 * HEAD_RESERVE <= max_payload <= MAX_PAYLOAD:
            raise ValueError(f"max_payload must be from {4 * HEAD_RESERVE} to {MAX_PAYLOAD}, got {max_payload!r}")
        if replication:
            # `events_after` reads the log then (`frames_after`): a ring would only hold
            # the last events' records once more, never read.
            ring_capacity = 0
        faults = FaultPlan.from_env()
        if not readonly and lock is None:
            lock = WriterLock.acquire(directory)
        try:
            loaded = recovery.load(
                directory,
                models,
                description,
                readonly=readonly,
                ring_capacity=ring_capacity,
                faults=faults,
                compact_bytes=compact_bytes,
                retain_bytes=retain_bytes,
            )
            return cls(
                directory,
                loaded,
                lock,
                Options(sync == "full", replication, ring_capacity, faults, compact_bytes, retain_bytes, max_payload),
            )
        except BaseException:
            if lock is not None:
                lock.release()
            raise

    # -- reads -----------------------------------------------------------------------------

    def get(self, model: str, id: Any, as_of: int | None = None) -> tuple[dict | None, int]:
        table = self.table(model)
        if as_of is None or as_of >= table.watermark:
            stored = table.live.get(id)
            return (None if stored is None else table.shown(id, stored)), table.watermark
        past, _version = table.get_as_of(id, max(as_of, 0))
        return (None if past is None else table.model.decode(unpack(past))), as_of

    def get_versioned(
        self, model: str, id: Any, as_of: int | None = None, texts: bool = False
    ) -> tuple[dict | bytes | None, int, int]:
        """`get`, and the record's version: the log offset of its last write (as of
        `as_of`), 0 with no record (versions.py; the ETag, docs/guide/rest.md). `texts`: the
        record is only to be sent whole (a GET with no projection, `expand=` or access
        rules), so it comes as its stored text itself, which is its JSON (rows.py `sent`),
        live or `as_of`, with no dict made, looked up or kept; a text that may hold a lone
        surrogate comes as its dict, as without `texts` (the application encodes it)."""
        table = self.table(model)
        if as_of is None or as_of >= table.watermark:
            stored = table.live.get(id)
            if stored is None:
                return None, table.watermark, 0
            text = sent(stored) if texts else None
            return text or table.shown(id, stored), table.watermark, table.versions.get(id)
        past, version = table.get_as_of(id, max(as_of, 0))
        if past is None:
            return None, as_of, version
        text = sent(past) if texts else None
        return text or table.model.decode(unpack(past)), as_of, version

    def version(self, model: str, id: Any) -> int:
        """The log offset of live record `id`'s last write (its ETag), 0 when there is
        none: O(1), read under the single writer by a conditional write's check."""
        return self.table(model).versions.get(id)

    def list_records(self, model: str, query: Query) -> tuple[list[dict], int, int]:
        records, total, watermark, _more = self.list_page(model, query)
        return records, total, watermark

    def list_page(self, model: str, query: Query, texts: bool = False) -> tuple[list[Any], int, int, bool]:
        """(page, total, watermark, whether another page follows: a list's Link rel=next).
        `texts`: the page is only to be sent whole, so the records of the present come as
        their JSON, bytes, the last as a dict carrying its JSON (shown.py `ShownDicts.page`)."""
        table = self.table(model)
        as_of = query.as_of
        if as_of is None or as_of >= table.watermark:
            records, total, more = list_page(table, query, texts)
            return records, total, table.watermark, more
        records, total, more = page_as_of(table, max(as_of, 0), query)
        return records, total, as_of, more

    def live_ids(
        self, model: str, filters: Filters, ranges: tuple = (), nulls: tuple = (), search: tuple[str, ...] = ()
    ) -> list[Any]:
        """Every live id matching `filters`, the operators (`Query.ranges`, `Query.nulls`) and
        the text `search`'s words, in id order, at `applied_offset`: no record is read (a live
        query's Init, realtime/init.py)."""
        return live_ids(
            self.table(model), Query(filters=filters, limit=INT64_MAX, ranges=ranges, nulls=nulls, search=search)
        )

    def watermarks(self) -> dict[str, int]:
        return {name: t.watermark for name, t in self._tables.items()}

    def watermarks_at(self, model: str, n: int) -> dict[str, int]:
        """Every model's watermark at the last moment `model`'s was `n`: where `as_of=n` on
        `model` reads the other models (`expand=`; instants.py)."""
        return instants.watermarks_at(self, model, n)

    def live_counts(self) -> dict[str, int]:
        return {name: len(t.live) for name, t in self._tables.items()}

    def tick(self, model: str) -> int:
        """`model`'s change tick (table.py `Table.tick`): it moves on every change of the
        model's live state, a refused write's undo included, and never comes back, so an
        answer kept with it is fresh while it is the same (the app's `PresentPages`)."""
        return self._tables[model].tick

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def head_offset(self) -> int:
        return self._changes.head

    @property
    def applied_offset(self) -> int:
        """Offset of the last row applied to memory (>= head_offset: its fsync may be in
        flight). A read reflects exactly the rows up to here."""
        return self._writes.next_offset - 1

    @property
    def epoch(self) -> str:
        return self._epoch.id

    @property
    def history(self) -> History | None:
        """The tenant's history (history.py), or None for one written before histories."""
        return self._history

    @property
    def history_json(self) -> dict[str, Any] | None:
        """The history as `/snapshot` and `/replicate/snapshot` carry it (history.py)."""
        return None if self._history is None else self._history.to_json()

    def fork_history(self) -> History:
        """Start a new history after the current head (history.py rule 3: an import into
        a tenant holding rows calls this before it appends)."""
        self._history = history.fork_history(self._directory, self.head_offset)
        return self._history

    def adopt_history(self, record: History) -> None:
        """A replica's history becomes its primary's (history.py rule 3), durably."""
        history.write_history(self._directory, record)
        self._history = record

    @property
    def epoch_state(self) -> Epoch:
        """The current epoch (epoch.py): replaced whole by each compaction."""
        return self._epoch

    @property
    def oldest_offset(self) -> int:
        """The oldest `after` that `frames_after` serves (the retained segment's base, else the log's)."""
        return self._epoch.oldest_offset

    @property
    def acked_log_bytes(self) -> int:
        """The log's acknowledged end: what `frames_after` reads up to (replay.py)."""
        commit = self._writes.commit
        return commit.writer.acked if commit is not None else self._readonly_end

    @property
    def commit_queue(self) -> CommitQueue | None:
        """The group commit (commit.py); None on a read-only store."""
        return self._writes.commit

    @property
    def holds_lock(self) -> bool:
        return self._lock is not None

    @property
    def compactions(self) -> int:
        """Online compactions finished since the open."""
        return self.compactor.count

    @property
    def compaction_pauses(self) -> deque[tuple[float, float]]:
        """(cut seconds, switch seconds) of the last online compactions: the loop's pauses."""
        return self.compactor.pauses

    @property
    def compaction_releases(self) -> deque[Release]:
        """How the files the last online compactions replaced were freed: in pieces, or
        whole (a reader held one, or it was small; storage/freeing.py)."""
        return self.compactor.releases

    def stats(self) -> dict[str, Any]:
        """Counters for /metrics and the bench."""
        c = self._writes.commit
        retained = self._epoch.retained
        return {
            "fsyncs": c.stats.fsyncs if c else 0,
            "commits": c.stats.commits if c else 0,
            "failed_writes": c.stats.failures if c else 0,
            "read_only": self.readonly or (c is not None and c.failed is not None),
            "write_state": self.health().state.value,
            "torn_tail_bytes": (self.recovered_tail.size - self.recovered_tail.position) if self.recovered_tail else 0,
            "history_rows": sum(len(t.rows) for t in self._tables.values()),
            "log_bytes": c.writer.written if c else self._readonly_end,
            "retained_bytes": retained.size if retained is not None else 0,
            "compactions": self.compactor.count,
            "batch_sizes": (BATCH_BOUNDS, list(c.stats.batches)) if c else None,
            "snapshot_bytes": _size(os.path.join(self._directory, SNAPSHOT_NAME)),
            "kept_texts": sum(t.kept_texts for t in self._tables.values()),
        }

    # -- following a primary (follow.py; dbsvc/replica) --------------------------------------

    def apply_replicated(self, frame: bytes) -> asyncio.Future[None]:
        """Apply one frame of a primary's `/replicate` stream as the primary wrote it
        (follow.py `apply_replicated`): `StreamError` for a frame that does not fit this
        store, `EpochChanged` when the primary compacted; nothing applied when it raises."""
        return follow.apply_replicated(self, frame)

    def apply_replicated_frames(self, frames: Sequence[bytes]) -> asyncio.Future[None]:
        """Apply frames of a primary's stream as one group: one write, one fsync, each
        payload decoded once (follow.py rule 5); when one raises, the frames before it
        are committed and nothing of it or after it is applied."""
        return follow.apply_replicated_frames(self, frames)

    def epoch_snapshot(self) -> tuple[str, int, Iterator[bytes]]:
        """The current epoch's id, base offset and snapshot bytes in chunks, for a
        follower's bootstrap (follow.py `epoch_snapshot`)."""
        return follow.epoch_snapshot(self)

    # -- change stream (changes.py) -----------------------------------------------------------

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        return self._changes.subscribe(callback)

    def subscribe_groups(self, callback: GroupCallback) -> Callable[[], None]:
        """`callback(events, frames)` once per committed group (changes.py rule 4)."""
        return self._changes.subscribe_groups(callback)

    def events_after(self, offset: int) -> Iterator[ChangeEvent]:
        """Committed events with offsets > `offset`, oldest first (rule 5)."""
        return self._changes.events_after(offset)

    def frames_after(self, offset: int) -> Iterator[bytes]:
        """Committed log frames (the `/replicate` messages) after `offset`, read lazily:
        the retained segment's, then the log's (rule 5, replay.py)."""
        return self._changes.frames_after(offset)

    @property
    def changes(self) -> ChangeStream:
        """The change stream itself (changes.py), for a reader of its ring."""
        return self._changes

    # -- epochs (compactor.py, replay.py) ----------------------------------------------------

    def compact_at(self, epoch: str, head: int) -> asyncio.Task[None]:
        """A follower's compaction at its primary's cut: epoch `epoch` from offset `head`,
        at or behind the applied offset (compactor.py invariant 4); `ValueError` when this
        store cannot make that cut (a compaction runs, or a row after `head` applied before
        the last open or the last compaction's switch)."""
        return self.compactor.compact_at(epoch, head, self.applied_rows)

    def compact_now(self) -> asyncio.Task[None]:
        """Start an online compaction whatever the size rule says (a bench, an operator),
        or return the one running (compactor.py)."""
        return self.compactor.compact_now()

    @property
    def compaction(self) -> asyncio.Task[None] | None:
        """The running online compaction's task, or None."""
        return self.compactor.task

    def install_epoch(self, epoch: Epoch, renumbered: Callable[[ChangeEvent], ChangeEvent]) -> None:
        """A compaction's switch (compactor.py, on the loop, inside the committer): the new
        epoch in one assignment, and the ring's and queued writes' events after its base
        renumbered into it."""
        self._epoch = epoch
        # A follower's notes name positions in the old log: a later cut behind this switch
        # cannot be made (compactor.py invariant 4), and bootstraps instead.
        self.applied_rows.clear()
        self._changes.renumber(renumbered, epoch.log_base)
        assert self._writes.commit is not None
        self._writes.commit.map_pending_events(renumbered)

    def drop_retained(self, segment: retain.Segment) -> bool:
        """Stop serving `segment` (found damaged: replay.py rule 5); False if the epoch
        no longer holds it."""
        if self._epoch.retained is not segment:
            return False
        self._epoch = self._epoch.without_retained()
        return True

    # -- shutdown --------------------------------------------------------------------------

    def close(self, keep_lock: bool = False) -> WriterLock | None:
        """Stop a running compaction (its `.new` files are discarded), acknowledge what is
        written (one last fsync), stop the committer, unlock (or, with `keep_lock`, return
        the still-held lock for the next `open`)."""
        self.compactor.stop()
        commit = self._writes.commit
        if commit is not None:
            commit.flush()
            commit.shutdown()
            files.ops.close(commit.writer.fd)
            self._writes.commit = None
        lock, self._lock = self._lock, None
        if lock is not None and not keep_lock:
            lock.release()
            return None
        return lock

    async def aclose(self) -> None:
        """Wait for a running compaction and for queued writes to commit, then `close()`."""
        task = self.compactor.task
        if task is not None:
            try:
                await task
            except asyncio.CancelledError:
                pass
        while (commit := self._writes.commit) is not None and commit.pending and commit.failed is None:
            await asyncio.sleep(0.001)
        self.close()


def _size(path: str) -> int:
    """A file's size in bytes, 0 when there is none (a tenant never compacted has no snapshot)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
