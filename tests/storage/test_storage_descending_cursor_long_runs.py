"""Pages after a cursor sorted by a descending key whose run is longer than a sublist, or
is the highest key's and reaches the index's last sublist (storage/keptparts.py
`_run_across`), in an index of more than WHOLE_SUBLISTS sublists, held to a reference
order written out here.

The older table (test_storage_descending_cursor_many_sublists.py) has runs of ~100, so a
run that goes on past its sublist ends in the next one, and its highest key's run ends
inside the last sublist. Session 24's mutation pass left two paths of `_run_across`
unasked: a page that starts in a sublist wholly the run's (past the cursor's sublist: the
bisect there starts at 0, not at the cursor's run start), and a run that goes on into the
index's last sublist (no sublist past it to read the run's end in). So here one key holds
1,500 items (its run covers at least one whole sublist) and the highest key 700 (its run
is the index's end, across a sublist's end); cursors sit at each end of every sublist that
holds either run, between, before the first id and past the last. A `Table` in memory,
no store: ~70,000 records by one `insert_many` take ~1 s.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from dataclasses import replace

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import query as plans
from dbsvc.storage.keptparts import WHOLE_SUBLISTS
from dbsvc.storage.table import Table

ITEM = compile_schema(parse_schema("model Item {\n  id int @id\n  f float @sort\n}\n", "long.dbs")).BY_NAME["Item"]
ITEMS = 70_000
LONG, TOP = 50.0, 900.0  # the key of the run longer than a sublist, and the highest key


def keys_by_id() -> dict[int, float]:
    """Random keys of ~100 items each, LONG for 1,500 ids spread over the table and TOP
    (above every other key) for 700."""
    rng = random.Random(24)
    keys = {i: rng.randrange(700) / 4 for i in range(1, ITEMS + 1)}
    for i in rng.sample(range(1, ITEMS + 1), 2_200)[:1_500]:
        keys[i] = LONG
    for i in rng.sample([i for i in keys if keys[i] != LONG], 700):
        keys[i] = TOP
    return keys


def reference_after(order: list[tuple[float, int]], key: float, id_: int, limit: int) -> list[int]:
    """The ids after the cursor sorted by -f (keys descending, ids ascending in a run)."""
    at = bisect_right(order, (-key, id_))
    return [place[1] for place in order[at : at + limit]]


def page_after(table: Table, key: float, id_: int, limit: int) -> tuple[list[int], bool]:
    query = replace(ITEM.parse_list_query([("sort", "-f"), ("limit", str(limit))]), cursor=((key,), id_))
    page, _total, more = plans.list_page(table, query)
    return [r["id"] for r in page], more


def run_cursors(table: Table, key: float) -> list[int]:
    """Cursor ids in `key`'s run: each end of every sublist holding it, one past each end,
    the sublist's middle, and ids before the run's first and past its last."""
    index = table.ordered["f"]
    keys, ids = index.key_sublists, index.id_sublists
    holding = [s for s in range(len(keys)) if keys[s][0] <= key <= keys[s][-1]]
    out = [0, ITEMS + 1]
    for s in holding:
        mine = [ids[s][j] for j in range(len(keys[s])) if keys[s][j] == key]
        out += [mine[0], mine[-1], mine[len(mine) // 2], mine[0] - 1, mine[-1] + 1]
    return out


def test_the_setup_has_a_run_over_a_whole_sublist_and_the_highest_run_across_the_last_end():
    table = Table(ITEM)
    keys = keys_by_id()
    table.insert_many([ITEM.row({"id": i, "f": k}) for i, k in keys.items()])
    index = table.ordered["f"]
    sublists = index.key_sublists
    assert len(sublists) > WHOLE_SUBLISTS
    assert any(sub[0] == sub[-1] == LONG for sub in sublists), "no sublist wholly LONG's"
    assert sublists[-1][-1] == TOP and sublists[-2][-1] == TOP, "TOP's run within the last sublist"


def test_pages_after_cursors_in_a_run_longer_than_a_sublist_and_in_the_highest_run():
    table = Table(ITEM)
    keys = keys_by_id()
    table.insert_many([ITEM.row({"id": i, "f": k}) for i, k in keys.items()])
    order = sorted((-k, i) for i, k in keys.items())
    for key in (LONG, TOP):
        for id_ in run_cursors(table, key):
            for limit in (3, 20, 600, 1_000):  # 1,000: the largest page a query takes
                want = reference_after(order, key, id_, limit + 1)
                got, more = page_after(table, key, id_, limit)
                assert got == want[:limit], (key, id_, limit)
                assert more == (len(want) > limit), (key, id_, limit)
