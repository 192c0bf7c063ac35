"""A filter's bucket that changes between the pages of a walk by cursors, in id order
(storage/seek.py `_one_bucket`: the bucket looked up once for its count and its slice
after the cursor). Between two pages the walk deletes the record at the cursor, adds a
record to the bucket after it and one before it, moves a record out of the bucket ahead of
the cursor and one into it; every page (ids, total, whether more follow) is the one worked
out here from the records as they are then, and the walk sees no record twice. Beside
it: a cursor past the bucket's last id, a filter of two values (not one bucket: the whole
plan), a bucket grown past a list's size (flags: the whole plan), and an `as_of` page,
each against the records. None of these failed before session 28's change: they hold
the new lookup (a cut one short, `bisect_left` at the cursor, flags bisected as a list
each fail here)."""

from __future__ import annotations

import asyncio

import pytest

from dbsvc.cursors import encode_cursor
from dbsvc.storage import hashes
from support.query_oracle import ITEM, body, filled_store


def row(g: int | None) -> dict:
    return {"n": 1, "f": 1.0, "s": None, "t": "red", "b": True, "dt": None, "g": g, "w": None}


def page(store, g: list[int], after: int, limit: int) -> tuple[list[int], int, bool]:
    pairs = [("limit", str(limit)), *(("g", str(v)) for v in g), ("cursor", encode_cursor("Item", (), [], after))]
    records, total, _watermark, more = store.list_page("Item", ITEM.parse_list_query(pairs))
    return [r["id"] for r in records], total, more


def expected(held: dict[int, int | None], g: list[int], after: int, limit: int) -> tuple[list[int], int, bool]:
    """The page worked out from `held` (id -> g of every live record)."""
    ids = sorted(i for i, v in held.items() if v in g)
    rest = [i for i in ids if i > after]
    return rest[:limit], len(ids), limit > 0 and len(rest) > limit


def put(store, held: dict[int, int | None], id_: int, g: int | None) -> None:
    record = {**ITEM.validate_create(body(row(g))), "id": id_}
    asyncio.run(store.replace("Item", id_, record))
    held[id_] = g


def test_a_walk_by_cursors_follows_its_bucket_as_it_changes_between_pages():
    gs = [2 if n % 3 == 0 else 4 for n in range(60)]  # 20 of 60 in g = 2
    with filled_store([row(g) for g in gs]) as (store, ids, _twin):
        held = dict(zip(ids, gs))
        after, seen, limit = ids[0] - 1, [], 3
        for step in range(20):
            got = page(store, [2], after, limit)
            assert got == expected(held, [2], after, limit), (step, after)
            seen += got[0]
            if not got[0]:
                break
            after = got[0][-1]
            if step == 0:  # the record at the cursor deleted: the next page starts after its id still
                asyncio.run(store.delete("Item", after))
                del held[after]
            elif step == 1:  # a new record in the bucket: the largest id, so after the cursor
                new = asyncio.run(store.insert("Item", ITEM.validate_create(body(row(2)))))["id"]
                held[new] = 2
            elif step == 2:  # one behind the cursor moved into the bucket: counted, never paged
                behind = max(i for i in held if i < after and held[i] != 2)
                put(store, held, behind, 2)
            elif step == 3:  # one ahead of the cursor moved out: neither counted nor paged
                ahead = min(i for i in held if i > after and held[i] == 2)
                put(store, held, ahead, 4)
            elif step == 4:  # one ahead moved in: paged in its place
                ahead = min(i for i in held if i > after and held[i] != 2)
                put(store, held, ahead, 2)
        else:
            pytest.fail("the walk did not end")
        assert all(a < b for a, b in zip(seen, seen[1:]))  # none twice, none out of order


def test_a_cursor_past_the_buckets_last_id_is_an_empty_last_page():
    with filled_store([row(2 if n % 2 else 4) for n in range(20)]) as (store, ids, _twin):
        held = dict(zip(ids, [2 if n % 2 else 4 for n in range(20)]))
        last = max(i for i, v in held.items() if v == 2)
        for after in (last, last + 1, ids[-1] + 100):
            assert page(store, [2], after, 5) == ([], 10, False) == expected(held, [2], after, 5)


@pytest.mark.parametrize("limit", [0, 1, 3, 20])
def test_a_filter_of_two_values_at_a_cursor_pages_as_its_records(limit):
    gs = [n % 3 for n in range(30)]
    with filled_store([row(g) for g in gs]) as (store, ids, _twin):
        held = dict(zip(ids, gs))
        for after in (ids[0] - 1, ids[4], ids[17], ids[-1]):
            assert page(store, [0, 2], after, limit) == expected(held, [0, 2], after, limit), after


@pytest.mark.parametrize("limit", [1, 6, 20])
def test_a_bucket_past_a_lists_size_pages_as_its_records(monkeypatch, limit):
    monkeypatch.setattr(hashes, "SET_AT", 8)  # a bucket past 8 ids of an id space of 64 becomes flags
    # g = 1 on 5 ids of 60 (a list), g = 2 on 20 (flags: few enough for the bucket's plan
    # at limit 20, where its form is what declines it), g = 4 on the other 35 (flags)
    gs = [1 if n % 12 == 0 else 2 if n % 3 == 1 else 4 for n in range(60)]
    with filled_store([row(g) for g in gs]) as (store, ids, _twin):
        held = dict(zip(ids, gs))
        buckets = store.table("Item").hashes["g"].buckets
        assert (type(buckets[1]), type(buckets[2]), type(buckets[4])) == (list, hashes.IdBits, hashes.IdBits)
        for g in (1, 2, 4):
            for after in (ids[0] - 1, ids[7], ids[25], ids[-1]):
                assert page(store, [g], after, limit) == expected(held, [g], after, limit), (g, after)


def test_an_as_of_page_under_one_filter_at_a_cursor_is_the_bucket_as_it_was():
    gs = [2 if n % 3 == 0 else 4 for n in range(45)]  # 15 of 45 in g = 2
    with filled_store([row(g) for g in gs]) as (store, ids, _twin):
        then = dict(zip(ids, gs))
        watermark = store.table("Item").watermark
        now = dict(then)
        asyncio.run(store.delete("Item", ids[9]))  # in the bucket then
        del now[ids[9]]
        put(store, now, ids[10], 2)  # moved in since
        put(store, now, ids[12], 4)  # moved out since
        now[asyncio.run(store.insert("Item", ITEM.validate_create(body(row(2)))))["id"]] = 2
        for after in (ids[0] - 1, ids[3], ids[9], ids[20], ids[-1]):
            for limit in (1, 4, 20):
                pairs = [("limit", str(limit)), ("g", "2"), ("cursor", encode_cursor("Item", (), [], after))]
                query = ITEM.parse_list_query([*pairs, ("as_of", str(watermark))])
                records, total, seen_at, more = store.list_page("Item", query)
                assert seen_at == watermark
                assert ([r["id"] for r in records], total, more) == expected(then, [2], after, limit), (after, limit)
                assert page(store, [2], after, limit) == expected(now, [2], after, limit), (after, limit)
