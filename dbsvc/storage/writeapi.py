"""The Store's write surface: its tables, and the writes it hands to the write path.

Job: `TableWrites` is the part of `Store` (store.py) that names a model's table and hands
each write to `WritePath` (writes.py): `insert`, `replace`, `delete` (coroutines), their
`apply_*` forms (applied now, durable later: a future) and `*_then` forms (applied now, a
completion callback told when durable), `POST /batch`'s `begin_batch`, the offline
`check_batch` / `insert_batch`, and the write health. store.py keeps the open, the reads,
the change stream, a follower's apply, the epochs and the close; this module holds no state
of its own (the `Store` sets `_tables`, `_writes` and `max_payload`).

Rules (store.py rules 1-2): a write's checks, its frame and its apply to memory happen in
the synchronous call, before its first `await`, so under asyncio a write is atomic and a
refused one changed nothing; it is acknowledged only once its frame is durable.

Imports storage's own modules only; never store.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from dbsvc.errors import NotFound
from dbsvc.storage import batch
from dbsvc.storage.batchwrite import BatchWrite
from dbsvc.storage.commit import Done
from dbsvc.storage.logwriter import WriteHealth
from dbsvc.storage.table import Table
from dbsvc.storage.writes import WritePath

__all__ = ["TableWrites"]


class TableWrites:
    """The tables and the writes of a `Store` (module docstring); a base of `Store` only."""

    _tables: dict[str, Table]
    _writes: WritePath
    max_payload: int

    def table(self, model: str) -> Table:
        """The `Table` of `model` (`NotFound` for an unknown one): read it, never write it."""
        try:
            return self._tables[model]
        except KeyError:
            raise NotFound(f"unknown model {model!r}") from None

    @property
    def tables(self) -> Mapping[str, Table]:
        """Every model's `Table`, by model name: read them, never write them."""
        return self._tables

    def health(self, retry: bool = False) -> WriteHealth:
        """Whether the store takes writes, and if not why and what to do (commit.py rule 4):
        OK; REFUSING after a write found no space (resumes by itself once there is room);
        FAILED, fail-stop, after an fsync or other I/O error (until a restart). `retry`:
        while REFUSING, probe for room now if a probe is due (the server's `/ready` does;
        `/health` does not touch the disk)."""
        return self._writes.health(retry)

    def check_writable(self) -> None:
        """`Unavailable` unless the store takes writes now (read-only, or commit.py rule 4)."""
        self._writes.writable()

    @property
    def writes(self) -> WritePath:
        """The write path (writes.py): a follower's group of frames (follow.py) is applied
        and committed through its fields, as a local batch's rows are."""
        return self._writes

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

    def apply_insert(self, model: str, record: dict[str, Any]) -> tuple[dict[str, Any], asyncio.Future[None]]:
        return self._writes.apply_insert(self.table(model), record)

    def apply_replace(
        self, model: str, id: Any, record: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], asyncio.Future[None]]:
        return self._writes.apply_replace(self.table(model), id, record)

    def apply_delete(self, model: str, id: Any) -> tuple[dict[str, Any], asyncio.Future[None]]:
        return self._writes.apply_delete(self.table(model), id)

    def insert_then(self, model: str, record: dict[str, Any], done: Done) -> dict[str, Any]:
        """`apply_insert` with a completion callback instead of a future: the record as
        stored now, and `done(None)` once it is durable, `done(Unavailable(...))` if its
        write fails; a committed group's callbacks are called together, in order, on the
        loop (writes.py rule 6). A refusal raises here and `done` is never called."""
        return self._writes.insert_then(self.table(model), record, done)[0]

    def insert_run_then(
        self, model: str, records: Sequence[dict[str, Any]], dones: Sequence[Done]
    ) -> list[tuple[dict[str, Any], int] | Exception]:
        """`insert_then` of each record in turn, `dones[i]` the i-th's callback, their frames
        held in the open run, or handed over together (writes.py rule 7): for each, (the record as
        stored, its offset: `applied_offset` right after it), or the refusal `insert_then`
        would have raised (nothing changed, its callback never called)."""
        table = self._tables.get(model)
        if table is None:
            table = self.table(model)
        return self._writes.insert_run_then(table, records, dones)

    def begin_run(self) -> None:
        """Hold every write told by a callback from now until `end_run` and hand them to
        the commit queue together (writes.py rule 7): a pass of the application's writes,
        each applied and checked as alone; no await may come in between."""
        self._writes.begin_run()

    def end_run(self) -> None:
        """The run's writes to the commit queue, in one hand-over (writes.py rule 7)."""
        self._writes.end_run()

    def replace_then(
        self, model: str, id: Any, record: dict[str, Any], done: Done
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """`apply_replace` with a completion callback (`insert_then`): (previous, record)."""
        table = self._tables.get(model)
        if table is None:  # `table`'s NotFound; no call for a model it has
            table = self.table(model)
        previous, stored, _none = self._writes.replace_then(table, id, record, done)
        return previous, stored

    def delete_then(self, model: str, id: Any, done: Done) -> dict[str, Any]:
        """`apply_delete` with a completion callback (`insert_then`): the record deleted."""
        return self._writes.delete_then(self.table(model), id, done)[0]

    def written_json(self, record: dict[str, Any]) -> bytes | None:
        """The JSON bytes of `record` if the last insert or replace stored it (writes.py rule 5)."""
        return self._writes.written_json(record)

    def begin_batch(self, size: int = 0) -> BatchWrite:
        """An atomic batch (`POST /batch`, batchwrite.py): ops applied one by one, each
        checked against the ones before; then `commit()` (one durable group) or `abort()`.
        No await may run between this and the commit or abort. `size`: how many ops follow."""
        return self._writes.begin_batch(size)

    def check_batch(self, rows: Sequence[tuple[str, dict]], measure: bool = True) -> None:
        """`BatchRejected` if `insert_batch(rows)` would refuse them; works on a read-only
        store too, so a tool can judge a batch before it opens the tenant for writing.
        `measure=False`: the caller knows no record is near the size limit (batch.py rule 5)."""
        batch.plan(self._tables, rows, self.max_payload, measure)

    def insert_batch(self, rows: Sequence[tuple[str, dict]]) -> list[dict]:
        """Insert (model name, record) rows as one durable batch (batch.py): checked as a
        set (`BatchRejected` lists every bad row, nothing written), written with one fsync,
        then applied; returns the stored records (automatic ids filled in). Synchronous,
        for offline tools (`dbsvc import`) with no write in flight; subscribers get the
        events as usual. The next open compacts if the log has grown past the rule."""
        return self._writes.insert_batch(rows)
