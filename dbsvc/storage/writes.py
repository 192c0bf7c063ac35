"""The write path of one store: a write's checks, its event and frame, its commit, its undo.

Job: `WritePath` owns what a write changes besides the tables: the next offset, the group
commit (commit.py, None on a read-only store), and the epoch's checkpoints of the frames it
appends. store.py's `Store` hands every write here (`apply_insert`, `apply_replace`,
`apply_delete`, `begin_batch` for `POST /batch` (batchwrite.py), a follower's
`submit_frame`, the offline `insert_batch`) and keeps the reads.

Rules (store.py rules 1-2 hold here):
1. A write runs its checks (constraints.py), builds its event and frame and submits them
   before its first `await`, so under asyncio it is atomic: a refused write changed
   nothing. A frame larger than the store's `max_payload` allows is refused before any of
   that (events.py "Sizes": `PayloadTooLarge`), so what is acknowledged always reopens;
   a delete's frame is fitted first (its largest values left out), so a delete is always possible.
2. The commit queue applies a write to memory (`applied`) when its frame is handed to the
   log, and undoes it (`rollback`) when that write fails: the table's last row, the next
   offset and any checkpoint at or past its offset go back, in that order.
3. Every CHECKPOINT_EVERY-th offset gets a checkpoint (offset, byte position) in the current
   epoch (epoch.py), which a compaction replaces whole; `epoch_of` is read at each write.
4. Past the compactor's size rule a write asks it to run (compactor.py), and while one runs
   each replace and delete notes its id in the compaction's cut (online.py `note_write`:
   the record it replaces, as of the cut). An insert notes nothing: the snapshot thread
   reads only the ids live at the cut, and an insert's id was not live when it was
   applied (a live id is refused; one deleted since the cut was noted by its delete).
5. A record is encoded once per write: rows.py `pack_parts` gives its stored form and the
   JSON text of each value, and the log payload is the model's template filled with those
   texts (events.py `payload_templates`; an update's previous record's texts reuse the
   new record's for the values it left alone, `previous_parts`). `written_json` hands the
   record's JSON to the application for a PUT's or PATCH's response: its stored text,
   which is that JSON (session 27). A record not in its form, or holding a list or an object, is encoded
   whole, as `event_payload` does.
6. `insert_then`, `replace_then`, `delete_then` are `apply_*` with a completion callback:
   no future is made, and `done(error)` is called once the write is durable (None) or
   failed (`Unavailable`), a committed group's callbacks in one loop callback (commit.py,
   "Completions"). A refusal of its checks raises, as `apply_*`'s does, and never calls it.
7. A run: between `begin_run` and `end_run` (a pass of the application's writes,
   dbsvc/writeroutes.py) every write told by a callback is checked against the tables as
   the writes before it left them and applied to memory at once, as alone, but its frame
   is held in the run; `end_run` hands the run to the commit queue in one
   `CommitQueue.submit_run` (one chunk, one `Pending`, its events published as a group)
   and asks the size rule once. `insert_run_then` is `insert_then` of several records
   into one table in one call (a refused one changes nothing and the run goes on), in the
   open run or in one of its own. Offsets, frames, bytes, checkpoints and undo are each
   write's own, as rules 2-3 give them; a future-told write (`apply_*`) is never held.

Imports storage's own modules only; never store.py (the Store passes what this needs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from dbsvc.errors import Unavailable
from dbsvc.runtime import compact_json
from dbsvc.storage import batch, recovery
from dbsvc.storage.batchwrite import BatchWrite
from dbsvc.storage.changes import ChangeStream
from dbsvc.storage.commit import CommitQueue, Done
from dbsvc.storage.compactor import Compactor
from dbsvc.storage.constraints import Constraints
from dbsvc.storage.epoch import Epoch
from dbsvc.storage.events import (
    ChangeEvent,
    EventKind,
    check_payload,
    id_text,
    payload_templates,
    write_event,
    write_payload,
)
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.logwriter import LogWriter, WriteHealth, WriteState
from dbsvc.storage.rows import Values, in_form, pack_parts, previous_parts, record_text, sent
from dbsvc.storage.table import Table

__all__ = ["WritePath"]

# A write's `ChangeEvent` made from all of its fields at once, in C: the named tuple's own
# `__new__` is a Python function, one frame more on every write.
_event = tuple.__new__

# A run's frames, events, undos and completion callbacks, in offset order (rule 7).
_Run = tuple[list[bytes], list[ChangeEvent], list[tuple[Table, int, int]], list[Done]]


class WritePath:
    """The writes of one store (module docstring)."""

    def __init__(
        self,
        tables: Mapping[str, Table],
        writer: LogWriter | None,
        *,
        sync: bool,
        next_offset: int,
        max_payload: int,
        epoch_of: Callable[[], Epoch],
        changes: ChangeStream,
    ) -> None:
        self.next_offset = next_offset
        self.max_payload = max_payload
        self.compactor: Compactor | None = None  # set once the store has built it
        self._tables = tables
        self._constraints = Constraints(tables)
        self._epoch_of = self.epoch_of = epoch_of  # epoch_of: for batchwrite.py's checkpoints
        self._changes = changes
        # the last record stored: (record, its JSON as UTF-8: its stored form, rows.py, when
        # made from its parts; else the record's own encoding, in its own key order): rule 5
        self._written: tuple[dict[str, Any], bytes] | None = None
        # each model's payload templates (insert, update), made once (events.py)
        self._templates = {name: payload_templates(name, t.model.fields) for name, t in tables.items()}
        # A pass's writes held for one hand-over (rule 7), None while no run is open.
        self._run: _Run | None = None
        self.commit: CommitQueue | None = None
        if writer is not None:
            self.commit = CommitQueue(
                writer, sync=sync, publish=changes.publish, rollback=self.rollback, publish_group=changes.publish_group
            )

    def writable(self) -> CommitQueue:
        """The commit queue, or `Unavailable` unless the store takes writes now (read-only,
        or commit.py rule 4)."""
        commit = self.commit
        if commit is not None and commit.failed is None:  # the common case, with no call
            return commit
        if commit is None:
            raise Unavailable("the store was opened read-only")
        commit.check_writable()
        return commit

    def health(self, retry: bool = False) -> WriteHealth:
        """Whether the store takes writes (Store.health)."""
        if self.commit is None:
            return WriteHealth(WriteState.READ_ONLY, "the store was opened read-only")
        if retry and self.commit.failed is not None:
            try:
                self.commit.check_writable()
            except Unavailable:
                pass
        return self.commit.health()

    def apply_insert(self, table: Table, record: dict[str, Any]) -> tuple[dict[str, Any], asyncio.Future[None]]:
        record, future = self.insert_then(table, record, None)
        assert future is not None
        return record, future

    def insert_then(
        self, table: Table, record: dict[str, Any], done: Done | None
    ) -> tuple[dict[str, Any], asyncio.Future[None] | None]:
        """`apply_insert`, telling `done(error)` instead of a future when given (rule 6)."""
        commit = self.writable()
        record, values, stored, event, frame = self._insert_frame(table, record)
        offset = event.offset

        def apply() -> None:
            table.insert(values, stored, record, offset)

        future = self.submit(commit, table, offset, frame, event, apply, done)
        return record, future

    def _insert_frame(
        self, table: Table, record: dict[str, Any]
    ) -> tuple[dict[str, Any], Values, bytes, ChangeEvent, bytes]:
        """An insert's checks (raising its refusal), its stored form, event and frame at
        the next offset (rules 1 and 5); `_written` is the record's."""
        record, id_, values = self._constraints.check_insert(table, record)
        offset, watermark = self.next_offset, table.watermark + 1
        stored, parts = pack_parts(table.model.fields, record, values)  # rule 5
        event = _event(ChangeEvent, (EventKind.INSERT, table.name, offset, watermark, id_, record, None, None))
        if parts is None:
            text: str | None = compact_json(record)
            payload = write_payload(event, table.id_field, self.max_payload, text)
        else:
            text = None
            template = self._templates[table.name][0]
            payload = check_payload(
                event, (template % (offset, watermark, id_text(id_), *parts)).encode(), self.max_payload
            )
        self._written = (record, stored if text is None else text.encode("utf-8", "surrogatepass"))
        return record, values, stored, event, encode_frame(offset, payload)

    def insert_run_then(
        self, table: Table, records: Sequence[dict[str, Any]], dones: Sequence[Done]
    ) -> list[tuple[dict[str, Any], int] | Exception]:
        """`insert_then` of each record in turn, each told by its `dones[i]`, held in the
        open run or in one of its own (rule 7): for each, (the record as stored, its
        offset), or the refusal it raised (it changed nothing, and `dones[i]` is never
        called)."""
        outcomes: list[tuple[dict[str, Any], int] | Exception] = []
        opened = self._run is None
        if opened:
            self.begin_run()
        try:
            for record, done in zip(records, dones):
                try:
                    commit = self.commit
                    if commit is None or commit.failed is not None:
                        commit = self.writable()
                    record, values, stored, event, frame = self._insert_frame(table, record)
                except Exception as exc:  # the refusal `insert_then` raises: nothing changed
                    outcomes.append(exc)
                    continue
                offset = event.offset
                # held in the open run by `submit` (rule 7), applied to memory at once
                self.submit(
                    commit, table, offset, frame, event, partial(table.insert, values, stored, record, offset), done
                )
                outcomes.append((record, offset))
        finally:  # what was applied to memory is handed over, whatever stopped the loop
            if opened:
                self.end_run()
        return outcomes

    def begin_run(self) -> _Run:
        """Hold the writes told by a callback from now until `end_run` for one hand-over
        (rule 7): a pass of the application's writes; no await may come in between."""
        assert self._run is None, "one run at a time"
        run: _Run = ([], [], [], [])
        self._run = run
        return run

    def end_run(self) -> None:
        """Hand the run's writes to the commit queue together (rule 7): one
        `CommitQueue.submit_run`, the checkpoints each frame's offset takes, the size rule."""
        run, self._run = self._run, None
        if run is None or not run[0]:
            return
        frames, events, undos, dones = run
        commit, compactor = self.commit, self.compactor
        assert commit is not None and compactor is not None
        position = commit.writer.written
        commit.submit_run(frames, events, undos, dones)
        checkpoints = self._epoch_of().checkpoints
        for frame, event in zip(frames, events):
            if event.offset % recovery.CHECKPOINT_EVERY == 0:
                checkpoints.append((event.offset, position))
            position += len(frame)
        if commit.writer.written > compactor.compact_bytes and compactor.task is None:
            compactor.after_write(commit)

    def apply_replace(
        self, table: Table, id: Any, record: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], asyncio.Future[None]]:
        previous, record, future = self.replace_then(table, id, record, None)
        assert future is not None
        return previous, record, future

    def replace_then(
        self, table: Table, id: Any, record: dict[str, Any], done: Done | None
    ) -> tuple[dict[str, Any], dict[str, Any], asyncio.Future[None] | None]:
        """`apply_replace`, telling `done(error)` instead of a future when given (rule 6)."""
        commit = self.commit
        if commit is None or commit.failed is not None:  # `writable`'s refusal; no call when it takes writes
            commit = self.writable()
        current, previous, record, values = self._constraints.check_replace(table, id, record)
        fields = table.model.fields
        was = table.model.row(previous)
        offset, watermark = self.next_offset, table.watermark + 1
        stored, parts = pack_parts(fields, record, values)  # rule 5
        event = _event(ChangeEvent, (EventKind.UPDATE, table.name, offset, watermark, id, record, previous, None))
        if parts is None or not in_form(fields, previous):
            text: str | None = record_text(fields, record, parts)
            payload = write_payload(event, table.id_field, self.max_payload, text, compact_json(previous))
        else:
            text = None
            template = self._templates[table.name][1]
            texts = (offset, watermark, id_text(id), *parts, *previous_parts(parts, was, values))
            payload = check_payload(event, (template % texts).encode(), self.max_payload)
        apply = partial(table.replace, current, values, was, stored, record, offset)  # no frame of its own
        future = self.submit(commit, table, offset, encode_frame(offset, payload), event, apply, done)
        self._written = (record, stored if text is None else text.encode("utf-8", "surrogatepass"))
        return previous, record, future

    def written_json(self, record: dict[str, Any]) -> bytes | None:
        """The JSON of `record` (`json_bytes(record)`'s bytes) when it is the record the last
        `apply_insert` or `apply_replace` stored, else None (rule 5): its stored text, which
        is that JSON (rows.py), or the record's own encoding (one not in the record form);
        None where a lone surrogate may be held (UTF-8 0xED), which `json_bytes` refuses:
        the caller encodes the record as it always did."""
        written = self._written
        if written is None or written[0] is not record:
            return None
        return sent(written[1])

    def apply_delete(self, table: Table, id: Any) -> tuple[dict[str, Any], asyncio.Future[None]]:
        previous, future = self.delete_then(table, id, None)
        assert future is not None
        return previous, future

    def delete_then(
        self, table: Table, id: Any, done: Done | None
    ) -> tuple[dict[str, Any], asyncio.Future[None] | None]:
        """`apply_delete`, telling `done(error)` instead of a future when given (rule 6)."""
        commit = self.writable()
        previous, apply = self._constraints.delete(table, id)
        offset = self.next_offset
        event = write_event(EventKind.DELETE, table.name, offset, table.watermark + 1, id, None, previous)
        payload = write_payload(event, table.id_field, self.max_payload)  # rule 1
        return previous, self.submit(commit, table, offset, encode_frame(offset, payload), event, apply, done)

    def begin_batch(self, size: int = 0) -> BatchWrite:
        """An atomic batch of writes (batchwrite.py), checked op by op, committed as one;
        `size`: the number of ops that will follow, when the caller knows it."""
        return BatchWrite(self, self._tables, self._constraints, size)

    def submit(
        self,
        commit: CommitQueue,
        table: Table,
        offset: int,
        frame: bytes,
        event: ChangeEvent,
        apply: Callable[[], object],
        done: Done | None = None,
    ) -> asyncio.Future[None] | None:
        """Hand `frame` at `offset` (the next one) to the commit queue, `apply` changing
        `table` when it is written (rules 2-4; an insert's or replace's `apply` stamps its
        record's version, a delete leaves none); its future, or None when `done` is told
        instead (rule 6)."""
        max_id = table.max_id
        compactor = self.compactor
        assert compactor is not None
        run = self._run
        if run is not None and done is not None:  # held for the run's one hand-over (rule 7)
            if compactor.cut is not None and event.kind is not EventKind.INSERT:  # rule 4
                compactor.cut[table.name].note_write(event.id)
            apply()
            self.next_offset = offset + 1
            run[0].append(frame)
            run[1].append(event)
            run[2].append((table, max_id, offset))
            run[3].append(done)
            return None

        def applied() -> tuple[Table, int, int]:
            if compactor.cut is not None and event.kind is not EventKind.INSERT:  # rule 4
                compactor.cut[table.name].note_write(event.id)
            apply()  # an insert's or replace's stamps its record's version (versions.py)
            self.next_offset = offset + 1
            return table, max_id, offset

        future = commit.submit(frame, event, applied, done)
        if offset % recovery.CHECKPOINT_EVERY == 0 and self.next_offset > offset:
            self._epoch_of().checkpoints.append((offset, commit.writer.written - len(frame)))
        if commit.writer.written > compactor.compact_bytes and compactor.task is None:
            compactor.after_write(commit)
        # The commit queue never needs the future back, so a writer that stops waiting for
        # it (a cancelled await) leaves its write to be committed, or rolled back, like any other.
        return future

    def rollback(self, undo: tuple[Table, int, int]) -> None:
        """The commit queue's undo of a write that failed (rule 2)."""
        table, max_id, offset = undo
        table.undo_last(max_id)
        self.next_offset = offset
        checkpoints = self._epoch_of().checkpoints
        while checkpoints and checkpoints[-1][0] >= offset:
            checkpoints.pop()

    def insert_batch(self, rows: Sequence[tuple[str, dict]]) -> list[dict]:
        """Store.insert_batch: checked as a set, written with one fsync, then applied."""
        commit = self.writable()
        planned = batch.plan(self._tables, rows, self.max_payload, measure=False)
        if not planned:
            return []
        first = self.next_offset
        batch.write(commit, planned, first, recovery.CHECKPOINT_EVERY, self._epoch_of().checkpoints, self.max_payload)
        self.next_offset = first + len(planned)
        self._changes.publish_batch(planned, first)
        return [record for _t, record in planned]
