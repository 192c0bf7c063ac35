"""A window's first ids in id order (storage/seek.py `_first_ids`) against SQLite, and the
id-sorted sublists its kept span is merged from (`OrderedIndex.sorted_ids`, `span_by_id`) as the index changes.

A range or prefix listed in id order takes its page from the id-sorted copies of the
sublists its span covers when it holds few records (s * s <= WALK_FACTOR * end * n), and
walks the primary key testing each id when it holds many. The store here holds 2,600
records, so an index has several sublists (LOAD 512): windows on both sides of that
threshold, spread evenly over the ids or packed at one end (the guess of how far to look
is then wrong and widened), with nulls, walked by cursor to the end, before and after
writes that change the keys.
"""

from __future__ import annotations

import asyncio
import random
import tempfile

from dbsvc.compiler import compile_schema
from dbsvc.cursors import encode_cursor
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.orders import sort_records
from dbsvc.storage.tenants import create_tenant
from support.query_oracle import ITEM, body, filled_store

LETTERS = "abcd"


def rows(count: int, seed: int) -> list[dict]:
    """Items whose `t` is three letters of LETTERS, but 'yy...' for the first 60 and 'zz...'
    for the last 200 (prefixes packed at either end of the ids); `n` 0-99 or null."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        t = "".join(rng.choices(LETTERS, k=3))
        if i < 60:
            t = "yy" + t
        elif i >= count - 200:
            t = "zz" + t
        n = None if i % 7 == 3 else rng.randint(0, 99)
        b, g = rng.random() < 0.5, rng.choice([None, 0, 1, 2])
        out.append({"n": n, "f": None, "s": None, "t": t, "b": b, "dt": None, "g": g, "w": None})
    return out


# (query params, SQL condition, its arguments): few matches (first ids), many (a walk), none
WINDOWS = [
    ([("t__prefix", "ab")], "substr(t, 1, 2) = ?", ["ab"]),
    ([("t__prefix", "abc")], "substr(t, 1, 3) = ?", ["abc"]),
    ([("t__prefix", "a")], "substr(t, 1, 1) = ?", ["a"]),
    ([("t__prefix", "zz")], "substr(t, 1, 2) = ?", ["zz"]),
    ([("t__prefix", "yy")], "substr(t, 1, 2) = ?", ["yy"]),
    ([("t__prefix", "q")], "substr(t, 1, 1) = ?", ["q"]),
    ([("t__gte", "b"), ("t__lt", "c")], "t >= ? AND t < ?", ["b", "c"]),
    ([("t__gte", "c"), ("t__lt", "yy")], "t >= ? AND t < ?", ["c", "yy"]),
    ([("n__gte", "97")], "n >= ?", [97]),
    ([("n__gte", "10")], "n >= ?", [10]),
    ([("n__lt", "3")], "n < ?", [3]),
    ([("n__null", "true")], "n IS NULL", []),
    # a window and filters: the smallest condition read, the others tested per id
    ([("n__gte", "90"), ("b", "true")], "n >= ? AND b = 1", [90]),
    ([("n__gte", "90"), ("g", "1"), ("g", "2")], "n >= ? AND g IN (1, 2)", [90]),
    ([("n__gte", "98"), ("n", "98"), ("n", "5"), ("n", "6"), ("n", "7")], "n >= ? AND n IN (98, 5, 6, 7)", [98]),
    ([("n__gte", "90"), ("n", "98"), ("n", "5")], "n >= ? AND n IN (98, 5)", [90]),
    ([("t__prefix", "a"), ("n__lt", "20")], "substr(t, 1, 1) = ? AND n < ?", ["a", 20]),
    ([("t__prefix", "ab"), ("n__gte", "20")], "substr(t, 1, 2) = ? AND n >= ?", ["ab", 20]),
]


def page(store: Store, params: list[tuple[str, str]]) -> tuple[list[int], int, bool]:
    records, total, _watermark, more = store.list_page("Item", ITEM.parse_list_query(params))
    return [r["id"] for r in records], total, more


def walk(store: Store, params: list[tuple[str, str]], limit: int) -> list[int]:
    """Every page by cursor, in id order."""
    ids: list[int] = []
    cursor = None
    for _ in range(10_000):
        got, _total, more = page(store, params + [("limit", str(limit))] + ([("cursor", cursor)] if cursor else []))
        ids += got
        if not more:
            return ids
        cursor = encode_cursor("Item", (), [], got[-1])
    raise AssertionError("a cursor walk that does not end")


def check_all(store: Store, twin) -> None:
    for params, where, args in WINDOWS:
        want = twin.expected(where, args, "id")
        for limit, offset in ((20, 0), (5, 3), (100, 0), (1, 0), (0, 0), (20, len(want)), (20, max(len(want) - 20, 0))):
            got, total, more = page(store, params + [("limit", str(limit)), ("offset", str(offset))])
            assert (got, total) == (want[offset : offset + limit], len(want)), (params, limit, offset)
            assert more == (limit > 0 and offset + limit < len(want)), (params, limit, offset)
        assert walk(store, params, 40) == want, params
        if len(want) > 21:  # the last 20 after a cursor: a full page, and none after it
            cursor = encode_cursor("Item", (), [], want[-21])
            assert page(store, params + [("limit", "20"), ("cursor", cursor)]) == (want[-20:], len(want), False)
        assert walk(store, params, 150) == want, params
        for sort, order in (("t,n", "t, n IS NULL, n, id"), ("n,t", "n IS NULL, n, t, id")):
            want = twin.expected(where, args, order)  # several keys: runs of the first, in order
            got, total, _more = page(store, params + [("sort", sort), ("limit", "700"), ("offset", "5")])
            assert (got, total) == (want[5:705], len(want)), (params, sort)
        for field in ("n", "t"):  # the same windows sorted descending: a seek in batches from the top
            want = twin.expected(where, args, f"{field} IS NULL DESC, {field} DESC, id")
            for limit, offset in ((20, 0), (50, 130), (700, 10)):
                sorted_params = params + [("sort", f"-{field}"), ("limit", str(limit)), ("offset", str(offset))]
                got, total, _more = page(store, sorted_params)
                assert (got, total) == (want[offset : offset + limit], len(want)), (params, field, limit, offset)


def test_windows_in_id_order_agree_with_sqlite_before_and_after_writes():
    records = rows(2600, 34)
    with filled_store(records) as (store, ids, twin):
        check_all(store, twin)
        # keys change (each a remove and an add in the index), records go and come
        rng = random.Random(35)
        for id_ in rng.sample(ids, 150):
            changed = dict(records[ids.index(id_)], t="ab" + rng.choice(LETTERS), n=rng.choice([None, 98, 1]))
            asyncio.run(store.replace("Item", id_, ITEM.validate_replace(body(changed), id_)))
            records[ids.index(id_)] = changed
        gone = set(rng.sample(ids, 100))
        for id_ in gone:
            asyncio.run(store.delete("Item", id_))
        more = rows(700, 36)
        new_ids = [(asyncio.run(store.insert("Item", ITEM.validate_create(body(r)))))["id"] for r in more]
        kept = [(i, r) for i, r in zip(ids, records) if i not in gone] + list(zip(new_ids, more))
        twin.fill(kept)
        check_all(store, twin)


def test_sort_records_orders_dicts_by_their_fields_then_the_id():
    records = [{"id": 4, "n": 1}, {"id": 2, "n": None}, {"id": 3, "n": 1}, {"id": 1, "n": 5}, {"id": 5, "n": None}]
    sort_records(records, [("n", False)], ITEM)
    assert [r["id"] for r in records] == [3, 4, 1, 2, 5]
    sort_records(records, [("n", True)], ITEM)
    assert [r["id"] for r in records] == [2, 5, 1, 3, 4]


def test_a_record_of_id_0_is_listed_by_a_range_sorted_on_several_keys():
    rows_ = [dict(r, id=i, n=5) for i, r in enumerate(rows(3, 1))]
    with filled_store(rows_) as (store, ids, _twin):
        assert ids == [0, 1, 2]
        got, total, _more = page(store, [("n__gte", "0"), ("sort", "n,t"), ("limit", "10")])
        assert (sorted(got), total) == ([0, 1, 2], 3)


def test_a_window_of_str_ids_in_id_order_takes_its_first_ids():
    module = compile_schema(parse_schema("model Tag {\n  id str @id\n  name str @sort\n}\n", "tags.dbs"))
    tag = module.BY_NAME["Tag"]
    rng = random.Random(7)
    names = {f"k{i:05d}": "".join(rng.choices("ab", k=4)) for i in rng.sample(range(100_000), 600)}
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(create_tenant(tmp, "t"), module.MODELS, module.DESCRIPTION, sync="off")
        try:

            async def fill() -> None:
                for id_, name in names.items():
                    await store.insert("Tag", tag.validate_create({"id": id_, "name": name}))

            asyncio.run(fill())
            want = sorted(i for i, name in names.items() if name.startswith("ab"))
            query = tag.parse_list_query([("name__prefix", "ab"), ("limit", "30")])
            records, total, _watermark, more = store.list_page("Tag", query)
            assert ([r["id"] for r in records], total, more) == (want[:30], len(want), True)
        finally:
            store.close()


def test_descending_batches_are_the_descending_order_of_any_span():
    rng = random.Random(3)
    keys = [rng.randint(0, 40) for _ in range(3000)]  # runs of ~75 ids, many across sublists
    ids = list(range(1, 3001))
    index = OrderedIndex.from_columns(keys, ids)
    pairs = sorted(zip(keys, ids))
    for _ in range(60):
        lo, hi = sorted(rng.sample(range(3001), 2))
        start = index.lower(pairs[lo][0], True) if lo < 3000 else index.end
        stop = index.lower(pairs[hi][0], True) if hi < 3000 else index.end
        span = [p for p in pairs if (start_key(pairs, lo) <= p[0] < start_key(pairs, hi))]
        want = [i for _k, i in sorted(span, key=lambda p: (-p[0], p[1]))]
        batches = list(index.batches_descending(start, stop))
        assert [i for batch in batches for i in batch] == want, (lo, hi)
        assert all(len(b) >= min(32 << n, len(want) - sum(map(len, batches[:n]))) for n, b in enumerate(batches))


def start_key(pairs: list[tuple[int, int]], at: int) -> float:
    return pairs[at][0] if at < len(pairs) else float("inf")


def test_sorted_ids_follow_every_change_of_their_sublist():
    index = OrderedIndex.from_columns([i % 10 for i in range(3000)], list(range(1, 3001)))
    assert len(index.id_sublists) == 6  # LOAD 512: 3,000 entries in five full sublists and one of 440
    first = index.id_sublists[0]
    assert index.sorted_ids(0) == sorted(first)
    assert index.sorted_ids(0) is index.sorted_ids(0)  # kept
    index.add(0, 5000)  # into sublist 0, no split
    assert index.sorted_ids(0) == sorted(index.id_sublists[0]) and 5000 in index.sorted_ids(0)
    index.remove(0, 5000)
    assert 5000 not in index.sorted_ids(0)
    kept_last = index.sorted_ids(5)
    for id_ in range(6000, 6600):  # key 9 goes to the last sublist until it splits
        index.add(9, id_)
    assert len(index.id_sublists) == 7
    for i in range(7):
        assert index.sorted_ids(i) == sorted(index.id_sublists[i]), i
    assert kept_last != index.sorted_ids(5)
    for id_ in list(index.id_sublists[6]):  # the last sublist emptied and dropped
        index.remove(9, id_)
    assert len(index.id_sublists) == 6
    assert [index.sorted_ids(i) for i in range(6)] == [sorted(ids) for ids in index.id_sublists]
    index.grown(0)  # runs.py's in-place additions: every kept copy is dropped
    index.id_sublists[1].append(9999)
    assert index.sorted_ids(1)[-1] == 9999


def test_an_index_keeps_at_most_256_sorted_sublists():
    index = OrderedIndex.from_columns(list(range(300 * 512)), list(range(1, 300 * 512 + 1)))
    kept = [index.sorted_ids(i) for i in range(256)]
    assert all(index.sorted_ids(i) is kept[i] for i in range(256))
    index.sorted_ids(256)  # the 257th: every kept one dropped first
    assert index.sorted_ids(0) is not kept[0] and index.sorted_ids(0) == kept[0]


def test_a_live_query_init_takes_every_id_of_a_window_with_its_nulls():
    """A live query's Init asks for every match (`Store.live_ids`: a limit of INT64_MAX, so
    one past it as the plan's end): a window holding the nulls took them with that end as
    islice's bound, past sys.maxsize, and raised ValueError (found by the session-11 CI
    rehearsal, tests/realtime/test_routes_mutants.py)."""
    records = rows(2600, 37)
    with filled_store(records) as (store, _ids, twin):
        for params, where, args in WINDOWS:
            query = ITEM.parse_list_query(params)
            got = store.live_ids("Item", query.filters, query.ranges, query.nulls)
            assert got == twin.expected(where, args, "id"), params
