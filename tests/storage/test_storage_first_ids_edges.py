"""A window's first ids in id order (storage/seek.py `_first_ids`) when the first guess of
how far to look finds nothing, in process, no fixture.

A key that grows with the id puts a window of the high keys at the high ids: the first
round's ids (up to first + about (2 * end + 8) * n / size) hold none of it, so an end
sublist of the span is partly covered and gives no id in that round; the next round
widens the reach by four and finds the page (docs/mutation.md, "mq", `_first_ids` 98).
"""

from __future__ import annotations

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import query as plans
from dbsvc.storage.table import Table

SCHEMA = """
model Item {
  id  int    @id
  n   int    @sort
}
"""
ITEM = compile_schema(parse_schema(SCHEMA, "edges.dbs")).BY_NAME["Item"]


def test_a_window_at_the_high_ids_is_found_after_the_first_round_finds_nothing():
    table = Table(ITEM)
    for i in range(1, 2001):
        table.insert(ITEM.row({"id": i, "n": i}))
    for params, want, total in (
        ([("n__gte", "1900"), ("limit", "20")], list(range(1900, 1920)), 101),
        ([("n__gt", "1950"), ("n__lt", "1990"), ("limit", "5"), ("offset", "3")], [1954, 1955, 1956, 1957, 1958], 39),
        ([("n__gte", "1999"), ("limit", "20")], [1999, 2000], 2),
    ):
        page, got_total, more = plans.list_page(table, ITEM.parse_list_query(params))
        assert ([r["id"] for r in page], got_total) == (want, total), params


def test_a_window_ending_one_entry_into_a_sublist_keeps_that_entry():
    """The span's last part is the first `hi` entries of a sublist: `hi` of 1 is a part of
    one id, which the page must hold (a hand mutant skipping parts of one id survived)."""
    table = Table(ITEM)
    for i in range(1, 2001):
        table.insert(ITEM.row({"id": i, "n": i}))
    keys = table.ordered["n"].key_sublists
    assert len(keys) > 2
    for k in range(1, len(keys)):
        first = keys[k][0]  # the window stops right after it: at (k, 1)
        for params, want in (
            ([("n__gte", str(first - 3)), ("n__lte", str(first)), ("limit", "20")], list(range(first - 3, first + 1))),
            ([("n__gte", str(first)), ("n__lte", str(first)), ("limit", "20")], [first]),
            ([("n__gt", str(first - 2)), ("n__lt", str(first + 2)), ("limit", "20")], [first - 1, first, first + 1]),
        ):
            page, total, more = plans.list_page(table, ITEM.parse_list_query(params))
            assert ([r["id"] for r in page], total, more) == (want, len(want), False), params
