"""A filter's buckets kept in sort order (storage/buckets.py, bucketplan.py) on a `Table` in
memory: a list of `filter=v&sort=S` builds the bucket's order once and keeps it, and every
path that changes the table keeps it exact (inserts, replaces moving a record between
buckets and between keys, deletes, `undo_last` of each, a follower's `insert_run`), or drops
it where the indexes are rebuilt at once (`insert_many`, `load_base`); after each step
every kept order is held to the table's records and every list shape over it (one or two
sort keys, either direction, nulls, equal keys, offsets, two filters, a range and a filter)
to a reference order written out in test_storage_plan_units.py. A store compacting online
under writes, and reopened from its snapshot, answers the same from orders built again."""

from __future__ import annotations

import random

import pytest

from dbsvc.storage import query as plans
from dbsvc.storage.buckets import BUCKET_AT
from dbsvc.storage.rows import pack
from dbsvc.storage.table import Table
from dbsvc.storage.tableruns import insert_run
from support.churn import churn
from support.storage import BLOG, post, run, user
from tests.storage.test_storage_plan_units import FIELDS, ITEM, reference, sort_param

# g has 5 values (and null) over COUNT records: buckets of ~BUCKET_AT * 1.3 (167), in order once listed.
COUNT = 1000
SHAPES = [
    ([("g", "1")], lambda r: r["g"] == 1, [("n", False)]),
    ([("g", "2")], lambda r: r["g"] == 2, [("n", True)]),
    ([("g", "3")], lambda r: r["g"] == 3, [("f", True)]),
    ([("g", "4")], lambda r: r["g"] == 4, [("s", False), ("n", True)]),
    ([("g", "5")], lambda r: r["g"] == 5, [("n", True), ("f", False)]),
    ([("g", "1"), ("k", "y")], lambda r: r["g"] == 1 and r["k"] == "y", [("n", True)]),
    ([("g", "2"), ("k", "x")], lambda r: r["g"] == 2 and r["k"] == "x", []),
    ([("g", "3"), ("n__gte", "1")], lambda r: r["g"] == 3 and r["n"] is not None and r["n"] >= 1, []),
    ([("g", "3"), ("n__lt", "3")], lambda r: r["g"] == 3 and r["n"] is not None and r["n"] < 3, [("n", True)]),
    (
        [("g", "4"), ("k", "y"), ("n__gt", "0")],
        lambda r: r["g"] == 4 and r["k"] == "y" and (r["n"] or 0) > 0,
        [("n", False)],
    ),
]
PAGES = [(20, 0), (7, 3), (20, 140), (100, 0), (0, 0)]


def row(rng: random.Random) -> tuple:
    return (
        rng.choice([None, 0, 1, 1, 2, 3, 3]),  # n: equal keys and nulls
        rng.choice([0.5, 1.0, 1.5, 2.0, 2.5]),
        rng.choice([None, "a", "ab", "b"]),
        rng.choice(["x", "y", "y"]),
        rng.choice([1, 2, 3, 4, 5, None]),  # g: the buckets
        None,
    )


def record(i: int, values: tuple) -> dict:
    return {"id": i, **dict(zip(FIELDS, values))}


def filled(count: int = COUNT, seed: int = 1) -> tuple[Table, dict[int, dict]]:
    rng = random.Random(seed)
    table, records = Table(ITEM), {}
    for i in range(1, count + 1):
        records[i] = record(i, row(rng))
        table.insert(ITEM.row(records[i]))
    return table, records


def check_orders(table: Table, records: dict[int, dict]) -> None:
    """Every kept order holds exactly its bucket's live ids, by its sort key, ties on id."""
    for (field, sort_field), orders in table.buckets.pairs.items():
        for key, order in orders.items():
            want = reference(records, lambda r: ITEM.keys[field](r[field]) == key, [(sort_field, False)])
            assert [id_ for _key, id_ in order] == want, (field, sort_field, key)
            assert [k for k, _id in order] == [ITEM.keys[sort_field](records[i][sort_field]) for i in want]
            assert len(order) == len(want)


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


def check_both(table: Table, records: dict[int, dict]) -> None:
    check_orders(table, records)
    check_pages(table, records)


def test_a_list_keeps_its_bucket_in_order_and_answers_from_it():
    table, records = filled()
    assert len(table.buckets) == 0
    check_pages(table, records)
    built = {pair: set(orders) for pair, orders in table.buckets.pairs.items()}
    # every shape's smallest bucket (g=1..5), by its first sort key or its range's field
    assert built == {("g", "n"): {1, 2, 3, 4, 5}, ("g", "f"): {3}, ("g", "s"): {4}}, built
    assert all(len(order) >= BUCKET_AT for orders in table.buckets.pairs.values() for order in orders.values())
    check_orders(table, records)
    entries = table.buckets.entries()
    assert entries == sum(len(o) for orders in table.buckets.pairs.values() for o in orders.values()) > 0
    assert 16 * entries < table.buckets.nbytes() < 64 * entries  # a key and an id slot, plus each order's own
    # the same lists again: answered from the kept orders, none built anew
    kept = {pair: dict(orders) for pair, orders in table.buckets.pairs.items()}
    check_pages(table, records)
    assert all(table.buckets.pairs[p][k] is kept[p][k] for p in kept for k in kept[p])


def test_a_small_bucket_or_a_unique_value_is_never_kept():
    table, records = filled(count=200)  # buckets of ~33
    check_pages(table, records)
    assert len(table.buckets) == 0


@pytest.mark.parametrize("seed", [1, 2])
def test_writes_and_undo_keep_every_order_exact(seed):
    rng = random.Random(seed)
    table, records = filled(seed=seed)
    check_pages(table, records)  # builds the orders
    churn(
        table, ITEM, records, rng, lambda i: record(i, row(rng)), ("n", "f", "s", "g"), check_both, first_id=COUNT + 1
    )


def test_a_followers_run_of_inserts_is_added_to_the_kept_orders():
    rng = random.Random(5)
    table, records = filled()
    check_pages(table, records)
    batch = []
    for i in range(COUNT + 1, COUNT + 401):
        records[i] = record(i, row(rng))
        batch.append(ITEM.row(records[i]))
    insert_run(table, batch)
    check_orders(table, records)
    check_pages(table, records)


def test_bulk_paths_drop_the_orders_and_lists_build_them_again():
    rng = random.Random(6)
    table, records = filled(count=300)
    check_pages(table, records)
    batch = []
    for i in range(301, 1201):  # larger than the table: insert_many rebuilds the indexes
        records[i] = record(i, row(rng))
        batch.append(ITEM.row(records[i]))
    table.insert_many(batch)
    assert len(table.buckets) == 0
    check_pages(table, records)
    assert len(table.buckets) > 0
    check_orders(table, records)
    # load_base: a snapshot's records into a new table (compaction's new epoch opens so)
    base = Table(ITEM)
    values = [ITEM.row(records[i]) for i in sorted(records)]
    base.load_base(
        [pack(ITEM.fields, v) for v in values],
        {p: [ITEM.keys[ITEM.fields[p]](v[p]) for v in values] for p in base.columns},
        max(records),
    )
    assert len(base.buckets) == 0
    check_pages(base, records)
    check_orders(base, records)


def test_a_store_compacting_online_and_reopening_answers_from_orders_built_again(tenant, stores):
    """Compaction's new epoch and a reopen (a snapshot's load) build the orders again on
    demand; writes during the compaction are in them."""
    model = BLOG.BY_NAME["BlogPost"]
    store = stores(tenant)
    rng = random.Random(9)
    shapes = [[("author_id", "1"), ("sort", "-score")], [("author_id", "2"), ("sort", "title"), ("published", "true")]]

    def check(s) -> None:
        records = s.table("BlogPost").records
        for params in shapes:
            want = reference(
                dict(records),
                lambda r, p=params: all(str(r[f]).lower() == v for f, v in p if f != "sort"),
                _sort(params),
            )
            for limit, offset in ((20, 0), (15, 60), (15, 130)):
                query = model.parse_list_query(params + [("limit", str(limit)), ("offset", str(offset))])
                page, total, _watermark, _more = s.list_page("BlogPost", query)
                assert ([r["id"] for r in page], total) == (want[offset : offset + limit], len(want)), params

    async def go() -> None:
        await store.insert("User", user(1))
        await store.insert("User", user(2))
        for i in range(1, 601):
            score = rng.choice([0.5, 1.0, 2.5, 3.0])
            await store.insert("BlogPost", post(i, author=rng.choice([1, 2]), score=score, published=i % 3 == 0))
        check(store)
        assert len(store.table("BlogPost").buckets) == 2
        task = store.compact_now()
        for i in range(1, 200, 3):  # writes while it runs: between authors, new scores
            await store.replace("BlogPost", i, post(i, author=1 + i % 2, score=float(i % 5), published=True))
        await task
        check(store)

    run(go())
    store.close()
    reopened = stores(tenant)
    assert len(reopened.table("BlogPost").buckets) == 0
    check(reopened)
    assert len(reopened.table("BlogPost").buckets) == 2


def _sort(params: list[tuple[str, str]]) -> list[tuple[str, bool]]:
    (text,) = [v for f, v in params if f == "sort"]
    return [(f.lstrip("-"), f.startswith("-")) for f in text.split(",")]
