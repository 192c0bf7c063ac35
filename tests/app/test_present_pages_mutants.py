"""readcache.py `PresentPages` at each of its decisions (docs/mutation.md, session 8): which
store, epoch and ticks keep an entry fresh, what a stale entry leaves behind, the size and
count bounds at their edges, and the bytes it says it holds, exactly.

Each test opens real stores in a directory of its own (no pytest fixture: the in-process
mutation runner, bench/mutation_inprocess.py, calls these functions itself) and writes to
them to move the ticks; the kept bodies are plain bytes, so every count is a literal.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable

from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.readcache import PresentPages
from dbsvc.storage import Store
from support.storage import open_store, post, user

LINK = '<x>; rel="next"'  # 15 characters


def req(target: str) -> Request:
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])


def with_stores(go: Callable[..., Awaitable[None]], count: int = 1) -> None:
    """Run `go(*stores)` over `count` fresh stores, closed and removed after."""
    directory = tempfile.mkdtemp(prefix="present-pages-")
    stores: list[Store] = []
    try:
        for n in range(count):
            os.mkdir(f"{directory}/{n}")
            stores.append(open_store(f"{directory}/{n}", sync="off"))
        asyncio.run(asyncio.wait_for(go(*stores), 60))
    finally:
        for store in stores:
            store.close()
        shutil.rmtree(directory, ignore_errors=True)


def test_a_kept_answer_is_served_for_its_own_path_and_query_only():
    async def go(store: Store) -> None:
        pages = PresentPages()
        listed = req("/api/user?limit=2&sort=name")
        assert pages.get(store, listed) is None and len(pages) == 0
        pages.keep(store, listed, ("User",), b'{"data":[]}', 7, LINK)
        assert len(pages) == 1 and pages.kept_bytes == 11 + 15
        assert pages.get(store, listed) == (b'{"data":[]}', 7, LINK)
        assert pages.get(store, req("/api/user?limit=2&sort=name")) == (b'{"data":[]}', 7, LINK)
        assert pages.get(store, req("/api/user?limit=3&sort=name")) is None
        assert pages.get(store, req("/api/user?sort=name&limit=2")) is None  # the pairs in order
        assert pages.get(store, req("/api/blogpost?limit=2&sort=name")) is None
        assert len(pages) == 1 and pages.kept_bytes == 26  # a miss drops nothing
        pages.keep(store, req("/api/user"), ("User",), b"[1]", 0, None)
        assert pages.get(store, req("/api/user")) == (b"[1]", 0, None) and pages.kept_bytes == 29

    with_stores(go)


def test_a_write_to_the_listed_model_makes_the_entry_stale_and_drops_it():
    async def go(store: Store) -> None:
        pages = PresentPages()
        listed = req("/api/user")
        pages.keep(store, listed, ("User",), b"0123456789", 3, LINK)
        await store.insert("User", user(1))
        assert pages.get(store, listed) is None
        assert len(pages) == 0 and pages.kept_bytes == 0  # the stale entry's body and link given back
        pages.keep(store, listed, ("User",), b"0123456789", 4, None)
        assert pages.get(store, listed) == (b"0123456789", 4, None) and pages.kept_bytes == 10

    with_stores(go)


def test_every_model_named_is_checked_and_only_those():
    async def go(store: Store) -> None:
        await store.insert("User", user(1))
        pages = PresentPages()
        first, second, alone = req("/api/blogpost?expand=author"), req("/api/user?expand=x"), req("/api/user")
        pages.keep(store, first, ("BlogPost", "User"), b"a", 1, None)
        pages.keep(store, second, ("BlogPost", "User"), b"b", 1, None)
        pages.keep(store, alone, ("User",), b"c", 1, None)
        await store.insert("BlogPost", post(1, author=1))  # the first name moves, the second does not
        assert pages.get(store, first) is None and pages.get(store, alone) == (b"c", 1, None)
        pages.keep(store, first, ("BlogPost", "User"), b"a", 2, None)
        await store.replace("User", 1, user(1, name="renamed"))  # now only the second name moves
        assert pages.get(store, first) is None and pages.get(store, alone) is None
        assert pages.get(store, second) is None
        assert len(pages) == 0 and pages.kept_bytes == 0
        posts = req("/api/blogpost")
        pages.keep(store, posts, ("BlogPost",), b"p", 2, None)
        await store.insert("User", user(2))  # a model the answer did not read
        assert pages.get(store, posts) == (b"p", 2, None)

    with_stores(go)


def test_another_store_or_another_epoch_makes_the_entry_stale():
    async def go(store: Store, other: Store) -> None:
        pages = PresentPages()
        listed = req("/api/user?limit=1")
        pages.keep(store, listed, ("User",), b"kept", 1, None)
        assert other.epoch != store.epoch  # and other ticks: TICKS is process-wide (table.py)
        assert pages.get(other, listed) is None and len(pages) == 0 and pages.kept_bytes == 0
        await store.insert("User", user(1))
        pages.keep(store, listed, ("User",), b"kept", 1, None)
        tick, epoch = store.tick("User"), store.epoch
        await store.compactor.compact_now()
        assert store.epoch != epoch and store.tick("User") == tick  # the epoch alone moved
        assert pages.get(store, listed) is None and len(pages) == 0 and pages.kept_bytes == 0

    with_stores(go, count=2)


def test_a_body_of_largest_bytes_is_kept_and_one_byte_more_is_not():
    async def go(store: Store) -> None:
        pages = PresentPages(largest=10)
        pages.keep(store, req("/api/user?a=1"), ("User",), b"x" * 10, 0, None)
        pages.keep(store, req("/api/user?a=2"), ("User",), b"x" * 11, 0, None)
        assert pages.get(store, req("/api/user?a=1")) == (b"x" * 10, 0, None)
        assert pages.get(store, req("/api/user?a=2")) is None
        assert len(pages) == 1 and pages.kept_bytes == 10

    with_stores(go)


def test_a_target_of_512_characters_is_kept_and_one_more_is_not():
    async def go(store: Store) -> None:
        pages = PresentPages()
        fits = "/api/user?name=" + "n" * (512 - 15)
        over = "/api/user?name=" + "n" * (513 - 15)
        assert len(fits) == 512 and len(over) == 513
        pages.keep(store, req(fits), ("User",), b"1", 0, None)
        pages.keep(store, req(over), ("User",), b"2", 0, None)
        assert pages.get(store, req(fits)) == (b"1", 0, None) and pages.get(store, req(over)) is None
        assert len(pages) == 1

    with_stores(go)


def test_the_budget_counts_the_body_and_the_link_to_the_byte():
    async def go(store: Store) -> None:
        pages = PresentPages(budget=30)
        pages.keep(store, req("/api/user?a=1"), ("User",), b"x" * 15, 0, LINK)  # 30: fits
        assert pages.kept_bytes == 30 and len(pages) == 1
        pages.keep(store, req("/api/user?a=2"), ("User",), b"x" * 16, 0, LINK)  # 31: never kept
        assert pages.get(store, req("/api/user?a=2")) is None
        assert pages.get(store, req("/api/user?a=1")) == (b"x" * 15, 0, LINK) and pages.kept_bytes == 30
        pages.keep(store, req("/api/user?a=3"), ("User",), b"y" * 30, 0, None)  # the first goes for it
        assert pages.get(store, req("/api/user?a=1")) is None
        assert pages.get(store, req("/api/user?a=3")) == (b"y" * 30, 0, None)
        assert len(pages) == 1 and pages.kept_bytes == 30

    with_stores(go)


def test_the_oldest_entries_go_first_until_the_new_one_fits_the_budget():
    async def go(store: Store) -> None:
        pages = PresentPages(budget=30)
        for n in range(3):
            pages.keep(store, req(f"/api/user?n={n}"), ("User",), b"x" * 10, n, None)
        assert len(pages) == 3 and pages.kept_bytes == 30  # exactly the budget: all kept
        pages.keep(store, req("/api/user?n=3"), ("User",), b"x" * 11, 3, None)  # two must go
        assert pages.get(store, req("/api/user?n=0")) is None and pages.get(store, req("/api/user?n=1")) is None
        assert pages.get(store, req("/api/user?n=2")) == (b"x" * 10, 2, None)
        assert pages.get(store, req("/api/user?n=3")) == (b"x" * 11, 3, None)
        assert len(pages) == 2 and pages.kept_bytes == 21

    with_stores(go)


def test_at_capacity_the_oldest_entry_goes_and_keeping_a_kept_list_again_replaces_it():
    async def go(store: Store) -> None:
        pages = PresentPages(capacity=2)
        a, b, c = req("/api/user?n=a"), req("/api/user?n=b"), req("/api/user?n=c")
        pages.keep(store, a, ("User",), b"aa", 1, None)
        pages.keep(store, b, ("User",), b"bbb", 2, LINK)
        assert len(pages) == 2 and pages.kept_bytes == 2 + 3 + 15
        pages.keep(store, b, ("User",), b"b", 5, None)  # the same list again: a stays
        assert len(pages) == 2 and pages.kept_bytes == 2 + 1
        assert pages.get(store, a) == (b"aa", 1, None) and pages.get(store, b) == (b"b", 5, None)
        pages.keep(store, c, ("User",), b"cccc", 3, None)  # a is the oldest
        assert pages.get(store, a) is None
        assert pages.get(store, b) == (b"b", 5, None) and pages.get(store, c) == (b"cccc", 3, None)
        assert len(pages) == 2 and pages.kept_bytes == 1 + 4

    with_stores(go)


def test_the_documented_bounds_512_answers_and_8_mib():
    async def go(store: Store) -> None:
        pages = PresentPages()
        for n in range(513):
            pages.keep(store, req(f"/api/user?n={n}"), ("User",), b"x", 0, None)
        assert len(pages) == 512 and pages.get(store, req("/api/user?n=0")) is None
        assert pages.get(store, req("/api/user?n=1")) == (b"x", 0, None)
        big = PresentPages(largest=1 << 24)
        big.keep(store, req("/api/user?big=1"), ("User",), b"x" * (8 << 20), 0, None)  # the whole budget
        assert big.kept_bytes == 8 << 20
        big.keep(store, req("/api/user?big=2"), ("User",), b"x" * ((8 << 20) + 1), 0, None)
        assert big.get(store, req("/api/user?big=2")) is None and len(big) == 1
        kept = PresentPages()
        kept.keep(store, req("/api/user?page=1"), ("User",), b"x" * 65536, 0, None)
        kept.keep(store, req("/api/user?page=2"), ("User",), b"x" * 65537, 0, None)
        assert len(kept) == 1 and kept.kept_bytes == 65536

    with_stores(go)
