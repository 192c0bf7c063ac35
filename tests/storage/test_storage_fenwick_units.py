"""Exact cases of the Fenwick tree (storage/fenwick.py) and the key columns
(storage/keycolumns.py) at their decisions: a count at both ends, `find` on each side of a
boundary, a column's slots against its dict of far ids (the ends of `max(2 * count,
len + STEP)`), the gaps a set or a build leaves, the nulls' place in each direction.
Fixture-free and in milliseconds: bench/mutation_inprocess.py runs them per mutant
(docs/mutation.md, the storage query modules' section)."""

from __future__ import annotations

from array import array

import pytest

from dbsvc.storage.fenwick import Fenwick
from dbsvc.storage.keycolumns import KeyColumn

# -- Fenwick ---------------------------------------------------------------------------


def test_a_tree_of_no_counts_sums_to_zero_and_finds_nothing():
    tree = Fenwick([])
    assert len(tree) == 0 and tree.tree == [0]
    assert tree.prefix(0) == 0
    assert tree.find(0) == (0, 0)


def test_the_built_slots_are_the_sums_of_their_spans():
    # slot k holds the counts (k - lowbit(k), k]: 1:[1] 2:[1,2] 3:[3] 4:[1..4] 5:[5] 6:[5,6] 7:[7] 8:[1..8]
    tree = Fenwick([1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert tree.tree == [0, 1, 3, 3, 10, 5, 11, 7, 36, 9]
    assert len(tree) == 9


def test_prefix_sums_at_both_ends_and_between():
    counts = [4, 0, 7, 1, 3, 0, 2]
    tree = Fenwick(counts)
    assert [tree.prefix(i) for i in range(8)] == [0, 4, 4, 11, 12, 15, 15, 17]


def test_add_to_the_first_and_the_last_count_moves_only_the_sums_after_it():
    tree = Fenwick([1, 1, 1, 1, 1, 1, 1, 1])
    tree.add(7, 5)  # the last count: every slot it belongs to is inside the tree
    assert [tree.prefix(i) for i in range(9)] == [0, 1, 2, 3, 4, 5, 6, 7, 13]
    tree.add(0, -1)
    assert [tree.prefix(i) for i in range(9)] == [0, 0, 1, 2, 3, 4, 5, 6, 12]
    tree.add(3, 2)
    assert tree.tree == [0, 0, 1, 1, 5, 1, 2, 1, 14]


def test_add_walks_up_by_the_lowest_bit_to_the_very_last_slot():
    tree = Fenwick([1] * 8)
    tree.add(2, 4)  # count 2 is in the slots 3, 4 and 8, not 6
    assert tree.tree == [0, 1, 2, 5, 8, 1, 2, 1, 12]
    three = Fenwick([1, 1, 1])
    three.add(2, 1)  # slot 3, then 3 + 1 = 4: one past the last slot, where the walk stops
    assert three.tree == [0, 1, 2, 2] and three.prefix(3) == 4


def test_find_names_the_count_holding_a_position_and_the_position_inside_it():
    tree = Fenwick([3, 0, 2, 5])  # positions 0-2 in count 0, 3-4 in count 2, 5-9 in count 3
    assert [tree.find(p) for p in range(10)] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (2, 0),
        (2, 1),
        (3, 0),
        (3, 1),
        (3, 2),
        (3, 3),
        (3, 4),
    ]


def test_find_over_a_power_of_two_of_counts_reaches_the_last():
    tree = Fenwick([1] * 8)
    assert [tree.find(p) for p in range(8)] == [(i, 0) for i in range(8)]
    one = Fenwick([4])
    assert [one.find(p) for p in range(4)] == [(0, 0), (0, 1), (0, 2), (0, 3)]


# -- KeyColumn ---------------------------------------------------------------------------


def test_ids_in_order_fill_the_slots_one_append_each():
    column = KeyColumn("q")
    for i in range(3):
        column.set(i, 10 - i)
    assert column.slots == array("q", [10, 9, 8]) and column.far == {} and len(column) == 3


def test_an_id_past_the_end_leaves_zeroed_or_empty_slots_before_it():
    numbers = KeyColumn("d")
    numbers.set(3, 2.5)
    assert numbers.slots == array("d", [0.0, 0.0, 0.0, 2.5]) and len(numbers) == 1
    keys = KeyColumn()
    keys.set(2, "b")
    assert keys.slots == [None, None, "b"] and len(keys) == 1


def test_the_slots_take_ids_up_to_the_larger_of_twice_the_count_and_the_length_plus_a_step():
    column = KeyColumn()
    column.set(0, "a")
    column.set(1024, "b")  # len 1 + STEP 1024 = 1025: slot 1024 is the last one taken
    assert len(column.slots) == 1025 and column.far == {}
    column.set(2 * 1025 + 2000, "far")  # past max(2 * 2, 1025 + 1024)
    assert column.far == {4050: "far"}
    column.set(2049, "c")  # len 1025 + 1024 = 2049 is past the end: far
    assert 2049 in column.far and len(column.slots) == 1025
    column.set(2048, "d")  # the last slot max(2 * 2, 2049) admits
    assert column.slots[2048] == "d" and 2048 not in column.far
    assert len(column) == 5 and column.get(2049) == "c" and column.get(4050) == "far"


def test_the_count_of_slots_widens_what_they_take():
    column = KeyColumn()
    for i in range(3000):  # appended one by one: the count is 3000, the length 3000
        column.set(i, i)
    column.set(5999, "x")  # under 2 * 3000: a slot, past len + STEP (4024)
    assert column.far == {} and column.get(5999) == "x"
    column.set(7002, "y")  # 2 * 3001 = 6002 and 6000 + 1024 = 7024: a slot
    column.set(14100, "z")  # past both: far
    assert column.far == {14100: "z"} and column.get(7002) == "y"
    three = KeyColumn()
    for i in range(3000):
        three.set(i, i)
    three.set(6500, "w")  # past 2 * 3000 and 3000 + 1024: far (not under three times the count)
    assert three.far == {6500: "w"}


def test_negative_and_string_ids_live_in_the_dict_and_leave_the_count_of_slots():
    column = KeyColumn("q")
    column.set(-1, 5)
    column.set("a", 6)
    column.set(0, None)
    assert column.far == {-1: 5, "a": 6} and column.nulls == {0}
    assert column.slots == array("q", [0]) and len(column) == 3
    assert column.get(-1) == 5 and column.get(0) is None
    column.discard(-1)
    column.discard(0)
    assert column.far == {"a": 6} and column.nulls == set() and len(column) == 1
    assert column.slots == array("q", [0])


def test_an_id_once_in_the_dict_stays_there_when_it_comes_back():
    column = KeyColumn()
    column.set(5000, "far")
    column.discard(5000)
    column.set(0, "a")
    column.far[7] = "kept"  # an id the dict holds: `set` never moves it to the slots
    column.set(7, "again")
    assert column.far == {7: "again"} and column.slots == ["a"]


def test_discard_empties_a_slot_and_counts_one_fewer():
    column = KeyColumn("d")
    column.set(0, 1.5)
    column.set(1, 2.5)
    column.discard(0)
    assert column.slots == array("d", [0.0, 2.5]) and len(column) == 1
    words = KeyColumn()
    words.set(0, "a")
    words.discard(0)
    assert words.slots == [None] and len(words) == 0


def test_a_null_in_a_number_column_is_a_zero_slot_and_a_member_of_the_nulls():
    column = KeyColumn("q")
    column.set(0, 0)
    column.set(1, None)
    assert column.slots == array("q", [0, 0]) and column.nulls == {1}
    assert column.get(0) == 0 and column.get(1) is None


@pytest.mark.parametrize("desc", [False, True])
def test_order_puts_the_nulls_last_ascending_and_first_descending(desc):
    column = KeyColumn("q")
    for id_, key in [(1, 5), (2, None), (3, 1), (4, 5), (5, None), (6, 3)]:
        column.set(id_, key)
    if desc:
        assert column.order([1, 2, 3, 4, 5, 6], True) == [2, 5, 1, 4, 6, 3]
    else:
        assert column.order([1, 2, 3, 4, 5, 6], False) == [3, 6, 1, 4, 2, 5]


def test_order_without_a_null_among_the_ids_and_with_far_ids():
    column = KeyColumn()
    for id_, key in [(0, "b"), (1, None), (2, "a"), (9000, "a")]:
        column.set(id_, key)
    assert column.far == {9000: "a"}
    assert column.order([0, 2, 9000], False) == [2, 9000, 0]
    assert column.order([0, 2, 9000], True) == [0, 2, 9000]
    assert column.order([9000, 1, 0], True) == [1, 0, 9000]
    assert column.order([], False) == []


@pytest.mark.parametrize(
    "ids, slots",
    [
        ([2, 3, 4], [None, None, "a", None, "c"]),  # no gaps: the slots start with `first` empty ones
        ([0, 2, 5], ["a", None, None, None, None, "c"]),  # gaps: one slot an id up to the last
        ([0, 2, 4], ["a", None, None, None, "c"]),  # two gaps: last - first - 1 ids, still gaps
    ],
)
def test_from_columns_lays_the_slots_out_by_id(ids, slots):
    keys = ["a", None, "c"]
    column = KeyColumn.from_columns(keys, ids)
    # the null's slot holds None (a list column), its id is in the nulls
    assert column.slots == slots and column.nulls == {ids[1]} and column.far == {}
    assert len(column) == 3 and [column.get(i) for i in ids] == keys


@pytest.mark.parametrize("ids, slots", [([1, 2], [0.0, 1.5, 0.0]), ([0, 3], [1.5, 0.0, 0.0, 0.0])])
def test_from_columns_of_numbers_zeroes_the_nulls_and_the_gaps(ids, slots):
    column = KeyColumn.from_columns([1.5, None], ids, "d")
    assert column.slots == array("d", slots) and column.nulls == {ids[1]}
    assert [column.get(i) for i in ids] == [1.5, None]
    column.set(max(ids) + 1, 7.0)  # the next id after a build is an append
    assert column.slots[-1] == 7.0 and len(column) == 3
    column.discard(ids[0])  # a number column's empty slot is 0, never None
    assert column.slots[ids[0]] == 0.0 and len(column) == 2
    column.set(ids[0], None)
    assert column.slots[ids[0]] == 0.0 and column.get(ids[0]) is None


def test_from_columns_of_an_array_without_nulls_copies_it():
    column = KeyColumn.from_columns(array("q", [7, 8, 9]), [1, 2, 3], "q")
    assert column.slots == array("q", [0, 7, 8, 9]) and column.nulls == set() and len(column) == 3


@pytest.mark.parametrize(
    "ids",
    [[-1, 0, 1], [0, 1, 2048], [5, 6, 1030]],  # a negative first id; a last id at max(2 * 3, STEP) and past it
)
def test_from_columns_scatters_ids_the_slots_would_hold_badly(ids):
    column = KeyColumn.from_columns(["a", "b", "c"], ids)
    assert [column.get(i) for i in ids] == ["a", "b", "c"] and len(column) == 3
    assert set(column.far) >= {i for i in ids if i < 0 or i >= 1024 * 2}


def test_from_columns_keeps_a_last_id_just_under_the_step_in_the_slots():
    column = KeyColumn.from_columns(["a", "b"], [0, 1023])
    assert column.far == {} and len(column.slots) == 1024 and column.get(1023) == "b"
    scattered = KeyColumn.from_columns(["a", "b"], [0, 2000])  # set one by one: 2000 is far
    assert scattered.far == {2000: "b"} and scattered.slots == ["a"]


@pytest.mark.parametrize(
    "ids, far",
    [
        (list(range(1099)) + [2199], {}),  # under 2 * 1100: one layout, though one set at a time would not take it
        (list(range(1099)) + [2200], {2200: "z"}),  # 2 * 1100: set one by one, and 2200 is far from 1099
        (list(range(599)) + [1700], {1700: "z"}),  # past max(1200, 1024): one by one, far from 599 + 1024
    ],
)
def test_from_columns_builds_in_place_exactly_under_twice_the_ids_or_the_step(ids, far):
    keys = [float(i % 7) for i in ids[:-1]] + ["z"]
    column = KeyColumn.from_columns(keys, ids)
    assert column.far == far and len(column) == len(ids) and column.get(ids[-1]) == "z"
    assert len(column.slots) == (ids[-1] + 1 if not far else ids[-2] + 1)


def test_from_columns_of_numbers_scattered_keeps_its_typecode():
    column = KeyColumn.from_columns([1, 2], [-3, 4], "q")
    assert column.far == {-3: 1} and column.slots == array("q", [0, 0, 0, 0, 2])
    column.discard(4)
    assert column.slots == array("q", [0, 0, 0, 0, 0])


def test_from_columns_of_nothing_and_from_pairs():
    assert len(KeyColumn.from_columns([], [], "q")) == 0
    column = KeyColumn.from_pairs([("b", 1), (None, 0)])
    assert column.slots == [None, "b"] and column.nulls == {0} and len(column) == 2
    numbers = KeyColumn.from_pairs([(5, 1), (None, 0)], "q")
    assert numbers.slots == array("q", [0, 5]) and numbers.typecode == "q"


def test_nbytes_counts_the_three_containers():
    from sys import getsizeof

    column = KeyColumn("q")
    for i in range(100):
        column.set(i, i)
    column.set(-5, 1)
    column.set(3000, None)
    want = getsizeof(column.slots) + getsizeof(column.far) + getsizeof(column.nulls)
    assert column.nbytes() == want and getsizeof(column.slots) > 800
