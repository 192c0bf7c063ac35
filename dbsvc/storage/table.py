"""One model's in-memory state: live records, their indexes, and the epoch's history.

Records are held in their stored form: the tuple of the record's values in declaration
order (`CompiledModel.row`, generated; `decode` turns one back into a dict). A 7-field
record's dict costs 272 bytes, its tuple 96: the field names are the model's, said once.
Stored records are immutable; a replace stores a new tuple.

State of a `Table`::

    live        id -> stored record (tuple)
    pk          SortedIndex of ids (primary-key order, the order of unsorted lists)
    unique      field -> {index key -> id}, for every @unique field (nulls not indexed)
    hashes      field -> HashIndex, for every @filter field (UniqueFilter over `unique` for
                a field that is @unique too: each of its keys holds one id)
    ordered     field -> OrderedIndex of (key, id) entries, nulls apart, for every @sort field
    refs        field -> {parent id -> number of children}, for every @ref field
    base_ids    ids of the snapshot's records, ascending: rows 1..len(base_ids) of the epoch
    rows        (id, stored | None, previous stored | None) per row after the snapshot
    max_id      largest int id ever used (survives deletes and compaction)
    _shown      id -> (stored, its dict): the dicts handed out lately (`shown`)

Watermark = len(base_ids) + len(rows): the number of the model's rows in this epoch.

Dicts handed out: the store's reads and writes speak dicts (`shown`, `prime`). Reading one
record version twice gives the same dict object for as long as it stays among the last
SHOWN handed out, so the application's encoded-JSON cache, which trusts a record by
identity (app.py `EncodedRecords`), keeps hitting: without it every page of 20 records
would be encoded again (~47 us instead of ~1.4 us). `records` is a read-only mapping of
fresh dicts for tests and tools.

History and `as_of` (docs/guide/queries.md#reading-the-past-watermarks-and-as_of). Rows after the snapshot are kept as 3-tuples that
share their stored records with the live state, so history costs about 80 bytes per row
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
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping
from itertools import chain
from operator import itemgetter
from typing import Any

from dbsvc.runtime import CompiledModel, identity
from dbsvc.storage.indexes import FilterIndex, HashIndex, OrderedIndex, SortedIndex, UniqueFilter

Stored = tuple            # a record's values in declaration order (CompiledModel.row)
Row = tuple[Any, "Stored | None", "Stored | None"]

SHOWN = 65536             # dicts a table remembers handing out (app.py caches as many encodings)


class Records(Mapping[Any, dict]):
    """The live records of a table as dicts, each made when it is read: what tests and
    tools compare against (storage itself reads `Table.live`)."""

    __slots__ = ("_table",)

    def __init__(self, table: Table) -> None:
        self._table = table

    def __getitem__(self, id_: Any) -> dict:
        return self._table.model.decode(self._table.live[id_])

    def __contains__(self, id_: object) -> bool:
        return id_ in self._table.live

    def __iter__(self) -> Iterator[Any]:
        return iter(self._table.live)

    def __len__(self) -> int:
        return len(self._table.live)


class Table:
    __slots__ = (
        "_plan_hash",
        "_plan_ordered",
        "_plan_refs",
        "_plan_unique",
        "_shown",
        "base_ids",
        "fixup",
        "hashes",
        "id_field",
        "id_position",
        "keys",
        "live",
        "max_id",
        "model",
        "name",
        "ordered",
        "pk",
        "positions",
        "refs",
        "rows",
        "unique",
    )

    def __init__(self, model: CompiledModel) -> None:
        self.model = model
        self.name = model.name
        self.id_field = model.id_field
        self.keys = model.keys
        self.positions = {f: i for i, f in enumerate(model.fields)}
        self.id_position = self.positions[model.id_field]
        self.live: dict[Any, Stored] = {}
        self.pk = SortedIndex()
        self.unique: dict[str, dict[Any, Any]] = {f: {} for f in model.unique_fields}
        span = HashIndex.span_of(model.id_type == "int", ())
        self.hashes: dict[str, FilterIndex] = {
            f: UniqueFilter(self.unique[f], span) if f in self.unique else HashIndex(span)
            for f in model.filter_fields}
        self.ordered: dict[str, OrderedIndex] = {f: OrderedIndex() for f in model.sort_fields}
        self.refs: dict[str, dict[Any, int]] = {f: {} for f, _parent in model.refs}
        self.base_ids: list[Any] = []
        self.rows: list[Row] = []
        self.max_id = 0
        self._shown: OrderedDict[Any, tuple[Stored, dict]] = OrderedDict()
        # Fills fields added by a migration into records read from disk (migrate.py).
        self.fixup: Callable[[dict], dict] | None = None
        self._plan()

    def _plan(self) -> None:
        """(field, position, key function, index) per index, built once (and again when
        `load_base` replaces index objects), so a write walks flat tuples instead of dicts
        of names."""
        keys, at = self.keys, self.positions
        self._plan_unique = tuple((f, at[f], keys[f], index) for f, index in self.unique.items())
        self._plan_hash = tuple((at[f], keys[f], index) for f, index in self.hashes.items())
        self._plan_ordered = tuple((at[f], keys[f], index) for f, index in self.ordered.items())
        self._plan_refs = tuple((at[f], counts) for f, counts in self.refs.items())

    # -- records as dicts ------------------------------------------------------------------

    @property
    def records(self) -> Records:
        return Records(self)

    def shown(self, stored: Stored) -> dict:
        """The dict of a live stored record: the one handed out before for this very
        tuple while it is among the last SHOWN, else a new one (module docstring)."""
        id_ = stored[self.id_position]
        entry = self._shown.get(id_)
        if entry is not None and entry[0] is stored:
            return entry[1]
        record = self.model.decode(stored)
        self._remember(id_, stored, record)
        return record

    def shown_all(self, page: list[Stored]) -> list[dict]:
        """`shown` of each stored record of a list page, the hits inline."""
        get, pos = self._shown.get, self.id_position
        out = []
        for stored in page:
            entry = get(stored[pos])
            out.append(entry[1] if entry is not None and entry[0] is stored else self.shown(stored))
        return out

    def prime(self, stored: Stored, record: dict) -> None:
        """`record` is the dict of `stored` (a write hands the record it was given back)."""
        self._remember(stored[self.id_position], stored, record)

    def _remember(self, id_: Any, stored: Stored, record: dict) -> None:
        shown = self._shown
        if id_ in shown:
            shown.move_to_end(id_)
        elif len(shown) >= SHOWN:
            shown.popitem(last=False)
        shown[id_] = (stored, record)

    # -- bulk load (snapshot) ------------------------------------------------------------

    def load_base(self, records: list[Stored], max_id: int) -> None:
        """Install the snapshot's records as rows 1..n of an empty table. Their ids must
        be strictly ascending (recovery.py checks the file's rows), so the primary key
        needs no sort and each ordered index one stable sort by key alone."""
        assert not self.live and not self.rows, "load_base fills an empty table"
        ids = list(map(itemgetter(self.id_position), records))
        self.live = dict(zip(ids, records))
        self.base_ids = ids
        self.pk = SortedIndex.from_sorted(ids)
        keys, at = self.keys, self.positions
        span = HashIndex.span_of(self.model.id_type == "int", ids)
        for f in dict.fromkeys(chain(self.unique, self.hashes, self.ordered)):
            # One key column per field, shared by its indexes and dropped before the
            # next one is made: 8 MB a column at 1M records, which the allocator keeps
            # once freed, so holding them all at once costs RSS for good.
            column = list(map(itemgetter(at[f]), records))
            if keys[f] is not identity:
                column = list(map(keys[f], column))
            if f in self.unique:
                index = self.unique[f]
                index.update(zip(column, ids))
                index.pop(None, None)                   # nulls are not indexed
            if f in self.ordered:
                self.ordered[f] = OrderedIndex.from_columns(column, ids)
            if f in self.hashes:
                if f in self.unique:                # the unique map holds its keys
                    self.hashes[f] = UniqueFilter.from_column(self.unique[f], column, ids, span)
                elif f in self.ordered:             # its buckets are the ordered index's runs
                    self.hashes[f] = HashIndex.from_runs(self.ordered[f].runs(), span)
                else:
                    self.hashes[f] = HashIndex.from_columns(column, ids, span)
            del column
        for f, counts in self.refs.items():
            counts.update(Counter(map(itemgetter(at[f]), records)))
            counts.pop(None, None)
        self.max_id = max(max_id, self.max_id)
        if self.model.id_type == "int" and ids:
            self.max_id = max(self.max_id, ids[-1])
        self._plan()

    # -- reads ---------------------------------------------------------------------------

    @property
    def watermark(self) -> int:
        return len(self.base_ids) + len(self.rows)

    def get_as_of(self, id_: Any, n: int) -> Stored | None:
        base = len(self.base_ids)
        for row_id, _record, previous in self.rows[max(n - base, 0):]:
            if row_id == id_:
                found = previous
                break
        else:
            found = self.live.get(id_)
        if n < base and found is not None:
            i = bisect_left(self.base_ids, id_)
            if i >= n or self.base_ids[i] != id_:
                return None
        return found

    def state_as_of(self, n: int) -> dict[Any, Stored]:
        base = len(self.base_ids)
        state = dict(self.live)
        for row_id, _record, previous in reversed(self.rows[max(n - base, 0):]):
            if previous is None:
                del state[row_id]
            else:
                state[row_id] = previous
        if n < base:
            state = {i: state[i] for i in self.base_ids[:n]}
        return state

    # -- constraint probes (the store raises the errors) --------------------------------

    def unique_clash(self, stored: Stored) -> tuple[str, Any] | None:
        """(field, other id) of the first @unique value another record holds."""
        own = stored[self.id_position]
        for f, pos, kf, index in self._plan_unique:
            v = stored[pos]
            if v is None:
                continue
            other = index.get(kf(v))
            if other is not None and other != own:
                return f, other
        return None

    # -- mutation ------------------------------------------------------------------------

    def _index(self, r: Stored) -> None:
        """Add a record that is not live to the live state and every index."""
        id_ = r[self.id_position]
        self.live[id_] = r
        self.pk.add(id_)
        for _f, pos, kf, index in self._plan_unique:
            v = r[pos]
            if v is not None:
                index[kf(v)] = id_
        for pos, kf, hindex in self._plan_hash:
            hindex.add(kf(r[pos]), id_)
        for pos, kf, sindex in self._plan_ordered:
            sindex.add(kf(r[pos]), id_)
        for pos, counts in self._plan_refs:
            v = r[pos]
            if v is not None:
                counts[v] = counts.get(v, 0) + 1

    def _unindex(self, r: Stored) -> None:
        """Take a live record out of the live state and every index."""
        id_ = r[self.id_position]
        del self.live[id_]
        self.pk.remove(id_)
        self._shown.pop(id_, None)
        for _f, pos, kf, index in self._plan_unique:
            v = r[pos]
            if v is not None:
                del index[kf(v)]
        for pos, kf, hindex in self._plan_hash:
            hindex.remove(kf(r[pos]), id_)
        for pos, kf, sindex in self._plan_ordered:
            sindex.remove(kf(r[pos]), id_)
        for pos, counts in self._plan_refs:
            v = r[pos]
            if v is not None:
                _uncount(counts, v)

    def insert(self, record: Stored) -> None:
        id_ = record[self.id_position]
        self._index(record)
        self.rows.append((id_, record, None))
        if type(id_) is int and id_ > self.max_id:
            self.max_id = id_

    def insert_many(self, records: list[Stored]) -> None:
        """`insert` of each record in turn (a batch, store.insert_batch), with the same
        result. When the batch is at least as large as the table, the sorted indexes are
        rebuilt with one sort each instead of taking that many sorted inserts."""
        if len(records) < len(self.live) or not records:
            for record in records:
                self.insert(record)
            return
        ids = list(map(itemgetter(self.id_position), records))
        self.live.update(zip(ids, records))
        self.rows.extend(zip(ids, records, [None] * len(records)))
        self.pk = SortedIndex(chain(self.pk, ids))
        for _f, pos, kf, index in self._plan_unique:
            for id_, r in zip(ids, records):
                v = r[pos]
                if v is not None:
                    index[kf(v)] = id_
        for pos, kf, hindex in self._plan_hash:
            add = hindex.add
            for id_, r in zip(ids, records):
                add(kf(r[pos]), id_)
        for f, sindex in self.ordered.items():
            kf, pos = self.keys[f], self.positions[f]
            self.ordered[f] = OrderedIndex(chain(sindex, zip([kf(r[pos]) for r in records], ids)))
        for pos, counts in self._plan_refs:
            for r in records:
                v = r[pos]
                if v is not None:
                    counts[v] = counts.get(v, 0) + 1
        top = max((i for i in ids if type(i) is int), default=None)
        if top is not None and top > self.max_id:
            self.max_id = top
        self._plan()

    def _swap(self, old: Stored, new: Stored) -> None:
        """Put `new` in place of `old`, another version of the same live record, moving only
        the index entries whose key changed: a PATCH of one field touches that field's
        indexes, not every index of the model (each sorted-index move is two bisects and
        two list shifts)."""
        id_ = new[self.id_position]
        self.live[id_] = new
        for _f, pos, kf, index in self._plan_unique:
            a, b = old[pos], new[pos]
            was = None if a is None else kf(a)
            now = None if b is None else kf(b)
            if was != now:
                if was is not None:
                    del index[was]
                if now is not None:
                    index[now] = id_
        for pos, kf, hindex in self._plan_hash:
            was, now = kf(old[pos]), kf(new[pos])
            if was != now:
                hindex.remove(was, id_)
                hindex.add(now, id_)
        for pos, kf, sindex in self._plan_ordered:
            was, now = kf(old[pos]), kf(new[pos])
            if was != now:
                sindex.remove(was, id_)
                sindex.add(now, id_)
        for pos, counts in self._plan_refs:
            a, b = old[pos], new[pos]
            if a != b:
                if a is not None:
                    _uncount(counts, a)
                if b is not None:
                    counts[b] = counts.get(b, 0) + 1

    def replace(self, previous: Stored, record: Stored) -> None:
        self._swap(previous, record)
        self.rows.append((record[self.id_position], record, previous))

    def delete(self, previous: Stored) -> None:
        self._unindex(previous)
        self.rows.append((previous[self.id_position], None, previous))

    def undo_last(self, max_id: int) -> None:
        """Remove the last row and restore exactly the state before it."""
        _id, record, previous = self.rows.pop()
        if previous is None:
            assert record is not None
            self._unindex(record)
        elif record is None:
            self._index(previous)
        else:
            self._swap(record, previous)
        self.max_id = max_id


def _uncount(counts: dict[Any, int], parent: Any) -> None:
    """One child fewer for `parent`; a parent with none left is dropped (refs count only
    parents that have children)."""
    left = counts[parent] - 1
    if left:
        counts[parent] = left
    else:
        del counts[parent]
