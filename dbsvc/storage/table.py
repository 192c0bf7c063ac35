"""One model's in-memory state: live records, their indexes, and the epoch's history.

Records are held in their stored form (rows.py): each one bytes object, the compact JSON
array of its values in declaration order, 211 bytes for the bench's 7-field post where the
tuple of its values costs 457, the values included. Values are read back out
(`rows.unpack`) only where they are needed; the writes take the values they store
(`CompiledModel.row`) and pack them here. Stored records are immutable; a replace stores
a new one.

State of a `Table`::

    live        id -> stored record (bytes): an IdMap (a list indexed by id) for int ids
    pk          SortedIndex of ids (primary-key order, the order of unsorted lists)
    unique      field -> {index key -> id}, for every @unique field (nulls not indexed)
    hashes      field -> HashIndex, for every @filter field (UniqueFilter over `unique` for
                a field that is @unique too: each of its keys holds one id; OrderedFilter
                over `ordered` for one that is @sort too: its runs are the buckets)
    ordered     field -> OrderedIndex of (key, id) entries, nulls apart, for every @sort field,
                with its id -> key column (`.column`, keycolumns.py) for sorting ids
    refs        field -> {parent id -> number of children}, for every @ref field
    words       WordIndex (words.py): word -> ids of the @search fields, or None without any
    buckets     BucketOrders (buckets.py): what lists asked for, kept by `_index`, `_unindex`,
                `_swap`: a filter value's bucket in a sort field's order, a count per pair of
                filter values, a prefix's ids in another sort field's order
    base_ids    ids of the snapshot's records, ascending: rows 1..len(base_ids) of the epoch
    rows        (id, stored | None, previous stored | None) per row after the snapshot
    prior       array('q') beside `rows`: the version of each row's previous record (0: none)
    versions    id -> offset of the live record's last write (versions.py): its ETag
    max_id      largest int id ever used (survives deletes and compaction)
    dicts       ShownDicts (shown.py): the dicts handed out lately
    fit         RecordFit (fits.py): what a replica checks a record for, and has learned
    tick        this state's change tick: the next of the process-wide `TICKS` at creation
                and at every change of the live state (insert, replace, delete, undo,
                a run, a batch, a load), so no two states of any table share one; an
                answer kept with a tick is fresh while the table's tick is that one
                (dbsvc/readcache.py `PresentPages`)

Index keys are the only values held apart from the stored records (an ordered index needs
its keys to compare): a str sort field's key is a str object per record; a number sort
field's keys sit in arrays, 8 bytes each (indexes.py `OrderedIndex.typecode`). Each sort
field's key column holds the same keys by id (8 bytes a record more: an array slot, or a
list slot pointing at the index's own key object).

Watermark = len(base_ids) + len(rows): the number of the model's rows in this epoch.

Dicts handed out: the store's reads and writes speak dicts (`shown`, `shown_all`, `prime`),
which shown.py remembers so that a record read twice gives the same dict. `records` is a
read-only mapping of fresh dicts for tests and tools.

History and `as_of`: rows after the snapshot are kept as 3-tuples sharing their stored
records with the live state; asof.py reads the past from them (its docstring has the costs
and how compaction bounds them).

All mutation goes through `insert` / `replace` / `delete` (which append a row and its
`prior`), `stamp(offset)` (the offset of the row just appended becomes its record's
version: every writer calls it right after the mutation, versions.py) and
`undo_last` (which removes the last row and restores the previous state exactly, versions
included); the store checks constraints before calling them, so they never fail half way.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterator, KeysView, Mapping, Sequence
from itertools import chain, count
from operator import itemgetter
from typing import Any

from dbsvc.runtime import CompiledModel, identity
from dbsvc.storage.asof import Row, record_as_of, records_as_of
from dbsvc.storage.buckets import BucketOrders
from dbsvc.storage.fits import RecordFit
from dbsvc.storage.hashes import FilterIndex, HashIndex, OrderedFilter, UniqueFilter
from dbsvc.storage.idmap import LiveMap, pick, records_of
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.rows import Stored, Values, pack, pack_many, unpack
from dbsvc.storage.shown import ShownDicts
from dbsvc.storage.sortedlist import SortedIndex
from dbsvc.storage.versions import Versions
from dbsvc.storage.words import WordIndex

TICKS = count(1)  # `Table.tick`'s source: never the same number twice in a process


class Records(Mapping[Any, dict]):
    """The live records of a table as dicts, each made when it is read: what tests and
    tools compare against (storage itself reads `Table.live`)."""

    __slots__ = ("_table",)

    def __init__(self, table: Table) -> None:
        self._table = table

    def __getitem__(self, id_: Any) -> dict:
        return self._table.model.decode(unpack(self._table.live[id_]))

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
        "_hash_steps",
        "_ordered_steps",
        "base_ids",
        "buckets",
        "columns",
        "dicts",
        "fit",
        "fixup",
        "hashes",
        "id_field",
        "id_position",
        "keys",
        "kept_texts",
        "live",
        "max_id",
        "model",
        "name",
        "ordered",
        "pk",
        "positions",
        "prior",
        "refs",
        "rows",
        "tick",
        "unique",
        "versions",
        "words",
    )

    def __init__(self, model: CompiledModel) -> None:
        self.model = model
        self.name = model.name
        self.id_field = model.id_field
        self.keys = model.keys
        self.positions = {f: i for i, f in enumerate(model.fields)}
        self.id_position = self.positions[model.id_field]
        # The positions whose values `load_base` takes as columns: the id's and every
        # indexed or counted field's.
        self.columns = sorted(
            {
                self.id_position,
                *(
                    self.positions[f]
                    for f in (
                        *model.unique_fields,
                        *model.filter_fields,
                        *model.sort_fields,
                        *(f for f, _p in model.refs),
                    )
                ),
            }
        )
        self.live: LiveMap = records_of(model.id_type == "int")
        self.pk = SortedIndex()
        self.unique: dict[str, dict[Any, Any]] = {f: {} for f in model.unique_fields}
        span = HashIndex.span_of(model.id_type == "int", ())
        self.ordered: dict[str, OrderedIndex] = {
            f: OrderedIndex(typecode=model.key_arrays.get(f, "")) for f in model.sort_fields
        }
        self.hashes: dict[str, FilterIndex] = {}
        for f in model.filter_fields:
            if f in self.unique:
                self.hashes[f] = UniqueFilter(self.unique[f], span)
            elif f in self.ordered:
                self.hashes[f] = OrderedFilter(self.ordered[f])
            else:
                self.hashes[f] = HashIndex(span)
        self.refs: dict[str, dict[Any, int]] = {f: {} for f, _parent in model.refs}
        self.buckets = BucketOrders(self.keys, self.positions)  # filter buckets in sort order, built by lists
        search = [self.positions[f] for f in model.search_fields]
        self.words: WordIndex | None = WordIndex(search) if search else None
        self.base_ids: list[Any] = []
        self.rows: list[Row] = []
        self.prior = array("q")  # beside `rows`: the version of each row's previous record
        self.versions = Versions()
        self.max_id = 0
        # Records a replica's run stored as their frames carried them (tableruns.py `insert_run`):
        # a count for `Store.stats`, which says whether a primary's spelling lets the run skip its encode.
        self.kept_texts = 0
        # What this table's replicated records are checked for, and the value types learned
        # good (followrun.py rule 4): the table's own, so each store learns alone (fits.py).
        self.fit = RecordFit(model)
        # kept past SHOWN while within a share of the table's records (shown.py `_within`)
        self.dicts = ShownDicts(model.decode, fields=model.fields, id_field=model.id_field, sized=self.live.__len__)
        self.tick = next(TICKS)
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
        # A write's steps, bound once so that no attribute is looked up and no identity
        # function called per write (key None where the key is the value itself):
        # (position, key, add, remove) per hash index, and per ordered index (position,
        # key, add, remove, move, kept) where `kept` is the kept sets of the field's
        # `OrderedFilter` (None without one). That filter's only write is to drop the sets
        # kept for the keys an id leaves and joins (hashes.py), so a field both @filter and
        # @sort is one step: its keys computed once a value, not once an index.
        kept = {f: index.kept_sets for f, index in self.hashes.items() if type(index) is OrderedFilter}
        self._hash_steps = tuple(
            (pos, None if kf is identity else kf, index.add, index.remove)
            for pos, kf, index in self._plan_hash
            if type(index) is not OrderedFilter
        )
        self._ordered_steps = tuple(
            (at[f], None if keys[f] is identity else keys[f], index.add, index.remove, index.move, kept.get(f))
            for f, index in self.ordered.items()
        )

    @property
    def index_plan(self) -> tuple[tuple[Any, ...], ...]:
        """`_plan`'s tuples (unique, hash, ordered, refs), for tableruns.py's run of inserts."""
        return self._plan_unique, self._plan_hash, self._plan_ordered, self._plan_refs

    # -- records as dicts ------------------------------------------------------------------

    @property
    def records(self) -> Records:
        return Records(self)

    @property
    def shown_ids(self) -> KeysView[Any]:
        """The ids whose handed-out dicts are kept for reuse (shown.py; a view, never written)."""
        return self.dicts.ids

    def shown(self, id_: Any, stored: Stored) -> dict:
        """The dict of `id_`'s live stored record, the one handed out before if kept (shown.py)."""
        return self.dicts.one(id_, stored)

    def shown_all(self, ids: list[Any], texts: bool = False, keyed: bool = True, columns: tuple = ()) -> list[Any]:
        """`shown` of the live record of each id of a list page (shown.py `ShownDicts.page`);
        `texts`: every record but the last as its JSON (bytes), the last a `SentRecord`,
        holding its id alone when not `keyed` (a list in id order: its `Link` reads no key),
        or its id and its `sort_keys` read from `columns` (`sort_columns`)."""
        return self.dicts.page(ids, pick(self.live, ids), texts, keyed, columns)

    def sort_columns(self, sort: tuple[tuple[str, bool], ...]) -> tuple[Any, ...]:
        """The key column (keycolumns.py) of each field of `sort`, in its order: where a
        page's `Link` reads its last record's sort keys without the record. Every field a
        query sorts by is @sort, so it has an ordered index and its column."""
        ordered = self.ordered
        return tuple([ordered[field].column for field, _desc in sort])

    def prime(self, id_: Any, stored: Stored, record: dict) -> None:
        """`record` is the dict of `stored` (a write hands the record it was given back)."""
        self.dicts.remember(id_, stored, record)

    # -- bulk load (snapshot) ------------------------------------------------------------

    @property
    def key_fields(self) -> list[str]:
        """The fields at `columns`, by name: the keys a snapshot carries for this table
        (snapshot.py), so that `load_base` gets its columns without a row parsed."""
        fields = self.model.fields
        return [fields[p] for p in self.columns]

    def load_base(
        self, stored: list[Stored], columns: Mapping[int, Any], max_id: int, versions: Sequence[int] = ()
    ) -> None:
        """Install the snapshot's records as rows 1..n of an empty table: `stored` in
        their stored form, `columns` the index keys (`self.keys`) of each field at
        `self.columns`, a list, or an array of a sort field's number keys (snapshotload.py
        `_KeyColumns`; the id's and references' keys are their values, their key
        function being the identity). The records' other values are never made objects.
        Their ids must be strictly ascending (snapshotload.py checks the file's rows), so the
        primary key needs no sort and each ordered index one stable sort by key alone.
        `versions`: each record's version (versions.py), in the same order."""
        assert not self.live and not self.rows, "load_base fills an empty table"
        ids = columns[self.id_position]
        self.tick = next(TICKS)
        if versions:
            assert len(versions) == len(ids), f"{self.name}: {len(versions)} versions for {len(ids)} records"
            self.versions = Versions.from_ascending(ids, versions)
        self.live = records_of(self.model.id_type == "int", ids, stored)
        self.dicts.sized = self.live.__len__  # the record cache's share counts this map
        self.base_ids = ids
        self.pk = SortedIndex.from_sorted(ids)
        at = self.positions
        span = HashIndex.span_of(self.model.id_type == "int", ids)
        for f in dict.fromkeys(chain(self.unique, self.hashes, self.ordered)):
            column = columns[at[f]]  # one key column, shared by its indexes
            if f in self.unique:
                index = self.unique[f]
                index.update(zip(column, ids))
                index.pop(None, None)  # nulls are not indexed
            if f in self.ordered:
                self.ordered[f] = OrderedIndex.from_columns(column, ids, self.model.key_arrays.get(f, ""))
            if f in self.hashes:
                if f in self.unique:  # the unique map holds its keys
                    self.hashes[f] = UniqueFilter.from_column(self.unique[f], column, ids, span)
                elif f in self.ordered:  # the ordered index's runs answer it
                    self.hashes[f] = OrderedFilter(self.ordered[f])
                else:
                    self.hashes[f] = HashIndex.from_columns(column, ids, span)
        for f, counts in self.refs.items():
            counts.update(Counter(columns[at[f]]))
            counts.pop(None, None)
        if self.words is not None:  # text is no index key: its words are read from the records
            self.words.build_stored(ids, stored, self.model.fields)
        self.max_id = max(max_id, self.max_id)
        if self.model.id_type == "int" and ids:
            self.max_id = max(self.max_id, ids[-1])
        self.buckets.clear()
        self._plan()

    # -- reads ---------------------------------------------------------------------------

    @property
    def watermark(self) -> int:
        return len(self.base_ids) + len(self.rows)

    def get_as_of(self, id_: Any, n: int) -> tuple[Stored | None, int]:
        """The record `id_` as it was after the table's first `n` rows, and its version
        then (0 with no record): asof.py."""
        return record_as_of(self.base_ids, self.rows, self.prior, self.live, self.versions, id_, n)

    def state_as_of(self, n: int) -> dict[Any, Stored]:
        """id -> stored record of every record live after the table's first `n` rows: asof.py."""
        return records_as_of(self.base_ids, self.rows, self.live, n)

    # -- constraint probes (the store raises the errors) --------------------------------

    def unique_clash(self, values: Values) -> tuple[str, Any] | None:
        """(field, other id) of the first @unique value another record holds."""
        own = values[self.id_position]
        for f, pos, kf, index in self._plan_unique:
            v = values[pos]
            if v is None:
                continue
            other = index.get(kf(v))
            if other is not None and other != own:
                return f, other
        return None

    # -- mutation ------------------------------------------------------------------------

    def _index(self, id_: Any, r: Values) -> None:
        """Add the index entries of a record that is not live (its values `r`)."""
        self.pk.add(id_)
        for _f, pos, kf, index in self._plan_unique:
            v = r[pos]
            if v is not None:
                index[kf(v)] = id_
        for pos, key, add, _remove in self._hash_steps:
            add(r[pos] if key is None else key(r[pos]), id_)
        for pos, key, add, _remove, _move, kept in self._ordered_steps:
            k = r[pos] if key is None else key(r[pos])
            add(k, id_)
            if kept:
                kept.pop(k, None)
        for pos, counts in self._plan_refs:
            v = r[pos]
            if v is not None:
                counts[v] = counts.get(v, 0) + 1
        if self.words is not None:
            self.words.add(id_, r)
        if self.buckets.plan:
            self.buckets.add(id_, r)

    def _unindex(self, id_: Any, stored: Stored) -> None:
        """Take a live record out of the live state and every index."""
        r = unpack(stored)
        del self.live[id_]
        self.pk.remove(id_)
        self.dicts.forget(id_)
        for _f, pos, kf, index in self._plan_unique:
            v = r[pos]
            if v is not None:
                del index[kf(v)]
        for pos, key, _add, remove in self._hash_steps:
            remove(r[pos] if key is None else key(r[pos]), id_)
        for pos, key, _add, remove, _move, kept in self._ordered_steps:
            k = r[pos] if key is None else key(r[pos])
            remove(k, id_)
            if kept:
                kept.pop(k, None)
        for pos, counts in self._plan_refs:
            v = r[pos]
            if v is not None:
                _uncount(counts, v)
        if self.words is not None:
            self.words.remove(id_, r)
        if self.buckets.plan:
            self.buckets.remove(id_, r)

    def stamp(self, offset: int) -> None:
        """The row just appended was written at log offset `offset`: its record's version
        (a delete's record has none left)."""
        id_, record, _previous = self.rows[-1]
        if record is not None:
            self.versions.set(id_, offset)

    def stamp_inserts(self, offsets: Sequence[int]) -> None:
        """`stamp` of each of the last `len(offsets)` rows (an `insert_many`'s), in order."""
        rows, versions = self.rows, self.versions
        for (id_, _record, _previous), offset in zip(rows[len(rows) - len(offsets) :], offsets):
            versions.set(id_, offset)

    def insert(
        self, values: Values, stored: Stored | None = None, record: dict | None = None, offset: int = 0
    ) -> Stored:
        """Store a new record from its values (`stored`: their packed form, when the caller
        made it, rows.py `pack_parts`); returns its stored form. A write's apply gives its
        `record` (`prime`d) and its `offset` (`stamp`ed) in the same call."""
        id_ = values[self.id_position]
        if stored is None:
            stored = pack(self.model.fields, values)
        self.tick = next(TICKS)
        self._index(id_, values)
        self.live[id_] = stored
        self.rows.append((id_, stored, None))
        self.prior.append(0)
        if type(id_) is int and id_ > self.max_id:
            self.max_id = id_
        if offset:
            self.versions.set(id_, offset)
        if record is not None:
            self.dicts.remember(id_, stored, record)
        return stored

    def insert_many(self, batch: list[Values]) -> None:
        """`insert` of each record in turn (a batch, store.insert_batch), with the same
        result. When the batch is at least as large as the table, the sorted indexes are
        rebuilt with one sort each instead of taking that many sorted inserts."""
        if len(batch) < len(self.live) or not batch:
            for values in batch:
                self.insert(values)
            return
        ids = list(map(itemgetter(self.id_position), batch))
        records = pack_many(self.model.fields, batch)
        self.tick = next(TICKS)
        self.live.update(zip(ids, records))
        self.rows.extend(zip(ids, records, [None] * len(records)))
        self.prior.frombytes(bytes(8 * len(records)))
        self.pk = SortedIndex(chain(self.pk, ids))
        for _f, pos, kf, index in self._plan_unique:
            for id_, r in zip(ids, batch):
                v = r[pos]
                if v is not None:
                    index[kf(v)] = id_
        for pos, kf, hindex in self._plan_hash:
            add = hindex.add
            for id_, r in zip(ids, batch):
                add(kf(r[pos]), id_)
        for f, sindex in self.ordered.items():
            kf, pos = self.keys[f], self.positions[f]
            pairs = chain(sindex, zip([kf(r[pos]) for r in batch], ids))
            self.ordered[f] = OrderedIndex(pairs, sindex.typecode)
            if type(self.hashes.get(f)) is OrderedFilter:
                self.hashes[f] = OrderedFilter(self.ordered[f])
        for pos, counts in self._plan_refs:
            for r in batch:
                v = r[pos]
                if v is not None:
                    counts[v] = counts.get(v, 0) + 1
        if self.words is not None:
            for id_, r in zip(ids, batch):
                self.words.add(id_, r)
        top = max((i for i in ids if type(i) is int), default=None)
        if top is not None and top > self.max_id:
            self.max_id = top
        self.buckets.clear()
        self._plan()

    def _swap(self, id_: Any, old: Values, new: Values) -> None:
        """Move the index entries of record `id_` from its values `old` to `new`, only
        those whose key changed: a PATCH of one field touches that field's indexes, not
        every index of the model (each sorted-index move is two bisects and two list
        shifts)."""
        for _f, pos, kf, index in self._plan_unique:
            a, b = old[pos], new[pos]
            was = None if a is None else kf(a)
            now = None if b is None else kf(b)
            if was != now:
                if was is not None:
                    del index[was]
                if now is not None:
                    index[now] = id_
        for pos, key, add, remove in self._hash_steps:
            was, now = old[pos], new[pos]
            if key is not None:
                was, now = key(was), key(now)
            if was != now:
                remove(was, id_)
                add(now, id_)
        for pos, key, _add, _remove, move, kept in self._ordered_steps:
            was, now = old[pos], new[pos]
            if key is not None:
                was, now = key(was), key(now)
            if was != now:
                move(was, now, id_)  # the id's key column slot rewritten once
                if kept:
                    kept.pop(was, None)
                    kept.pop(now, None)
        for pos, counts in self._plan_refs:
            a, b = old[pos], new[pos]
            if a != b:
                if a is not None:
                    _uncount(counts, a)
                if b is not None:
                    counts[b] = counts.get(b, 0) + 1
        if self.words is not None:
            self.words.swap(id_, old, new)
        if self.buckets.plan:
            self.buckets.swap(id_, old, new)

    def replace(
        self,
        previous: Stored,
        values: Values,
        was: Values | None = None,
        stored: Stored | None = None,
        record: dict | None = None,
        offset: int = 0,
    ) -> Stored:
        """Store a new version of a live record (`previous` its stored form now, `was` its
        values when the caller has them) from its values (`stored`, `record`, `offset`: as
        `insert` takes them); returns the new stored form."""
        id_ = values[self.id_position]
        if stored is None:
            stored = pack(self.model.fields, values)
        self.tick = next(TICKS)
        self._swap(id_, unpack(previous) if was is None else was, values)
        self.live[id_] = stored
        self.rows.append((id_, stored, previous))
        self.prior.append(self.versions.get(id_))
        if offset:
            self.versions.set(id_, offset)
        if record is not None:
            self.dicts.remember(id_, stored, record)
        return stored

    def delete(self, id_: Any, previous: Stored) -> None:
        self.tick = next(TICKS)
        self._unindex(id_, previous)
        self.rows.append((id_, None, previous))
        self.prior.append(self.versions.pop(id_))

    def undo_last(self, max_id: int) -> None:
        """Remove the last row and restore exactly the state before it, its record's
        version included."""
        id_, record, previous = self.rows.pop()
        version = self.prior.pop()
        self.tick = next(TICKS)
        if previous is None:
            assert record is not None
            self._unindex(id_, record)
            self.versions.pop(id_)
        elif record is None:
            self._index(id_, unpack(previous))
            self.live[id_] = previous
        else:
            self._swap(id_, unpack(record), unpack(previous))
            self.live[id_] = previous
        if previous is not None:
            if version:
                self.versions.set(id_, version)
            else:
                self.versions.pop(id_)
        self.max_id = max_id


def _uncount(counts: dict[Any, int], parent: Any) -> None:
    """One child fewer for `parent`; a parent with none left is dropped (refs count only
    parents that have children)."""
    left = counts[parent] - 1
    if left:
        counts[parent] = left
    else:
        del counts[parent]
