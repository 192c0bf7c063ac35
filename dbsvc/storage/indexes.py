"""In-memory indexes: a sorted list of sublists for order, key -> ids buckets for equality.

`SortedIndex` keeps its entries in ascending order as a list of sorted sublists (the
layout of the `sortedcontainers` package): `_lists[i]` holds at most 2 * LOAD entries and
`_maxes[i]` is its last entry. Finding a sublist is a bisect over `_maxes` (O(log n)),
inserting or removing inside it a list shift of at most 2 * LOAD pointers, so an update
costs O(log n + LOAD) instead of the O(n) shift of one flat list; iterating from either end
costs O(1) to start and O(1) per entry.

A sort field's `OrderedIndex` keeps its (key, id) entries in that order, keys and ids in
parallel sublists of the same layout (16 bytes an entry, no tuple per entry), and apart, the
ids whose value is null: nulls order after every value (PostgreSQL's ASC NULLS LAST) and ties
break on the primary key. Keeping nulls out of the keys (rather than a `(0, key, id)` /
`(1, 0, id)` marker) lets CPython's sort compare the typed key first, which made building the
index over 1,000,000 random floats 20 times faster. `HashIndex` maps an index key
(`CompiledModel.keys[field](value)`: typed, so 3 and 3.0 are one key) to the ids holding
it (a sorted list; once large, one byte per id of the id space or a set); null is the key
None.

Bulk builds (`SortedIndex.from_sorted`, `OrderedIndex.from_columns`, `HashIndex.from_columns`
and `from_runs`) are what opening a snapshot of 1,000,000 records costs most of: they take
columns in id order and never compare ids (bench/README.md, "Storage").

Iteration is built from itertools over the sublists (`chain`, `compress`, `filter`), never a
Python generator: a list page walks its index at C speed, about 40 ns an entry instead of
about 1 us through generator frames.

Everything here is plain data: no I/O, no model knowledge.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from itertools import chain, compress, repeat
from operator import eq, is_, is_not, itemgetter
from typing import Any, Union

LOAD = 512
FEW_KEYS = 4           # at most this many distinct keys: HashIndex.from_columns scans once per key
SHIFT_MAX = 1 << 16    # OrderedIndex.from_columns sorts ids starting at most this (so many placeholders)
SET_AT = 16384         # a HashIndex bucket is a sorted list up to this many ids, then flags or a set
KEPT_SETS = 8          # sets of list buckets a HashIndex keeps for walks (`keeper`)
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)
_NOTHING = object()
_NONE: frozenset = frozenset()
Keep = Callable[[Any], Any]     # id -> truthy if the id is kept (a walk's membership test)


class SortedIndex:
    """A sorted multiset of comparable entries (tuples or bare ids).

    `share()` hands out the sublists as they are, in O(number of sublists), for a reader
    that walks them later (online compaction's cut, which used to copy 1,000,000 ids on the
    loop): until `unshare()`, a sublist is copied before its first change, so what was handed
    out never changes.
    """

    __slots__ = ("_len", "_lists", "_maxes", "_shared")

    def __init__(self, entries: Iterable[Any] = ()) -> None:
        self._fill(sorted(entries))

    @classmethod
    def from_sorted(cls, items: list[Any]) -> SortedIndex:
        """The index of `items`, which the caller knows to be in ascending order already
        (not checked): a snapshot's ids, or pairs a stable sort by key just ordered."""
        index = cls.__new__(cls)
        index._fill(items)
        return index

    def _fill(self, items: list[Any]) -> None:
        self._lists: list[list[Any]] = [items[i : i + LOAD] for i in range(0, len(items), LOAD)]
        self._maxes: list[Any] = [sub[-1] for sub in self._lists]
        self._len = len(items)
        self._shared: set[int] | None = None     # id() of the sublists handed out by `share`

    def share(self) -> list[list[Any]]:
        """The sublists as they stand; they stay as they are until `unshare` (class doc)."""
        self._shared = set(map(id, self._lists))
        return list(self._lists)

    def unshare(self) -> None:
        """The reader of `share` is done: sublists change in place again."""
        self._shared = None

    def _own(self, i: int) -> list[Any]:
        """Sublist `i`, ready to change: a copy of it if it was handed out by `share`. (A
        handed-out sublist is alive, held by its reader, so no new list can have its id.)"""
        sub = self._lists[i]
        if self._shared and id(sub) in self._shared:
            sub = self._lists[i] = list(sub)
        return sub

    def __len__(self) -> int:
        return self._len

    def add(self, entry: Any) -> None:
        maxes = self._maxes
        if not maxes:
            self._lists.append([entry])
            maxes.append(entry)
        else:
            i = bisect_right(maxes, entry)
            if i == len(maxes):
                i -= 1
                sub = self._own(i)
                sub.append(entry)
                maxes[i] = entry
            else:
                sub = self._own(i)
                insort(sub, entry)
            if len(sub) > 2 * LOAD:
                self._lists[i : i + 1] = [sub[:LOAD], sub[LOAD:]]
                maxes[i : i + 1] = [sub[LOAD - 1], sub[-1]]
        self._len += 1

    def remove(self, entry: Any) -> None:
        """Remove one occurrence of `entry`; KeyError if it is absent."""
        maxes = self._maxes
        i = bisect_left(maxes, entry)
        if i == len(maxes):
            raise KeyError(entry)
        sub = self._lists[i]
        j = _position(sub, entry)
        if j < 0:
            raise KeyError(entry)
        sub = self._own(i)
        del sub[j]
        self._len -= 1
        if not sub:
            del self._lists[i]
            del maxes[i]
        else:
            maxes[i] = sub[-1]

    def __contains__(self, entry: Any) -> bool:
        i = bisect_left(self._maxes, entry)
        if i == len(self._maxes):
            return False
        sub = self._lists[i]
        return _position(sub, entry) >= 0

    def __iter__(self) -> Iterator[Any]:
        return chain.from_iterable(self._lists)

    def __reversed__(self) -> Iterator[Any]:
        return _backwards(self._lists)

    def slice(self, start: int, stop: int) -> list[Any]:
        """Entries [start, stop) by position, O(len(_lists) + stop - start)."""
        return _slice(self._lists, start, stop)


def _position(items: list[Any], entry: Any) -> int:
    """Where `entry` is in the ascending list `items`, or -1."""
    i = bisect_left(items, entry)
    return i if i < len(items) and items[i] == entry else -1


def _slice(lists: list[list[Any]], start: int, stop: int) -> list[Any]:
    """Entries [start, stop) by position of the concatenation of `lists`."""
    out: list[Any] = []
    pos = 0
    for sub in lists:
        n = len(sub)
        if pos + n > start and pos < stop:
            out.extend(sub[max(0, start - pos) : stop - pos])
        pos += n
        if pos >= stop:
            break
    return out


def _backwards(lists: list[list[Any]]) -> Iterator[Any]:
    """The entries of the concatenation of `lists`, last first."""
    return chain.from_iterable(map(reversed, reversed(lists)))


class OrderedIndex:
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
    bytes): 32 bytes a record less for a float sort field at 1,000,000 records. Bisect
    and iteration read it as they read a list (each key read makes its object then).
    """

    __slots__ = ("_ids", "_keys", "_lastids", "_lastkeys", "_len", "nulls", "typecode")

    def __init__(self, pairs: Iterable[tuple[Any, Any]] = (), typecode: str = "") -> None:
        self.typecode = typecode
        pairs = list(pairs)
        values = sorted(p for p in pairs if p[0] is not None)
        self._fill(list(map(_FIRST, values)), list(map(_SECOND, values)))
        self.nulls = SortedIndex(p[1] for p in pairs if p[0] is None)

    @classmethod
    def from_columns(cls, keys: Sequence[Any], ids: Sequence[Any], typecode: str = "") -> OrderedIndex:
        """The index of the records whose ids are `ids`, strictly ascending (a snapshot's),
        and whose keys are `keys`, in the same order. One stable sort of the entries by key
        alone gives the index order: equal keys keep their ids' ascending order, which is
        the tie order, so no id is ever compared (sorting (key, id) tuples compares both on
        every tie: 2.5 times slower on 1,000,000 float keys).

        The entries sorted are the ids themselves when they are a run of ints starting at
        most SHIFT_MAX (a snapshot's without deletions, mostly): the key of id i is then
        `by_id[i]`, keys behind `ids[0]` placeholders, and the sorted entries are the index's
        ids. Otherwise they are positions, and the ids are gathered after the sort: one
        more pass in random order over 1,000,000 objects, 0.25 s of an open."""
        index = cls.__new__(cls)
        index.typecode = typecode
        nulls = type(keys) is not array and None in keys      # an array holds no None
        if type(keys) is array:             # key objects made once, for the sort and the fill
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
        # slice of it. An array built from the map itself grows one item at a time (0.5 s
        # at 1,000,000 float keys, against 0.2 for the list and 0.06 for the slices' arrays).
        ordered_ids = entries if by_id is not keys else list(map(ids.__getitem__, entries))
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

    def __len__(self) -> int:
        return self._len + len(self.nulls)

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
        if key is None:
            self.nulls.add(id_)
            return
        lastkeys = self._lastkeys
        if not lastkeys:
            self._keys.append(self._column([key]))
            self._ids.append([id_])
            lastkeys.append(key)
            self._lastids.append(id_)
            self._len += 1
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
            j = bisect_left(keys, key)
            if j < len(keys) and keys[j] == key:        # a run of this key: its ids ascend
                j = bisect_left(ids, id_, j, bisect_right(keys, key, j))
            keys.insert(j, key)
            ids.insert(j, id_)
        if len(keys) > 2 * LOAD:
            self._keys[i : i + 1] = [keys[:LOAD], keys[LOAD:]]
            self._ids[i : i + 1] = [ids[:LOAD], ids[LOAD:]]
            lastkeys[i : i + 1] = [keys[LOAD - 1], keys[-1]]
            self._lastids[i : i + 1] = [ids[LOAD - 1], ids[-1]]
        self._len += 1

    def remove(self, key: Any, id_: Any) -> None:
        """Remove the entry; KeyError if it is absent."""
        if key is None:
            self.nulls.remove(id_)
            return
        i = self._sublist(key, id_)
        if i == len(self._lastkeys):
            raise KeyError((key, id_))
        keys, ids = self._keys[i], self._ids[i]
        j = bisect_left(keys, key)
        if j == len(keys) or keys[j] != key:
            raise KeyError((key, id_))
        if ids[j] != id_:                               # not the first of its key's run
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
        else:
            self._lastkeys[i] = keys[-1]
            self._lastids[i] = ids[-1]

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return chain(zip(chain.from_iterable(self._keys), chain.from_iterable(self._ids)),
                     zip(repeat(None), self.nulls))

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
                if k == key:                    # a run continued from the sublist before
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
        pairs = zip(_backwards(self._keys), _backwards(self._ids))
        if keep is None:
            return pairs
        return compress(pairs, map(keep, _backwards(self._ids)))

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
        """Ids at positions [start, stop) of the ascending order."""
        n = self._len
        out = _slice(self._ids, start, min(stop, n))
        if stop > n:
            out.extend(self.nulls.slice(max(start - n, 0), stop - n))
        return out


class IdBits:
    """A bucket holding a large share of a table's int ids: `flags[id]` is 1 for each id
    held. One byte per id of the table's id space, where a set costs 30-60 per id held and
    a list 8, so a bucket holding an eighth of the ids or more is cheapest this way: the
    two buckets of a bool field at 1,000,000 records took 34 bytes a record as sets, 2 as
    flags. `flags.__getitem__` is the walk's membership test, at C speed."""

    __slots__ = ("flags", "n")

    def __init__(self, ids: Iterable[int], span: int) -> None:
        self.flags = bytearray(span)
        deque(map(self.flags.__setitem__, ids, repeat(1)), maxlen=0)   # one C-level pass
        self.n = self.flags.count(1)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        return compress(range(len(self.flags)), self.flags)

    def __contains__(self, id_: object) -> bool:
        return type(id_) is int and 0 <= id_ < len(self.flags) and self.flags[id_] == 1

    def add(self, id_: int) -> None:
        if not self.flags[id_]:
            self.flags[id_] = 1
            self.n += 1

    def discard(self, id_: int) -> None:
        if self.flags[id_]:
            self.flags[id_] = 0
            self.n -= 1


Bucket = Union[list, set, IdBits]


class HashIndex:
    """key -> the ids holding it; empty buckets are dropped so `len(buckets)` counts
    distinct keys.

    A bucket takes one of three forms, by size:

    - a sorted list of ids, up to SET_AT of them. A set costs 30-60 bytes an id, a list 8:
      at 1,000,000 records a float field with a hundred records per value held 85 bytes a
      record in sets (bench/README.md, "Open time and memory"). What a list gives up is
      O(1) membership, which matters only to a list page that walks a sort order testing
      each id against one bucket (query.py), and `keeper` gives such a walk a set all the
      same, made from the list and kept until that key's bucket changes.
    - past SET_AT, `IdBits` when the table's ids are ints and the bucket holds at least an
      eighth of the id space (`span`, one more than the largest id seen);
    - a set otherwise, or once the id space has grown so that the flags would cost more
      than twice what a list would (a bucket stays big until it empties or the index is
      rebuilt; it never goes back to a list).

    `span` is -1 when ids are not ints (or one was negative): no flags then. Every id
    added is below `span` afterwards, so every live id of the table indexes every bucket's
    flags.
    """

    __slots__ = ("_sets", "buckets", "span")

    def __init__(self, span: int = -1) -> None:
        self.buckets: dict[Any, Bucket] = {}
        self.span = span
        self._sets: dict[Any, set[Any]] = {}        # key -> set of a list bucket, for walks

    @staticmethod
    def span_of(int_ids: bool, ids: Sequence[Any]) -> int:
        """The `span` for a table whose ids are `ids`, ascending: -1 unless they are ints
        and none is negative."""
        if not int_ids or (ids and ids[0] < 0):
            return -1
        return ids[-1] + 1 if ids else 0

    @classmethod
    def from_columns(cls, keys: Sequence[Any], ids: Sequence[Any], span: int = -1) -> HashIndex:
        """The index of the records whose keys and ids are `keys` and `ids` (same order,
        ids ascending). A field of a few distinct keys (a bool, a small enum) takes one
        C-level pass per key (`compress`), half the time of the loop. Otherwise the ids
        are gathered in one list per key, which is its bucket (ascending already)."""
        index = cls(span)
        buckets = index.buckets
        distinct = set(keys)
        if len(distinct) <= FEW_KEYS:
            for key in distinct:
                buckets[key] = index._bucket(list(compress(ids, map(eq, keys, repeat(key)))))
            return index
        groups: dict[Any, list[Any]] = {}
        get = groups.get
        for key, id_ in zip(keys, ids):
            group = get(key)
            if group is None:
                groups[key] = [id_]
            else:
                group.append(id_)
        index.buckets = {key: index._bucket(group) for key, group in groups.items()}
        return index

    @classmethod
    def from_runs(cls, runs: Iterable[tuple[Any, list[Any]]], span: int = -1) -> HashIndex:
        """The index whose buckets are `runs`' (key, ascending ids): a field that is also
        sorted has them from its `OrderedIndex.runs`, one slice per key instead of one
        loop step per id."""
        index = cls(span)
        index.buckets = {key: index._bucket(ids) for key, ids in runs}
        return index

    def _bucket(self, ids: list[Any]) -> Bucket:
        """The form for a bucket of ascending `ids` (class doc)."""
        if len(ids) <= SET_AT:
            return ids
        if self.span >= 0 and len(ids) * 8 >= self.span:
            return IdBits(ids, self.span)
        return set(ids)

    def add(self, key: Any, id_: Any) -> None:
        self.cover(id_)
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [id_]
            return
        if isinstance(bucket, list):
            if id_ > bucket[-1]:
                bucket.append(id_)              # a new record: the largest id so far
            else:
                insort(bucket, id_)
            if len(bucket) > SET_AT:
                self.buckets[key] = self._bucket(bucket)
            self._sets.pop(key, None)
        else:
            bucket.add(id_)

    def cover(self, id_: Any) -> None:
        """Take `id_` into the id space without adding it to a bucket: a table's every live
        id must index every bucket's flags (`UniqueFilter` adds ids to no bucket here)."""
        if self.span >= 0 and not 0 <= id_ < self.span:
            self._widen(id_)

    def _widen(self, id_: Any) -> None:
        """An id at or past `span` (or a negative one): grow the id space by an eighth at
        least, so that ids arriving in order grow it rarely; a bucket whose flags would then
        cost more than twice a list becomes a set, and a negative id ends flags here."""
        if id_ < 0:
            span = -1
        else:
            span = max(id_ + 1, self.span + self.span // 8, 64)
        for key, bucket in self.buckets.items():
            if type(bucket) is IdBits:
                if span < 0 or len(bucket) * 16 < span:
                    self.buckets[key] = set(bucket)
                else:
                    bucket.flags.extend(bytes(span - len(bucket.flags)))
        self.span = span

    def remove(self, key: Any, id_: Any) -> None:
        bucket = self.buckets[key]
        if isinstance(bucket, list):
            i = _position(bucket, id_)
            if i >= 0:
                del bucket[i]
            self._sets.pop(key, None)
        else:
            bucket.discard(id_)
        if not bucket:
            del self.buckets[key]

    def count(self, keys: Iterable[Any]) -> int:
        """Ids holding any of `keys` (keys are distinct, so buckets are disjoint)."""
        return sum(map(len, map(self.buckets.get, keys, repeat(()))))

    def ids(self, keys: Iterable[Any]) -> set[Any]:
        out: set[Any] = set()
        for k in keys:
            bucket = self.buckets.get(k)
            if bucket:
                out.update(bucket)
        return out

    def has(self, keys: Iterable[Any], id_: Any) -> bool:
        for k in keys:
            bucket = self.buckets.get(k)
            if bucket is None:
                continue
            if isinstance(bucket, list):
                if _position(bucket, id_) >= 0:
                    return True
            elif id_ in bucket:
                return True
        return False

    def keeper(self, key: Any) -> Keep:
        """Whether an id holds `key`, as a C-level test for a walk (class doc)."""
        bucket = self.buckets.get(key)
        if bucket is None:
            return _NONE.__contains__
        if type(bucket) is IdBits:
            return bucket.flags.__getitem__
        if type(bucket) is set:
            return bucket.__contains__
        found = self._sets.get(key)
        if found is None:
            if len(self._sets) >= KEPT_SETS:
                self._sets.clear()
            found = self._sets[key] = set(bucket)
        return found.__contains__


class UniqueFilter:
    """The filter index of a field that is both @unique and @filter: the table's unique map
    (key -> the one id holding it) answers every filter on a value, so no bucket is kept
    per record. As a `HashIndex` the 1,000,000 distinct e-mails of a users table cost a
    one-id list and a dict entry each, about 110 bytes a record and a second of open.

    Null, which the unique map leaves out (any number of records may hold it), is the one
    key kept here, in a `HashIndex` of its own (`nulls`). The table keeps the unique map
    (table.py), so `add` and `remove` only ever move ids in and out of null. The read side
    is `HashIndex`'s: `count`, `ids`, `has`, `keeper`.
    """

    __slots__ = ("nulls", "unique")

    def __init__(self, unique: dict[Any, Any], span: int = -1) -> None:
        self.unique = unique
        self.nulls = HashIndex(span)

    @classmethod
    def from_column(cls, unique: dict[Any, Any], keys: Sequence[Any], ids: Sequence[Any],
                    span: int = -1) -> UniqueFilter:
        """Over the unique map already built from `keys` (ascending `ids`): only the ids
        holding null are gathered, in one C-level pass."""
        index = cls(unique, span)
        held = list(compress(ids, map(is_, keys, repeat(None))))
        index.nulls = HashIndex.from_runs([(None, held)] if held else [], span)
        return index

    def add(self, key: Any, id_: Any) -> None:
        if key is None:
            self.nulls.add(None, id_)
        else:
            self.nulls.cover(id_)

    def remove(self, key: Any, id_: Any) -> None:
        if key is None:
            self.nulls.remove(None, id_)

    def count(self, keys: Collection[Any]) -> int:
        held = sum(map(self.unique.__contains__, keys))
        return held + self.nulls.count((None,)) if None in keys else held

    def ids(self, keys: Collection[Any]) -> set[Any]:
        unique = self.unique
        out = {unique[k] for k in keys if k in unique}
        if None in keys:
            out.update(self.nulls.ids((None,)))
        return out

    def has(self, keys: Collection[Any], id_: Any) -> bool:
        unique = self.unique
        if any(k in unique and unique[k] == id_ for k in keys):
            return True
        return None in keys and self.nulls.has((None,), id_)

    def keeper(self, key: Any) -> Keep:
        if key is None:
            return self.nulls.keeper(None)
        held = self.unique.get(key, _NOTHING)
        return _NONE.__contains__ if held is _NOTHING else frozenset((held,)).__contains__


class OrderedFilter:
    """The filter index of a field that is both @filter and @sort (and not @unique): its
    `OrderedIndex` answers every filter on a value from the run of that key (ids ascending
    already), so no bucket is kept per record. As a `HashIndex` the bench's float score
    (10,000 distinct values over 1,000,000 posts) cost 12 bytes a record, a bucket insert
    on every write and 0.2 s of open.

    The table keeps the ordered index (table.py); `add` and `remove` only drop the set a
    walk was given for that key (`keeper`), as a `HashIndex` does. A lookup costs a bisect
    per key where a bucket was a dict lookup: O(log n), on reads only.
    """

    __slots__ = ("_sets", "ordered")

    def __init__(self, ordered: OrderedIndex) -> None:
        self.ordered = ordered
        self._sets: dict[Any, set[Any]] = {}

    def add(self, key: Any, id_: Any) -> None:
        if self._sets:
            self._sets.pop(key, None)

    remove = add

    def count(self, keys: Iterable[Any]) -> int:
        return sum(map(self.ordered.run_count, keys))

    def ids(self, keys: Iterable[Any]) -> set[Any]:
        out: set[Any] = set()
        for k in keys:
            out.update(self.ordered.run_ids(k))
        return out

    def has(self, keys: Iterable[Any], id_: Any) -> bool:
        holds = self.ordered.holds
        return any(holds(k, id_) for k in keys)

    def keeper(self, key: Any) -> Keep:
        found = self._sets.get(key)
        if found is None:
            if len(self._sets) >= KEPT_SETS:
                self._sets.clear()
            found = self._sets[key] = set(self.ordered.run_ids(key))
        return found.__contains__

    @property
    def buckets(self) -> dict[Any, list[Any]]:
        """key -> ids, as a `HashIndex` holds them (for tests and tools: O(n))."""
        return dict(self.ordered.runs())


FilterIndex = Union[HashIndex, UniqueFilter, OrderedFilter]
