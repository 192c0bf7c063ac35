"""Range scans, null tests and cursor seeks of `Store.list_page` against SQLite (storage/seek.py).

The REST test (tests/app/test_query_oracle.py) keeps its tables small so it stays fast; here
a store holds up to a few hundred records of few distinct keys, so every plan of seek.py
runs: the seek over the first sort key, the gathered and sorted matches, and the walk that
keeps only the matches. Each example also reads the same list `as_of` a watermark before a
few later writes (the state plan) and walks every list by cursor to its end.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbsvc.cursors import encode_cursor
from dbsvc.storage import Store
from support.query_oracle import ITEM, fill, filled_store, queries, records


def walk(store: Store, pairs: list[tuple[str, str]], limit: int) -> tuple[list[int], set[int]]:
    """Every page by cursor: (the ids, in order; the totals the pages said)."""
    ids: list[int] = []
    totals = set()
    cursor = None
    for _ in range(10_000):
        extra = [("limit", str(limit))] + ([("cursor", cursor)] if cursor else [])
        query = ITEM.parse_list_query(pairs + extra)
        records_, total, _watermark, more = store.list_page("Item", query)
        totals.add(total)
        ids += [r["id"] for r in records_]
        if not more:
            return ids, totals
        last = records_[-1]
        cursor = encode_cursor("Item", query.sort, [ITEM.keys[f](last[f]) for f, _ in query.sort], last["id"])
    raise AssertionError("a cursor walk that does not end")


PROPERTY = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CHECKS = st.lists(st.tuples(queries(), st.integers(0, 12), st.integers(0, 30)), min_size=1, max_size=6)


@settings(max_examples=10, **PROPERTY)
@given(rows=records(most=150), checks=CHECKS)
def test_list_page_agrees_with_sqlite(rows, checks):
    check(rows, checks)


@pytest.mark.slow
@settings(max_examples=60, **PROPERTY)
@given(rows=records(most=300), checks=CHECKS)
def test_list_page_agrees_with_sqlite_long(rows, checks):
    check(rows, checks)


def check(rows, checks):
    with filled_store(rows) as (store, ids, twin):
        for (params, where, args, order), limit, offset in checks:
            want = twin.expected(where, args, order)
            query = ITEM.parse_list_query(params + [("limit", str(limit)), ("offset", str(offset))])
            page, total, _watermark, more = store.list_page("Item", query)
            assert ([r["id"] for r in page], total) == (want[offset : offset + limit], len(want)), params
            assert more == (limit > 0 and offset + limit < len(want)), params
            if limit:
                assert walk(store, params, limit) == (want, {len(want)}), params
        # the same lists at a past watermark: later writes are not seen
        watermark = store.watermarks()["Item"]
        asyncio.run(fill(store, rows[:3]))
        if ids:
            asyncio.run(store.delete("Item", ids[0]))
        for (params, where, args, order), limit, offset in checks:
            want = twin.expected(where, args, order)
            at = params + [("as_of", str(watermark))]
            query = ITEM.parse_list_query(at + [("limit", str(limit)), ("offset", str(offset))])
            page, total, _watermark, more = store.list_page("Item", query)
            assert ([r["id"] for r in page], total) == (want[offset : offset + limit], len(want)), params
            if limit:
                assert walk(store, at, limit) == (want, {len(want)}), params
