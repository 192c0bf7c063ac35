"""SQLite as the oracle of the live-query matcher (issue 34, "Show", over the live-query matcher).

Hypothesis makes records (nulls, equal keys, unicode, extreme numbers) and feed queries
(exact filters with repeated values, every operator, null tests, text search against FTS5:
support/query_oracle.py,
the REST oracle's strategies, without `sort`, which a feed refuses). The same records go
into an in-memory `sqlite3` table. For every record, the generated `match` (what
`/subscribe` and `/live-query` run on each event: no server) must say what the SQL WHERE
clause says; and the ids a live query's Init starts from (`Store.live_ids`, storage's range
scans) must be the SQL's ids in id order.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.query_oracle import ITEM, Twin, body, filled_store, queries, records

PROPERTY = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def feed_query(query):
    """A list query of the oracle as a feed query: its conditions, without `sort`."""
    params, where, args, _order = query
    return [(k, v) for k, v in params if k != "sort"], where, args


def check_match(rows, checks) -> None:
    stored = [ITEM.validate_create({**body(row), "id": i + 1}) for i, row in enumerate(rows)]
    twin = Twin()
    twin.fill([(r["id"], row) for r, row in zip(stored, rows)])
    for query in checks:
        pairs, where, args = feed_query(query)
        parsed = ITEM.parse_feed_query(pairs)
        want = set(twin.expected(where, args, "id"))
        for record in stored:
            got = ITEM.match(record, parsed.filters, parsed.ranges, parsed.nulls, parsed.search)
            assert got == (record["id"] in want), (pairs, where, args, record)


@settings(max_examples=30, **PROPERTY)
@given(rows=records(most=20), checks=st.lists(queries(), min_size=1, max_size=8))
def test_the_feed_matcher_agrees_with_sqlite_record_by_record(rows, checks):
    check_match(rows, checks)


@pytest.mark.slow
@settings(max_examples=600, **PROPERTY)
@given(rows=records(most=40), checks=st.lists(queries(), min_size=1, max_size=8))
def test_the_feed_matcher_agrees_with_sqlite_record_by_record_long(rows, checks):
    check_match(rows, checks)


@settings(max_examples=8, **PROPERTY)
@given(rows=records(most=60), checks=st.lists(queries(), min_size=1, max_size=6))
def test_a_live_querys_init_ids_agree_with_sqlite(rows, checks):
    with filled_store(rows) as (store, _ids, twin):
        for query in checks:
            pairs, where, args = feed_query(query)
            parsed = ITEM.parse_feed_query(pairs)
            got = list(store.live_ids("Item", parsed.filters, parsed.ranges, parsed.nulls, parsed.search))
            assert got == twin.expected(where, args, "id"), (pairs, where, args)
