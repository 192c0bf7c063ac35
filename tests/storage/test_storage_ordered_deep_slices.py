"""A sort field's ids at a deep offset (`OrderedIndex.ids_slice`, `?sort=score&offset=`),
found past FOUND_FROM by a descent of the sublists' lengths kept in a Fenwick tree
(storage/sortedlist.py `counted_slice`): each slice is the same positions of the brute
force order, keys ascending, ties by id, nulls last.

The tree is built by the first deep slice and then kept by every entry added or removed,
or dropped when the sublists themselves move: a count it missed shifts every later deep
slice. So the slices are asked (the tree built) before each change and after it, across a
delete before the offset, a whole sublist emptied, re-inserts in the middle, a split, a
key moved, and nulls added and removed. 3,000 entries make five or six sublists (LOAD 512).
"""

from __future__ import annotations

from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.sortedlist import FOUND_FROM, LOAD

N = 3000


def key_of(i: int) -> int | None:
    """Ties (37 keys over 3,000 ids) and a null every 11th id."""
    return None if i % 11 == 0 else (i * 7) % 37


def brute(entries: dict[int, int | None]) -> list[int]:
    keyed = sorted((k, i) for i, k in entries.items() if k is not None)
    return [i for _k, i in keyed] + sorted(i for i, k in entries.items() if k is None)


def assert_slices(index: OrderedIndex, entries: dict[int, int | None]) -> None:
    want = brute(entries)
    n = len(want)
    starts = [0, 1, 20, FOUND_FROM - 1, FOUND_FROM, FOUND_FROM + 1, LOAD * 2 + 3, 1500, 2047, 2048]
    starts += [n - len(index.nulls) - 5, n - len(index.nulls), n - 20, n - 1, n, n + 5]
    bound = 0
    for sub in index.id_sublists:  # pages ending one short of a sublist's end, at it, one past it
        bound += len(sub)
        starts += [bound - 21, bound - 20, bound - 19, bound - 1, bound]
    for start in starts:
        for size in (1, 20, 700, 1500):  # a page inside one sublist, across two, across several
            got = index.ids_slice(start, start + size)
            assert got == want[start : start + size], (start, size)
    assert index.ids_slice(FOUND_FROM + 10, FOUND_FROM + 10) == []
    assert index.ids_slice(FOUND_FROM + 10, FOUND_FROM) == []


def test_deep_slices_follow_every_change_to_the_sublists() -> None:
    entries = {i: key_of(i) for i in range(1, N + 1)}
    index = OrderedIndex(((k, i) for i, k in entries.items()))
    assert len(index.id_sublists) >= 5  # the layout this test means: several sublists
    assert_slices(index, entries)

    def remove(*ids: int) -> None:
        for i in ids:
            index.remove(entries.pop(i), i)

    def add(*ids: int, key=key_of) -> None:
        for i in ids:
            entries[i] = key(i)
            index.add(entries[i], i)

    first = index.id_sublists[0][0]
    remove(first)  # one entry before every deep offset
    assert_slices(index, entries)
    second = list(index.id_sublists[1])
    remove(*second)  # a whole sublist emptied, dropped from the layout
    assert_slices(index, entries)
    add(first, *second[:100])  # back in the middle
    assert_slices(index, entries)
    add(*range(N + 1, N + 1 + 2 * LOAD + 50), key=lambda i: 5)  # one key's run: a split in it
    assert_slices(index, entries)
    moved = next(i for i, k in entries.items() if k == 3)
    index.move(3, 36, moved)  # a key changed: out of one sublist, into another
    entries[moved] = 36
    assert_slices(index, entries)
    nulled = next(i for i, k in entries.items() if k == 0)
    index.move(0, None, nulled)  # a key made null: a position fewer before every deep offset
    entries[nulled] = None
    assert_slices(index, entries)
    remove(*[i for i, k in entries.items() if k is None][:30])  # nulls removed
    assert_slices(index, entries)


def test_a_deep_slice_of_an_index_built_from_columns() -> None:
    """The bulk build (a snapshot's load) holds no tree until the first deep slice."""
    ids = list(range(1, N + 1))
    keys = [key_of(i) for i in ids]
    index = OrderedIndex.from_columns(keys, ids)
    assert_slices(index, dict(zip(ids, keys)))
