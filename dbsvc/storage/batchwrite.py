"""An atomic batch of writes (`POST /batch`): every op checked against the state the
earlier ops leave, then all of them committed as one group, or none.

    batch = store.begin_batch(size)          # size: how many ops will follow, when known
    stored            = batch.insert("Order", record)
    previous, stored  = batch.replace("Line", 3, record)
    previous          = batch.delete("Product", 9)
    durable           = batch.commit()       # or batch.abort(), after any refusal

Rules:

1. An op runs the checks of a single write (constraints.py, the size rules of events.py)
   and is applied to memory at once, so the next op is checked against it (a batch may
   create a parent and then its children, or update a record it created). A refused op
   raises its single write's refusal; the caller then calls `abort`, which undoes every
   applied op in reverse order (the commit queue's own undo: writes.py rule 2).
2. The caller never awaits between `begin_batch` and `commit` / `abort`, so no other
   write, read or event delivery sees the batch half applied (store.py rule 1, for N rows).
3. `commit` gives the rows consecutive offsets F..L (they took them as they applied), marks
   each payload of a batch of two or more with `"batch":{"first":F,"last":L}` (events.py
   "Batches"), and hands the frames to the commit queue together (`submit_group`): one
   write call, one fsync, one acknowledgement and the events published in one call, or
   all rolled back on an I/O error. A batch of one is a plain write, with no mark.
   A batch begun with its `size` (`POST /batch` knows its ops' count) knows L from the
   start: each op's event and payload carry the mark as they are built, and `commit`
   checks that exactly `size` ops came; without it `commit` adds the mark to each.
4. Sizes: an op's payload is measured with room for the widest mark (`BATCH_MARK_MAX`), so
   a frame the mark lengthens still fits the store's `max_payload`.
5. Crash atomicity is the log's: recovery cuts a batch whose last row is missing
   (recovery.py), so after a crash at any byte the log holds all of a batch or none.

Imports storage's own modules; never store.py or writes.py (`WriteHost` names what it needs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from dbsvc.storage import recovery
from dbsvc.storage.commit import CommitQueue
from dbsvc.storage.compactor import Compactor
from dbsvc.storage.constraints import Constraints
from dbsvc.storage.epoch import Epoch
from dbsvc.storage.events import BATCH_MARK_MAX, ChangeEvent, EventKind, batch_mark, write_event, write_payload
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.table import Table

__all__ = ["BatchWrite"]

Undo = tuple[Table, int, int]  # writes.py `rollback`: the table, its max id before, the offset


class WriteHost(Protocol):
    """What a batch needs of the store's write path (writes.py's `WritePath` is one)."""

    next_offset: int
    max_payload: int
    compactor: Compactor | None

    def writable(self) -> CommitQueue: ...

    def rollback(self, undo: Undo) -> None: ...

    def epoch_of(self) -> Epoch: ...


class BatchWrite:
    """One batch under way (module docstring). Not reusable: after `commit` or `abort`
    every method raises AssertionError."""

    def __init__(self, writes: WriteHost, tables: Mapping[str, Table], constraints: Constraints, size: int) -> None:
        self._writes = writes
        self._tables = tables
        self._constraints = constraints
        self._commit = writes.writable()
        self._first = writes.next_offset
        self._events: list[ChangeEvent] = []
        self._payloads: list[bytes] = []
        self._undos: list[Undo] = []
        self._open = True
        self._size = size
        # Rule 3: the mark every op's event carries from the start, when the size is known.
        self._mark = (self._first, self._first + size - 1) if size > 1 else None

    def __len__(self) -> int:
        return len(self._events)

    def table(self, model: str) -> Table:
        try:
            return self._tables[model]
        except KeyError:
            raise AssertionError(f"unknown model {model!r}") from None

    def insert(self, model: str, record: dict[str, Any]) -> dict[str, Any]:
        table = self.table(model)
        record, id_, apply = self._constraints.insert(table, record)
        self._apply(table, EventKind.INSERT, id_, record, None, apply)
        return record

    def replace(self, model: str, id_: Any, record: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        table = self.table(model)
        previous, record, apply = self._constraints.replace(table, id_, record)
        self._apply(table, EventKind.UPDATE, id_, record, previous, apply)
        return previous, record

    def delete(self, model: str, id_: Any) -> dict[str, Any]:
        table = self.table(model)
        previous, apply = self._constraints.delete(table, id_)
        self._apply(table, EventKind.DELETE, id_, None, previous, apply)
        return previous

    def _apply(
        self,
        table: Table,
        kind: EventKind,
        id_: Any,
        record: dict | None,
        previous: dict | None,
        apply: Callable[[], object],
    ) -> None:
        """Rules 1 and 4: the op's event and payload, its size checked, then applied."""
        assert self._open, "the batch was committed or aborted"
        writes = self._writes
        offset = writes.next_offset
        assert offset == self._first + len(self._events), "another write ran inside the batch"
        event = write_event(kind, table.name, offset, table.watermark + 1, id_, record, previous, self._mark)
        payload = write_payload(event, table.id_field, writes.max_payload - BATCH_MARK_MAX)
        max_id = table.max_id
        compactor = writes.compactor
        if compactor is not None and compactor.cut is not None and kind is not EventKind.INSERT:
            compactor.cut[table.name].note_write(id_)  # an insert notes nothing (writes.py rule 4)
        apply()
        table.stamp(offset)  # the record's version, its ETag (versions.py), as writes.py stamps one
        writes.next_offset = offset + 1
        self._undos.append((table, max_id, offset))
        self._events.append(event)
        self._payloads.append(payload)

    def abort(self) -> None:
        """Undo every applied op, last first (rule 1)."""
        assert self._open, "the batch was committed or aborted"
        self._open = False
        for undo in reversed(self._undos):
            self._writes.rollback(undo)
        self._events.clear()
        self._payloads.clear()
        self._undos.clear()

    def commit(self) -> asyncio.Future[None]:
        """Hand the batch to the commit queue as one group (rule 3); the future resolves when
        all of it is durable, or fails with `Unavailable` (all of it rolled back)."""
        assert self._open, "the batch was committed or aborted"
        self._open = False
        writes, commit = self._writes, self._commit
        events, payloads = self._events, self._payloads
        if not events:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        first, last = self._first, self._first + len(events) - 1
        assert writes.next_offset == last + 1, "another write ran inside the batch"
        if self._size:
            assert len(events) == self._size, f"a batch of {self._size} ops committed after {len(events)}"
        elif len(events) > 1:
            mark = batch_mark(first, last).encode("ascii")
            events = [event._replace(batch=(first, last)) for event in events]
            payloads = [payload[:-1] + mark + b"}" for payload in payloads]
        frames = [encode_frame(event.offset, payload) for event, payload in zip(events, payloads)]
        checkpoints = writes.epoch_of().checkpoints
        position = commit.writer.written
        for event, frame in zip(events, frames):
            if event.offset % recovery.CHECKPOINT_EVERY == 0:
                checkpoints.append((event.offset, position))
            position += len(frame)
        future = commit.submit_group(frames, events, self._undos)
        compactor = writes.compactor
        if compactor is not None and commit.writer.written > compactor.compact_bytes and compactor.task is None:
            compactor.after_write(commit)
        return future
