"""runs.py `add_hash_run` and its `_add_bucket_run` at the edges session 26 left unmutated
(docs/mutation.md, session 27, wt-mpo19): a run of ascending ids into a flags bucket that
is a range reaching into ids already held, or not a range though its first two or last
two ids look like one; a run beside a null key's bucket; a run of few keys holding a null
or a key unequal to itself.

Each is held to `index.add` of each pair in turn, read as a reader reads the index: each
key's members (iteration, `in`, `len`) and the id space. Not the buckets' forms (a list,
a set, flags), which are storage's to choose, so these hold whatever form a bucket takes.
"""

from __future__ import annotations

import pytest

from dbsvc.storage.hashes import SET_AT, HashIndex
from dbsvc.storage.runs import add_hash_run

BIG = 2 * SET_AT  # a key holding most of 0..BIG-1 is kept as flags today
GAP = range(1000, 1200)  # ids 0..BIG-1 held by "a" but these


def seen(index: HashIndex) -> dict:
    """What a reader sees: each key's members in order, its count, `in` over the id space
    (and one past it), and the span."""
    probe = range(-1, index.span + 2)
    return {
        "span": index.span,
        "members": {repr(key): (sorted(bucket), len(bucket)) for key, bucket in index.buckets.items()},
        "in": {repr(key): [i for i in probe if i in bucket] for key, bucket in index.buckets.items()},
    }


def both(span: int, pairs: list[tuple[object, int]]) -> tuple[HashIndex, HashIndex]:
    one, run = HashIndex(span), HashIndex(span)
    for key, id_ in pairs:
        one.add(key, id_)
        run.add(key, id_)
    return one, run


def add_both(one: HashIndex, run: HashIndex, keys: list[object], ids: list[int]) -> None:
    for key, id_ in zip(keys, ids):
        one.add(key, id_)
    add_hash_run(run, keys, ids)


def with_a_gap() -> tuple[HashIndex, HashIndex]:
    """ "a" holds every id of 0..BIG-1 but GAP's (its bucket's flags), "b" a few."""
    return both(2 * BIG, [("a", i) for i in range(BIG) if i not in GAP] + [("b", 1000), ("b", 1001)])


@pytest.mark.parametrize(
    "ids",
    [
        [*range(1000, 1010), 1200, 1201],  # a range whose last ids are held already
        list(range(1190, 1202)),  # ... the same at the gap's end
        list(range(1000, 1200)),  # the whole gap: the ids above it stay as they were
        [1001, 1005, 1007, 1008],  # not a range, though its last three span as many ids as the run holds
        [1005, 1007, 1100],  # not a range, though its first two span three ids
        [1005, 1006, 1008, 1100],  # not a range, though all but its last span four ids
        [1005, 1006, 1009],  # not a range: five ids spanned by three
    ],
    ids=[
        "range, last held",
        "range at the gap's end",
        "whole gap",
        "2nd to last",
        "first two",
        "all but last",
        "span + 2",
    ],
)
def test_a_flags_buckets_run_into_a_gap_below_held_ids_is_add_of_each(ids):
    one, run = with_a_gap()
    add_both(one, run, ["a"] * len(ids), ids)
    assert seen(run) == seen(one)


def test_a_run_beside_a_null_keys_bucket_goes_to_its_own_key():
    # the null key's bucket is a bucket like any other: a run of "a" never lands in it
    one, run = both(1000, [("a", 1), (None, 2), ("b", 3)])
    add_both(one, run, ["a", "a", "b"], [10, 11, 12])
    assert seen(run) == seen(one)


@pytest.mark.parametrize(
    "keys",
    [[None, "a"], ["a", None, None, "a"], [None, "a", "b", None]],
    ids=["a null and a key", "nulls in the middle", "three keys"],
)
def test_a_run_of_few_keys_one_of_them_null_is_add_of_each(keys):
    one, run = both(1000, [("a", 1), (None, 2), ("b", 3)])
    add_both(one, run, keys, list(range(10, 10 + len(keys))))
    assert seen(run) == seen(one)


@pytest.mark.parametrize("held", [True, False], ids=["its bucket held", "a new bucket"])
def test_a_run_of_few_keys_one_unequal_to_itself_is_add_of_each(held):
    # NaN: the dict finds it by identity, `==` never matches it, so gathering each key's
    # ids by comparison misses its own; the run must then go a pair at a time
    nan = float("nan")
    one, run = both(1000, [("a", 1), *([(nan, 2)] if held else [])])
    add_both(one, run, [nan, "a", nan], [10, 11, 12])
    assert seen(run) == seen(one)
    assert [sorted(b) for k, b in run.buckets.items() if k is nan] == [[2, 10, 12] if held else [10, 12]]
