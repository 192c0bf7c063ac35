"""Cursor walks down one sort key inside a range of it, with a filter on another field tested
as the walk goes (walks.py `_one_key`, descending with a cursor): the range keeps no nulls,
and a cursor lands inside a run of tied keys, so the page after it must take the rest of
that run (ids ascending) before the keys below. Held to the brute-force order
(tests/storage/test_storage_plan_units.py `reference`) on a field of four values (`n`: None,
1, 2, 3; runs of ~125 ids once filtered) and on one of sixty (`f`)."""

from __future__ import annotations

import pytest

from tests.storage.test_storage_plan_units import reference, table_of, walk
from tests.storage.test_storage_tied_pages import rows

TABLE, RECORDS = table_of(rows(11, 0.05))

RANGES = [
    pytest.param([("n__gte", "2")], lambda r: r["n"] is not None and r["n"] >= 2, id="n>=2"),
    pytest.param([("n__lt", "3")], lambda r: r["n"] is not None and r["n"] < 3, id="n<3"),
    pytest.param([("f__gt", "10"), ("f__lte", "20")], lambda r: 10 < r["f"] <= 20, id="10<f<=20"),
]
FILTERS = [
    pytest.param([], lambda r: True, id="no-filter"),
    pytest.param([("g", "3")], lambda r: r["g"] == 3, id="g=3"),
    pytest.param([("k", "x")], lambda r: r["k"] == "x", id="k=x"),
]


@pytest.mark.parametrize("params, test", RANGES)
@pytest.mark.parametrize("also, also_test", FILTERS)
@pytest.mark.parametrize("desc", [True, False], ids=["desc", "asc"])
def test_a_cursor_walk_inside_a_range_reaches_every_tied_id_in_order(params, test, also, also_test, desc):
    sort = [(params[0][0].split("__")[0], desc)]
    seen, totals = walk(TABLE, params + also, sort, 37)
    assert seen == reference(RECORDS, lambda r: test(r) and also_test(r), sort)
    assert totals == {len(seen)}
