"""A range's size from the sublists' counts (storage/fenwick.py, issue 34's range figure):
`OrderedIndex.count_span` agrees with counting the entries, between any two positions,
while entries come and go, sublists split and empty, and counts are asked in between."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbsvc.storage.fenwick import Fenwick
from dbsvc.storage.indexes import OrderedIndex


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 50), max_size=40),
    changes=st.lists(st.tuples(st.integers(0, 39), st.integers(-3, 3)), max_size=20),
)
def test_fenwick_prefix_sums_follow_each_change(counts, changes):
    tree = Fenwick(counts)
    for i, delta in changes:
        if i < len(counts):
            counts[i] += delta
            tree.add(i, delta)
        assert [tree.prefix(k) for k in range(len(counts) + 1)] == [sum(counts[:k]) for k in range(len(counts) + 1)]


def brute_count(index: OrderedIndex, low, high) -> int:
    return sum(1 for key, _id in index if key is not None and low <= key <= high)


@pytest.mark.parametrize("typecode", ["", "d"])
def test_count_span_agrees_with_the_entries_through_splits_and_removals(typecode):
    rng = random.Random(36)
    index = OrderedIndex(typecode=typecode)
    held: dict[int, float] = {}
    for step in range(6000):
        if held and rng.random() < 0.35:
            id_ = rng.choice(list(held)) if step % 50 == 0 else next(iter(held))
            index.remove(held.pop(id_), id_)
        else:
            id_ = step + 1
            held[id_] = float(rng.randint(0, 300)) if rng.random() < 0.9 else None
            index.add(held[id_], id_)
        if step % 97 == 0:  # asked now and then: the tree is built, then kept or dropped
            low, high = sorted((float(rng.randint(0, 300)), float(rng.randint(0, 300))))
            start, stop = index.lower(low, True), index.upper(high, True)
            assert index.count_span(start, stop) == brute_count(index, low, high), step
    # whole spans, and every key's run, at the end
    assert index.count_span((0, 0), index.end) == sum(1 for k in held.values() if k is not None)
    for key in set(held.values()) - {None}:
        assert index.count_span(index.lower(key, True), index.upper(key, True)) == index.run_count(key)


@pytest.mark.parametrize("distinct", [3, 40, 5000])
def test_a_descending_page_by_position_is_the_walk_from_the_top(distinct):
    """`ids_descending` (a deep offset of a descending sort) against the descending order
    written out: keys descending, ids ascending in a run, runs crossing sublists."""
    rng = random.Random(distinct)
    index = OrderedIndex(typecode="q")
    keys = {}
    for id_ in rng.sample(range(1, 4000), 2500):
        keys[id_] = rng.randint(0, distinct)
        index.add(keys[id_], id_)
    for id_ in rng.sample(sorted(keys), 300):  # some removed: sublists shrink
        index.remove(keys.pop(id_), id_)
    order = [i for _k, i in sorted(((-k, i) for i, k in keys.items()))]
    for start, stop in [(0, 20), (1, 21), (600, 620), (1000, 1100), (2180, 2220), (2195, 2200), (2200, 2300), (5, 5)]:
        assert index.ids_descending(start, stop) == order[start:stop], (start, stop)
