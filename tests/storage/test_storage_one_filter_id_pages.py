"""Lists under one filter in id order, first page without a cursor and every next one by its
cursor (storage/seek.py `_one_bucket`, plan 2 over a filter's sorted bucket), against a
brute-force answer over the records the test wrote.

`_one_bucket` reads `query.cursor[1]`: it once also started at the bucket's first id when no
cursor was given, a branch no caller reached (mutant 41, always `query.cursor[1]`, survived as
equivalent), so it asserts the cursor now. `plan_operators`, its only caller, is reached only when
`has_operators` holds, and `_one_bucket` only when the query has no range, null test or
search, so only with a cursor: a first page without one is planned by query.py's plain
id-order plan. These pages pin both: each first page asks for no cursor, each next one for
the cursor the list's Link would carry (`encode_cursor`, read back by the generated
`parse_list_query` as a request's is). The model sorts by its id as well (`id int @id
@sort`), so the same pages are asked as `sort=id` and `sort=-id` too (planned elsewhere:
`_one_bucket` serves no `sort`).

The filter's keys hold buckets of every size the plans choose between: one record, a few,
some tens (a slice of the bucket at every page size), a few hundred (a slice for a page of
100, a walk for a page of 7), most of the table (a walk of the id order testing the filter),
and a key no record holds; after deletes, re-inserts and replaces that change them.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.cursors import encode_cursor
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from dbsvc.storage.tenants import create_tenant
from support.storage import run

MODULE = compile_schema(parse_schema("model Item {\n  id int @id @sort\n  g int @filter\n}\n", "items.dbs"))
ITEM = MODULE.BY_NAME["Item"]
COUNT = 1500
KEYS = (1, 2, 3, 4, 5, 6)  # 1 record, 3, ~300, the rest (most), none, ~30
SORTS = {"": (), "id": (("id", False),), "-id": (("id", True),)}


def key_of(i: int) -> int:
    if i == 700:
        return 1
    if i in (5, 900, 1499):
        return 2
    if i % 50 == 7:
        return 6
    return 3 if i % 5 == 0 else 4


def page(store: Store, params: list[tuple[str, str]]) -> tuple[list[int], int, bool]:
    records, total, _watermark, more = store.list_page("Item", ITEM.parse_list_query(params))
    return [r["id"] for r in records], total, more


def walk(store: Store, key: int, sort: str, limit: int, want: list[int]) -> None:
    """Every page of `g=key` in the order `sort`, the first without a cursor, each next
    after the last id of the one before; each page, total and `more` as `want` says."""
    base = [("g", str(key)), ("limit", str(limit))] + ([("sort", sort)] if sort else [])
    cursor_keys = (lambda last: [last]) if sort else (lambda last: [])
    params, seen = base, 0
    while True:
        got = page(store, params)
        assert got == (want[seen : seen + limit], len(want), seen + limit < len(want)), (key, sort, limit, seen)
        seen += len(got[0])
        if not got[2]:
            break
        last = got[0][-1]
        params = base + [("cursor", encode_cursor("Item", SORTS[sort], cursor_keys(last), last))]
    assert seen == len(want), (key, sort, limit)


def check_every_list(store: Store, keys: dict[int, int]) -> None:
    for key in KEYS:
        ascending = sorted(i for i, k in keys.items() if k == key)
        for sort in SORTS:
            want = ascending[::-1] if sort == "-id" else ascending
            for limit in (1, 7, 100):
                if limit == 1 and len(want) > 400:
                    continue  # a page a record over most of the table: 1,200 pages say nothing more
                walk(store, key, sort, limit, want)


@pytest.fixture
def store(tmp_path, stores) -> Store:
    return stores(create_tenant(str(tmp_path / "data"), "t"), module=MODULE, sync="off")


def test_one_filter_pages_in_id_order_from_no_cursor_then_by_cursor(store) -> None:
    keys = {i: key_of(i) for i in range(1, COUNT + 1)}
    order = list(keys)
    random.Random(41).shuffle(order)  # buckets filled out of id order

    async def fill() -> None:
        for i in order:
            await store.insert("Item", {"id": i, "g": keys[i]})

    run(fill())
    check_every_list(store, keys)

    async def change() -> None:
        for i in (5, 700, *range(10, 400, 10)):  # the one-record key emptied, a few-key shrunk
            await store.delete("Item", i)
            del keys[i]
        for i in (700, 20, 30):  # back, with another key
            await store.insert("Item", {"id": i, "g": 2})
            keys[i] = 2
        for i in (41, 42, 1498):  # moved between keys
            await store.replace("Item", i, {"id": i, "g": 3})
            keys[i] = 3

    run(change())
    check_every_list(store, keys)


def test_cursor_pages_of_a_key_with_one_record_with_none_and_of_no_records(store) -> None:
    """A cursor before every id and after every id, under each key: the key of one record and
    the key of none included (a first page never asks those with a cursor), and pages of no
    records (`limit=0`, the store's Query: the HTTP parser clamps it), whose `more` is False."""
    keys = {i: key_of(i) for i in range(1, COUNT + 1)}

    async def fill() -> None:
        for i in keys:
            await store.insert("Item", {"id": i, "g": keys[i]})

    run(fill())
    for key in KEYS:
        want = sorted(i for i, k in keys.items() if k == key)
        for sort, first, last in (("", 0, COUNT + 1), ("id", 0, COUNT + 1), ("-id", COUNT + 1, 0)):
            ordered = want[::-1] if sort == "-id" else want
            for after, rest in ((first, ordered), (last, [])):
                cursor = encode_cursor("Item", SORTS[sort], [after] if sort else [], after)
                params = [("g", str(key)), ("limit", "20"), ("cursor", cursor)] + ([("sort", sort)] if sort else [])
                assert page(store, params) == (rest[:20], len(want), len(rest) > 20), (key, sort, after)
                query = replace(ITEM.parse_list_query(params), limit=0)
                records, total, _watermark, more = store.list_page("Item", query)
                assert (records, total, more) == ([], len(want), False), (key, sort, after)


def test_a_first_page_under_one_filter_needs_no_cursor_on_a_fresh_store(store) -> None:
    """The smallest case: one record under the key, one under another, each order."""

    async def fill() -> None:
        await store.insert("Item", {"id": 2, "g": 1})
        await store.insert("Item", {"id": 1, "g": 2})

    run(fill())
    for sort in SORTS:
        params = [("g", "1"), ("limit", "5")] + ([("sort", sort)] if sort else [])
        assert page(store, params) == ([2], 1, False), sort
        assert page(store, [("g", "3"), *params[1:]]) == ([], 0, False), sort
