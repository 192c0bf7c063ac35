"""Pages after a cursor sorted by a descending float key, against a reference order
(storage/walks.py `descending_page`, keptparts.py `head_after_descending`).

A cursor's page at a key of the whole index is a slice of its sublist's kept descending
order (kept from the second ask of that sublist), and what follows comes from below the
sublist. The slice is wrong if it is cut one entry off, if it takes a run that began in
the sublist before (that run's lower ids come first), or if it keeps an order a write
changed. So the store holds 2,600 items (several sublists of an ordered index, LOAD 512)
whose keys take few values (runs of ~8 and a few runs of ~60, which cross sublist ends),
some nulls (first in descending order), and every cursor is asked three times (made,
kept, found kept): at keys and ids at random, inside runs (ties), at each sublist's end,
on a deleted record and at a key no record holds, then again after deletes.
"""

from __future__ import annotations

import asyncio
import random

from dbsvc.cursors import encode_cursor
from support.query_oracle import ITEM, fill, filled_store

ITEMS, PAGE = 2600, 20
SORT = (("f", True),)


def row(f: float | None) -> dict:
    return {"n": None, "f": f, "s": None, "t": "x", "b": False, "dt": None, "g": None, "w": None}


def rank(key: float | None, id_: int) -> tuple:
    """An item's place sorted by -f: nulls first, then keys descending, ids ascending in a run."""
    return (0, 0.0, id_) if key is None else (1, -key, id_)


def page_after(store, key: float | None, id_: int, limit: int) -> tuple[list[int], bool]:
    cursor = encode_cursor("Item", SORT, [key], id_)
    query = ITEM.parse_list_query([("sort", "-f"), ("limit", str(limit)), ("cursor", cursor)])
    records, _total, _watermark, more = store.list_page("Item", query)
    return [r["id"] for r in records], more


def check_cursor(store, keys: dict[int, float | None], key: float | None, id_: int) -> None:
    after = sorted((i for i in keys if rank(keys[i], i) > rank(key, id_)), key=lambda i: rank(keys[i], i))
    for ask in range(3):
        for limit in (PAGE, 3):
            ids, more = page_after(store, key, id_, limit)
            assert ids == after[:limit], (key, id_, limit, ask)
            assert more == (len(after) > limit), (key, id_, limit, ask)


def keys_at_random(rng: random.Random) -> list[float | None]:
    out: list[float | None] = []
    for n in range(ITEMS):
        if n % 40 == 0:
            out.append(None)
        elif n % 13 == 0:  # a few long runs, crossing sublist ends
            out.append(float(rng.choice([10, 30, 55])))
        else:
            out.append(rng.randrange(300) / 4)
    return out


def test_descending_pages_at_cursors_are_the_reference_before_and_after_deletes():
    rng = random.Random(53)
    values = keys_at_random(rng)
    with filled_store([row(f) for f in values]) as (store, ids, _twin):
        keys = dict(zip(ids, values))
        present = sorted({k for k in values if k is not None})
        order = sorted(keys, key=lambda i: rank(keys[i], i))
        cursors: list[tuple[float | None, int]] = [(keys[i], i) for i in rng.sample(ids, 60)]
        cursors += [(keys[i], i) for i in order[:: len(order) // 25]]  # spread over every sublist
        cursors += [(keys[i], i) for i in order[499:530] + order[1000:1060]]  # around sublists' ends
        cursors += [(k + 0.1, 0) for k in rng.sample(present, 10)]  # keys no record holds
        cursors += [(10.0, 0), (10.0, max(ids) + 1), (55.0, rng.choice(ids)), (None, 0), (None, ids[-1])]
        cursors += [(present[-1] + 1.0, 0), (present[0], max(ids)), (present[0] - 1.0, 0)]
        for key, id_ in cursors:
            check_cursor(store, keys, key, id_)
        gone = list(dict.fromkeys(rng.sample(ids, 150) + [i for i in ids if keys[i] == 30.0][:20]))
        for id_ in gone:  # each delete drops its sublist's kept order
            asyncio.run(store.delete("Item", id_))
        deleted = {i: keys.pop(i) for i in gone}
        for id_ in gone[:40] + gone[-10:]:  # a cursor on a deleted record: its key and id still seek
            check_cursor(store, keys, deleted[id_], id_)
        for key, id_ in cursors:
            check_cursor(store, keys, key, id_)


def long_run_keys(rng: random.Random, items: int) -> list[float | None]:
    """Keys of ~26 values (runs of ~100, as 1,000,000 posts' scores at two decimals are),
    a few nulls: most pages after a cursor end inside its run, and several runs cross a
    sublist's end (LOAD 512)."""
    return [None if n % 97 == 0 else rng.randrange(26) * 2.5 for n in range(items)]


def test_descending_pages_in_long_runs_are_the_reference_across_sublists_deletes_and_writes():
    """A page after a cursor inside a long run is the rest of that run's slice (ids
    ascending), then the runs below from (sublist, run start): wrong if the slice starts one
    id off, if it goes on below from the wrong place, or if it ends a run that goes on in
    the next sublist. Cursors at each run's last 23 ids (the page leaves the run at each
    count), at its first id and below it, at random, in the nulls and at keys no record
    holds; then on deleted records, and on both sides of writes made between two pages."""
    rng = random.Random(22)
    values = long_run_keys(rng, ITEMS)
    with filled_store([row(f) for f in values]) as (store, ids, _twin):
        keys = dict(zip(ids, values))
        runs: dict[float, list[int]] = {}
        for i in ids:
            if keys[i] is not None:
                runs.setdefault(keys[i], []).append(i)
        cursors: list[tuple[float | None, int]] = [(None, 0), (None, ids[-1]), (100.0, 0), (-1.0, 0), (1.0, 5)]
        for key, run in runs.items():
            cursors += [(key, i) for i in run[-23:]] + [(key, run[0]), (key, 0), (key, run[len(run) // 2] + 1)]
        cursors += [(keys[i], i) for i in rng.sample(ids, 40)]
        for key, id_ in cursors:
            check_cursor(store, keys, key, id_)
        gone = rng.sample([i for i in ids if keys[i] is not None], 120)
        for id_ in gone:  # each delete drops its sublist's kept order
            asyncio.run(store.delete("Item", id_))
        deleted = {i: keys.pop(i) for i in gone}
        for id_ in gone[:50]:  # a cursor on a deleted record: its key and id still seek
            check_cursor(store, keys, deleted[id_], id_)
        for key, id_ in cursors[::3]:
            check_cursor(store, keys, key, id_)
        # a write between two pages: the second page, at the first's last record, sees what
        # was written after that place in the order and not what was written before it
        for key in rng.sample(sorted(runs), 6):
            run = [i for i in runs[key] if i in keys]
            first, _more = page_after(store, key, run[len(run) // 3], PAGE)
            last = first[-1]
            made = asyncio.run(fill(store, [row(key), row(keys[last]), row(key + 2.5), row(None)]))
            keys.update(zip(made, [key, keys[last], key + 2.5, None]))
            check_cursor(store, keys, keys[last], last)
