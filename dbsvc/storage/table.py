"""One model's in-memory state: live records, their indexes, and the epoch's history.

State of a `Table`::

    records     id -> record dict (immutable once stored; a replace stores a new dict)
    pk          SortedIndex of ids (primary-key order, the order of unsorted lists)
    unique      field -> {index key -> id}, for every @unique field (nulls not indexed)
    hashes      field -> HashIndex, for every @filter field
    ordered     field -> OrderedIndex of (key, id), nulls apart, for every @sort field
    refs        field -> {parent id -> number of children}, for every @ref field
    base_ids    ids of the snapshot's records, ascending: rows 1..len(base_ids) of the epoch
    rows        (id, record | None, previous | None) per row after the snapshot
    max_id      largest int id ever used (survives deletes and compaction)

Watermark = len(base_ids) + len(rows): the number of the model's rows in this epoch.

History and `as_of` (docs/guide/queries.md#reading-the-past-watermarks-and-as_of). Rows after the snapshot are kept as 3-tuples that
share their record dicts with the live state, so history costs about 80 bytes per row
(tuple + list slot) plus the superseded record versions themselves; snapshot rows cost one
list slot (8 bytes) each. History is bounded by compaction, which starts a new epoch whose
`rows` are only those written after its cut: at open, by `dbsvc compact`, and while serving
(online.py) as soon as the log is over `compact_bytes` (64 MiB) and holds more than twice
as many rows as there are live records, or more than twice the snapshot's bytes
(recovery.py `needs_compaction`). So `rows` never holds much more than
max(2 x live records, the rows of a `compact_bytes` log) plus the rows written during one
compaction. Costs:

- `get_as_of(id, n)`: O(rows after n), a scan for the first later row touching `id`
  (its `previous` is the answer; none means the live record is).
- `state_as_of(n)`: O(live records + rows after n): copy the live map, undo later rows.
  A list at a past watermark then filters, sorts and pages that map (see query.py).

Snapshot rows: a snapshot record counts as one row, in id order, so `as_of=n` below the
snapshot's count sees the first n records by id, each as it was when the snapshot was taken.

All mutation goes through `insert` / `replace` / `delete` (which append a row) and
`undo_last` (which removes the last row and restores the previous state exactly); the store
checks constraints before calling them, so they never fail half way.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from itertools import chain
from typing import Any

from dbsvc.runtime import CompiledModel
from dbsvc.storage.indexes import HashIndex, OrderedIndex, SortedIndex

Row = tuple[Any, "dict | None", "dict | None"]


class Table:
    __slots__ = (
        "_plan_hash",
        "_plan_ordered",
        "_plan_refs",
        "_plan_unique",
        "base_ids",
        "fixup",
        "hashes",
        "id_field",
        "keys",
        "max_id",
        "model",
        "name",
        "ordered",
        "pk",
        "records",
        "refs",
        "rows",
        "unique",
    )

    def __init__(self, model: CompiledModel) -> None:
        self.model = model
        self.name = model.name
        self.id_field = model.id_field
        self.keys = model.keys
        self.records: dict[Any, dict] = {}
        self.pk = SortedIndex()
        self.unique: dict[str, dict[Any, Any]] = {f: {} for f in model.unique_fields}
        self.hashes: dict[str, HashIndex] = {f: HashIndex() for f in model.filter_fields}
        self.ordered: dict[str, OrderedIndex] = {f: OrderedIndex() for f in model.sort_fields}
        self.refs: dict[str, dict[Any, int]] = {f: {} for f, _parent in model.refs}
        self.base_ids: list[Any] = []
        self.rows: list[Row] = []
        self.max_id = 0
        # Fills fields added by a migration into records read from disk (migrate.py).
        self.fixup: Callable[[dict], dict] | None = None
        self._plan()

    def _plan(self) -> None:
        """(field, key function, index) per index, built once (and again when `load_base`
        replaces index objects), so a write walks flat tuples instead of dicts of names."""
        keys = self.keys
        self._plan_unique = tuple((f, keys[f], index) for f, index in self.unique.items())
        self._plan_hash = tuple((f, keys[f], index) for f, index in self.hashes.items())
        self._plan_ordered = tuple((f, keys[f], index) for f, index in self.ordered.items())
        self._plan_refs = tuple(self.refs.items())

    # -- bulk load (snapshot) ------------------------------------------------------------

    def load_base(self, records: list[dict], max_id: int) -> None:
        """Install the snapshot's records (ascending id) as rows 1..n, building indexes
        with one sort each instead of n inserts."""
        idf = self.id_field
        ids = [r[idf] for r in records]
        self.records = dict(zip(ids, records))
        self.base_ids = ids
        self.pk = SortedIndex(ids)
        keys = self.keys
        for f, index in self.unique.items():
            kf = keys[f]
            for r in records:
                v = r[f]
                if v is not None:
                    index[kf(v)] = r[idf]
        for f, hindex in self.hashes.items():
            kf = keys[f]
            buckets = hindex.buckets
            for id_, key in zip(ids, [kf(r[f]) for r in records]):
                bucket = buckets.get(key)
                if bucket is None:
                    buckets[key] = {id_}
                else:
                    bucket.add(id_)
        for f in self.ordered:
            kf = keys[f]
            self.ordered[f] = OrderedIndex(zip([kf(r[f]) for r in records], ids))
        for f, counts in self.refs.items():
            for r in records:
                v = r[f]
                if v is not None:
                    counts[v] = counts.get(v, 0) + 1
        self.max_id = max(max_id, self.max_id)
        if self.model.id_type == "int" and ids:
            self.max_id = max(self.max_id, ids[-1])
        self._plan()

    # -- reads ---------------------------------------------------------------------------

    @property
    def watermark(self) -> int:
        return len(self.base_ids) + len(self.rows)

    def get_as_of(self, id_: Any, n: int) -> dict | None:
        base = len(self.base_ids)
        for row_id, _record, previous in self.rows[max(n - base, 0):]:
            if row_id == id_:
                found = previous
                break
        else:
            found = self.records.get(id_)
        if n < base and found is not None:
            i = bisect_left(self.base_ids, id_)
            if i >= n or self.base_ids[i] != id_:
                return None
        return found

    def state_as_of(self, n: int) -> dict[Any, dict]:
        base = len(self.base_ids)
        state = dict(self.records)
        for row_id, _record, previous in reversed(self.rows[max(n - base, 0):]):
            if previous is None:
                del state[row_id]
            else:
                state[row_id] = previous
        if n < base:
            state = {i: state[i] for i in self.base_ids[:n]}
        return state

    # -- constraint probes (the store raises the errors) --------------------------------

    def unique_clash(self, record: dict) -> tuple[str, Any] | None:
        """(field, other id) of the first @unique value another record holds."""
        own = record[self.id_field]
        for f, kf, index in self._plan_unique:
            v = record[f]
            if v is None:
                continue
            other = index.get(kf(v))
            if other is not None and other != own:
                return f, other
        return None

    # -- mutation ------------------------------------------------------------------------

    def _index(self, r: dict, with_pk: bool) -> None:
        id_ = r[self.id_field]
        self.records[id_] = r
        if with_pk:
            self.pk.add(id_)
        for f, kf, index in self._plan_unique:
            v = r[f]
            if v is not None:
                index[kf(v)] = id_
        for f, kf, hindex in self._plan_hash:
            hindex.add(kf(r[f]), id_)
        for f, kf, sindex in self._plan_ordered:
            sindex.add(kf(r[f]), id_)
        for f, counts in self._plan_refs:
            v = r[f]
            if v is not None:
                counts[v] = counts.get(v, 0) + 1

    def _unindex(self, r: dict, with_pk: bool) -> None:
        id_ = r[self.id_field]
        del self.records[id_]
        if with_pk:
            self.pk.remove(id_)
        for f, kf, index in self._plan_unique:
            v = r[f]
            if v is not None:
                del index[kf(v)]
        for f, kf, hindex in self._plan_hash:
            hindex.remove(kf(r[f]), id_)
        for f, kf, sindex in self._plan_ordered:
            sindex.remove(kf(r[f]), id_)
        for f, counts in self._plan_refs:
            v = r[f]
            if v is not None:
                left = counts[v] - 1
                if left:
                    counts[v] = left
                else:
                    del counts[v]

    def insert(self, record: dict) -> None:
        id_ = record[self.id_field]
        self._index(record, True)
        self.rows.append((id_, record, None))
        if type(id_) is int and id_ > self.max_id:
            self.max_id = id_

    def insert_many(self, records: list[dict]) -> None:
        """`insert` of each record in turn (a batch, store.insert_batch), with the same
        result. When the batch is at least as large as the table, the sorted indexes are
        rebuilt with one sort each instead of taking that many sorted inserts."""
        if len(records) < len(self.records) or not records:
            for record in records:
                self.insert(record)
            return
        idf = self.id_field
        ids = [r[idf] for r in records]
        self.records.update(zip(ids, records))
        self.rows.extend(zip(ids, records, [None] * len(records)))
        self.pk = SortedIndex(chain(self.pk, ids))
        keys = self.keys
        for f, kf, index in self._plan_unique:
            for id_, r in zip(ids, records):
                v = r[f]
                if v is not None:
                    index[kf(v)] = id_
        for f, kf, hindex in self._plan_hash:
            add = hindex.add
            for id_, r in zip(ids, records):
                add(kf(r[f]), id_)
        for f, sindex in self.ordered.items():
            kf = keys[f]
            self.ordered[f] = OrderedIndex(chain(sindex, zip([kf(r[f]) for r in records], ids)))
        for f, counts in self._plan_refs:
            for r in records:
                v = r[f]
                if v is not None:
                    counts[v] = counts.get(v, 0) + 1
        top = max((i for i in ids if type(i) is int), default=None)
        if top is not None and top > self.max_id:
            self.max_id = top
        self._plan()

    def replace(self, previous: dict, record: dict) -> None:
        self._unindex(previous, False)
        self._index(record, False)
        self.rows.append((record[self.id_field], record, previous))

    def delete(self, previous: dict) -> None:
        self._unindex(previous, True)
        self.rows.append((previous[self.id_field], None, previous))

    def undo_last(self, max_id: int) -> None:
        """Remove the last row and restore exactly the state before it."""
        _id, record, previous = self.rows.pop()
        if previous is None:
            assert record is not None
            self._unindex(record, True)
        elif record is None:
            self._index(previous, True)
        else:
            self._unindex(record, False)
            self._index(previous, False)
        self.max_id = max_id
