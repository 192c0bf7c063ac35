"""readcache.py's kept answers at each of their decisions (docs/mutation.md, session 8):
`PresentPages` (which store, epoch and ticks keep an entry fresh, what a stale entry leaves
behind, the size and count bounds at their edges, and the bytes it says it holds, exactly),
`PastPages` (per model, query, store and epoch, and its bounds) and
`EncodedRecords.encode_page` (a page of the same record objects is the kept bytes object).

Each test opens real stores in a directory of its own (no pytest fixture: the in-process
mutation runner, bench/mutation_inprocess.py, calls these functions itself) and writes to
them to move the ticks; the kept bodies are plain bytes, so every count is a literal.
"""

from __future__ import annotations

from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.readcache import EncodedRecords, PastPages, PresentPages
from dbsvc.runtime import json_bytes
from dbsvc.storage import Store
from support.storage import BLOG, post, user, with_stores

LINK = '<x>; rel="next"'  # 15 characters


def req(target: str) -> Request:
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])


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


# --- PastPages: lists at a past watermark, kept whole ------------------------------------------

USER = BLOG.BY_NAME["User"]
POST = BLOG.BY_NAME["BlogPost"]
HEADERS = [("Dbsvc-Watermark", "3"), ("Link", LINK)]


def test_a_past_page_is_kept_per_model_query_store_and_epoch():
    async def go(store: Store, other: Store) -> None:
        pages = PastPages()
        listed = req("/api/user?as_of=1&limit=2")
        assert pages.get(store, USER, listed) is None
        pages.keep(store, USER, listed, b"body", HEADERS)
        kept = pages.get(store, USER, listed)
        assert kept == (b"body", HEADERS) and kept[1] is not pages.get(store, USER, listed)[1]  # type: ignore[index]
        assert pages.get(store, POST, listed) is None  # another model, the same query
        assert pages.get(store, USER, req("/api/user?as_of=1&limit=3")) is None
        assert pages.get(other, USER, listed) is None  # another store
        await store.insert("User", user(1))  # a write does not touch a past page
        assert pages.get(store, USER, listed) == (b"body", HEADERS)
        await store.compactor.compact_now()  # a new epoch does
        assert pages.get(store, USER, listed) is None
        pages.keep(store, USER, listed, b"again", [])
        assert pages.get(store, USER, listed) == (b"again", [])

    with_stores(go, count=2)


def test_a_past_page_over_largest_or_with_a_target_over_longest_is_not_kept():
    async def go(store: Store) -> None:
        pages = PastPages()
        assert (pages.capacity, pages.largest, pages.longest) == (256, 65536, 512)
        fits = "/api/user?name=" + "n" * (512 - 15)
        over = "/api/user?name=" + "n" * (513 - 15)
        pages.keep(store, USER, req("/api/user?a=1"), b"x" * 65536, [])
        pages.keep(store, USER, req("/api/user?a=2"), b"x" * 65537, [])
        pages.keep(store, USER, req(fits), b"1", [])
        pages.keep(store, USER, req(over), b"2", [])
        assert pages.get(store, USER, req("/api/user?a=1")) == (b"x" * 65536, [])
        assert pages.get(store, USER, req("/api/user?a=2")) is None
        assert pages.get(store, USER, req(fits)) == (b"1", []) and pages.get(store, USER, req(over)) is None

    with_stores(go)


def test_past_pages_at_capacity_drop_the_oldest_and_a_kept_query_kept_again_drops_none():
    async def go(store: Store) -> None:
        pages = PastPages(capacity=2)
        a, b, c = req("/api/user?n=a"), req("/api/user?n=b"), req("/api/user?n=c")
        pages.keep(store, USER, a, b"a", [])
        pages.keep(store, USER, b, b"b", [])
        pages.keep(store, USER, b, b"B", [])  # at capacity, but already kept: a stays
        assert pages.get(store, USER, a) == (b"a", []) and pages.get(store, USER, b) == (b"B", [])
        pages.keep(store, USER, c, b"c", [])
        assert pages.get(store, USER, a) is None
        assert pages.get(store, USER, b) == (b"B", []) and pages.get(store, USER, c) == (b"c", [])
        full = PastPages()
        for n in range(257):
            full.keep(store, USER, req(f"/api/user?n={n}"), b"x", [])
        assert full.get(store, USER, req("/api/user?n=0")) is None
        assert full.get(store, USER, req("/api/user?n=1")) == (b"x", [])

    with_stores(go)


# --- EncodedRecords.encode_page: a page of the same record objects joined once -----------------


def named(i: int, size: int = 0) -> dict:
    record = user(i)
    if size:
        record["name"] = ""
        record["name"] = "n" * (size - len(json_bytes(record)))
    return record


def test_a_page_of_the_same_record_objects_is_the_kept_bytes_and_new_objects_are_joined_again():
    cache = EncodedRecords([USER])
    records = [named(1), named(2)]
    once = cache.encode_page(USER, records)  # joined once: not kept (kept from a second join)
    first = cache.encode_page(USER, records)
    assert first == once == json_bytes(records[0]) + b"," + json_bytes(records[1]) and first is not once
    assert cache.encode_page(USER, records) is first  # kept: not joined again
    assert cache.encode_page(USER, list(records)) is first  # the same objects in another list
    changed = [records[0], named(2) | {"name": "other"}]
    assert cache.encode_page(USER, changed) == json_bytes(records[0]) + b"," + json_bytes(changed[1])
    assert cache.encode_page(USER, [records[1], records[0]]) is not first


def test_a_page_of_64_kib_is_kept_and_one_byte_more_is_not():
    cache = EncodedRecords([USER])
    assert (cache.pages, cache.largest_page) == (256, 65536)
    exact, over = [named(1, 65536)], [named(2, 65537)]
    assert len(cache.encode_page(USER, exact)) == 65536 and len(cache.encode_page(USER, over)) == 65537
    cache.encode_page(USER, over)  # each asked twice now: kept from there unless over 64 KiB
    assert cache.encode_page(USER, exact) is cache.encode_page(USER, exact)
    assert cache.encode_page(USER, over) is not cache.encode_page(USER, over)


def test_at_most_pages_pages_are_kept_the_oldest_dropped_first():
    records = [named(i) for i in range(600)]
    pairs = [records[2 * n : 2 * n + 2] for n in range(300)]  # two records: joined, a new object
    small = EncodedRecords([USER], pages=2)

    def twice(cache: EncodedRecords, pair: list[dict]) -> bytes:  # kept from the second join
        cache.encode_page(USER, pair)
        return cache.encode_page(USER, pair)

    kept = [twice(small, pair) for pair in pairs[:3]]  # the first is dropped
    assert small.encode_page(USER, pairs[1]) is kept[1] and small.encode_page(USER, pairs[2]) is kept[2]
    assert small.encode_page(USER, pairs[0]) is not kept[0]
    default = EncodedRecords([USER])
    pages = [twice(default, pair) for pair in pairs[:257]]
    assert default.encode_page(USER, pairs[1]) is pages[1]
    assert default.encode_page(USER, pairs[0]) is not pages[0]


def test_a_page_is_kept_from_its_second_join_among_the_last_pages_not_kept():
    """Pages at many targets (session 15, wt-many): a page joined once is not kept (no
    tuple of its records, no eviction); a page whose second join comes after `pages` other
    pages not kept counts as joined once. Failed before session 15 (kept at once)."""
    cache = EncodedRecords([USER], pages=4)
    records = [named(i) for i in range(20)]
    page = records[:2]
    assert cache.encode_page(USER, page) is not cache.encode_page(USER, page)  # the second keeps it
    assert cache.encode_page(USER, page) is cache.encode_page(USER, page)
    later = records[2:4]
    cache.encode_page(USER, later)
    for n in range(4):  # 4 other pages joined once: the window is emptied at the 4th
        cache.encode_page(USER, records[4 + 2 * n : 6 + 2 * n])
    once_again = cache.encode_page(USER, later)  # joined "once" again: not kept
    assert cache.encode_page(USER, later) is not once_again


def test_a_page_target_is_admitted_from_its_second_ask_within_capacity_targets():
    """`PresentPages.admits_page` (session 15, wt-many): a target's path and pairs, asked a
    second time among the last `capacity` asked once, are kept; the app asks it only for
    pages at a cursor or an offset (tests/app/test_list_present_pages.py)."""
    pages = PresentPages(capacity=2)
    first, other, third = req("/api/m?offset=20"), req("/api/m?offset=40"), req("/api/m?offset=60")
    assert [pages.admits_page(first), pages.admits_page(first)] == [False, True]
    assert pages.admits_page(req("/api/n?offset=20")) is False  # another path: another target
    assert pages.admits_page(other) is False  # the window (2) was full: emptied, then `other`
    assert pages.admits_page(first) is False and pages.admits_page(third) is False
    assert pages.admits_page(third) is True and len(pages) == 0  # keeping is the caller's
