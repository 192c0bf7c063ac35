"""Two filters counted per pair of values (storage/buckets.py `PairCount`, bucketplan.py
`bucket_count`) on a `Table` in memory: a list of `g=v&k=w` keeps how many of g=v's ids hold
k=w (the smaller bucket holding BUCKET_AT ids or more), so its `total` is a look-up and not
a pass over the bucket; every path that changes the table keeps the count exact (inserts,
replaces moving a record between either field's values, deletes, `undo_last` of each, a
follower's `insert_run`) or drops it where the indexes are rebuilt at once (`insert_many`,
`load_base`). After each step every kept count is held to the table's records and every
two-filter shape (no sort, one or two sort keys, offsets past the end) to the reference
order of test_storage_plan_units.py."""

from __future__ import annotations

import random

import pytest

from dbsvc.storage import query as plans
from dbsvc.storage.rows import pack
from dbsvc.storage.table import Table
from dbsvc.storage.tableruns import insert_run
from support.churn import churn
from tests.storage.test_storage_bucket_orders import COUNT, filled, record, row
from tests.storage.test_storage_plan_units import ITEM, reference, sort_param

# (params, test, sort): g's buckets hold ~167 ids (over BUCKET_AT), k's ~333 and ~667
SHAPES = [
    ([("g", "1"), ("k", "y")], lambda r: r["g"] == 1 and r["k"] == "y", []),
    ([("k", "x"), ("g", "2")], lambda r: r["g"] == 2 and r["k"] == "x", [("n", True)]),
    ([("g", "3"), ("k", "y")], lambda r: r["g"] == 3 and r["k"] == "y", [("f", False), ("s", True)]),
    ([("g", "4"), ("k", "z")], lambda r: r["g"] == 4 and r["k"] == "z", []),  # no such k: 0
    ([("g", "5"), ("n", "1")], lambda r: r["g"] == 5 and r["n"] == 1, [("s", False)]),
]
PAGES = [(20, 0), (7, 3), (20, 100), (5, 400), (0, 0)]


def check_pages(table: Table, records: dict[int, dict]) -> None:
    for params, test, sort in SHAPES:
        want = reference(records, test, sort)
        for limit, offset in PAGES:
            query = ITEM.parse_list_query(params + sort_param(sort) + [("limit", str(limit)), ("offset", str(offset))])
            page, total, more = plans.list_page(table, query)
            got = [r["id"] for r in page]
            where = (params, sort, limit, offset)
            assert (got, total) == (want[offset : offset + limit], len(want)), where
            assert more == (bool(got) and offset + len(got) < len(want)), where
            assert plans.live_ids(table, query) == got, where


def check_counts(table: Table, records: dict[int, dict]) -> None:
    """Every kept count is the number of live records holding both keys."""
    for (field, other), counted in table.buckets.counted.items():
        for key, pair in counted.items():
            for other_key, held in pair.counts.items():
                want = sum(
                    1
                    for r in records.values()
                    if ITEM.keys[field](r[field]) == key and ITEM.keys[other](r[other]) == other_key
                )
                assert held == want, (field, key, other, other_key)


def check_both(table: Table, records: dict[int, dict]) -> None:
    check_counts(table, records)
    check_pages(table, records)


def test_two_filters_keep_a_count_per_pair_of_values():
    table, records = filled()
    check_pages(table, records)
    kept = {
        pair: {key: dict(c.counts) for key, c in counted.items()} for pair, counted in table.buckets.counted.items()
    }
    # counted from the smaller bucket (g's), for the pairs asked; k=z's bucket is empty,
    # smaller than BUCKET_AT: nothing kept for it
    assert kept == {
        ("g", "k"): {
            1: {"y": sum(1 for r in records.values() if r["g"] == 1 and r["k"] == "y")},
            2: {"x": sum(1 for r in records.values() if r["g"] == 2 and r["k"] == "x")},
            3: {"y": sum(1 for r in records.values() if r["g"] == 3 and r["k"] == "y")},
        },
        ("g", "n"): {5: {1: sum(1 for r in records.values() if r["g"] == 5 and r["n"] == 1)}},
    }, kept
    check_counts(table, records)
    objects = {(p, k): c for p, counted in table.buckets.counted.items() for k, c in counted.items()}
    check_pages(table, records)  # answered from the kept counts: none made anew
    assert all(table.buckets.counted[p][k] is c for (p, k), c in objects.items())


def test_a_small_bucket_keeps_no_count():
    table, records = filled(count=200)  # g's buckets of ~33
    check_pages(table, records)
    assert table.buckets.counted == {}


@pytest.mark.parametrize("seed", [3, 4])
def test_writes_and_undo_keep_every_count_exact(seed):
    rng = random.Random(seed)
    table, records = filled(seed=seed)
    check_pages(table, records)  # makes the counts
    churn(
        table, ITEM, records, rng, lambda i: record(i, row(rng)), ("n", "f", "k", "g"), check_both, first_id=COUNT + 1
    )


def test_a_followers_run_and_the_bulk_paths():
    rng = random.Random(7)
    table, records = filled()
    check_pages(table, records)
    batch = []
    for i in range(COUNT + 1, COUNT + 401):
        records[i] = record(i, row(rng))
        batch.append(ITEM.row(records[i]))
    insert_run(table, batch)  # a follower's run of inserts: counted in
    check_counts(table, records)
    check_pages(table, records)
    batch = []
    for i in range(COUNT + 401, COUNT + 3001):  # larger than the table: insert_many rebuilds
        records[i] = record(i, row(rng))
        batch.append(ITEM.row(records[i]))
    table.insert_many(batch)
    assert table.buckets.counted == {}
    check_pages(table, records)
    check_counts(table, records)
    base = Table(ITEM)  # a snapshot's load starts with none
    values = [ITEM.row(records[i]) for i in sorted(records)]
    base.load_base(
        [pack(ITEM.fields, v) for v in values],
        {p: [ITEM.keys[ITEM.fields[p]](v[p]) for v in values] for p in base.columns},
        max(records),
    )
    assert base.buckets.counted == {}
    check_pages(base, records)
    check_counts(base, records)
