"""A prefix sorted by another field (storage/buckets.py `prefix_order`, bucketplan.py
`_prefix_plan`) on a `Table` in memory: `s__prefix=ab&sort=-n` keeps the ids whose `s` starts
with `ab` in `n`'s order once a list finds that cheaper than seek.py's gather (at least
BUCKET_AT ids, few enough that a walk of the sort order is not cheaper), so the next list is
a seek; every path that changes the table keeps the order exact (inserts, replaces into and
out of the prefix and between keys, deletes, `undo_last` of each, a follower's
`insert_run`), or drops it where the indexes are rebuilt at once (`insert_many`,
`load_base`). Each step holds every kept order to the records and every page to the
reference order of test_storage_plan_units.py, on both sides of each threshold."""

from __future__ import annotations

import random

import pytest

from dbsvc.storage import query as plans
from dbsvc.storage.buckets import BUCKET_AT, PREFIXES_KEPT
from dbsvc.storage.rows import pack
from dbsvc.storage.table import Table
from dbsvc.storage.tableruns import insert_run
from support.churn import churn
from tests.storage.test_storage_plan_units import ITEM, reference, sort_param

COUNT = 1200
WORDS = [None, "", "a", "ab", "abc", "abd", "ab\U0010ffff", "abz", "b", "ba", "é", "éa", "Ab"]
# (prefix, sort): "ab" holds ~5/13 of the records (a walk is cheaper for a short page, the
# kept order for a long one), "abc" ~1/13 (under BUCKET_AT: never kept), "b" ~2/13
SHAPES = [
    ("ab", [("n", True)]),
    ("ab", [("f", False), ("n", True)]),
    ("b", [("n", False)]),
    ("b", [("f", True)]),
    ("abc", [("n", True)]),
    ("é", [("n", True)]),
]
PAGES = [(20, 0), (300, 0), (7, 30), (20, 200), (50, 440), (0, 0)]


def row(rng: random.Random, i: int) -> dict:
    return {
        "id": i,
        "n": rng.choice([None, 0, 1, 2, 3, 4, 5]),
        "f": rng.choice([0.5, 1.0, 1.5]),
        "s": rng.choice(WORDS),
        "k": "x",
        "g": None,
        "w": None,
    }


def filled(count: int = COUNT, seed: int = 1) -> tuple[Table, dict[int, dict]]:
    rng = random.Random(seed)
    table, records = Table(ITEM), {}
    for i in range(1, count + 1):
        records[i] = row(rng, i)
        table.insert(ITEM.row(records[i]))
    return table, records


def starts(prefix: str):
    return lambda r: r["s"] is not None and r["s"].startswith(prefix)


def check_pages(table: Table, records: dict[int, dict]) -> None:
    for prefix, sort in SHAPES:
        want = reference(records, starts(prefix), sort)
        for limit, offset in PAGES:
            params = [("s__prefix", prefix), *sort_param(sort), ("limit", str(limit)), ("offset", str(offset))]
            page, total, more = plans.list_page(table, ITEM.parse_list_query(params))
            got = [r["id"] for r in page]
            assert (got, total) == (want[offset : offset + limit], len(want)), (prefix, sort, limit, offset)
            assert more == (offset + limit < len(want) and limit > 0), (prefix, sort, limit, offset)


def check_orders(table: Table, records: dict[int, dict]) -> None:
    """Every kept order holds exactly the live ids under its prefix, by its sort key, ties on id."""
    for (field, length, sort_field), orders in table.buckets.prefixed.items():
        for prefix, order in orders.items():
            assert len(prefix) == length
            want = reference(records, starts(prefix), [(sort_field, False)])
            assert [id_ for _key, id_ in order] == want, (field, prefix, sort_field)
            assert [k for k, _id in order] == [records[i][sort_field] for i in want]


def check_both(table: Table, records: dict[int, dict]) -> None:
    check_orders(table, records)
    check_pages(table, records)


def test_a_prefix_sorted_by_another_field_is_kept_in_that_order():
    table, records = filled()
    for prefix, sort in SHAPES:  # a short first page: seek.py's plan, nothing kept
        params = [("s__prefix", prefix), *sort_param(sort), ("limit", "5")]
        page, total, _more = plans.list_page(table, ITEM.parse_list_query(params))
        assert [r["id"] for r in page] == reference(records, starts(prefix), sort)[:5]
    assert table.buckets.prefixed == {}  # ~185 to ~460 ids each: s * s > 2 * 6 * n
    check_pages(table, records)
    kept = {slot: set(orders) for slot, orders in table.buckets.prefixed.items()}
    # a page of 300 makes every prefix of BUCKET_AT ids or more worth keeping
    assert kept == {("s", 2, "n"): {"ab"}, ("s", 2, "f"): {"ab"}, ("s", 1, "n"): {"b", "é"}, ("s", 1, "f"): {"b"}}, kept
    assert ("s", 3, "n") not in kept  # "abc": under BUCKET_AT
    assert len(reference(records, starts("abc"), [])) < BUCKET_AT
    check_orders(table, records)
    objects = {(slot, p): o for slot, orders in table.buckets.prefixed.items() for p, o in orders.items()}
    check_pages(table, records)  # the same lists: from the kept orders, none built anew
    assert all(table.buckets.prefixed[slot][p] is o for (slot, p), o in objects.items())


@pytest.mark.parametrize("seed", [1, 2])
def test_writes_and_undo_keep_every_prefix_order_exact(seed):
    rng = random.Random(seed)
    table, records = filled(seed=seed)
    check_pages(table, records)
    churn(table, ITEM, records, rng, lambda i: row(rng, i), ("n", "f", "s"), check_both, first_id=COUNT + 1)


def test_a_followers_run_and_the_bulk_paths():
    rng = random.Random(3)
    table, records = filled()
    check_pages(table, records)
    assert table.buckets.prefixed
    batch = []
    for i in range(COUNT + 1, COUNT + 301):
        records[i] = row(rng, i)
        batch.append(ITEM.row(records[i]))
    insert_run(table, batch)
    check_orders(table, records)
    check_pages(table, records)
    batch = []
    for i in range(COUNT + 301, COUNT + 3001):  # larger than the table: insert_many rebuilds
        records[i] = row(rng, i)
        batch.append(ITEM.row(records[i]))
    table.insert_many(batch)
    assert table.buckets.prefixed == {}
    check_pages(table, records)
    check_orders(table, records)
    base = Table(ITEM)
    values = [ITEM.row(records[i]) for i in sorted(records)]
    base.load_base(
        [pack(ITEM.fields, v) for v in values],
        {p: [ITEM.keys[ITEM.fields[p]](v[p]) for v in values] for p in base.columns},
        max(records),
    )
    assert base.buckets.prefixed == {}
    check_pages(base, records)
    check_orders(base, records)


def test_at_most_prefixes_kept_orders_a_prefix_length_and_sort():
    table, records = Table(ITEM), {}
    prefixes = [chr(97 + i // 26) + chr(97 + i % 26) for i in range(PREFIXES_KEPT + 2)]
    i = 0
    for prefix in prefixes:
        for j in range(BUCKET_AT + 2):
            i += 1
            records[i] = {"id": i, "n": j % 7, "f": 1.0, "s": prefix + "x", "k": "x", "g": None, "w": None}
            table.insert(ITEM.row(records[i]))
    for prefix in prefixes:
        query = ITEM.parse_list_query([("s__prefix", prefix), ("sort", "-n"), ("limit", "20")])
        page, total, _more = plans.list_page(table, query)
        assert [r["id"] for r in page] == reference(records, starts(prefix), [("n", True)])[:20]
        assert total == BUCKET_AT + 2
        assert 0 < len(table.buckets.prefixed["s", 2, "n"]) <= PREFIXES_KEPT
    assert set(table.buckets.prefixed["s", 2, "n"]) == set(prefixes[PREFIXES_KEPT:])
    check_orders(table, records)
