"""A cursor page in id order under one filter whose bucket is small enough to be sliced
(storage/seek.py `_one_bucket`; a filter without a cursor is planned elsewhere, and a
cursor page takes no offset): a bucket of exactly one id, of two, and an empty one, at
limits 0, 1 and 20, from cursors before, between and after its ids. Each answer (ids,
total, whether more follow) is the one worked out here from the records.
test_storage_cursor_alone.py's buckets hold tens of ids, so two cuts of the shortcut's
first test survived it (session 24 mutation pass): a bucket of one id answered as an empty
page (`size == 1`), and a page of limit 0 saying more follow (`limit == 0 and size == 0`)."""

from __future__ import annotations

import pytest

from dbsvc.cursors import encode_cursor
from support.query_oracle import ITEM, filled_store


def row(g: int | None) -> dict:
    return {"n": 1, "f": 1.0, "s": None, "t": "red", "b": True, "dt": None, "g": g, "w": None}


# 40 records: g = 1 on one of them (the 11th), g = 2 on two (the 6th and the 31st), g = 4
# on the rest; g = 3 on none
GS = [1 if n == 10 else 2 if n in (5, 30) else 4 for n in range(40)]


@pytest.fixture(scope="module")
def filled():
    with filled_store([row(g) for g in GS]) as (store, ids, _twin):
        yield store, ids


def expected(ids: list[int], g: int, after: int, limit: int) -> tuple[list[int], int, bool]:
    held = [i for i, gi in zip(ids, GS) if gi == g]
    rest = [i for i in held if i > after]
    return rest[:limit], len(held), limit > 0 and len(rest) > limit


@pytest.mark.parametrize("g", [1, 2, 3])
@pytest.mark.parametrize("limit", [0, 1, 20])
def test_a_small_bucket_in_id_order_pages_as_its_records_from_each_cursor(filled, g, limit):
    store, ids = filled
    for after in [ids[0] - 1, ids[0], ids[5], ids[10], ids[20], ids[30], ids[-1]]:
        pairs = [("limit", str(limit)), ("g", str(g)), ("cursor", encode_cursor("Item", (), [], after))]
        records, total, _watermark, more = store.list_page("Item", ITEM.parse_list_query(pairs))
        assert ([r["id"] for r in records], total, more) == expected(ids, g, after, limit), (after, pairs)
