"""In-memory equality indexes: key -> ids buckets, and the filters a list page tests.

`HashIndex` maps an index key (`CompiledModel.keys[field](value)`: typed, so 3 and 3.0 are
one key) to the ids holding it (a sorted list; once large, one byte per id of the id space,
`IdBits`, or a set); null is the key None. `UniqueFilter` answers the same questions from a
@unique field's key -> id map, and `OrderedFilter` from a sort field's `OrderedIndex`
(indexes.py), so a field that is both sorted and filtered holds one index, not two.
`FilterIndex` is any of the three: what query.py filters with.

Bulk builds (`HashIndex.from_columns`, `from_runs`, `UniqueFilter.from_column`) take columns
in id order, as a snapshot's open gives them.

Imports indexes.py (the ordered index and the `Keep` test) and nothing else of dbsvc.
Everything here is plain data: no I/O, no model knowledge.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from itertools import compress, repeat
from operator import eq, is_, sub
from typing import Any, Union

from dbsvc.storage.indexes import Keep, OrderedIndex
from dbsvc.storage.sortedlist import sorted_position

FEW_KEYS = 4  # at most this many distinct keys: HashIndex.from_columns scans once per key
SET_AT = 16384  # a HashIndex bucket is a sorted list up to this many ids, then flags or a set
KEPT_SETS = 8  # sets of list buckets a HashIndex keeps for walks (`keeper`)
# `holding` makes a list bucket's set (`keeper`'s) once the ids it bisected in that bucket
# since it last changed reach 1/ASKED_SHARE of its length: a bisect costs about as much as
# ten ids put in a set (log2 of 10,000 comparisons), so the bisects a set would have saved
# have by then cost about what it costs, and never more than that twice over.
ASKED_SHARE = 8
_NOTHING = object()
_NONE: frozenset[Any] = frozenset()


class IdBits:
    """A bucket holding a large share of a table's int ids: `flags[id]` is 1 for each id
    held. One byte per id of the table's id space, where a set costs several times more
    per id held and a list 8 bytes, so a bucket holding an eighth of the ids or more is
    cheapest this way (bench/README.md has the measured bool-field figures).
    `flags.__getitem__` is the walk's membership test, at C speed."""

    __slots__ = ("flags", "n")

    def __init__(self, ids: Iterable[int], span: int) -> None:
        self.flags = bytearray(span)
        deque(map(self.flags.__setitem__, ids, repeat(1)), maxlen=0)  # one C-level pass
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

    - a sorted list of ids, up to SET_AT of them. A set costs several times a list's 8
      bytes an id (bench/README.md, "Open time and memory"). What a list gives up is
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

    __slots__ = ("_asked", "_sets", "buckets", "span")

    def __init__(self, span: int = -1) -> None:
        self.buckets: dict[Any, Bucket] = {}
        self.span = span
        self._sets: dict[Any, set[Any]] = {}  # key -> set of a list bucket, for walks
        self._asked: dict[Any, int] = {}  # key -> ids `holding` bisected in its list bucket

    @property
    def kept_sets(self) -> dict[Any, set[Any]]:
        """The sets `keeper` made of list buckets and keeps for walks (at most KEPT_SETS)."""
        return self._sets

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
        """The form for a bucket of ascending `ids` (class doc). A list bucket holds the
        records' own id objects: ids of its own in its order (sortedlist.py `own_ints`) read
        an author's page ~2-3 us faster at 1,000,000 records but cost 32 bytes a record,
        which beside the sort index's own ids passed the 5% RSS limit (docs/decisions.md,
        "Own ints")."""
        if len(ids) <= SET_AT:
            return ids
        if self.span >= 0 and len(ids) * 8 >= self.span:
            return IdBits(ids, self.span)
        return set(ids)

    def add(self, key: Any, id_: Any) -> None:
        if self.span >= 0 and not 0 <= id_ < self.span:  # `cover`, without its call (a write's hot path)
            self._widen(id_)
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [id_]
            return
        if isinstance(bucket, list):
            if id_ > bucket[-1]:
                bucket.append(id_)  # a new record: the largest id so far
            else:
                insort(bucket, id_)
            if len(bucket) > SET_AT:
                self.buckets[key] = self._bucket(bucket)
            self.changed(key)
        else:
            bucket.add(id_)

    def changed(self, key: Any) -> None:
        """`key`'s list bucket changed: the set kept of it for walks, and the asks counted
        toward making one (`_held`), start over. Every writer of a list bucket calls it
        (`add`, `remove`, runs.py's extend of a bucket at once)."""
        self._sets.pop(key, None)
        if self._asked:
            self._asked.pop(key, None)

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
            i = sorted_position(bucket, id_)
            if i >= 0:
                del bucket[i]
            self.changed(key)
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

    def first_after(self, keys: Collection[Any], after: Any, end: int, start: int = 0) -> list[Any] | None:
        """The ids holding the one key of `keys`, in id order, after the id `after` (None:
        from the first), from the `start`-th to before the `end`-th of them (`ids_after`),
        where `ids` makes a set of the whole bucket, reading every id (~300 us for an
        author's 1,000 posts of 1,000,000, their ints cold in memory: bench/README.md,
        session 13). None when the bucket is not kept as a list (several keys, flags or a set)."""
        if len(keys) != 1:
            return None
        (key,) = keys
        bucket = self.buckets.get(key, [])
        if not isinstance(bucket, list):
            return None
        return ids_after(bucket, after, start, end)

    def has(self, keys: Iterable[Any], id_: Any) -> bool:
        for k in keys:
            bucket = self.buckets.get(k)
            if bucket is None:
                continue
            if isinstance(bucket, list):
                if sorted_position(bucket, id_) >= 0:
                    return True
            elif id_ in bucket:
                return True
        return False

    def holding(self, keys: Collection[Any], ids: list[Any]) -> list[Any]:
        """The ids of `ids` (live ids) holding one of `keys`, in their order: `has` asked of
        each, at C speed (`_held`), for a few candidates where making a `keeper` costs more."""
        if len(keys) == 1:
            return list(compress(ids, self._held(next(iter(keys)), ids)))
        held: set[Any] = set()
        for key in keys:
            held.update(compress(ids, self._held(key, ids)))
        return list(filter(held.__contains__, ids))

    def _held(self, key: Any, ids: list[Any]) -> Iterator[Any]:
        """Whether each id of `ids` holds `key`, lazily, no Python code an id. A list
        bucket's set answers when `keeper` keeps one, or once the ids asked since the
        bucket changed make it worth its cost (ASKED_SHARE); else a bisect an id (about 14
        comparisons in a bucket of 10,000): in the bucket (sorted, never empty) the last id
        not above `id_` is `id_` itself when held; with none below, position -1 is the
        largest id, above `id_`, so not equal either."""
        bucket = self.buckets.get(key)
        if bucket is None:
            return repeat(False)
        if type(bucket) is list:
            found = self._sets.get(key)
            if found is None:
                asked = self._asked.get(key, 0) + len(ids)
                if asked * ASKED_SHARE < len(bucket):
                    if len(self._asked) >= 8 * KEPT_SETS:
                        self._asked.clear()
                    self._asked[key] = asked
                    at = map(sub, map(bisect_right, repeat(bucket), ids), repeat(1))
                    return map(eq, map(bucket.__getitem__, at), ids)
                self._asked.pop(key, None)
                return map(self.keeper(key), ids)
            return map(found.__contains__, ids)
        if type(bucket) is IdBits:
            return map(bucket.flags.__getitem__, ids)
        return map(bucket.__contains__, ids)

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
    per record. As a `HashIndex` every distinct value (a users table's e-mails) would cost
    a one-id list and a dict entry of its own, in memory and at open (bench/README.md).

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
    def from_column(
        cls, unique: dict[Any, Any], keys: Sequence[Any], ids: Sequence[Any], span: int = -1
    ) -> UniqueFilter:
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

    def holding(self, keys: Collection[Any], ids: list[Any]) -> list[Any]:
        """`HashIndex.holding`: the unique map's ids of `keys`, and the nulls' bucket."""
        unique = self.unique
        held = {unique[k] for k in keys if k in unique}
        if None in keys:
            held.update(self.nulls.holding((None,), ids))
        return list(filter(held.__contains__, ids))

    def keeper(self, key: Any) -> Keep:
        if key is None:
            return self.nulls.keeper(None)
        held = self.unique.get(key, _NOTHING)
        return _NONE.__contains__ if held is _NOTHING else frozenset((held,)).__contains__


class OrderedFilter:
    """The filter index of a field that is both @filter and @sort (and not @unique): its
    `OrderedIndex` answers every filter on a value from the run of that key (ids ascending
    already), so no bucket is kept per record. As a `HashIndex` a field of many distinct
    values (the bench's float score) would cost memory per record, a bucket insert on every
    write and time at open (bench/README.md has the figures).

    The table keeps the ordered index (table.py); `add` and `remove` only drop the set a
    walk was given for that key (`keeper`), as a `HashIndex` does. The table's own writes
    do that drop themselves, in the ordered index's step, from `kept_sets` (the one dict
    the filter ever holds): one step a write for the field, its keys made once. A lookup
    costs a bisect per key where a bucket was a dict lookup: O(log n), on reads only.
    """

    __slots__ = ("_sets", "ordered")

    def __init__(self, ordered: OrderedIndex) -> None:
        self.ordered = ordered
        self._sets: dict[Any, set[Any]] = {}

    @property
    def kept_sets(self) -> dict[Any, set[Any]]:
        """The sets `keeper` made of runs and keeps for walks (at most KEPT_SETS)."""
        return self._sets

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

    def holding(self, keys: Collection[Any], ids: list[Any]) -> list[Any]:
        """`HashIndex.holding`, each id's key read from the ordered index's key column
        (None for a null, which is a filter key too): `ids` must be live ids, which the
        column holds (a slot of an id it does not hold reads as a placeholder)."""
        return list(compress(ids, map(keys.__contains__, map(self.ordered.column.get, ids))))

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


def ids_after(bucket: list[Any], after: Any, start: int, end: int) -> list[Any]:
    """The ids of a list bucket (ascending) after the id `after` (None: from the first),
    from the `start`-th to before the `end`-th of them: a bisect and a slice."""
    at = 0 if after is None else bisect_right(bucket, after)
    return bucket[at + start : at + end]
