"""A filter's buckets kept in sort order: per (@filter field, @sort field) pair and filter
value, the bucket's (key, id) entries in an ordered index, so that
`author_id=7&sort=-score&limit=20` is a seek, O(log s + page), not a sort of the bucket.

Without it a list filtered by one value and sorted by another field gathers the value's
bucket (hashes.py) and orders its s ids by key (keycolumns.py): O(s log s), each key read
from an 8 MB key column at a random id, a cache miss apiece at 1,000,000 records
(bench/README.md, "Filter buckets in sort order").

`BucketOrder` is an `OrderedIndex` (indexes.py: keys and ids in parallel sublists, nulls
apart, ties on the id ascending, descending walks by position) that keeps no key column of
its own: the table's sort field's column answers "which key has this id" for every bucket.

Built lazily (docs/decisions.md): a pair's bucket for one value is made the first time a
list asks for it (`order`), from the value's bucket and the sort field's key column, one
sort by key (O(s log s), what that list would have cost anyway), and then kept. Only
buckets of at least BUCKET_AT ids are built (a smaller one sorts in microseconds), so a
`@unique` field's one-id buckets never cost an index each. Memory: about 16 bytes a record
of a built bucket (an 8-byte key slot and an 8-byte id slot) plus a few hundred bytes a
bucket, counted in bench/README.md.

Kept exactly by the table's write paths (table.py calls `add`, `remove` and `swap` from
`_index`, `_unindex` and `_swap`, which every write, `undo_last`, a follower's run and a
replica's apply go through) and dropped whole (`clear`) where the table rebuilds its
indexes at once (`insert_many`); a table built from a snapshot (`load_base`, compaction's
new epoch) starts with none. Invariant: every built bucket holds exactly the live ids whose
filter key is its value, each with its sort key.

Kept the same way, lazily and by the same write plan (`plan`: one flat entry per pair):

- `PairCount`, per (filter field A, filter field B) and A value: how many of the value's
  ids hold each B value a list has asked (`count`, O(s) once in C, then a look-up), so two
  filters' `total` is not a pass over the bucket (docs/decisions.md, "Two filters counted
  per pair of values"). Invariant: each kept count is the number of live ids holding both.
- prefix orders, per (str sort field R, prefix length L, sort field S) and prefix: the ids
  whose R key starts with the prefix, in S's order (`prefix_order`), a write's record found
  by its R key's first L characters; at most PREFIXES_KEPT a (R, L, S). Invariant: each
  holds exactly the live ids under its prefix, each with its S key.

Imports indexes.py, keycolumns.py, sortedlist.py and hashes.py (the `FilterIndex` type);
plain data: no I/O, no model knowledge. The plans that use it are in bucketplan.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from sys import getsizeof
from typing import Any, Union

from dbsvc.storage.hashes import FilterIndex
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.keycolumns import KeyColumn
from dbsvc.storage.sortedlist import SortedIndex

BUCKET_AT = 128  # a bucket of fewer ids is sorted per list, never kept in order
# Prefix orders kept per (field, prefix length, sort field): the next one past this many
# drops them all (a bound on memory, as hashes.py's KEPT_SETS is on its sets).
PREFIXES_KEPT = 64


class _NoKeys(KeyColumn):
    """The key column of a `BucketOrder`: none (the table's column of the sort field has
    every key), so `OrderedIndex.add` and `remove` set and discard nothing here."""

    __slots__ = ()

    def set(self, id_: Any, key: Any) -> None:
        return None

    def discard(self, id_: Any) -> None:
        return None


_NO_KEYS = _NoKeys()


class BucketOrder(OrderedIndex):
    """One filter value's ids in the order of one sort field (module docstring)."""

    __slots__ = ()

    @classmethod
    def build(cls, keys: list[Any], ids: list[Any], typecode: str = "") -> BucketOrder:
        """The order of the records whose ids are `ids` (ascending) and sort keys `keys`
        (None: null): one stable sort of positions by key, so ties keep the ids ascending."""
        index = cls.__new__(cls)
        index.typecode = typecode
        index.column = _NO_KEYS
        index.nulls = SortedIndex.from_sorted([i for k, i in zip(keys, ids) if k is None])
        positions = [p for p, k in enumerate(keys) if k is not None]
        positions.sort(key=keys.__getitem__)
        index._fill([keys[p] for p in positions], [ids[p] for p in positions])
        return index


class PairCount:
    """One filter value's bucket (field A holding key a) counted by the keys of another
    filter field B its ids hold: B key -> how many, for the B keys lists have asked only
    (a key never asked is not counted, so a write holding it changes nothing here).

    Its `add` and `remove` take (B key, id) as a `BucketOrder`'s take (sort key, id), so
    the writes' plan moves a record in and out of both alike (`BucketOrders.add`)."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[Any, int] = {}

    def add(self, key: Any, id_: Any) -> None:
        counts = self.counts
        if key in counts:
            counts[key] += 1

    def remove(self, key: Any, id_: Any) -> None:
        counts = self.counts
        if key in counts:
            counts[key] -= 1


# (filter position, filter key function, sort (or other filter) position, its key function,
# value -> order or count)
_Plan = tuple[int, Callable[[Any], Any], int, Callable[[Any], Any], Mapping[Any, Union[BucketOrder, PairCount]]]


def _cut(key: Callable[[Any], Any], length: int) -> Callable[[Any], Any]:
    """A str field's value -> the first `length` characters of its key (None: null): the
    prefix whose order holds the record."""

    def cut(value: Any) -> Any:
        return None if value is None else key(value)[:length]

    return cut


class BucketOrders:
    """(filter field, sort field) -> filter key -> `BucketOrder`, the ones built so far,
    and the writes' flat plan over the pairs that hold any (`plan`, empty until a list
    builds one, so a table no list asked this of pays one truth test a write)."""

    __slots__ = ("_keys", "_positions", "counted", "pairs", "plan", "prefixed")

    def __init__(self, keys: Mapping[str, Callable[[Any], Any]], positions: Mapping[str, int]) -> None:
        self._keys, self._positions = keys, positions
        self.pairs: dict[tuple[str, str], dict[Any, BucketOrder]] = {}
        # (filter field A, filter field B) -> A key -> its bucket counted by B keys
        self.counted: dict[tuple[str, str], dict[Any, PairCount]] = {}
        # (str sort field R, prefix length, sort field S) -> prefix -> the ids whose R key
        # starts with it, in S's order
        self.prefixed: dict[tuple[str, int, str], dict[str, BucketOrder]] = {}
        self.plan: tuple[_Plan, ...] = ()

    def _orders(self) -> list[dict[Any, BucketOrder]]:
        return [*self.pairs.values(), *self.prefixed.values()]

    def __len__(self) -> int:
        """Buckets and prefixes built."""
        return sum(map(len, self._orders()))

    def entries(self) -> int:
        """Entries held by every built bucket and prefix (for the memory figures)."""
        return sum(len(order) for orders in self._orders() for order in orders.values())

    def nbytes(self) -> int:
        """The bytes the built orders' own containers take: each order object, its key and id
        sublists, their last keys and ids, its nulls (the id objects are the table's own,
        shared; for the memory figures)."""
        total = 0
        for orders in self._orders():
            total += getsizeof(orders)
            for order in orders.values():
                parts = (order.key_sublists, order.id_sublists, order.last_keys, order.last_ids)
                total += getsizeof(order) + sum(map(getsizeof, parts))
                total += sum(map(getsizeof, order.key_sublists)) + sum(map(getsizeof, order.id_sublists))
                total += getsizeof(order.nulls) + sum(map(getsizeof, order.nulls.sublists))
        return total

    def order(
        self, filter_field: str, key: Any, index: FilterIndex, sort_field: str, ordered: OrderedIndex
    ) -> BucketOrder | None:
        """`key`'s bucket of `filter_field` (its filter index `index`) in the order of
        `sort_field` (its ordered index `ordered`, whose key column gives the keys): the
        kept one, or built now; None for a bucket under BUCKET_AT ids."""
        orders = self.pairs.get((filter_field, sort_field))
        if orders is not None:
            found = orders.get(key)
            if found is not None:
                return found
        if index.count((key,)) < BUCKET_AT:
            return None
        ids = sorted(index.ids((key,)))
        order = BucketOrder.build(list(map(ordered.column.get, ids)), ids, ordered.typecode)
        if orders is None:
            orders = self.pairs[(filter_field, sort_field)] = {}
            self._replan()
        orders[key] = order
        return order

    def kept_prefix(self, field: str, prefix: str, sort_field: str) -> BucketOrder | None:
        """The ids whose `field` key starts with `prefix` in `sort_field`'s order, when kept."""
        orders = self.prefixed.get((field, len(prefix), sort_field))
        return None if orders is None else orders.get(prefix)

    def prefix_order(
        self, field: str, prefix: str, ids: Iterable[Any], sort_field: str, ordered: OrderedIndex
    ) -> BucketOrder:
        """The order of `ids` (those whose `field` key starts with `prefix`, a str @sort
        field's window) by `sort_field` (its ordered index `ordered`): built now, one sort
        by key, and kept (at most PREFIXES_KEPT a prefix length and sort field) by the
        writes, which put a record in the order of its key's first len(prefix) characters."""
        slot = (field, len(prefix), sort_field)
        orders = self.prefixed.get(slot)
        if orders is not None and len(orders) >= PREFIXES_KEPT:
            orders.clear()
        chosen = sorted(ids)
        order = BucketOrder.build(list(map(ordered.column.get, chosen)), chosen, ordered.typecode)
        if orders is None:
            self.prefixed[slot] = {prefix: order}
            self._replan()
        else:
            orders[prefix] = order
        return order

    def kept_count(self, field: str, key: Any, other: str, other_key: Any) -> int | None:
        """How many ids of `key`'s bucket of `field` hold `other_key` of `other`, when kept."""
        counted = self.counted.get((field, other))
        found = counted.get(key) if counted is not None else None
        return None if found is None else found.counts.get(other_key)

    def count(
        self, field: str, key: Any, index: FilterIndex, other: str, other_key: Any, other_index: FilterIndex
    ) -> int:
        """How many ids of `key`'s bucket of `field` (its filter index `index`) hold
        `other_key` of `other` (`other_index`): kept, or counted now, O(s) at C speed (each
        id tested by the other field's `keeper`), and kept from then on."""
        kept = self.kept_count(field, key, other, other_key)
        if kept is not None:
            return kept
        counted = self.counted.get((field, other))
        if counted is None:
            counted = self.counted[(field, other)] = {}
            self._replan()
        found = counted.get(key)
        if found is None:
            found = counted[key] = PairCount()
        held = found.counts[other_key] = sum(map(bool, map(other_index.keeper(other_key), index.ids((key,)))))
        return held

    def _replan(self) -> None:
        keys, at = self._keys, self._positions
        plan: list[_Plan] = [(at[f], keys[f], at[s], keys[s], orders) for (f, s), orders in self.pairs.items()]
        plan += [(at[f], keys[f], at[o], keys[o], counts) for (f, o), counts in self.counted.items()]
        plan += [(at[f], _cut(keys[f], n), at[s], keys[s], orders) for (f, n, s), orders in self.prefixed.items()]
        self.plan = tuple(plan)

    def clear(self) -> None:
        """Drop every built bucket and kept count (the table rebuilt its indexes at once)."""
        self.pairs.clear()
        self.counted.clear()
        self.prefixed.clear()
        self.plan = ()

    # -- the table's writes: `r`, `old`, `new` are a record's values ----------------------

    def add(self, id_: Any, r: Any) -> None:
        for fpos, fkey, spos, skey, orders in self.plan:
            order = orders.get(fkey(r[fpos]))
            if order is not None:
                order.add(skey(r[spos]), id_)

    def remove(self, id_: Any, r: Any) -> None:
        for fpos, fkey, spos, skey, orders in self.plan:
            order = orders.get(fkey(r[fpos]))
            if order is not None:
                order.remove(skey(r[spos]), id_)

    def swap(self, id_: Any, old: Any, new: Any) -> None:
        """Record `id_` goes from values `old` to `new`: moved where its filter key or its
        sort key changed (from one bucket to another, or inside one)."""
        for fpos, fkey, spos, skey, orders in self.plan:
            was, now = fkey(old[fpos]), fkey(new[fpos])
            before, after = skey(old[spos]), skey(new[spos])
            if was == now and before == after and (before is None) == (after is None):
                continue
            order = orders.get(was)
            if order is not None:
                order.remove(before, id_)
            order = orders.get(now)
            if order is not None:
                order.add(after, id_)
