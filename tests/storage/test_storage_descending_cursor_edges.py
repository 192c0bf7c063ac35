"""A cursor's page sorted by a descending key where a sublist of the index begins with a run
of one entry that began in the sublist before (storage/keptparts.py `head_after_descending`).

Descending, a run's ids ascend, and the ids of a run in the sublist before are the lower
ones: so the page from a sublist's kept descending order must stop before that last entry
and leave the whole run to the walk below (its `below`, the length of the sublist's first
run). test_storage_descending_cursor_pages.py's runs of ~8 at random never put a run of
exactly one entry at a sublist's start under a cursor whose page reaches it; here every key
is held by exactly three records, inserted in a shuffled order, so the sublists' ends fall
inside runs, and the case is found in the index and asked (docs/mutation.md, session 22).
"""

from __future__ import annotations

import random

from dbsvc.operators import encode_cursor
from support.query_oracle import ITEM, filled_store

SORT = (("f", True),)


def row(f: float) -> dict:
    return {"n": None, "f": f, "s": None, "t": "x", "b": False, "dt": None, "g": None, "w": None}


def page_after(store, key: float, id_: int, limit: int) -> tuple[list[int], bool]:
    cursor = encode_cursor("Item", SORT, [key], id_)
    query = ITEM.parse_list_query([("sort", "-f"), ("limit", str(limit)), ("cursor", cursor)])
    records, _total, _watermark, more = store.list_page("Item", query)
    return [r["id"] for r in records], more


def test_a_page_reaching_a_one_entry_run_that_began_in_the_sublist_before_takes_that_run_whole():
    values = [float(n // 3) for n in range(1300)]
    random.Random(2).shuffle(values)  # a seed whose index has the case (asserted below)
    with filled_store([row(f) for f in values]) as (store, ids, _twin):
        keys = dict(zip(ids, values))
        order = sorted(keys, key=lambda i: (-keys[i], i))  # keys descending, ids ascending in a run
        index = store.tables["Item"].ordered["f"]
        starts = [
            sublist[:2]
            for before, sublist in zip(index._keys, index._keys[1:])
            if before[-1] == sublist[0] and sublist[1] != sublist[0]
        ]
        assert starts, "the seed's index has no sublist starting with a one-entry run of the one before"
        for low, next_key in starts:
            run = [i for i in order if keys[i] == next_key]
            for id_ in run:  # cursors in the run above it: each page reaches the low run
                after = order[order.index(id_) + 1 :]
                for ask in range(3):  # made, kept, found kept
                    got, more = page_after(store, next_key, id_, 8)
                    assert got == after[:8], (low, next_key, id_, ask)
                    assert more == (len(after) > 8)
                    assert [keys[i] for i in got if keys[i] == low] == [low] * 3  # the low run whole
