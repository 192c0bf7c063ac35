"""A filtered page's misses two ways in one process: storage/shown.py `ShownDicts._jsons` (the
page's misses in one frame, the admission's floor-or-share part read once and again after
a record kept) against each record taken by `_json` alone, which asks `admits` whole, as
before session 24 (issue 36 item 2, wt-filt2).

    python bench/page_misses.py CODE DATA
    ROUNDS=8 N=4000 WARM=20000 python bench/page_misses.py . /tmp/copy-of-1m

One open of DATA (a tenant seeded by `service_bench.py --matrix --records 1000000 --data
DATA`, opened read-only as pages_kit.py opens it), then WARM pages of the matrix's "cursor
at random + filter" row (an author at random, one of 5,000 cursors at random, limit 20),
which fill the record cache to its share; then ROUNDS rounds, each taking both ways in
turn (the order alternated), N new targets each: the whole `Application.__call__` and the
page's records alone (`ShownDicts.page` with texts over stored records picked before the
clock starts), CPU a request by `time.thread_time`. The same cache and the same data for
both ways, so the host's drift between two processes is out of the pair; the two ways
keep and refuse the same records (tests/storage/test_storage_shown_misses.py). CODE must
hold `ShownDicts._jsons` (session 24 on). RECORDS (default 1,000,000) is the tenant's
count of posts. bench/README.md, "A filtered page's misses in one frame", has figures.
"""

import os
import sys
import time

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import filtered_cursor_targets, open_app, request  # noqa: E402

from dbsvc.storage.bucketplan import bucket_operators  # noqa: E402
from dbsvc.storage.idmap import pick  # noqa: E402
from dbsvc.storage.seek import plan_operators  # noqa: E402
from dbsvc.storage.shown import ShownDicts  # noqa: E402

RECORDS = int(os.environ.get("RECORDS", "1000000"))
ROUNDS = int(os.environ.get("ROUNDS", "8"))
N = int(os.environ.get("N", "4000"))
WARM = int(os.environ.get("WARM", "20000"))


def one_by_one(self: ShownDicts, ids: list, page: list, found: list) -> list:
    """The miss path before `_jsons`: `_json` a record, `admits` whole on each miss."""
    return list(map(self._json, ids, page, found))


def main() -> None:
    app, store, opened = open_app(CODE, DATA)
    print(f"{CODE}: open {opened:.1f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    model, table = app.models["blog-post"], store.table("BlogPost")
    target = filtered_cursor_targets(RECORDS)
    for _ in range(WARM):
        app(request(target()))
    ways = {"per record": one_by_one, "one frame": ShownDicts._jsons}
    whole: dict[str, list[float]] = {name: [] for name in ways}
    records: dict[str, list[float]] = {name: [] for name in ways}
    tt = time.thread_time
    try:
        for round_ in range(ROUNDS):
            for name in list(ways) if round_ % 2 == 0 else list(ways)[::-1]:
                ShownDicts._jsons = ways[name]  # type: ignore[method-assign]
                targets = [request(target()) for _ in range(N)]
                start = tt()
                for r in targets:
                    app(r)
                whole[name].append((tt() - start) / N * 1e6)
                queries = [app.queries.listing(model, request(target())).query for _ in range(N)]
                plans = [bucket_operators(table, q) or plan_operators(table, q) for q in queries]
                stored = [pick(table.live, ids) for ids, _total, _more in plans]
                start = tt()
                for (ids, _total, _more), page in zip(plans, stored):
                    if ids:
                        table.dicts.page(ids, page, True, False)
                records[name].append((tt() - start) / N * 1e6)
    finally:
        ShownDicts._jsons = ways["one frame"]  # type: ignore[method-assign]
    dicts = table.dicts
    print(f"load {os.getloadavg()[0]:.1f}; kept {len(dicts.ids)}, refused {dicts.refused} in all")
    for name in ways:
        for label, figures in (("app()", whole[name]), ("records", records[name])):
            ordered = sorted(figures)
            print(
                f"{name:10} {label:7} best {ordered[0]:6.1f} median {ordered[len(ordered) // 2]:6.1f} us"
                f" (rounds {' '.join(f'{f:.1f}' for f in figures)})"
            )
    store.close()


if __name__ == "__main__":
    main()
