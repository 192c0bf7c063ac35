"""A page sorted on several keys found by position (orders.py `page_in_order`): the ids at
[offset, end) by the first key, widened to whole runs of equal first keys, ordered by every
key. Same pages as the reference order (tests/storage/test_storage_plan_units.py) at every
offset around the runs' ends, over the table's index (no filter, query.py) and over a
filter value's bucket kept in order (bucketplan.py), both directions; an order holding
nulls is left to the walk of its runs; and the page is found without a Python call an
entry before it (it walked the runs one generator step an id). An ascending first page is
left to that walk (None), which orders only its first runs; a descending one is taken from
the kept span (wt-m1m); the list tests ask both through the plans."""

from __future__ import annotations

import random
import sys

import pytest

from dbsvc.storage import query as plans
from dbsvc.storage.buckets import BUCKET_AT
from dbsvc.storage.orders import page_in_order
from tests.storage.test_storage_plan_units import ITEM, reference, sort_param, table_of

COUNT = 3000


def rows(seed: int = 3) -> list[tuple]:
    """(n, f, s, k, g, w): f of 40 values (runs of ~75, across sublists), s with repeats
    and nulls, g of 4 values (buckets of ~750, kept in order), n null for some."""
    rng = random.Random(seed)
    out = []
    for _ in range(COUNT):
        s = rng.choice("abcde") + str(rng.randint(0, 3)) if rng.random() < 0.9 else None
        out.append((rng.choice([None, 1, 2]), rng.randint(0, 39) / 4, s, "x", rng.randint(1, 4), None))
    return out


TABLE, RECORDS = table_of(rows())
SORTS = [[("f", True), ("s", False)], [("f", False), ("s", True)], [("f", True), ("s", True), ("n", False)]]
OFFSETS = [0, 1, 19, 70, 74, 75, 76, 500, 511, 512, 1023, 1500, 2980, 2999, 3000, 3100]


@pytest.mark.parametrize("sort", SORTS)
def test_a_page_by_position_is_the_reference_page_at_every_offset(sort):
    expected = reference(RECORDS, lambda r: True, sort)
    index = TABLE.ordered["f"]
    for offset in OFFSETS:
        for limit in (1, 20, 100):
            page = page_in_order(index, sort[0][1], tuple(sort), TABLE, offset, offset + limit)
            by_position = offset or sort[0][1]  # an ascending first page is the walk's
            assert page == (expected[offset : offset + limit] if by_position else None), (offset, limit)


@pytest.mark.parametrize("sort", SORTS)
def test_lists_sorted_on_several_keys_answer_the_reference_page(sort):
    for params, test in (([], lambda r: True), ([("g", "2")], lambda r: r["g"] == 2)):
        expected = reference(RECORDS, test, sort)
        assert len(expected) >= BUCKET_AT or not params
        for offset in OFFSETS:
            query = ITEM.parse_list_query([*params, *sort_param(sort), ("limit", "20"), ("offset", str(offset))])
            page, total, _more = plans.list_page(TABLE, query)
            assert [r["id"] for r in page] == expected[offset : offset + 20], (params, offset)
            assert total == len(expected)


def test_an_order_holding_nulls_is_left_to_the_walk_of_its_runs():
    assert TABLE.ordered["s"].nulls
    assert page_in_order(TABLE.ordered["s"], True, (("s", True), ("f", False)), TABLE, 40, 60) is None
    expected = reference(RECORDS, lambda r: True, [("s", True), ("f", False)])
    query = ITEM.parse_list_query([("sort", "-s,f"), ("limit", "20"), ("offset", "40")])
    assert [r["id"] for r in plans.list_page(TABLE, query)[0]] == expected[40:60]


def python_calls(fn) -> int:
    counts = [0]

    def profile(frame, event, arg):
        if event == "call":
            counts[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return counts[0]


@pytest.mark.parametrize("params", [[], [("g", "2")]])
def test_a_deep_page_on_several_keys_costs_no_python_call_an_entry_before_it(params):
    query = ITEM.parse_list_query([*params, ("sort", "-f,s"), ("limit", "20"), ("offset", "600")])
    plans.list_page(TABLE, query)  # the bucket's order built by the first list
    # the walk of the runs resumed a generator an id up to the page's end (600+)
    assert python_calls(lambda: plans.list_page(TABLE, query)) < 150


@pytest.mark.parametrize("sort", [[("f", True), ("s", False)], [("f", False), ("s", False)]])
def test_a_small_order_with_runs_of_two_and_an_empty_one(sort):
    # one sublist, the page reaching its first entry; runs of exactly two whose second key
    # orders them against their ids; and an empty table
    table, records = table_of([(None, float(i // 2), "zyxwvutsrq"[i % 10], "x", 1, None) for i in range(40)])
    expected = reference(records, lambda r: True, sort)
    for offset in range(0, 41, 3):
        for limit in (1, 2, 5, 40):
            got = page_in_order(table.ordered["f"], sort[0][1], tuple(sort), table, offset, offset + limit)
            by_position = offset or sort[0][1]  # an ascending first page is the walk's
            assert got == (expected[offset : offset + limit] if by_position else None), (offset, limit)
    empty, _records = table_of([])
    assert page_in_order(empty.ordered["f"], sort[0][1], tuple(sort), empty, 20, 40) == []
    assert page_in_order(empty.ordered["f"], sort[0][1], tuple(sort), empty, 0, 20) == ([] if sort[0][1] else None)


@pytest.mark.parametrize("sort", [[("f", True), ("s", False)], [("f", False), ("s", False)]])
def test_pages_of_distinct_first_keys_and_of_one_key_beside_a_run(sort):
    # Pages with no tie at all (nothing to order), and pages where one id of its own first key
    # stands before or after a run reaching the page's other end: only the run is ordered by
    # the second key (a whole-page sort by it would move the lone id: 'zz' last, 'a' first).
    rows = [(None, float(i), "a", "x", 1, None) for i in range(30)]  # distinct first keys
    rows += [(None, 100.0, "zyxwvu"[i], "x", 1, None) for i in range(6)]  # a run of six
    rows += [(None, 101.0, "zz", "x", 1, None), (None, -1.0, "zz", "x", 1, None)]  # lone ends
    table, records = table_of(rows)
    expected = reference(records, lambda r: True, sort)
    for offset in range(len(rows) + 1):
        for limit in (1, 3, 7, 20):
            got = page_in_order(table.ordered["f"], sort[0][1], tuple(sort), table, offset, offset + limit)
            by_position = offset or sort[0][1]
            assert got == (expected[offset : offset + limit] if by_position else None), (offset, limit)
