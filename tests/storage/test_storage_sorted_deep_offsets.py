"""Pages sorted by one field ascending at deep offsets (`?sort=age&offset=`), asked of the
store between writes: each is the page of the brute force order of the live users, ages
ascending, ties by id, nulls last (PostgreSQL's ASC NULLS LAST).

Past FOUND_FROM (storage/sortedlist.py) the page's place is found by a descent of the sort
field's sublist lengths (storage/indexes.py `OrderedIndex.ids_slice`), a Fenwick tree built
by the first deep page and kept by every write: so the pages are asked before each write
and after it, across a delete before the offset, many deletes (a sublist emptied), re-inserts,
an age changed and one made null, and at a watermark before them (`as_of`).
2,600 users with 40 ages make five sublists of ties (LOAD 512).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dbsvc.runtime import Query
from dbsvc.storage import Store
from dbsvc.storage.sortedlist import FOUND_FROM
from support.blog import BLOG
from support.storage import filled_store, run, user

USERS = 2600
QUERY = BLOG.BY_NAME["User"].parse_list_query([("sort", "age"), ("limit", "20")])


def age_of(i: int) -> int | None:
    return None if i % 13 == 0 else (i * 7) % 40


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    async def fill(store: Store) -> None:
        for i in range(1, USERS + 1):
            await store.insert("User", user(i, age=age_of(i)))

    yield from filled_store(fill)


def page(store: Store, offset: int, as_of: int | None = None) -> tuple[list[int], int]:
    query = Query(QUERY.filters, QUERY.sort, 20, offset, as_of=as_of)
    records, total, _watermark, _more = store.list_page("User", query)
    return [r["id"] for r in records], total


def assert_pages(store: Store, ages: dict[int, int | None], as_of: int | None = None) -> None:
    order = sorted((a, i) for i, a in ages.items() if a is not None)
    want_all = [i for _a, i in order] + sorted(i for i, a in ages.items() if a is None)
    n = len(want_all)
    for offset in [0, 19, FOUND_FROM - 1, FOUND_FROM, FOUND_FROM + 1, 1500, 2047, 2048, 2300, n - 20, n - 1, n]:
        assert page(store, offset, as_of) == (want_all[offset : offset + 20], n), (offset, as_of)


def test_deep_sorted_pages_follow_deletes_inserts_and_changes(store) -> None:
    ages = {i: age_of(i) for i in range(1, USERS + 1)}
    assert_pages(store, ages)  # the counts built
    before = store.table("User").watermark
    was = dict(ages)

    async def delete(*ids: int) -> None:
        for i in ids:
            await store.delete("User", i)
            del ages[i]

    async def insert(*ids: int) -> None:
        for i in ids:
            await store.insert("User", user(i, age=age_of(i)))
            ages[i] = age_of(i)

    async def change(i: int, age: int | None) -> None:
        await store.replace("User", i, user(i, age=age))
        ages[i] = age

    youngest = min((a, i) for i, a in ages.items() if a is not None)[1]
    run(delete(youngest))  # one entry before every deep offset
    assert_pages(store, ages)
    run(delete(*[i for i, a in ages.items() if a is not None and a < 10]))  # the first sublists emptied
    assert_pages(store, ages)
    run(insert(*[i for i in range(5, 400, 7) if i not in ages]))  # back in the middle
    assert_pages(store, ages)
    run(change(2, 39))  # moved towards the end
    run(change(3, None))  # made null: a position fewer before every deep offset
    assert_pages(store, ages)
    assert_pages(store, was, as_of=before)  # as the list was before every write here
