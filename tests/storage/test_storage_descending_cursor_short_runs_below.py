"""A page after a cursor sorted by a descending key that ends in the run just below the
cursor's, both in one sublist (storage/keptparts.py `head_after_descending`'s two-slice
branch): the run below of one entry, the cursor's run of one entry at the sublist's end,
and str keys. Each table is new, so the sublist's descending order is not yet kept (it
is made from the second ask) and the page is the two slices. A `Table` in memory.

Session 24's mutation pass: the older tables' runs below were ~100 long, or the kept
order answered, so the branch's bisect read at `keys[lo - 2]` (the start of a lower run
when the run below holds one entry), at `keys[lo + 1]` (past the sublist's end) and
against the int 0 (a TypeError for str keys) survived.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import query as plans
from dbsvc.storage.table import Table


def _model(kind: str):
    source = f"model Item {{\n  id int @id\n  f {kind} @sort\n}}\n"
    return compile_schema(parse_schema(source, "short.dbs")).BY_NAME["Item"]


def _page(keys: dict[int, object], kind: str, cursor: tuple[object, int], limit: int) -> list[int]:
    """The ids of the page after `cursor` sorted by -f, in a new table of `keys`."""
    model = _model(kind)
    table = Table(model)
    table.insert_many([model.row({"id": i, "f": k}) for i, k in keys.items()])
    query = replace(model.parse_list_query([("sort", "-f"), ("limit", str(limit))]), cursor=((cursor[0],), cursor[1]))
    page, _total, _more = plans.list_page(table, query)
    return [r["id"] for r in page]


@pytest.mark.parametrize(
    ("kind", "bottom", "low", "mid", "high"), [("float", 0.5, 1.0, 2.0, 3.0), ("str", "0", "a", "b", "c")]
)
def test_a_page_ending_in_a_run_of_one_below_the_cursors_run(kind, bottom, low, mid, high) -> None:
    # ascending in the index: id 1 at `bottom` (so the run below `low`'s starts past
    # position 0), ids 2-5 at `low`, 6 at `mid`, 7-9 at `high`
    keys = {1: bottom, **dict.fromkeys(range(2, 6), low), 6: mid, **dict.fromkeys(range(7, 10), high)}
    assert _page(keys, kind, (high, 7), 3) == [8, 9, 6]
    assert _page(keys, kind, (high, 7), 4) == [8, 9, 6, 2]
    assert _page(keys, kind, (high, 0), 4) == [7, 8, 9, 6]


@pytest.mark.parametrize(("kind", "low", "mid", "high"), [("float", 1.0, 2.0, 3.0), ("str", "a", "b", "c")])
def test_a_page_after_a_one_entry_run_at_the_sublists_end(kind, low, mid, high) -> None:
    # ids 1-5 at `low`, 6 and 7 at `mid`, 8 alone at `high`: the index's last entry
    keys = {**dict.fromkeys(range(1, 6), low), 6: mid, 7: mid, 8: high}
    assert _page(keys, kind, (high, 0), 2) == [8, 6]
    assert _page(keys, kind, (high, 0), 3) == [8, 6, 7]
    assert _page(keys, kind, (high, 8), 3) == [6, 7, 1]
