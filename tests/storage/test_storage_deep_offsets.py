"""Pages in id order at deep offsets, asked of the store between writes: each is the page of a
list of the live ids kept by the test.

An offset past the first FOUND_FROM ids (storage/sortedlist.py) is found by a descent of the
primary key's sublist lengths kept in a Fenwick tree, built by the first such page and then
kept up to date by every insert and delete (or dropped, when the sublists themselves move).
A count it missed would shift every later deep page by one: so the pages are asked (the
tree then built) before each write and again after it, across deletes before the offset
(one, and a whole sublist's worth), re-inserts in the middle, inserts at the end (appends,
then enough to split the last sublist), and updates (which move no id); and at a watermark
before them (`as_of`, planned on the live order: storage/query.py `page_as_of`).
2,600 posts make five sublists (LOAD 512; halves of 512 past 1,024). The cursor pages read a
store of their own, with its holes made when it is filled (`holed`): each test runs alone.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dbsvc.runtime import Query
from dbsvc.storage import Store
from dbsvc.storage.sortedlist import FOUND_FROM
from support.blog import BLOG
from support.storage import filled_store, post, run, user

POSTS = 2600
OFFSETS = [0, 19, FOUND_FROM - 1, FOUND_FROM, FOUND_FROM + 1, 1500, 2047, 2048, 2049, 2560, 2590]
QUERY = BLOG.BY_NAME["BlogPost"].parse_list_query([("limit", "20")])


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    async def fill(store: Store) -> None:
        await store.insert("User", user(1))
        for i in range(1, POSTS + 1):
            await store.insert("BlogPost", post(i))

    yield from filled_store(fill)


@pytest.fixture(scope="module")
def holed() -> Iterator[Store]:
    """The same posts with holes: 7 (before every deep offset) and 500-1,099 (the second
    sublist emptied, parts of two more) deleted. The cursor test's own, so that it holds
    deleted ids whichever tests ran before it (or none: `-k`, a worker's share)."""

    async def fill(store: Store) -> None:
        await store.insert("User", user(1))
        for i in range(1, POSTS + 1):
            await store.insert("BlogPost", post(i))
        for i in (7, *range(500, 1100)):
            await store.delete("BlogPost", i)

    yield from filled_store(fill)


def page(store: Store, offset: int, as_of: int | None = None) -> tuple[list[int], int, list[str]]:
    query = Query(QUERY.filters, QUERY.sort, 20, offset, as_of=as_of)
    records, total, _watermark, _more = store.list_page("BlogPost", query)
    return [r["id"] for r in records], total, [r["title"] for r in records]


def assert_pages(store: Store, live: list[int], titles: dict[int, str], as_of: int | None = None) -> None:
    for offset in [*OFFSETS, len(live) - 20, len(live) - 1, len(live), len(live) + 5]:
        want = live[offset : offset + 20]
        assert page(store, offset, as_of) == (want, len(live), [titles[i] for i in want]), (offset, as_of)


def test_deep_pages_follow_deletes_inserts_and_updates_between_them(store) -> None:
    live = list(range(1, POSTS + 1))
    titles = {i: f"title {i}" for i in live}
    assert_pages(store, live, titles)  # the counts built
    before = store.table("BlogPost").watermark
    was = list(live), dict(titles)

    async def delete(*ids: int) -> None:
        for i in ids:
            await store.delete("BlogPost", i)
            live.remove(i)

    async def insert(*ids: int) -> None:
        for i in ids:
            await store.insert("BlogPost", post(i))
            titles[i] = f"title {i}"
        live[:] = sorted(set(live) | set(ids))

    run(delete(7))  # one id before every deep offset
    assert_pages(store, live, titles)
    run(delete(*range(500, 1100)))  # the second sublist emptied (ids 513-1,024), parts of two more
    assert_pages(store, live, titles)
    run(insert(7, 700, 701))  # back in the middle
    assert_pages(store, live, titles)
    run(insert(POSTS + 1, POSTS + 2))  # appended to the last sublist
    assert_pages(store, live, titles)
    run(insert(*range(POSTS + 3, POSTS + 900)))  # the last sublist split
    assert_pages(store, live, titles)

    async def update(i: int) -> None:
        await store.replace("BlogPost", i, post(i, title=f"changed {i}"))
        titles[i] = f"changed {i}"

    run(update(2049))
    assert_pages(store, live, titles)
    assert_pages(store, *was, as_of=before)  # as the list was before every write here


def test_a_cursor_page_in_id_order_from_an_offset_is_the_list_after_the_id(holed) -> None:
    """A cursor in id order with an offset (the store's `Query` takes both; the HTTP parser
    refuses them together): the ids after the cursor's id, present or deleted, from the
    offset, sliced across sublists (sortedlist.py `head_after`)."""
    store = holed
    live = [r["id"] for r in store.list_page("BlogPost", Query({}, (), 10**6, 0))[0]]
    assert live == [i for i in range(1, POSTS + 1) if not (i == 7 or 500 <= i < 1100)]
    deleted = 7
    for after in (0, 1, 511, 512, 513, deleted, live[-21], live[-1]):
        rest = [i for i in live if i > after]
        for offset in (0, 1, 20, 600, len(rest) - 1, len(rest)):
            query = Query(QUERY.filters, QUERY.sort, 20, offset, cursor=((), after))
            records, total, _watermark, more = store.list_page("BlogPost", query)
            assert [r["id"] for r in records] == rest[offset : offset + 20], (after, offset)
            assert (total, more) == (len(live), len(rest) > offset + 20), (after, offset)
