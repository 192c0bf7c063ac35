"""A cursor's page sorted by a descending key where the cursor's own run ends its sublist and
goes on into the next one by a single entry (storage/keptparts.py `head_after_descending`).

Descending, a run's ids ascend, and the entry in the next sublist holds the run's highest
id: the page from a cursor in the run's first part is the rest of that part, then that one
entry, then the keys below. Whether the run goes on is read from the next sublist's first
key; test_storage_descending_cursor_edges.py asks the same one-entry runs, but with the
cursor in the run above, and reading the next sublist's second key instead (`_keys[i + 1][1]`,
`head_after_descending` 30, docs/mutation.md session 23) lost that entry from every page
here. Every key is held by three records inserted shuffled, so sublist ends fall inside runs;
the seed is one whose index has the case (asserted)."""

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


def test_a_page_from_a_run_that_goes_on_by_one_entry_into_the_next_sublist_holds_that_entry():
    values = [float(n // 3) for n in range(1300)]
    random.Random(2).shuffle(values)
    with filled_store([row(f) for f in values]) as (store, ids, _twin):
        keys = dict(zip(ids, values))
        order = sorted(keys, key=lambda i: (-keys[i], i))  # keys descending, ids ascending in a run
        index = store.tables["Item"].ordered["f"]
        split = [
            sublist[0]
            for before, sublist in zip(index._keys, index._keys[1:])
            if before[-1] == sublist[0] and sublist[1] != sublist[0]
        ]
        assert split, "the seed's index has no run going on into the next sublist by one entry"
        for key in split:
            run = [i for i in order if keys[i] == key]
            assert len(run) == 3
            for id_ in run[:2]:  # cursors in the run's part in the sublist before
                after = order[order.index(id_) + 1 :]
                for limit in (1, 2, 8):
                    for ask in range(3):  # made, kept, found kept
                        got, more = page_after(store, key, id_, limit)
                        assert got == after[:limit], (key, id_, limit, ask)
                        assert more == (len(after) > limit)
                assert run[2] in after[:2]  # each cursor's page reaches the entry in the next sublist
