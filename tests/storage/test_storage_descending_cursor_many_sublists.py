"""Pages after a cursor sorted by a descending key in an index of more than 128 sublists
(storage/keptparts.py `head_after_descending`), held to a reference order written out here.

Past WHOLE_SUBLISTS (128) sublists no sublist's descending order is kept, so a cursor's page
is the rest of its run (ids ascending), then the run below it when that run begins in the
same sublist and holds the rest of the page, else the walk below (`head_descending`); a run
that goes on past its sublist's end is found through the sublists' last ids (`_run_across`).
Each is wrong if it starts one id off, takes an id of the cursor's run twice, skips the part
of a run in the next sublist, or reads a run below that began in the sublist before. So the
table holds 70,000 items (136 sublists at LOAD 512) whose keys take 700 values (runs of
~100, as 1,000,000 posts' scores at two decimals: a run crosses a sublist's end about one
time in five) and some nulls (first in descending order); cursors sit at every sublist's
ends, on both sides of each end a run crosses, at keys no item holds, in the nulls, on
deleted items, and on both sides of items written between two pages. A `Table` in memory,
no store: 70,000 records by one `insert_many` take ~1 s.
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from dataclasses import replace

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import query as plans
from dbsvc.storage.keptparts import WHOLE_SUBLISTS
from dbsvc.storage.table import Table

ITEM = compile_schema(parse_schema("model Item {\n  id int @id\n  f float? @sort\n}\n", "many.dbs")).BY_NAME["Item"]
ITEMS = 70_000
LIMITS = (20, 3, 150)  # a page inside a run, a short one, one across several runs


def rank(key: float | None, id_: int) -> tuple:
    """An item's place sorted by -f: nulls first, then keys descending, ids ascending in a run."""
    return (0, 0.0, id_) if key is None else (1, -key, id_)


class Reference:
    """The items' keys by id and their order sorted by -f, kept by the test's writes."""

    def __init__(self, keys: dict[int, float | None]) -> None:
        self.keys = keys
        self.order = sorted(rank(k, i) for i, k in keys.items())

    def after(self, key: float | None, id_: int, limit: int) -> list[int]:
        at = bisect_right(self.order, rank(key, id_))
        return [place[2] for place in self.order[at : at + limit]]

    def run(self, key: float) -> list[int]:
        """The ids of `key`'s run, ascending."""
        lo, hi = bisect_left(self.order, (1, -key, 0)), bisect_left(self.order, (1, -key, 2 * ITEMS))
        return [place[2] for place in self.order[lo:hi]]

    def drop(self, id_: int) -> None:
        del self.order[bisect_left(self.order, rank(self.keys.pop(id_), id_))]

    def add(self, id_: int, key: float | None) -> None:
        self.keys[id_] = key
        self.order.insert(bisect_right(self.order, rank(key, id_)), rank(key, id_))


def page_after(table: Table, key: float | None, id_: int, limit: int) -> tuple[list[int], bool]:
    query = replace(ITEM.parse_list_query([("sort", "-f"), ("limit", str(limit))]), cursor=((key,), id_))
    page, _total, more = plans.list_page(table, query)
    return [r["id"] for r in page], more


def check(table: Table, ref: Reference, key: float | None, id_: int, limits: tuple[int, ...] = LIMITS) -> None:
    for limit in limits:
        want = ref.after(key, id_, limit + 1)
        got, more = page_after(table, key, id_, limit)
        assert got == want[:limit], (key, id_, limit)
        assert more == (len(want) > limit), (key, id_, limit)


def made() -> tuple[Table, Reference]:
    rng = random.Random(36)
    keys: dict[int, float | None] = {i: None if i % 97 == 0 else rng.randrange(700) / 4 for i in range(1, ITEMS + 1)}
    table = Table(ITEM)
    table.insert_many([ITEM.row({"id": i, "f": k}) for i, k in keys.items()])
    return table, Reference(keys)


def crossings(table: Table) -> list[tuple[float, list[int]]]:
    """(key, the run's ids around the end) of each sublist end that a run crosses: the
    last three ids before the end and the first three after it."""
    index = table.ordered["f"]
    keys, ids = index.key_sublists, index.id_sublists
    return [(keys[s][-1], ids[s][-3:] + ids[s + 1][:3]) for s in range(len(keys) - 1) if keys[s][-1] == keys[s + 1][0]]


def cursors(table: Table, ref: Reference, rng: random.Random) -> list[tuple[float | None, int]]:
    index = table.ordered["f"]
    keys, ids = index.key_sublists, index.id_sublists
    out: list[tuple[float | None, int]] = [(None, 0), (None, 97 * 5), (None, ITEMS), (1000.0, 0), (-1.0, 0)]
    for s in range(len(keys)):  # every sublist's ends: the page leaves the sublist, or starts at its top
        for j in (0, 1, len(keys[s]) - 2, len(keys[s]) - 1):
            out.append((keys[s][j], ids[s][j]))
    for key, run in crossings(table):
        out += [(key, i) for i in run] + [(key, 0), (key, ITEMS + 1), (key, run[2] + 1)]
    present = [i for i in ref.keys if ref.keys[i] is not None]
    for id_ in rng.sample(present, 250):
        out += [(ref.keys[id_], id_), (ref.keys[id_] + 0.01, id_)]  # and a key no item holds
    for id_ in rng.sample(present, 40):  # a cursor whose page ends right below its run
        key = ref.keys[id_]
        run = ref.run(key)
        out += [(key, run[-k]) for k in (1, 2, 3, 19, 20, 21)]
    return out


def test_many_sublists_pages_after_cursors_are_the_reference_across_deletes_and_writes():
    table, ref = made()
    rng = random.Random(4)
    index = table.ordered["f"]
    assert len(index.key_sublists) > WHOLE_SUBLISTS, "the index keeps each sublist's order: not the case tested"
    crossed = crossings(table)
    assert len(crossed) > 10, "no run crosses a sublist's end"
    asked = cursors(table, ref, rng)
    for n, (key, id_) in enumerate(asked):
        check(table, ref, key, id_, LIMITS if n % 5 == 0 else LIMITS[:2])
    gone = rng.sample([i for i in ref.keys if ref.keys[i] is not None], 300)
    gone += [i for _key, run in crossed[:8] for i in run[2:4]]  # both sides of a crossed end
    deleted: dict[int, float | None] = {}
    for id_ in dict.fromkeys(gone):
        table.delete(id_, table.live[id_])
        deleted[id_] = ref.keys[id_]
        ref.drop(id_)
    for id_, key in deleted.items():  # a cursor on a deleted item: its key and id still seek
        check(table, ref, key, id_, LIMITS[:2])
    for key, id_ in asked[::7]:
        check(table, ref, key, id_)
    # a write between two pages: the second page, at the first's last item, sees what was
    # written after that place in the order and not what was written before it (the ids
    # deleted above are free again: one below the last item's id and one above it, in its run)
    free = sorted(deleted)
    top = ITEMS
    for key, run in crossed[8:20]:
        first, _more = page_after(table, key, run[1], 20)
        last = first[-1]
        lastkey = ref.keys[last]
        assert lastkey is not None
        at = bisect_right(free, last)
        below, above = free[max(at - 1, 0)], free[min(at, len(free) - 1)]
        written = [(below, lastkey), (above, lastkey), (top + 1, lastkey), (top + 2, lastkey + 0.25), (top + 3, None)]
        for id_, new in written:
            if id_ in ref.keys:
                continue
            table.insert(ITEM.row({"id": id_, "f": new}))
            ref.add(id_, new)
        free = [i for i in free if i not in ref.keys]
        top += 3
        check(table, ref, lastkey, last)
        check(table, ref, key, run[1])
