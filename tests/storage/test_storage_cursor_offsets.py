"""A cursor and an offset together, asked of the store: the page is the list after the
cursor's place, from the offset (walks.py `ascending_page`'s offset into the nulls).

The HTTP parser refuses `cursor` beside `offset` (docs/guide/queries.md), but the store's
`Query` takes both, and every plan answers them alike: the offset counts from the cursor's
place (a filter's page in id order, test_storage_hash_buckets.py; a descending page, cut
by seek.py). An ascending page of one key whose window holds the nulls (no condition on
the sort field: the seek at a cursor) takes its non-null entries after the cursor from the
offset, and when they run out, the nulls from what is left of the offset: the entries
skipped are subtracted (the two lines of `ascending_page` no HTTP query reaches, kept for
this, docs/decisions.md). Ten records (`n`, nulls last ascending and first descending):

    ascending   3: 2 5 9 | 5: 1 3 7 | 7: 6 10 | null: 4 8
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.storage.test_storage_one_key_page_edges import ASCENDING, DESCENDING, ITEM, KEYS, cursor, store_of

PLACES = [(3, 2), (3, 9), (5, 3), (7, 6), (7, 10), (None, 4), (4, 99)]  # (key, id) a page ended on


def after(order: list[int], key, id_: int, desc: bool) -> list[int]:
    """The ids of `order` after the place (key, id_): keys compared as the order does
    (nulls last ascending, first descending), ties on the id."""

    def rank(i: int) -> tuple:
        k = KEYS[i]
        if desc:
            return (k is not None, -(k or 0), i)
        return (k is None, k or 0, i)

    place = rank_of(key, id_, desc)
    return [i for i in order if rank(i) > place]


def rank_of(key, id_: int, desc: bool) -> tuple:
    if desc:
        return (key is not None, -(key or 0), id_)
    return (key is None, key or 0, id_)


@pytest.mark.parametrize("desc", [False, True])
def test_a_cursor_page_from_an_offset_is_the_list_after_the_cursor_from_the_offset(desc):
    order = DESCENDING if desc else ASCENDING
    with store_of(KEYS) as store:
        for key, id_ in PLACES:
            rest = after(order, key, id_, desc)
            for offset in range(len(rest) + 2):
                for limit in (1, 2, 5):
                    params = [cursor(desc, key, id_), ("sort", "-n" if desc else "n"), ("limit", str(limit))]
                    query = replace(ITEM.parse_list_query(params), offset=offset)
                    records, total, _watermark, more = store.list_page("Item", query)
                    want = rest[offset : offset + limit]
                    assert ([r["id"] for r in records], total) == (want, 10), (key, id_, offset, limit)
                    assert more == (len(rest) > offset + limit), (key, id_, offset, limit)
