"""bucketplan.py at its decisions, on a `Table` in memory: the list shapes
test_storage_bucket_orders.py does not hold (three filters, a range with two filters in id
order or sorted descending, two ranges, a null test or a row test beside a range, the
smallest filter an @filter @sort field) give the reference's ids and totals, and which
buckets a list builds is exactly the rule's: never the sort field's own bucket, a bucket of
BUCKET_AT ids but not one fewer, and one whose walk is cheaper (s * s > 2 * max(end, 1) *
n) never, to the exact boundary."""

from __future__ import annotations

import sys
from dataclasses import replace
from sys import getsizeof

from dbsvc.storage import query as plans
from dbsvc.storage.bucketplan import bucket_operators, bucket_plan
from dbsvc.storage.buckets import BUCKET_AT, BucketOrder
from dbsvc.storage.table import Table
from tests.storage.test_storage_bucket_orders import filled, record
from tests.storage.test_storage_plan_units import ITEM, cursor_of, reference, sort_param

SHAPES = [
    # three filters: the smallest bucket walked, the other two tested per id
    ([("g", "1"), ("k", "y"), ("n", "3")], lambda r: r["g"] == 1 and r["k"] == "y" and r["n"] == 3, [("f", True)]),
    ([("g", "2"), ("k", "x"), ("n", "1")], lambda r: r["g"] == 2 and r["k"] == "x" and r["n"] == 1, []),
    # a range and two filters, in id order and sorted by the range's field descending
    ([("g", "3"), ("k", "y"), ("f__gte", "1.5")], lambda r: r["g"] == 3 and r["k"] == "y" and r["f"] >= 1.5, []),
    (
        [("g", "4"), ("k", "y"), ("n__gt", "0")],
        lambda r: r["g"] == 4 and r["k"] == "y" and (r["n"] or 0) > 0,
        [("n", True)],
    ),
    (
        [("g", "5"), ("k", "x"), ("f__lt", "2.5")],
        lambda r: r["g"] == 5 and r["k"] == "x" and r["f"] < 2.5,
        [("f", True)],
    ),
    # two ranges, and a null test beside a range: seek.py's, never a bucket plan
    (
        [("g", "3"), ("n__gte", "1"), ("f__lt", "2.0")],
        lambda r: r["g"] == 3 and r["n"] is not None and r["n"] >= 1 and r["f"] < 2.0,
        [],
    ),
    (
        [("g", "1"), ("s__null", "false"), ("n__gte", "1")],
        lambda r: r["g"] == 1 and r["s"] is not None and r["n"] is not None and r["n"] >= 1,
        [],
    ),
    # two values of the smallest filter beside a range
    ([("g", "1"), ("g", "2"), ("n__gte", "2")], lambda r: r["g"] in (1, 2) and r["n"] is not None and r["n"] >= 2, []),
    # two filters and two sort keys; two values of a filter, sorted
    ([("g", "4"), ("k", "y")], lambda r: r["g"] == 4 and r["k"] == "y", [("s", False), ("n", True)]),
    ([("g", "1"), ("g", "2")], lambda r: r["g"] in (1, 2), [("n", True)]),
    # a range sorted by another field, or by its own field and then another
    ([("g", "3"), ("n__gte", "1")], lambda r: r["g"] == 3 and r["n"] is not None and r["n"] >= 1, [("f", False)]),
    (
        [("g", "3"), ("n__gte", "1")],
        lambda r: r["g"] == 3 and r["n"] is not None and r["n"] >= 1,
        [("n", False), ("f", True)],
    ),
    # the smallest filter an @filter @sort field (its index an OrderedFilter), in id order
    ([("n", "0"), ("k", "y")], lambda r: r["n"] == 0 and r["k"] == "y", []),
    ([("n", "0"), ("k", "y"), ("f__gt", "1.0")], lambda r: r["n"] == 0 and r["k"] == "y" and r["f"] > 1.0, []),
]
PAGES = [(20, 0), (7, 3), (50, 40), (200, 0)]


def check(table: Table, records: dict[int, dict], shapes=SHAPES) -> None:
    for params, test, sort in shapes:
        want = reference(records, test, sort)
        assert want, params  # every shape has matches
        for limit, offset in PAGES:
            query = ITEM.parse_list_query(params + sort_param(sort) + [("limit", str(limit)), ("offset", str(offset))])
            page, total, more = plans.list_page(table, query)
            where = (params, sort, limit, offset)
            assert ([r["id"] for r in page], total) == (want[offset : offset + limit], len(want)), where
            assert more == (offset + limit < len(want)), where


def test_shapes_beyond_the_orders_file_answer_as_the_reference():
    table, records = filled()
    check(table, records)
    check(table, records)  # again, from the orders the first pass kept


def test_a_cursor_beside_a_range_is_never_a_bucket_plan():
    table, records = filled()
    sort = [("n", False)]
    query = ITEM.parse_list_query([("g", "2"), ("n__gte", "1"), ("sort", "n"), ("limit", "20")])
    want = reference(records, lambda r: r["g"] == 2 and r["n"] is not None and r["n"] >= 1, sort)
    after = replace(query, cursor=cursor_of(records[want[3]], sort))
    assert bucket_operators(table, query) == (want[:20], len(want), True)
    assert bucket_operators(table, after) is None
    page, _total, _more = plans.list_page(table, after)
    assert [r["id"] for r in page] == want[4:24]


def test_a_range_with_one_match_and_an_id_0_in_a_bucket_are_answered():
    table, _records = table_of([(1, i) for i in range(200)] + [(2, 0)] * 800)
    assert page(table, ("g", "1"), ("n__gte", "199"), ("limit", "50")) == [200]
    assert page(table, ("g", "1"), ("n__gte", "199"), ("sort", "-n"), ("limit", "50")) == [200]
    assert page(table, ("g", "1"), ("n__gte", "198"), ("sort", "n"), ("limit", "50"), ("offset", "1")) == [200]
    table, _records = table_of([(1, i) for i in range(200)])
    table.insert(ITEM.row(record(0, (5, 1.0, "a", "x", 1, None))))
    assert page(table, ("g", "1"), ("limit", "3")) == [0, 1, 2]
    assert page(table, ("g", "1"), ("k", "x"), ("limit", "3")) == [0, 1, 2]
    assert page(table, ("g", "1"), ("n__lte", "5"), ("limit", "3")) == [0, 1, 2]


def test_a_row_test_beside_a_range_is_never_a_bucket_plan():
    table, records = filled()
    query = ITEM.parse_list_query([("g", "2"), ("n__gte", "1"), ("limit", "500")])
    tested = replace(query, where_row=lambda values: values[2] == 1.0)  # f == 1.0
    want = reference(records, lambda r: r["g"] == 2 and r["n"] is not None and r["n"] >= 1 and r["f"] == 1.0, [])
    assert bucket_operators(table, tested) is None
    page, total, _more = plans.list_page(table, tested)
    assert ([r["id"] for r in page], total) == (want, len(want))


def test_the_plans_answer_from_the_kept_order_themselves():
    """bucket_plan and bucket_operators asked directly, as query.py asks them."""
    table, records = filled()
    query = ITEM.parse_list_query([("g", "1"), ("sort", "-n"), ("limit", "20"), ("offset", "2")])
    want = reference(records, lambda r: r["g"] == 1, [("n", True)])
    size = len(table.hashes["g"].ids((1,)))
    assert bucket_plan(table, query, "g", size, len(want)) == (want[2:22], len(want))
    # a bucket one id too small: left to query.py
    assert bucket_plan(table, query, "g", BUCKET_AT - 1, len(want)) is None
    ranged = ITEM.parse_list_query([("g", "1"), ("n__gte", "2"), ("sort", "n"), ("limit", "4")])
    want = reference(records, lambda r: r["g"] == 1 and r["n"] is not None and r["n"] >= 2, [("n", False)])
    assert bucket_operators(table, ranged) == (want[:4], len(want), True)
    # the kept order is used while a walk would now be cheaper (the table shrank around it)
    for id_ in [i for i, r in records.items() if r["g"] != 1][:700]:
        table.delete(id_, table.live[id_])
        del records[id_]
    kept = table.buckets.pairs[("g", "n")][1]
    assert size * size > 2 * 22 * len(table.live)
    want = reference(records, lambda r: r["g"] == 1, [("n", True)])
    assert bucket_plan(table, query, "g", size, len(want)) == (want[2:22], len(want))
    assert table.buckets.pairs[("g", "n")][1] is kept


def built(table: Table) -> dict:
    return {pair: sorted(orders) for pair, orders in table.buckets.pairs.items()}


def table_of(rows: list[tuple[int, int]]) -> tuple[Table, dict[int, dict]]:
    """Records 1.. with (g, n) given, f 1.0, s "a", k "x"."""
    table, records = Table(ITEM), {}
    for i, (g, n) in enumerate(rows, start=1):
        records[i] = record(i, (n, 1.0, "a", "x", g, None))
        table.insert(ITEM.row(records[i]))
    return table, records


def page(table: Table, *params: tuple[str, str]) -> list[int]:
    found, _total, _more = plans.list_page(table, ITEM.parse_list_query(list(params)))
    return [r["id"] for r in found]


def test_a_list_sorted_by_its_filtered_field_builds_no_bucket():
    table, _records = table_of([(1, i % 3) for i in range(400)])
    # equal keys: ids ascending (a page long enough that a bucket would be built)
    assert page(table, ("n", "1"), ("sort", "-n"), ("limit", "300"))[:3] == [2, 5, 8]
    assert page(table, ("n", "1"), ("n__gte", "1"), ("sort", "n"), ("limit", "300"))[:3] == [2, 5, 8]
    assert built(table) == {}
    assert page(table, ("g", "1"), ("sort", "-n"), ("limit", "300"))[:3] == [3, 6, 9]
    assert built(table) == {("g", "n"): [1]}


def test_a_bucket_of_exactly_bucket_at_ids_is_built_and_one_fewer_is_not():
    rows = [(1, i) for i in range(BUCKET_AT)] + [(2, i) for i in range(BUCKET_AT - 1)] + [(3, 0)] * 200
    table, _records = table_of(rows)
    assert page(table, ("g", "1"), ("sort", "-n"), ("limit", "100"))[:2] == [BUCKET_AT, BUCKET_AT - 1]
    assert page(table, ("g", "2"), ("sort", "-n"), ("limit", "100"))[:2] == [2 * BUCKET_AT - 1, 2 * BUCKET_AT - 2]
    assert built(table) == {("g", "n"): [1]}
    table, _records = table_of(rows)
    assert page(table, ("g", "1"), ("n__gte", "5"), ("limit", "100"))[:2] == [6, 7]
    assert page(table, ("g", "2"), ("n__gte", "5"), ("limit", "100"))[:2] == [BUCKET_AT + 6, BUCKET_AT + 7]
    assert built(table) == {("g", "n"): [1]}


def test_a_bucket_whose_walk_is_cheaper_is_never_built_to_the_exact_boundary():
    # s * s against 2 * end * n: 200 * 200 == 2 * 20 * 1000 is built, 201 * 201 is not
    for size, want in [(200, [1]), (201, [])]:
        table, _records = table_of([(1, i) for i in range(size)] + [(2, 0)] * (1000 - size))
        assert len(page(table, ("g", "1"), ("sort", "-n"), ("limit", "20"))) == 20
        assert built(table) == ({("g", "n"): want} if want else {}), size
    # a range's page reaches one further (end + 1): 200 * 200 > 2 * 20 * 999, not built
    table, _records = table_of([(1, i) for i in range(200)] + [(2, 0)] * 799)
    assert page(table, ("g", "1"), ("n__gte", "0"), ("limit", "19")) == list(range(1, 20))
    assert built(table) == {}
    table, _records = table_of([(1, i) for i in range(200)] + [(2, 0)] * 800)
    assert page(table, ("g", "1"), ("n__gte", "0"), ("limit", "19")) == list(range(1, 20))
    assert built(table) == {("g", "n"): [1]}
    # end 1 counts as 1, not more: 150 * 150 > 2 * 1 * 10000 is not built, <= 2 * 2 * 10000 would be
    table, _records = table_of([(1, i) for i in range(150)] + [(2, 0)] * 9850)
    assert page(table, ("g", "1"), ("sort", "-n"), ("limit", "1")) == [150]
    assert built(table) == {}


# -- buckets.py's own: its build, its kept lookup, its key arrays and its byte count ------


def test_a_bucket_order_built_alone_holds_its_entries_by_key_nulls_apart():
    order = BucketOrder.build([3, None, 1, 3, None], [10, 11, 12, 13, 14])
    assert (list(order), list(order.nulls)) == ([(1, 12), (3, 10), (3, 13), (None, 11), (None, 14)], [11, 14])
    assert [type(keys) for keys in order.key_sublists] == [list]  # no typecode: lists
    floats = BucketOrder.build([2.5, 0.5], [1, 2], "d")
    assert [(keys.typecode, list(keys)) for keys in floats.key_sublists] == [("d", [0.5, 2.5])]


def test_a_kept_bucket_is_found_again_and_holds_its_sort_fields_keys_in_an_array():
    table, _records = table_of([(1, i) for i in range(300)])
    buckets = table.buckets
    assert buckets.nbytes() == 0
    order = buckets.order("g", 1, table.hashes["g"], "n", table.ordered["n"])
    assert order is not None and len(order) == 300
    assert buckets.order("g", 1, table.hashes["g"], "n", table.ordered["n"]) is order
    assert [keys.typecode for keys in order.key_sublists] == ["q"] * len(order.key_sublists)
    other = buckets.order("g", 1, table.hashes["g"], "f", table.ordered["f"])
    assert other is not None and other is not order
    assert {keys.typecode for keys in other.key_sublists} == {"d"}
    assert buckets.order("g", 2, table.hashes["g"], "n", table.ordered["n"]) is None  # no such bucket
    assert len(buckets) == 2 and buckets.entries() == 600


def test_the_byte_count_is_every_container_an_order_holds():
    table, _records = table_of([(1, i if i % 5 else None) for i in range(300)])
    buckets = table.buckets
    order = buckets.order("g", 1, table.hashes["g"], "n", table.ordered["n"])
    assert order is not None and len(order.nulls) == 60
    own = (
        getsizeof(buckets.pairs[("g", "n")])
        + getsizeof(order)
        + getsizeof(order.key_sublists)
        + getsizeof(order.id_sublists)
        + getsizeof(order.last_keys)
        + getsizeof(order.last_ids)
        + sum(getsizeof(sub) for sub in order.key_sublists)
        + sum(getsizeof(sub) for sub in order.id_sublists)
        + getsizeof(order.nulls)
        + sum(getsizeof(sub) for sub in order.nulls.sublists)
    )
    assert buckets.nbytes() == own


def test_a_range_and_a_filter_in_id_order_slice_the_windows_ids_kept_by_id():
    # a bucket of 1,000 ids (keys n = i % 500) beside 4,000 others, so pages of 100 keep
    # its order: a narrow range holds few of it, and walking the bucket by id testing each
    # key read all of it (a Python call an id)
    table, records = table_of([(1, i % 500) for i in range(1000)] + [(2, 0)] * 4000)

    def expected(low: int, offset: int = 0) -> list[int]:
        return [i for i in sorted(records) if records[i]["g"] == 1 and records[i]["n"] >= low][offset : offset + 100]

    for low, offset in ((497, 0), (497, 3), (0, 0), (250, 400), (499, 0), (500, 0), (0, 990)):
        got = page(table, ("g", "1"), ("n__gte", str(low)), ("limit", "100"), ("offset", str(offset)))
        assert got == expected(low, offset), (low, offset)
    assert ("g", "n") in table.buckets.pairs
    query = ITEM.parse_list_query([("g", "1"), ("n__gte", "497"), ("limit", "100")])
    calls = [0]

    def count(frame, event, arg):
        calls[0] += event == "call"

    sys.setprofile(count)
    try:
        bucket_operators(table, query)
    finally:
        sys.setprofile(None)
    assert calls[0] < 60  # the walk made ~1,000 (a test an id of the bucket)
    for id_ in (498, 999):  # writes into the order's sublists: the kept ids made again
        table.delete(id_, table.live[id_])
        records.pop(id_)
    records[5000] = record(5000, (498, 1.0, "a", "x", 1, None))
    table.insert(ITEM.row(records[5000]))
    assert page(table, ("g", "1"), ("n__gte", "497"), ("limit", "100")) == expected(497)
