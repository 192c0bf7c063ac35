"""A page's `Query` copied two ways in one process: parsedlists.py `with_cursor` (plain
stores into a draft of the same slots, then its class assigned) against the copy before
session 25 (the slots' `__set__` mapped in C over an `attrgetter`'s values, each a slot
wrapper's call), round by round (issue 36 item 2, wt-filt3).

    python bench/query_copies.py CODE DATA
    ROUNDS=8 N=4000 WARM=20000 python bench/query_copies.py . /tmp/copy-of-1m

One open of DATA (a tenant seeded by `service_bench.py --matrix --records 1000000 --data
DATA`, opened read-only as pages_kit.py opens it), then WARM pages of the matrix's "cursor
at random + filter" row (an author at random, one of 5,000 cursors at random, limit 20);
then ROUNDS rounds, each taking both ways in turn (the order alternated), N new targets
each: the whole `Application.__call__`, CPU a request by `time.thread_time`, and the copy
alone (`with_cursor` of the row's list query, N calls). Same cache, same data for both
ways. At the end: the records kept and refused, and the misses a page over the last round
(a record whose kept JSON is not its stored record's). CODE must hold parsedlists.py
(session 25 on). RECORDS (default 1,000,000) is the tenant's count of posts.
"""

import os
import sys
import time
from collections import deque
from dataclasses import fields
from itertools import repeat
from operator import attrgetter

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import filtered_cursor_targets, open_app, request  # noqa: E402

from dbsvc import parsedlists  # noqa: E402
from dbsvc.runtime import Query  # noqa: E402
from dbsvc.storage.bucketplan import bucket_operators  # noqa: E402
from dbsvc.storage.idmap import pick  # noqa: E402
from dbsvc.storage.seek import plan_operators  # noqa: E402

RECORDS = int(os.environ.get("RECORDS", "1000000"))
ROUNDS = int(os.environ.get("ROUNDS", "8"))
N = int(os.environ.get("N", "4000"))
WARM = int(os.environ.get("WARM", "20000"))


def slot_setters(name: str):  # noqa: ANN201 (the copy before session 25, as it was)
    """`dataclasses.replace(query, <name>=value)` by the slots' `__set__` mapped in C."""
    others = tuple(f.name for f in fields(Query) if f.name != name)
    read_others = attrgetter(*others)
    slots = tuple(getattr(Query, field) for field in others)
    write = type(slots[0]).__set__
    new, set_ = Query.__new__, object.__setattr__

    def replaced(query: Query, value: object) -> Query:
        made = new(Query)
        deque(map(write, slots, repeat(made), read_others(query)), 0)
        set_(made, name, value)
        return made

    return replaced


def main() -> None:
    app, store, opened = open_app(CODE, DATA)
    print(f"{CODE}: open {opened:.1f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    model, table = app.models["blog-post"], store.table("BlogPost")
    target = filtered_cursor_targets(RECORDS)
    for _ in range(WARM):
        app(request(target()))
    ways = {"slot setters": slot_setters("cursor"), "draft": parsedlists.with_cursor}
    whole: dict[str, list[float]] = {name: [] for name in ways}
    alone: dict[str, list[float]] = {name: [] for name in ways}
    listed = app.queries.listing(model, request("/api/blog-post?author_id=7&limit=20")).query
    tt = time.thread_time
    try:
        for round_ in range(ROUNDS):
            for name in list(ways) if round_ % 2 == 0 else list(ways)[::-1]:
                copy = parsedlists.with_cursor = ways[name]
                targets = [request(target()) for _ in range(N)]
                start = tt()
                for r in targets:
                    app(r)
                whole[name].append((tt() - start) / N * 1e6)
                start = tt()
                for i in range(N):
                    copy(listed, ((), i))
                alone[name].append((tt() - start) / N * 1e6)
    finally:
        parsedlists.with_cursor = ways["draft"]
    misses = 0
    for _ in range(N):
        query = app.queries.listing(model, request(target())).query
        ids = (bucket_operators(table, query) or plan_operators(table, query))[0]
        for id_, stored in zip(ids, pick(table.live, ids)):
            entry = table.dicts._shown.get(id_)
            misses += entry is None or entry[0] is not stored or entry[2] is None
    dicts = table.dicts
    print(
        f"load {os.getloadavg()[0]:.1f}; kept {len(dicts.ids)}, refused {dicts.refused} in all, {misses / N:.1f} misses a page"
    )
    for name in ways:
        for label, figures in (("app()", whole[name]), ("copy", alone[name])):
            ordered = sorted(figures)
            print(
                f"{name:12} {label:5} best {ordered[0]:6.2f} median {ordered[len(ordered) // 2]:6.2f} us"
                f" (rounds {' '.join(f'{f:.2f}' for f in figures)})"
            )
    store.close()


if __name__ == "__main__":
    main()
