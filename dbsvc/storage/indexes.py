"""A sort field's ordered index: its (key, id) entries in order, nulls apart.

The primary key's order (`SortedIndex`, a sorted list of sublists) is in sortedlist.py;
this module keeps the same layout for (key, id) entries. A sort field's `OrderedIndex` keeps its (key, id) entries in that order, keys and ids in
parallel sublists of the same layout (no tuple per entry), and apart, the ids whose value
is null: nulls order after every value (PostgreSQL's ASC NULLS LAST) and ties break on the
primary key. Keeping nulls out of the keys (rather than a `(0, key, id)` / `(1, 0, id)`
marker) lets CPython's sort compare the typed key first, which builds the index over many
random floats far faster (bench/README.md).

Bulk builds (`SortedIndex.from_sorted`, `OrderedIndex.from_columns`) are much of what
opening a large snapshot costs: they take columns in id order and never compare ids
(bench/README.md, "Storage").

Iteration is built from itertools over the sublists (`chain`, `compress`, `filter`), never a
Python generator: a list page walks its index at C speed rather than through generator
frames.

The reads in other orders than the index's own (ids by id: `sorted_ids`, `span_by_id`;
descending: `ids_descending`, `batches_descending`) are the base class keptparts.py
`KeptOrders`, beside the parts they make on demand and keep until a sublist changes
(`KeptParts`, whose rules each write here keeps: `changed` for an entry in a sublist,
`clear` when the sublists themselves change).

Each `OrderedIndex` keeps its ids' keys by id too (`column`, keycolumns.py), updated by its
own `add`, `remove` and `move`, so every path that keeps the index (writes, undo, bulk builds,
snapshot loads) keeps the column: a list orders a bucket of ids by key without reading a
record.

Equality indexes (`HashIndex` and the filters) are in hashes.py, which imports this
module; this one imports only sortedlist.py (the sublists' slices by position), keptparts.py,
keycolumns.py and fenwick.py. Everything here is plain data: no I/O, no model
knowledge.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, compress, islice, repeat
from operator import is_, is_not, itemgetter
from typing import Any

from dbsvc.storage.fenwick import Fenwick
from dbsvc.storage.keptparts import KeptOrders, KeptParts
from dbsvc.storage.keycolumns import KeyColumn
from dbsvc.storage.sortedlist import (
    FOUND_FROM,
    LOAD,
    SortedIndex,
    backwards,
    counted_slice,
    own_ints,
    span_backwards,
    sublist_slice,
)

SEEN_KEPT = 256  # positions and counts an index keeps found (`_seen`) until its next write
SHIFT_MAX = 1 << 16  # OrderedIndex.from_columns sorts ids starting at most this (so many placeholders)
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)
_NOTHING = object()
Keep = Callable[[Any], Any]  # id -> truthy if the id is kept (a walk's membership test)


class OrderedIndex(KeptOrders):
    """A sort field's (key, id) entries in order, nulls apart; iteration yields (key, id),
    nulls last as (None, id).

    The non-null entries are parallel sublists, `_keys[i]` and `_ids[i]` (the layout of
    `SortedIndex`, at most 2 * LOAD entries each), with `_lastkeys[i]` and `_lastids[i]` the
    key and id of sublist i's last entry. Keys and ids are the records' own objects (a key
    function returns its value when the value already orders), so an entry costs two list
    slots, 16 bytes, where a (key, id) tuple per entry cost 64. Inside a sublist the
    entries of one key form a run whose ids ascend: an update bisects the last keys for the
    sublist (and the last ids among sublists that end on its key), the keys for the run,
    then, only when the key is held by other entries too, the run's ids (`bisect` with
    lo/hi).

    `typecode` ("d" for float keys, "q" for int ones: a float field's, an int's, a
    datetime's microseconds) keeps each sublist's keys in an `array` of that type, 8 bytes
    a key, where a list holds a pointer to a float or int object of its own (8 + 24 or 32
    bytes): tens of bytes a record less for a float sort field (bench/README.md). Bisect
    and iteration read it as they read a list (each key read makes its object then).
    """

    __slots__ = (
        "_counts",
        "_ids",
        "_keys",
        "_lastids",
        "_lastkeys",
        "_len",
        "_parts",
        "_seen",
        "column",
        "nulls",
        "typecode",
    )

    def __init__(self, pairs: Iterable[tuple[Any, Any]] = (), typecode: str = "") -> None:
        self.typecode = typecode
        pairs = list(pairs)
        values = sorted(p for p in pairs if p[0] is not None)
        self._fill(list(map(_FIRST, values)), list(map(_SECOND, values)))
        self.nulls = SortedIndex(p[1] for p in pairs if p[0] is None)
        self.column = KeyColumn.from_pairs(pairs, typecode)  # id -> key (keycolumns.py)

    @classmethod
    def from_columns(cls, keys: Sequence[Any], ids: Sequence[Any], typecode: str = "") -> OrderedIndex:
        """The index of the records whose ids are `ids`, strictly ascending (a snapshot's),
        and whose keys are `keys`, in the same order. One stable sort of the entries by key
        alone gives the index order: equal keys keep their ids' ascending order, which is
        the tie order, so no id is ever compared (sorting (key, id) tuples compares both on
        every tie, several times slower: bench/README.md).

        The entries sorted are the ids themselves when they are a run of ints starting at
        most SHIFT_MAX (a snapshot's without deletions, mostly): the key of id i is then
        `by_id[i]`, keys behind `ids[0]` placeholders, and the sorted entries are the index's
        ids. Otherwise they are positions, and the ids are gathered after the sort: one
        more pass in random order over every object, a visible share of an open."""
        index = cls.__new__(cls)
        index.typecode = typecode
        index.column = KeyColumn.from_columns(keys, ids, typecode)
        nulls = type(keys) is not array and None in keys  # an array holds no None
        if type(keys) is array:  # key objects made once, for the sort and the fill
            keys = keys.tolist()
        first = ids[0] if len(ids) else None
        if type(first) is int and 0 <= first <= SHIFT_MAX and ids[-1] - first == len(ids) - 1:
            shifted: list[Any] = [None] * first
            shifted.extend(keys)
            by_id: Sequence[Any] = shifted
            entries = list(ids)
        else:
            by_id, entries = keys, list(range(len(keys)))
        if nulls:
            entries = list(compress(entries, map(is_not, keys, repeat(None))))
            index.nulls = SortedIndex.from_sorted(list(compress(ids, map(is_, keys, repeat(None)))))
        else:
            index.nulls = SortedIndex()
        entries.sort(key=by_id.__getitem__)
        # Keys as a list, even for array keys: `_fill` makes each sublist's array from a
        # slice of it. An array built from the map itself grows one item at a time, several
        # times slower than the list and the slices' arrays together (bench/README.md).
        ordered_ids = entries if by_id is not keys else list(map(ids.__getitem__, entries))
        if typecode:  # a number-keyed sort field's ids made afresh in its order (sortedlist.py)
            ordered_ids = own_ints(ordered_ids)
        index._fill(list(map(by_id.__getitem__, entries)), ordered_ids)
        return index

    def _column(self, keys: Any) -> Any:
        """A sublist of keys: an array of `typecode`, or the list itself (a slice of an
        array is an array already)."""
        return array(self.typecode, keys) if self.typecode and type(keys) is not array else keys

    def _fill(self, keys: Any, ids: list[Any]) -> None:
        self._keys: list[Any] = [self._column(keys[i : i + LOAD]) for i in range(0, len(keys), LOAD)]
        self._ids: list[list[Any]] = [ids[i : i + LOAD] for i in range(0, len(ids), LOAD)]
        self._lastkeys: list[Any] = [k[-1] for k in self._keys]
        self._lastids: list[Any] = [i[-1] for i in self._ids]
        self._len = len(keys)
        self._counts: Fenwick | None = None  # the sublists' lengths, built by `count_span`
        self._parts = KeptParts()  # parts of sublists in other orders (`_kept`)
        # found since the last write: (key, inclusive) -> `lower`'s position, and
        # (start, stop) -> `count_span`'s count (a bool is never a position: no clash)
        self._seen: dict[tuple[Any, Any], Any] = {}

    @property
    def key_sublists(self) -> list[Any]:
        """The keys' sublists (arrays when `typecode` is set), in index order: read them (runs.py
        adds to them; tests find where a run of one key crosses a sublist's end)."""
        return self._keys

    @property
    def id_sublists(self) -> list[list[Any]]:
        return self._ids

    @property
    def last_keys(self) -> list[Any]:
        """Each key sublist's last key (what `add` and `remove` bisect)."""
        return self._lastkeys

    @property
    def last_ids(self) -> list[Any]:
        return self._lastids

    def __len__(self) -> int:
        return self._len + len(self.nulls)

    def grown(self, count: int) -> None:
        """`count` entries were put into the sublists in place (storage/runs.py alone does)."""
        self._len += count
        self._counts = None  # rebuilt by the next `count_span`
        self._seen.clear()
        self._parts.clear()

    def _sublist(self, key: Any, id_: Any) -> int:
        """The sublist where (key, id_) belongs: the first whose last entry is not before
        it, by a bisect over the last keys, and over the last ids only among sublists that
        end on `key` itself (an id is in an index once, so an entry being added never equals
        a last entry). Two lists of plain keys and ids instead of one of (key, id) tuples:
        no tuple made per update, and one key comparison per step instead of an equality
        and an order."""
        lasts = self._lastkeys
        i = bisect_left(lasts, key)
        if i == len(lasts) or lasts[i] != key:
            return i
        return bisect_left(self._lastids, id_, i, bisect_right(lasts, key, i))

    def add(self, key: Any, id_: Any) -> None:
        self.column.set(id_, key)
        if key is None:
            self.nulls.add(id_)
        else:
            self._put(key, id_)

    def remove(self, key: Any, id_: Any) -> None:
        """Remove the entry; KeyError if it is absent."""
        if key is None:
            self.nulls.remove(id_)
        else:
            self._take(key, id_)
        self.column.discard(id_)

    def move(self, was: Any, now: Any, id_: Any) -> None:
        """`remove(was, id_)` then `add(now, id_)`, `was != now` (a replace that changed
        the key), with the id's key column slot rewritten once (`KeyColumn.change`)
        instead of discarded and set again; KeyError if (was, id_) is absent."""
        if was is None:
            self.nulls.remove(id_)
        else:
            self._take(was, id_)
        if now is None:
            self.nulls.add(id_)
        else:
            self._put(now, id_)
        self.column.change(id_, now)

    def _put(self, key: Any, id_: Any) -> None:
        """Insert the entry (key, id_), key not None, into the sublists (not the column)."""
        if self._seen:  # every position after the new entry moves
            self._seen.clear()
        lastkeys = self._lastkeys
        if not lastkeys:
            self._keys.append(self._column([key]))
            self._ids.append([id_])
            lastkeys.append(key)
            self._lastids.append(id_)
            self._len += 1
            self._counts = None
            self._parts.clear()
            return
        i = self._sublist(key, id_)
        if i == len(lastkeys):
            i -= 1
            keys, ids = self._keys[i], self._ids[i]
            keys.append(key)
            ids.append(id_)
            lastkeys[i] = key
            self._lastids[i] = id_
        else:
            keys, ids = self._keys[i], self._ids[i]
            # One bisect to the end of the key's run: the place unless the run holds a larger
            # id (its ids ascend), which an insert's new largest id never meets there.
            j = bisect_right(keys, key)
            if j and keys[j - 1] == key and ids[j - 1] > id_:
                j = bisect_left(ids, id_, bisect_left(keys, key, 0, j), j)
            keys.insert(j, key)
            ids.insert(j, id_)
        if len(keys) > 2 * LOAD:
            self._keys[i : i + 1] = [keys[:LOAD], keys[LOAD:]]
            self._ids[i : i + 1] = [ids[:LOAD], ids[LOAD:]]
            lastkeys[i : i + 1] = [keys[LOAD - 1], keys[-1]]
            self._lastids[i : i + 1] = [ids[LOAD - 1], ids[-1]]
            self._counts = None
            self._parts.clear()
        else:
            if self._parts.held:
                self._parts.changed(i)
            if self._counts is not None:
                self._counts.add(i, 1)
        self._len += 1

    def _take(self, key: Any, id_: Any) -> None:
        """Delete the entry (key, id_), key not None, from the sublists (not the column);
        KeyError if it is absent."""
        i = self._sublist(key, id_)
        if i == len(self._lastkeys):
            raise KeyError((key, id_))
        if self._seen:  # every position after the entry moves
            self._seen.clear()
        keys, ids = self._keys[i], self._ids[i]
        j = bisect_left(keys, key)
        if j == len(keys) or keys[j] != key:
            raise KeyError((key, id_))
        if ids[j] != id_:  # not the first of its key's run
            hi = bisect_right(keys, key, j)
            j = bisect_left(ids, id_, j, hi)
            if j == hi or ids[j] != id_:
                raise KeyError((key, id_))
        del keys[j]
        del ids[j]
        self._len -= 1
        if not keys:
            del self._keys[i]
            del self._ids[i]
            del self._lastkeys[i]
            del self._lastids[i]
            self._counts = None
            self._parts.clear()
        else:
            self._lastkeys[i] = keys[-1]
            self._lastids[i] = ids[-1]
            if self._parts.held:
                self._parts.changed(i)
            if self._counts is not None:
                self._counts.add(i, -1)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return chain(
            zip(chain.from_iterable(self._keys), chain.from_iterable(self._ids)), zip(repeat(None), self.nulls)
        )

    def runs(self) -> Iterator[tuple[Any, list[Any]]]:
        """(key, the ids holding it) per distinct key, nulls last as (None, ids): what a
        `HashIndex` of the same field holds (`HashIndex.from_runs`). One bisect per run
        and sublist, the ids taken as slices."""
        key: Any = _NOTHING
        run: list[Any] = []
        for keys, ids in zip(self._keys, self._ids):
            lo, n = 0, len(keys)
            while lo < n:
                k = keys[lo]
                hi = bisect_right(keys, k, lo)
                if k == key:  # a run continued from the sublist before
                    run.extend(ids[lo:hi])
                else:
                    if run:
                        yield key, run
                    key, run = k, ids[lo:hi]
                lo = hi
        if run:
            yield key, run
        if self.nulls:
            yield None, list(self.nulls)

    def ids_ascending(self, keep: Keep | None = None) -> Iterator[Any]:
        """Ids in ascending order (ties on id ascending, nulls last), only those `keep`
        says yes to when given."""
        ids = chain(chain.from_iterable(self._ids), self.nulls)
        return ids if keep is None else filter(keep, ids)

    def nulls_ascending(self, keep: Keep | None = None) -> Iterator[Any]:
        """Ids whose value is null, ascending, only those `keep` says yes to when given."""
        return iter(self.nulls) if keep is None else filter(keep, self.nulls)

    def pairs_descending(self, keep: Keep | None = None) -> Iterator[tuple[Any, Any]]:
        """(key, id) pairs of non-null values, keys descending and, inside a run of equal
        keys, ids descending too; only ids `keep` says yes to when given."""
        pairs = zip(backwards(self._keys), backwards(self._ids))
        if keep is None:
            return pairs
        return compress(pairs, map(keep, backwards(self._ids)))

    def _run_bounds(self, key: Any) -> Iterator[tuple[int, int, int]]:
        """(sublist, lo, hi) of each piece of the run of `key` (not None), in order: the
        first sublist whose last key is not below it, and the next ones while the run
        goes on past a sublist's end."""
        lastkeys, allkeys = self._lastkeys, self._keys
        i = bisect_left(lastkeys, key)
        while i < len(allkeys):
            keys = allkeys[i]
            lo = bisect_left(keys, key)
            hi = bisect_right(keys, key, lo)
            if lo < hi:
                yield i, lo, hi
            if hi < len(keys):
                return
            i += 1

    def run_ids(self, key: Any) -> list[Any]:
        """The ids holding `key` (None: the nulls), ascending."""
        if key is None:
            return list(self.nulls)
        out: list[Any] = []
        for i, lo, hi in self._run_bounds(key):
            out.extend(self._ids[i][lo:hi])
        return out

    def run_count(self, key: Any) -> int:
        if key is None:
            return len(self.nulls)
        return sum(hi - lo for _i, lo, hi in self._run_bounds(key))

    def holds(self, key: Any, id_: Any) -> bool:
        """Whether the entry (key, id_) is in the index."""
        if key is None:
            return id_ in self.nulls
        i = self._sublist(key, id_)
        if i == len(self._lastkeys):
            return False
        keys, ids = self._keys[i], self._ids[i]
        lo = bisect_left(keys, key)
        hi = bisect_right(keys, key, lo)
        j = bisect_left(ids, id_, lo, hi)
        return j < hi and ids[j] == id_

    def ids_slice(self, start: int, stop: int) -> list[Any]:
        """Ids at positions [start, stop) of the ascending order (nulls last): walked to from
        the first sublist within the first FOUND_FROM entries (a first page touches one),
        found past them by a descent of the sublists' lengths (`_counted`, O(log n), where
        the walk was O(n / LOAD): `?sort=score&offset=900000`, bench/README.md, wt-ids)."""
        n = self._len
        top = min(stop, n)
        if start < FOUND_FROM or top <= start:
            out = sublist_slice(self._ids, start, top)
        else:
            out = counted_slice(self._ids, self._counted(), start, top)
        if stop > n:
            out.extend(self.nulls.slice(max(start - n, 0), stop - n))
        return out

    # -- ranges and seeks: positions (i, j) are sublist i, entry j of the non-null entries,
    # normalized so that j < len(sublist i) unless i is the number of sublists (the end).

    def _norm(self, i: int, j: int) -> tuple[int, int]:
        if i < len(self._keys) and j >= len(self._keys[i]):
            return i + 1, 0
        return i, j

    def lower(self, key: Any, inclusive: bool) -> tuple[int, int]:
        """The position of the first entry whose key is >= `key` (inclusive) or > `key`:
        one bisect over the last keys, one in a sublist; found once until the next write
        (`_seen`: the same list asked again, a range's or prefix's two bounds compared no
        key, where at 1,000,000 records each bisect step over string keys reads an object
        scattered in memory)."""
        seen = self._seen
        at = seen.get((key, inclusive))
        if at is None:
            if len(seen) >= SEEN_KEPT:
                seen.clear()
            at = seen[key, inclusive] = self._lower(key, inclusive)
        return at

    def _lower(self, key: Any, inclusive: bool) -> tuple[int, int]:
        if inclusive:
            i = bisect_left(self._lastkeys, key)
            if i == len(self._keys):
                return i, 0
            return self._norm(i, bisect_left(self._keys[i], key))
        i = bisect_right(self._lastkeys, key)
        if i == len(self._keys):
            return i, 0
        return self._norm(i, bisect_right(self._keys[i], key))

    def upper(self, key: Any, inclusive: bool) -> tuple[int, int]:
        """The position just past the last entry whose key is <= `key` (inclusive) or < `key`."""
        return self.lower(key, not inclusive)

    def after(self, key: Any, id_: Any) -> tuple[int, int]:
        """The position of the first entry after (key, id_), which need not be in the index:
        a cursor's seek, O(log n)."""
        i = self._sublist(key, id_)
        if i == len(self._keys):
            return i, 0
        keys = self._keys[i]
        lo = bisect_left(keys, key)
        hi = bisect_right(keys, key, lo)
        return self._norm(i, bisect_right(self._ids[i], id_, lo, hi))

    def cursor_run(self, key: Any, id_: Any) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """(`lower(key, True)`, `after(key, id_)`, `upper(key, True)`): where a cursor's run
        of `key` (not None) starts, where the entries after the cursor start, and where the
        run ends. Four bisects when the run ends inside the sublist it starts in (mostly)."""
        i = bisect_left(self._lastkeys, key)
        keys = self._keys[i] if i < len(self._keys) else ()
        lo = bisect_left(keys, key)
        hi = bisect_right(keys, key, lo)
        if hi < len(keys):  # `lower` found sublist i; the run ends inside it
            return (i, lo), (i, bisect_right(self._ids[i], id_, lo, hi)), (i, hi)
        return self.lower(key, True), self.after(key, id_), self.upper(key, True)

    @property
    def end(self) -> tuple[int, int]:
        return len(self._keys), 0

    def count_span(self, start: tuple[int, int], stop: tuple[int, int]) -> int:
        """Entries in [start, stop): the sublists' lengths between the two ends from a Fenwick
        tree (fenwick.py `between`, O(log n), none walked when `stop` is the end: its count
        is the index's length); built here, in O(n / LOAD), when the sublists changed. Found
        once until the next write (`_seen`, as `lower`)."""
        if stop <= start:
            return 0
        seen = self._seen
        count = seen.get((start, stop))
        if count is None:
            if len(seen) >= SEEN_KEPT:
                seen.clear()
            i = stop[0]
            if i == len(self._keys):  # to the end: every entry from sublist start[0] on
                count = self._len - start[1] - (self._counted().prefix(start[0]) if start[0] else 0)
            else:
                count = self._counted().between(start[0], i) - start[1] + stop[1]
            seen[start, stop] = count
        return count

    def _counted(self) -> Fenwick:
        counts = self._counts
        if counts is None:
            counts = self._counts = Fenwick(map(len, self._ids))
        return counts

    def ids_span(self, start: tuple[int, int], stop: tuple[int, int]) -> Iterator[Any]:
        """The ids in [start, stop), in index order (keys ascending, ids ascending in a run),
        lazily: nothing copied, so a walk that stops after a page costs O(page), not O(n /
        LOAD) for the list of the sublists it spans (a walk of a whole index testing each id,
        walks.py). The caller reads it within its synchronous call, while no write runs."""
        (i1, j1), (i2, j2) = start, stop
        if (i2, j2) <= (i1, j1):
            return iter(())
        ids = self._ids
        if i1 == i2:
            return islice(ids[i1], j1, j2)
        pieces = [islice(ids[i1], j1, None), chain.from_iterable(islice(ids, i1 + 1, i2))]
        if i2 < len(ids) and j2:
            pieces.append(islice(ids[i2], j2))
        return chain.from_iterable(pieces)

    def ids_head(self, start: tuple[int, int], stop: tuple[int, int], count: int, skip: int = 0) -> list[Any]:
        """The ids at [start, stop) in index order after the first `skip` of them, at most
        `count`: the sublists passed by their lengths, the page copied by a slice or two.
        Where `ids_span` walks to the page (an islice steps over the entries before it in
        the first sublist, up to 2 * LOAD, each id an object read at 1,000,000 records),
        nothing before the page is read: a prefix's first page sorted by its field, or a
        cursor's page in one key's order (walks.py `ascending_page`)."""
        (i, j), (last, hi) = start, stop
        ids = self._ids
        out: list[Any] = []
        while count > 0 and (i < last or (i == last and j < hi)):
            sub = ids[i]
            top = hi if i == last else len(sub)
            if skip >= top - j:  # the whole rest of this sublist is skipped
                skip -= top - j
            else:
                piece = sub[j + skip : min(top, j + skip + count)]
                out += piece
                count -= len(piece)
                skip = 0
            i, j = i + 1, 0
        return out

    def pairs_span_descending(self, start: tuple[int, int], stop: tuple[int, int]) -> Iterator[tuple[Any, Any]]:
        """(key, id) of [start, stop) from the last: keys descending, ids descending in a run;
        lazily, as `ids_span`."""
        return zip(span_backwards(self._keys, start, stop), span_backwards(self._ids, start, stop))
