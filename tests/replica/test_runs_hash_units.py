"""runs.py `add_hash_run`: a follower's run into a filter index (hashes.py) at once, held to
`add` of each pair in turn (session 9, rep80). A run of ascending ids under the index's
span adds a few keys' ids to their buckets a key at a time (flags set in one pass, a set
updated, a list extended past its last id, a kept set of that list dropped); anything
else goes one pair at a time (a new key, a list that would pass SET_AT, an id that widens
the span, ids out of order, str ids, many keys). A @unique filter's run of non-null keys
covers its ids and nothing more. A run of keys all new and distinct (a field of distinct
values: names) makes a bucket a key at once (session 13, rep9)."""

from __future__ import annotations

import pytest

from dbsvc.storage.hashes import SET_AT, HashIndex, IdBits, OrderedFilter, UniqueFilter
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.runs import add_hash_run


def hash_state(index: HashIndex) -> dict:
    """What a reader can see of a hash index, and the bucket forms it chose."""
    return {
        "span": index.span,
        # a list bucket as it stands (its order is what readers bisect), every bucket's
        # members as `in` sees them (flags hold exactly 1 for a member)
        "buckets": {
            key: (type(b).__name__, b if type(b) is list else sorted(b), len(b), sorted(i for i in b if i in b))
            for key, b in index.buckets.items()
        },
        "kept": sorted(index.kept_sets, key=repr),
    }


def two(span: int, pairs: list[tuple[object, int]], kept: tuple[object, ...] = ()) -> tuple[HashIndex, HashIndex]:
    one, many = HashIndex(span), HashIndex(span)
    for key, id_ in pairs:
        one.add(key, id_)
        many.add(key, id_)
    for key in kept:  # a walk asked for a list bucket's set (query.py), kept until it changes
        one.keeper(key)
        many.keeper(key)
    return one, many


def check(one: HashIndex, many: HashIndex, keys: list[object], ids: list[object]) -> None:
    for key, id_ in zip(keys, ids):
        one.add(key, id_)
    add_hash_run(many, keys, ids)
    assert hash_state(many) == hash_state(one)


BIG = 2 * SET_AT  # ids 0..BIG-1 held: a key holding most of them is flags (IdBits)


@pytest.mark.parametrize(
    "case",
    [
        "flags",
        "flags, an id already held",
        "flags, ids with a gap, one held",
        "a set",
        "lists extended, their kept sets dropped",
        "a list that would pass SET_AT",
        "a new key",
        "ids that widen the span",
        "ids out of order",
        "str ids",
        "many keys",
        "many new keys",
        "many new keys, one held",
        "many new keys, one twice",
        "many new keys, one null",
        "one id",
        "a negative id first",
        "the last id at the span",
        "the last id past the span, the one before under it",
        "a key unequal to itself",
    ],
)
def test_a_hash_run_is_add_one_at_a_time(case):
    if case.startswith("flags"):
        one, many = two(2 * BIG, [("a", i) for i in range(BIG)])
        assert type(many.buckets["a"]) is IdBits
        ids = list(range(BIG, BIG + 300))
        if case.endswith("already held"):
            ids = [BIG - 1, *ids]  # held already: counted once (a range of ids: its flags a slice)
        elif case.endswith("one held"):
            ids = [BIG - 1, BIG + 5, *ids[10:]]  # not a range: its flags one at a time
        check(one, many, ["a"] * len(ids), ids)
    elif case == "a set":
        one, many = two(100 * BIG, [("a", 50 * i) for i in range(SET_AT + 1)])
        assert type(many.buckets["a"]) is set
        check(one, many, ["a"] * 5, list(range(60 * SET_AT, 60 * SET_AT + 5)))
    elif case.startswith("lists"):
        one, many = two(1000, [("a", 1), ("b", 2), ("c", 3)], kept=("a", "b"))
        assert many.kept_sets
        check(one, many, ["a", "b", "a", "b", "b"], [10, 11, 12, 13, 14])
    elif case.startswith("a list that"):
        one, many = two(4 * SET_AT, [("a", i) for i in range(SET_AT - 2)])
        check(one, many, ["a"] * 5, list(range(SET_AT, SET_AT + 5)))
        assert type(many.buckets["a"]) is not list
    elif case == "a new key":
        one, many = two(1000, [("a", 1)])
        check(one, many, ["a", "new", "new"], [10, 11, 12])
    elif case.startswith("ids that widen"):
        one, many = two(100, [("a", i) for i in range(50)])
        check(one, many, ["a"] * 200, list(range(60, 260)))
    elif case == "ids out of order":
        one, many = two(1000, [("a", 1)])
        check(one, many, ["a", "a"], [20, 10])
    elif case == "str ids":
        one, many = two(-1, [("a", "x")])
        check(one, many, ["a", "a"], ["y", "z"])
    elif case == "many keys":
        one, many = two(1000, [(k, k) for k in range(10)])
        check(one, many, list(range(10)), list(range(100, 110)))
    elif case.startswith("many new keys"):
        # A key a pair, none held yet (a run's names): each a new bucket of its one id; a
        # key held already, or one twice, leaves the run to `add` of each.
        one, many = two(1000, [("a", 1), ("b", 2)])
        keys: list[object] = [f"k{i}" for i in range(10)]
        if case.endswith("held"):
            keys[5] = "b"
        elif case.endswith("twice"):
            keys[7] = "k2"
        elif case.endswith("null"):
            keys[3] = None
        check(one, many, keys, list(range(100, 110)))
        assert (type(many.buckets["k9"]), many.buckets["k9"]) == (list, [109])
    elif case == "one id":
        one, many = two(1000, [("a", 1)])
        check(one, many, ["a"], [5])
    elif case == "a negative id first":
        one, many = two(1000, [("a", 1)])
        check(one, many, ["a", "a"], [-1, 5])
    elif case == "the last id at the span":
        one, many = two(100, [("a", 1)])
        check(one, many, ["a", "a"], [60, 100])
    elif case.startswith("the last id past"):
        one, many = two(100, [("a", 1)])
        check(one, many, ["a", "a", "a"], [60, 61, 200])
    else:
        nan = float("nan")  # a key the dict finds by identity and `==` never matches
        one, many = two(1000, [(nan, 1)])
        check(one, many, [nan, nan], [5, 6])


@pytest.mark.parametrize("keys", [["x", "y", "z"], ["x", None, "z"]], ids=["non-null keys", "a null"])
@pytest.mark.parametrize(
    "ids",
    [[10, 11, 12], [10, 500, 2000], [10, 11, 2000], [10, 11, 100]],
    ids=["under the span", "widening it", "the last past the span", "the last at the span"],
)
def test_a_unique_filters_run_is_add_one_at_a_time(keys, ids):
    one, many = UniqueFilter({}, 100), UniqueFilter({}, 100)
    for key, id_ in zip(keys, ids):
        one.add(key, id_)
    add_hash_run(many, keys, ids)
    assert hash_state(many.nulls) == hash_state(one.nulls)


@pytest.mark.parametrize("kept", [(), ("b",), ("a", "b", "zz")], ids=["none kept", "one kept", "several kept"])
def test_an_ordered_filters_run_drops_the_kept_sets_of_its_keys(kept):
    # A @filter @sort field's filter index (hashes.py OrderedFilter) keeps no buckets: its
    # `add` only drops the set a walk was given for the key. A run does that for all of its
    # keys at once, where it was one `add` call a pair (session 13, rep9).
    def made() -> OrderedFilter:
        index = OrderedFilter(OrderedIndex([("a", 1), ("b", 2), ("zz", 3)]))
        for key in kept:
            index.keeper(key)
        return index

    one, many = made(), made()
    keys, ids = ["b", "c", "b", "zz"], [10, 11, 12, 13]
    for key, id_ in zip(keys, ids):
        one.add(key, id_)
    add_hash_run(many, keys, ids)
    assert sorted(many.kept_sets) == sorted(one.kept_sets) == sorted(set(kept) - set(keys))
