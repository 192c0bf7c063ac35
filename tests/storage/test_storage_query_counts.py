"""Counts of filtered lists at their edges (storage/query.py `_count`, `_plan_tested`), in process.

A filter of several fields is counted from its smallest field's ids, each tested against
the others; a row test (the part of an access rule no index answers) counts only what
passes. These cases sit on the edges the session-8 mutation pass found untested
(docs/mutation.md, "mq"): the smallest field holding no id, or exactly one, with and
without a row test. Literal ids, totals and `more`.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import query as plans
from dbsvc.storage.table import Table

SCHEMA = """
model Item {
  id  int    @id
  n   int?   @filter @sort
  k   str    @filter
  g   int?   @filter
}
"""
ITEM = compile_schema(parse_schema(SCHEMA, "counts.dbs")).BY_NAME["Item"]
N = ITEM.fields.index("n")

# id: (n, k, g); k "a" on every record, g 7 on ids 3 and 9 only, n 5 on id 3 only
ROWS = {i: (i % 4, "a", 7 if i in (3, 9) else 1) for i in range(1, 21)}
ROWS[3] = (5, "a", 7)


def _table() -> Table:
    table = Table(ITEM)
    for i, (n, k, g) in ROWS.items():
        table.insert(ITEM.row({"id": i, "n": n, "k": k, "g": g}))
    return table


def _list(params: list[tuple[str, str]], **over) -> tuple[list[int], int, bool]:
    query = ITEM.parse_list_query(params)
    if over:
        query = replace(query, **over)
    page, total, more = plans.list_page(_table(), query)
    return [r["id"] for r in page], total, more


@pytest.mark.parametrize("sort", [[], [("sort", "n")], [("sort", "-n")]])
def test_two_filters_whose_smallest_holds_one_matching_id(sort):
    assert _list([("n", "5"), ("k", "a")] + sort) == ([3], 1, False)
    assert _list([("n", "5"), ("g", "7")] + sort) == ([3], 1, False)
    assert _list([("n", "5"), ("g", "1")] + sort) == ([], 0, False)  # its one id fails the other filter


@pytest.mark.parametrize("sort", [[], [("sort", "n")]])
def test_two_filters_one_of_which_holds_no_id(sort):
    assert _list([("n", "6"), ("k", "a")] + sort) == ([], 0, False)
    assert _list([("k", "b"), ("g", "7")] + sort) == ([], 0, False)


def test_a_row_test_over_a_filter_holding_one_id_or_none():
    passes = lambda values: values[N] != 0  # noqa: E731  (a rule no index answers)
    assert _list([("n", "5")], where_row=passes) == ([3], 1, False)
    assert _list([("n", "6")], where_row=passes) == ([], 0, False)
    assert _list([("n", "0")], where_row=passes) == ([], 0, False)  # ids 4, 8, ... all fail the test
    assert _list([("g", "7")], where_row=passes) == ([3, 9], 2, False)
    assert _list([("g", "7"), ("limit", "1")], where_row=passes) == ([3], 2, True)


def test_a_smallest_filter_of_64_ids_or_more_against_a_filter_of_two_values():
    """The other field's every value is tested (each id against its hash index), not its
    first value alone (the one-value path, a set membership)."""
    table = Table(ITEM)
    for i in range(1, 301):  # g: i % 3 (100 ids each); n: i % 4 (75 each)
        table.insert(ITEM.row({"id": i, "n": i % 4, "k": "a", "g": i % 3}))
    for extra, limit in (([], "5"), ([("k", "a")], "5"), ([], "0")):
        query = ITEM.parse_list_query([("g", "0"), ("n", "1"), ("n", "2"), *extra, ("limit", limit)])
        page, total, more = plans.list_page(table, query)
        assert total == 50  # i % 3 == 0 and i % 4 in (1, 2): 9, 6, 21, 18, ...
        assert [r["id"] for r in page] == ([6, 9, 18, 21, 30] if limit == "5" else [])
    query = ITEM.parse_list_query([("g", "0"), ("n", "1"), ("k", "a"), ("limit", "3")])
    page, total, more = plans.list_page(table, query)
    assert ([r["id"] for r in page], total, more) == ([9, 21, 33], 25, True)
