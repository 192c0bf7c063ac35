"""Runs of new entries added to the in-memory indexes at once: a read replica's groups.

    add_sorted_run(index, entries)      # SortedIndex.add of each entry (a primary key's ids)
    add_ordered_run(index, keys, ids)   # OrderedIndex.add of each (keys[n], ids[n]) pair
    add_hash_run(index, keys, ids)      # a filter index's `add` of each pair (hashes.py)

A follower applies a primary's frames in groups of up to 512 (follow.py rule 5), mostly
inserts of new ids into one table, and tableruns.py `insert_run` hands each index the run's
entries together instead of one `add` a record and an index: one call an index and a
run, no attribute lookups per entry, and the commonest shapes at C speed (bench/README.md,
"Replica apply"):

- entries that all follow the last one held (new ids; the keys of a timestamp or a
  counter) extend the last sublist at once and split it as appending one at a time
  would: into LOAD-entry sublists, the last one holding at most 2 * LOAD;
- other pairs are put in index order first and taken a sublist at a time: the pairs
  before a sublist's last entry go into it together (found by one bisect over the
  sublists' last entries from the previous one on, and one over the pairs), merged
  with it at once when they are an eighth of it or more (a merge of two sorted runs:
  a follower's str keys, "user number 150001".., cluster), else each put at its place
  found against the sublist as it was, from the last one back, the pairs sharing a
  place (a key's run) taking it in one slice; a sublist grown past 2 * LOAD is cut
  into pieces of LOAD. When every new id is above every id the index holds (its id ->
  key column says so: no far ids, all under its slots), a pair goes after every entry
  of its key, found by keys alone, and a chunk of one key needs one bisect;
- a run told its ids ascend whose keys never fall (a timestamp's) and start after the
  last entry is in index order as it comes: it extends the last sublist with no pair
  made and no sort;
- an empty index takes its first run one `add` at a time (the first sublist's type is the
  index's to choose).

Rules: the result is what `add` of each entry in turn leaves, for every reader: the same
entries in the same order (key, then id), the same nulls, the same id -> key column
(keycolumns.py `set_many`), sublists of at most 2 * LOAD entries with their last keys and
ids kept; the sublist counts of `count_span` are dropped (`grown`) and built again when
next asked for. Where a sublist splits may differ from one `add` at a time (no reader
sees where: tests/replica/test_replica_apply_runs.py compares everything else). A sorted
index's shared sublists (`share`, a compaction's cut) are copied before they change.

`ascending` (tableruns.py finds it once a run): the caller knows the run's ids are ints in
strictly ascending order, so none of the runs here checks it again (each check is a C-level
pass over the run: three ordered and three filter indexes of one model made a dozen of them
a group); without it each checks for itself, as before.

`add_hash_run` takes a run of ascending ids under a filter index's span (no widening of
its flags: what `add` of each would do first) a key at a time for a few keys (a run of
one key, a follower's enum or bool column, takes all its ids with no pass to group them):
a bucket of flags (`IdBits`) counted and set as one slice when the ids are a range (a
follower's new rows), else in one C-level pass, a set updated, a list extended past its
last id (its kept set dropped, as `add` drops it); a @unique filter's run of non-null keys
has nothing to do (its `add` only covers the id). Anything else is `add` of each pair.

This module is the indexes' own: it writes the sublists and lasts an index hands out
(`key_sublists`, `last_keys`, ...) and a hash index's buckets (`buckets`, `IdBits.flags`
and `n`), which every other module only reads, then tells an ordered index how many
entries it put there (`OrderedIndex.grown`); a sorted index extends itself
(`SortedIndex.extend_past`, which copies a shared sublist first). Plain data, no I/O.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Sequence
from itertools import chain, compress, islice, repeat
from operator import eq, itemgetter, le, lt, ne
from typing import Any

from dbsvc.storage.hashes import FEW_KEYS, SET_AT, FilterIndex, HashIndex, IdBits, OrderedFilter, UniqueFilter
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.sortedlist import LOAD, SortedIndex

_FIRST = itemgetter(0)
_SECOND = itemgetter(1)
_INT = {int}
_ONES = b"\x01"  # an IdBits flag set
MERGE_AT = 8  # a sublist takes its pairs by one merge when they are at least an eighth of it


def ints_ascending(ids: Sequence[Any]) -> bool:
    """Whether `ids` are ints in strictly ascending order: the runs' `ascending` (module
    docstring), found once a run by tableruns.py and by `add_hash_run` when not told."""
    return set(map(type, ids)) == _INT and all(map(lt, ids, ids[1:]))


def add_sorted_run(index: SortedIndex, entries: list[Any], ascending: bool = False) -> None:
    """`index.add` of each entry, with the same result (module rules). Entries that ascend
    past the last one held extend the last sublist at once; any others are added one by one.
    `ascending`: the caller knows the entries are ints in strictly ascending order (module docstring)."""
    sublists = index.sublists
    if sublists and (ascending or all(map(lt, entries, entries[1:]))) and entries and sublists[-1][-1] < entries[0]:
        index.extend_past(entries)
        return
    for entry in entries:
        index.add(entry)


def add_ordered_run(index: OrderedIndex, keys: Sequence[Any], ids: Sequence[Any], ascending: bool = False) -> None:
    """`index.add(keys[n], ids[n])` of each pair, with the same result (module rules).
    `ascending`: the caller knows the ids are ints in strictly ascending order (module docstring)."""
    lastkeys, lastids = index.last_keys, index.last_ids
    if not lastkeys:  # an empty index: its first sublist is made by `add`
        for key, id_ in zip(keys, ids):
            index.add(key, id_)
        return
    column = index.column
    # Every id the index holds is an int under len(slots) when `far` is empty (keycolumns.py).
    if ascending:
        newer = bool(ids) and not column.far and ids[0] >= len(column.slots)
    else:
        newer = bool(ids) and not column.far and set(map(type, ids)) == _INT and min(ids) >= len(column.slots)
    column.set_many(ids, keys, ascending)
    if (
        ascending
        and keys
        and None not in keys
        and (lastkeys[-1], lastids[-1]) < (keys[0], ids[0])
        and all(map(le, keys, islice(keys, 1, None)))
    ):
        # Keys that never fall while the ids ascend (a timestamp's, a counter's) are in
        # index order as they come, and all after the last entry: no pair made, no sort.
        _append_entries(index, list(keys), list(ids))
        index.grown(len(keys))
        return
    if None in keys:
        nulls = index.nulls
        pairs = []
        for key, id_ in zip(keys, ids):
            if key is None:
                nulls.add(id_)
            else:
                pairs.append((key, id_))
    else:
        pairs = list(zip(keys, ids))
    if ascending:
        # The ids ascend in the run's order, so a stable sort by key alone leaves the pairs
        # of one key by id: the (key, id) order, without a tuple compare a step (a
        # compare of keys of one type takes the sort's own fast path).
        pairs.sort(key=_FIRST)
    else:
        pairs.sort()
    if pairs and (lastkeys[-1], lastids[-1]) < pairs[0]:
        _append_entries(index, list(map(_FIRST, pairs)), list(map(_SECOND, pairs)))  # all after the last entry
    else:
        _merge_pairs(index, pairs, newer)
    index.grown(len(pairs))


def _merge_pairs(index: OrderedIndex, pairs: list[tuple[Any, Any]], newer: bool) -> None:
    """Pairs in index order merged into the sublists: those that fall before one sublist's
    last entry go into it together (their places found against it as it was, then put in
    from the last one back, so each earlier place still holds), the rest extend the last
    sublist. `newer`: every id is above those the index holds, so a pair goes after every
    entry of its key, found by keys alone (one C-level `map` of bisects a sublist)."""
    keylists, idlists, lastkeys, lastids = index.key_sublists, index.id_sublists, index.last_keys, index.last_ids
    new_keys = list(map(_FIRST, pairs))
    new_ids = list(map(_SECOND, pairs))
    n, at, i = len(pairs), 0, 0
    while at < n:
        key = new_keys[at]
        if newer:
            i = bisect_right(lastkeys, key, i)
        else:
            i = bisect_left(lastkeys, key, i)
            if i < len(lastkeys) and lastkeys[i] == key:
                i = bisect_left(lastids, new_ids[at], i, bisect_right(lastkeys, key, i))
        if i == len(lastkeys):  # this pair and every one after it follow the last entry
            _append_entries(index, new_keys[at:], new_ids[at:])
            return
        # The pairs before sublist i's last entry (never equal to it: an id is held once).
        if newer:
            end = bisect_left(new_keys, lastkeys[i], at)
        else:
            end = bisect_left(pairs, (lastkeys[i], lastids[i]), at)
        keys_i, ids_i = keylists[i], idlists[i]
        if (end - at) * MERGE_AT >= len(keys_i):
            # Many pairs for one sublist: one merge of two sorted runs (entries order by
            # (key, id)) where an insert each would move the sublist's tail each time.
            merged = sorted(chain(zip(keys_i, ids_i), pairs[at:end]))
            if type(keys_i) is list:
                keys_i[:] = map(_FIRST, merged)
            else:  # an array of the index's typecode
                keys_i[:] = array(keys_i.typecode, map(_FIRST, merged))
            ids_i[:] = map(_SECOND, merged)
        else:
            chunk_keys: Any = new_keys[at:end]
            chunk_ids = new_ids[at:end]
            if newer and chunk_keys[0] == chunk_keys[-1]:  # one key: all after its run
                places = [bisect_right(keys_i, chunk_keys[0])]
            elif newer:
                places = list(map(bisect_right, repeat(keys_i), chunk_keys))
            else:
                places = list(map(_place, repeat(keys_i), repeat(ids_i), chunk_keys, chunk_ids))
            if type(keys_i) is not list:  # an array of the index's typecode takes an array's slice
                chunk_keys = array(keys_i.typecode, chunk_keys)
            j = places[0]
            if j == places[-1]:  # all between the same two entries
                keys_i[j:j] = chunk_keys
                ids_i[j:j] = chunk_ids
            else:
                # Pairs sharing a place (a key's pairs, when newer) go in as one slice, the
                # last place first: the order one insert each from the last back leaves.
                cuts = [0, *compress(range(1, len(places)), map(ne, islice(places, 1, None), places)), len(places)]
                for a, b in zip(reversed(cuts), islice(reversed(cuts), 1, None)):
                    j = places[b]
                    keys_i[j:j] = chunk_keys[b:a]
                    ids_i[j:j] = chunk_ids[b:a]
        if len(keys_i) > 2 * LOAD:
            i = _split(index, i) - 1
        at = end


def _place(keys: Any, ids: list[Any], key: Any, id_: Any) -> int:
    """Where (key, id_) goes in one sublist: after the keys before it, and among a run of
    its own key, by id (a run's ids ascend)."""
    j = bisect_left(keys, key)
    if j < len(keys) and keys[j] == key:
        j = bisect_left(ids, id_, j, bisect_right(keys, key, j))
    return j


def _split(index: OrderedIndex, i: int) -> int:
    """Sublist i, over 2 * LOAD entries, cut into sublists of LOAD (the last one taking
    the rest, under 2 * LOAD); returns the index of the sublist after them."""
    keylists, idlists, lastkeys, lastids = index.key_sublists, index.id_sublists, index.last_keys, index.last_ids
    keys_i, ids_i = keylists[i], idlists[i]
    cuts = list(range(0, len(keys_i), LOAD))
    if len(keys_i) - cuts[-1] < LOAD:
        cuts.pop()  # the rest joins the piece before it: LOAD + rest < 2 * LOAD
    bounds = list(zip(cuts, [*cuts[1:], len(keys_i)]))
    keylists[i : i + 1] = [keys_i[a:b] for a, b in bounds]
    idlists[i : i + 1] = [ids_i[a:b] for a, b in bounds]
    lastkeys[i : i + 1] = [keys_i[b - 1] for _a, b in bounds]
    lastids[i : i + 1] = [ids_i[b - 1] for _a, b in bounds]
    return i + len(bounds)


def _append_entries(index: OrderedIndex, keys: list[Any], ids: list[Any]) -> None:
    """Entries in index order (`keys[n]`, `ids[n]`) that all follow the last one: the last
    sublist extended at once, then split as appending one at a time splits it."""
    keylists, idlists, lastkeys, lastids = index.key_sublists, index.id_sublists, index.last_keys, index.last_ids
    keys_i, ids_i = keylists[-1], idlists[-1]
    if type(keys_i) is list:
        keys_i.extend(keys)
    else:  # an array's `extend` of a list checks and puts each item twice; `fromlist` once
        keys_i.fromlist(keys)
    ids_i.extend(ids)
    while len(keys_i) > 2 * LOAD:
        keylists[-1:] = [keys_i[:LOAD], keys_i[LOAD:]]
        idlists[-1:] = [ids_i[:LOAD], ids_i[LOAD:]]
        lastkeys[-1:] = [keys_i[LOAD - 1], keys_i[-1]]
        lastids[-1:] = [ids_i[LOAD - 1], ids_i[-1]]
        keys_i, ids_i = keylists[-1], idlists[-1]
    lastkeys[-1], lastids[-1] = keys_i[-1], ids_i[-1]


def add_hash_run(index: FilterIndex, keys: Sequence[Any], ids: Sequence[Any], ascending: bool = False) -> None:
    """`index.add(keys[n], ids[n])` of each pair, with the same result (module rules).
    `ascending`: the caller knows the ids are ints in strictly ascending order (module docstring)."""
    if isinstance(index, OrderedFilter):  # its `add` drops the set kept for the key, if any
        kept = index.kept_sets
        if kept:
            deque(map(kept.pop, keys, repeat(None)), 0)
        return
    if ids and (ascending or ints_ascending(ids)) and ids[0] >= 0:
        if isinstance(index, UniqueFilter) and None not in keys:
            if ids[-1] < index.nulls.span:  # `add` of a key is `cover` of its id: nothing to cover
                return
        elif isinstance(index, HashIndex) and ids[-1] < index.span:  # nothing to cover
            distinct = set(keys)
            if len(distinct) == 1:  # one key (one object, or equal ones): the bucket `add` finds for each
                groups = [list(ids)]
            elif len(distinct) <= FEW_KEYS:
                groups = [list(compress(ids, map(eq, keys, repeat(key)))) for key in distinct]
            else:
                groups = []
            if groups:
                if sum(map(len, groups)) == len(ids):  # (a compress misses a key unequal to itself: one by one)
                    for key, group in zip(distinct, groups):
                        _add_bucket_run(index, key, group)
                    return
            elif len(distinct) == len(ids) and distinct.isdisjoint(index.buckets):
                # A new key a pair (a field of distinct values: names, emails): `add` of each
                # makes its bucket, a list of its one id.
                index.buckets.update(zip(keys, map(list, zip(ids))))
                return
    deque(map(index.add, keys, ids), 0)


def _add_bucket_run(index: HashIndex, key: Any, ids: list[int]) -> None:
    """`index.add(key, id_)` of each of `ids` (ascending, every one under the index's
    span): a bucket of flags or a set takes them at once, a list that stays a list is
    extended when they follow its last id; anything else one by one."""
    bucket = index.buckets.get(key)
    if isinstance(bucket, IdBits):
        flags = bucket.flags
        first, last = ids[0], ids[-1]
        if last - first + 1 == len(ids) and last < len(flags):
            # A range of ids (a follower's new rows): its flags counted and set as one slice.
            held = flags.count(1, first, last + 1)
            flags[first : last + 1] = _ONES * len(ids)
        else:
            held = sum(map(flags.__getitem__, ids))
            deque(map(flags.__setitem__, ids, repeat(1)), 0)
        bucket.n += len(ids) - held
    elif isinstance(bucket, set):
        bucket.update(ids)
    elif isinstance(bucket, list) and bucket and bucket[-1] < ids[0] and len(bucket) + len(ids) <= SET_AT:
        bucket.extend(ids)
        index.changed(key)
    else:
        deque(map(index.add, repeat(key), ids), 0)
