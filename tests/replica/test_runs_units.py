"""runs.py at the decisions the random runs of test_replica_apply_runs.py reach seldom or
never: a sorted run whose first entry is below the last one held (or one entry alone), an
ordered run whose first pair goes inside and the rest after the end, a run of more than
2 * LOAD pairs into a middle sublist (split there, the sublists after it kept), and a run
of more than 4 * LOAD pairs past the end (every sublist's last key and id kept). Each is
held to `add` of each entry in turn."""

from __future__ import annotations

import pytest

from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.runs import add_ordered_run, add_sorted_run
from dbsvc.storage.sortedlist import LOAD, SortedIndex
from tests.replica.test_replica_apply_runs import _ordered_shape


def test_a_sorted_run_not_past_the_last_entry_is_added_one_by_one():
    for held, run in [
        ([1, 2, 3, 20], [15, 25, 30]),  # above the sublist's second and next-to-last entries, below its last
        ([1, 2, 3, 20], [25]),  # one entry past the end
        ([1, 2, 3, 20], [10, 30]),  # the first below the last, the second past it
    ]:
        one, many = SortedIndex(held), SortedIndex(held)
        for entry in run:
            one.add(entry)
        add_sorted_run(many, run)
        assert list(many) == sorted(held + run) == list(one), (held, run)


def ordered(pairs: list[tuple[int, int]]) -> tuple[OrderedIndex, OrderedIndex]:
    one, many = OrderedIndex(typecode="q"), OrderedIndex(typecode="q")
    for key, id_ in pairs:
        one.add(key, id_)
        many.add(key, id_)
    return one, many


def check_run(one: OrderedIndex, many: OrderedIndex, keys: list[int], ids: list[int], ascending: bool = False) -> None:
    for key, id_ in zip(keys, ids):
        one.add(key, id_)
    add_ordered_run(many, keys, ids, ascending)
    assert _ordered_shape(many) == _ordered_shape(one)
    assert list(many.last_keys) == [k[-1] for k in many.key_sublists]
    assert list(many.last_ids) == [i[-1] for i in many.id_sublists]


def test_an_ordered_run_with_its_first_pair_inside_and_the_rest_after_the_end():
    one, many = ordered([(k, k + 1) for k in range(11)])
    check_run(one, many, [5, 20], [100, 101])
    assert list(many) == sorted([(k, k + 1) for k in range(11)] + [(5, 100), (20, 101)])


@pytest.mark.parametrize("ascending", [False, True], ids=["ids checked by the run", "ids known ascending"])
def test_a_long_run_into_a_middle_sublist_splits_it_and_keeps_the_ones_after(ascending):
    one, many = ordered([(10 * k, k + 1) for k in range(5 * LOAD)])  # three sublists or more
    assert len(many.key_sublists) >= 3
    keys = [k for k in range(1, 10 * LOAD) if k % 10][: 3 * LOAD]  # distinct, inside the first sublist's keys
    check_run(one, many, keys, list(range(10**6, 10**6 + 3 * LOAD)), ascending)
    assert len(many) == 8 * LOAD


def test_a_run_past_the_end_longer_than_four_sublists_keeps_every_last_entry():
    one, many = ordered([(k, k + 1) for k in range(10)])
    keys = list(range(100, 100 + 5 * LOAD))
    check_run(one, many, keys, list(range(100, 100 + 5 * LOAD)))
    assert len(many.key_sublists) >= 3


@pytest.mark.parametrize(
    "typecode, held_key, new_key",
    [
        ("q", lambda k: k % 7, lambda n: n * 5 % 7),  # a few int keys, many pairs a key
        ("", lambda k: f"k{k % 50:03}", lambda n: f"k{n * 13 % 60:03}"),  # str keys, some new
        ("", lambda k: float(k % 5), lambda n: n % 6 if n % 2 else float(n % 6)),  # 1 == 1.0
        ("", lambda k: None if k % 9 == 0 else k % 4, lambda n: None if n % 5 == 0 else n % 4),  # nulls
    ],
    ids=["int keys", "str keys", "int and float keys equal", "null keys"],
)
@pytest.mark.parametrize("start", [10**6, 3], ids=["ids above the held ones", "ids among the held ones"])
def test_an_ascending_run_sorted_by_key_alone_is_add_of_each(typecode, held_key, new_key, start):
    # Told that the ids ascend, add_ordered_run sorts the pairs by key alone (a stable sort
    # leaves one key's pairs by id); the index must be what `add` of each leaves.
    held = [(held_key(k), 2 * k) for k in range(6 * LOAD)]
    one, many = OrderedIndex(held, typecode), OrderedIndex(held, typecode)
    ids = list(range(start, start + 4 * LOAD, 2))  # from 3: odd ids between the held even ones
    keys = [new_key(n) for n in range(len(ids))]
    check_run(one, many, keys, ids, ascending=True)
    assert list(many.nulls) == list(one.nulls)
    assert len(many) == len(held) + len(ids)


@pytest.mark.parametrize("typecode", ["", "q"])
@pytest.mark.parametrize(
    "ids",
    [[5, 6, 7, 8], [5, 7, 6, 8], [5, 6, 8], [6, 7, 8, 9]],
    ids=["the next ids", "the next ids, two swapped", "one missing", "one past the end first"],
)
@pytest.mark.parametrize("ascending", [False, True], ids=["ids checked", "ids known ascending when they are"])
def test_a_key_columns_run_is_set_of_each(typecode, ids, ascending):
    # keycolumns.py `set_many` extends the slots at once only for exactly the ids that come
    # next, in order (its list compare, session 13, rep9); anything else is `set` of each.
    # Told that the ids ascend (tableruns.py), it reads that from the first and last alone.
    from dbsvc.storage.keycolumns import KeyColumn

    one, many = KeyColumn(typecode), KeyColumn(typecode)
    for column in (one, many):
        for id_ in range(5):
            column.set(id_, 100 + id_)
    keys = [200 + n for n in range(len(ids))]
    for id_, key in zip(ids, keys):
        one.set(id_, key)
    many.set_many(ids, keys, ascending and ids == sorted(set(ids)))
    got = [many.get(i) for i in sorted(set(ids))]
    assert got == [one.get(i) for i in sorted(set(ids))]
    assert (list(many.slots), dict(many.far), len(many)) == (list(one.slots), dict(one.far), len(one))


@pytest.mark.parametrize("typecode", ["", "q"])
@pytest.mark.parametrize("start", [10**6, 1], ids=["ids above the held ones", "ids among the held ones"])
@pytest.mark.parametrize("seed", range(6))
def test_a_few_keys_into_each_sublist_go_in_as_add_of_each(typecode, start, seed):
    # Fewer pairs a sublist than its merge takes (MERGE_AT), over a handful of keys, so a
    # sublist's chunk has pairs at several places (inserted from the last back); the index
    # must be what `add` of each leaves. A chunk put in by runs of one place as slices was
    # measured in session 22 and not kept (no difference a pair a replica's group brings).
    import random

    rng = random.Random(seed)
    held = [(k // 40, 2 * k) for k in range(8 * LOAD)]  # runs of 40 equal keys
    one, many = OrderedIndex(held, typecode), OrderedIndex(held, typecode)
    ids = sorted(rng.sample(range(start, start + 8 * LOAD * 2, 2), 24))  # odd ids sit among the even held ones
    top = held[-1][0]
    keys = [rng.choice((0, 3, top // 2, top // 2 + 1, top - 1)) for _ in ids]
    check_run(one, many, keys, ids, ascending=rng.random() < 0.5)
    assert len(many) == len(held) + len(ids)
