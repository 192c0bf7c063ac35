"""A page at a cursor with no other condition, and the same cursor beside each kind of
condition, against a reference worked out here (storage/seek.py `plan_operators`).

A cursor alone (a list walked by its `Link`s, no filter) is planned without looking for
windows, filters or sources: the page is a walk of the whole first sort key's index from
the cursor's seek, and `total` is every live record. That shortcut is wrong if it is taken
beside any condition (a filter, a range or a null test on the sort field, a text search, an
access rule's row test): each would then be ignored, the page and the total those of the
whole list. Likewise one filter in id order is sliced from its bucket alone: wrong beside
a second filter or key, or for a bucket of many ids, which is walked (`g`: 4 is most
records, the other keys a few). So every sort shape (id order, one key either way, two keys) is asked at
cursors at random, in runs of equal keys (ties), in the nulls, at keys no record holds,
before and after every record, alone and beside each condition, at limits 0, 1 and 20;
then again after deletes (cursors on deleted records still seek) and after writes made
between two pages. 1,300 records: three sublists of an ordered index (LOAD 512).
"""

from __future__ import annotations

import asyncio
import bisect
import random
from dataclasses import replace

from dbsvc.cursors import encode_cursor
from support.query_oracle import ITEM, fill, filled_store

ITEMS = 1300
SORTS = [(), (("n", False),), (("n", True),), (("f", False),), (("f", True),)]
SORTS += [(("f", True), ("n", False)), (("n", False), ("f", True))]
# (query pairs, whether a row test of `b` is given to the Query too, the test they stand for)
CONDITIONS = [
    ([], False, lambda r: True),
    ([("n", "7")], False, lambda r: r["n"] == 7),
    ([("g", "3")], False, lambda r: r["g"] == 3),
    ([("g", "4")], False, lambda r: r["g"] == 4),
    ([("g", "3"), ("g", "1")], False, lambda r: r["g"] in (1, 3)),
    ([("g", "3"), ("n", "2")], False, lambda r: r["g"] == 3 and r["n"] == 2),
    ([("f__gte", "2.5")], False, lambda r: r["f"] is not None and r["f"] >= 2.5),
    ([("f__null", "false")], False, lambda r: r["f"] is not None),
    ([("f__null", "true")], False, lambda r: r["f"] is None),
    ([("search", "red")], False, lambda r: r["t"] == "red"),
    ([], True, lambda r: r["b"]),
    ([("g", "3")], True, lambda r: r["g"] == 3 and r["b"]),
]


def row(rng: random.Random) -> dict:
    n = None if rng.random() < 0.05 else rng.randrange(12)
    f = None if rng.random() < 0.08 else rng.randrange(8) * 1.25
    t = rng.choice(["red", "blue"])
    # g: a filter-only field whose buckets are sorted lists (3: a few ids) or many ids (4)
    g = 4 if rng.random() < 0.6 else None if rng.random() < 0.2 else rng.randrange(4)
    return {"n": n, "f": f, "s": None, "t": t, "b": rng.random() < 0.5, "dt": None, "g": g, "w": None}


def rank(sort: tuple, keys: tuple, id_: int) -> tuple:
    """A place in the list sorted by `sort`: nulls last ascending and first descending, ties
    on the id ascending."""
    out: list = []
    for (_field, desc), k in zip(sort, keys):
        if desc:
            out += [k is not None, -k if k is not None else 0]
        else:
            out += [k is None, k if k is not None else 0]
    return (*out, id_)


def reference(rows: dict[int, dict], sort: tuple, test) -> tuple[list[tuple], list[int]]:
    """The matches' places, ascending, and their ids in that order."""
    placed = sorted((rank(sort, tuple(r[f] for f, _d in sort), i), i) for i, r in rows.items() if test(r))
    return [p for p, _i in placed], [i for _p, i in placed]


def query_of(store, sort: tuple, condition: list, rule: bool, keys: tuple, id_: int, limit: int):
    pairs = [("limit", str(limit)), ("cursor", encode_cursor("Item", sort, list(keys), id_))]
    if sort:
        pairs.append(("sort", ",".join(("-" if d else "") + f for f, d in sort)))
    query = ITEM.parse_list_query(pairs + condition)
    if rule:
        position = store.table("Item").positions["b"]
        query = replace(query, where_row=lambda values: values[position])
    return query


def check(store, rows: dict[int, dict], cursors: list[tuple[dict, int]]) -> None:
    for sort in SORTS:
        for condition, rule, test in CONDITIONS:
            places, ids = reference(rows, sort, test)
            for values, id_ in cursors:
                keys = tuple(values[f] for f, _d in sort)
                start = bisect.bisect_right(places, rank(sort, keys, id_))
                for limit in (0, 1, 20):
                    query = query_of(store, sort, condition, rule, keys, id_, limit)
                    records, total, _watermark, more = store.list_page("Item", query)
                    want = ids[start : start + limit]
                    case = (sort, condition, rule, keys, id_, limit)
                    assert [r["id"] for r in records] == want, case
                    assert total == len(ids), case
                    assert more == (limit > 0 and bool(want) and len(ids) > start + limit), case


def test_a_cursor_alone_and_beside_each_condition_pages_as_the_reference():
    rng = random.Random(36)
    made = [row(rng) for _ in range(ITEMS)]
    with filled_store(made) as (store, ids, _twin):
        rows = dict(zip(ids, made))
        cursors = [(rows[i], i) for i in rng.sample(ids, 6)]
        cursors += [({"n": 7, "f": 2.5}, i) for i in (0, ids[len(ids) // 2], max(ids) + 1)]  # in runs
        cursors += [({"n": None, "f": None}, i) for i in (0, ids[100], max(ids) + 1)]  # in the nulls
        cursors += [({"n": 5, "f": 3.1}, ids[7]), ({"n": -1, "f": -1.0}, 0), ({"n": 99, "f": 99.0}, 0)]
        check(store, rows, cursors)
        gone = rng.sample(ids, 60)
        for id_ in gone:
            asyncio.run(store.delete("Item", id_))
        deleted = {i: rows.pop(i) for i in gone}
        cursors += [(deleted[i], i) for i in gone[:8]]  # a cursor on a deleted record still seeks
        # writes between two pages: records in the cursors' runs (ids past every id, so
        # after the cursors in a run), above and below them, and nulls
        added = [dict(row(rng), n=v["n"], f=v["f"], b=True) for v, _i in cursors[:12]] + [row(rng) for _ in range(30)]
        rows.update(zip(asyncio.run(fill(store, added)), added))
        check(store, rows, cursors)
