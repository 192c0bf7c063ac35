"""A cursor's page sorted by a descending key where a sublist of the index begins with a run
of one entry that began in the sublist before (storage/keptparts.py `head_after_descending`).

Descending, a run's ids ascend, and the ids of a run in the sublist before are the lower
ones: so the page from a sublist's kept descending order must stop before that last entry
and leave the whole run to the walk below (its `below`, the length of the sublist's first
run). test_storage_descending_cursor_pages.py's runs of ~8 at random never put a run of
exactly one entry at a sublist's start under a cursor whose page reaches it; here every key
is held by exactly three records, inserted in a shuffled order, so the sublists' ends fall
inside runs, and the case is found in the index and asked (docs/mutation.md, session 22).

The same index asked the other way: a cursor in a run's first part, where the run ends its
sublist and goes on into the next one by a single entry (the run's highest id, descending):
its page is the rest of that part, then that one entry, then the keys below. Whether the run
goes on is read from the next sublist's first key; reading its second key instead
(`head_after_descending` 30, docs/mutation.md session 23) lost that entry from every such page.
"""

from __future__ import annotations

import random
from contextlib import contextmanager

from dbsvc.cursors import encode_cursor
from support.query_oracle import ITEM, filled_store

SORT = (("f", True),)


def row(f: float) -> dict:
    return {"n": None, "f": f, "s": None, "t": "x", "b": False, "dt": None, "g": None, "w": None}


def page_after(store, key: float, id_: int, limit: int) -> tuple[list[int], bool]:
    cursor = encode_cursor("Item", SORT, [key], id_)
    query = ITEM.parse_list_query([("sort", "-f"), ("limit", str(limit)), ("cursor", cursor)])
    records, _total, _watermark, more = store.list_page("Item", query)
    return [r["id"] for r in records], more


@contextmanager
def three_a_key():
    """A store whose 1,300 records hold each key three times, inserted shuffled (a seed
    whose index has both cases, asserted by each test), with the keys by id, the ids in
    page order (keys descending, ids ascending in a run) and the first two keys of each
    sublist that begins with a one-entry run of the sublist before."""
    values = [float(n // 3) for n in range(1300)]
    random.Random(2).shuffle(values)
    with filled_store([row(f) for f in values]) as (store, ids, _twin):
        keys = dict(zip(ids, values))
        order = sorted(keys, key=lambda i: (-keys[i], i))
        index = store.tables["Item"].ordered["f"]
        starts = [
            sublist[:2]
            for before, sublist in zip(index.key_sublists, index.key_sublists[1:])
            if before[-1] == sublist[0] and sublist[1] != sublist[0]
        ]
        yield store, keys, order, starts


def test_a_page_reaching_a_one_entry_run_that_began_in_the_sublist_before_takes_that_run_whole():
    with three_a_key() as (store, keys, order, starts):
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


def test_a_page_from_a_run_that_goes_on_by_one_entry_into_the_next_sublist_holds_that_entry():
    with three_a_key() as (store, keys, order, starts):
        split = [first for first, _next in starts]
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
