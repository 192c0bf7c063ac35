"""A list at a past watermark planned on the live indexes (storage/query.py `page_as_of`) at
the edges of its page: a limit of 0, a page that ends exactly at the last match, both when
nothing the later rows touched passes the query then (the live plan's order is the list's)
and when some of it does (merged and sorted again); and `state_page`'s `more` at the same
edges. In process, no fixture (docs/mutation.md, "storage/query.py, seek.py, indexes.py",
session 9: `page_as_of` 81-126 and `state_page` 15-18 were unchecked)."""

from __future__ import annotations

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import query as plans
from dbsvc.storage.table import Table

SCHEMA = """
model Item {
  id  int    @id
  n   int    @sort
  k   str    @filter
}
"""
ITEM = compile_schema(parse_schema(SCHEMA, "asof.dbs")).BY_NAME["Item"]


def _item(i: int, n: int | None = None, k: str | None = None):
    return ITEM.row({"id": i, "n": i % 17 if n is None else n, "k": ("a" if i % 2 else "b") if k is None else k})


def _table(later: str) -> tuple[Table, int]:
    """200 records, the mark, then rows that touch no record passing the queries then
    ("inserts": five new ids), or some that do ("changes": 3 and 4 rewritten, 5 deleted)."""
    table = Table(ITEM)
    for i in range(1, 201):
        table.insert(_item(i))
    mark = table.watermark
    if later == "inserts":
        for i in range(201, 206):
            table.insert(_item(i, n=0, k="a"))
    else:
        table.replace(table.live[3], _item(3, n=99, k="b"))
        table.replace(table.live[4], _item(4, n=99, k="a"))
        table.delete(5, table.live[5])
    return table, mark


def _ids(page: list[dict]) -> list[int]:
    return [r["id"] for r in page]


@pytest.mark.parametrize("later", ["inserts", "changes"])
@pytest.mark.parametrize(
    "params, want, total, more",
    [
        ([("limit", "3")], [1, 2, 3], 200, True),
        ([("limit", "0")], [], 200, False),
        ([("limit", "0"), ("offset", "5")], [], 200, False),
        ([("offset", "195"), ("limit", "5")], [196, 197, 198, 199, 200], 200, False),
        ([("offset", "194"), ("limit", "5")], [195, 196, 197, 198, 199], 200, True),
        ([("offset", "198"), ("limit", "5")], [199, 200], 200, False),
        ([("k", "a"), ("sort", "-n"), ("limit", "4")], [33, 67, 101, 135], 100, True),
        ([("k", "a"), ("sort", "n"), ("offset", "96"), ("limit", "4")], [67, 101, 135, 169], 100, False),
        ([("k", "a"), ("sort", "n"), ("limit", "0")], [], 100, False),
    ],
)
def test_a_page_at_the_mark_ends_where_the_list_then_ends(later, params, want, total, more):
    table, mark = _table(later)
    query = ITEM.parse_list_query(params)
    page, got_total, got_more = plans.page_as_of(table, mark, query)
    assert (_ids(page), got_total, got_more) == (want, total, more)
    assert [r["n"] for r in page] == [i % 17 for i in want]  # each record as it was then
    page, got_total, got_more = plans.state_page(table.state_as_of(mark), table, query)
    assert (_ids(page), got_total, got_more) == (want, total, more)


def test_a_state_page_past_its_last_match_has_no_more():
    table, mark = _table("changes")
    state = table.state_as_of(mark)
    for params, want in (
        ([("offset", "200"), ("limit", "5")], ([], 200, False)),
        ([("offset", "199"), ("limit", "1")], ([200], 200, False)),
        ([("offset", "198"), ("limit", "1")], ([199], 200, True)),
    ):
        page, total, more = plans.state_page(state, table, ITEM.parse_list_query(params))
        assert (_ids(page), total, more) == want, params
