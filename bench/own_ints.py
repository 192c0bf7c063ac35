"""RSS after the open and a page's cold pick at 1,000,000 posts: what own ints cost and give.

    python bench/own_ints.py CODE DATA
    ROUNDS=3 N=4000 python bench/own_ints.py /tmp/var-ordered /tmp/copy-of-1m

CODE is the checkout to import (the old tree, this one, or a copy of it with one of the
two call sites of sortedlist.py `own_ints` taken out), DATA a tenant of 1,000,000 posts
seeded by query_bench.py `seeded` (as `service_bench.py --matrix --data DATA`), opened
read-only as pages_kit.py opens it. One process a tree: run trees in turn, A B A B, so
the host's load falls on each.

Prints, after the open (`gc.collect()` first, before the heap is advised for huge pages,
then after): the process's RSS (`VmRSS`) and the open's wall time; how the ids of the
score index's pages and of the author buckets lie in memory (the median distance in bytes
between the objects of two neighbouring ids of a page of 21, over 2,000 pages at random:
32 is side by side); then ROUNDS rounds of the matrix's two many-target rows at 1M
(`sort=-score` at a cursor at random; `author_id` at random at a cursor at random), each
over N new targets in turn so that each page's ids are cold: the plan (seek.py or
bucketplan.py: the index's seek and the page's ids, "the pick of a page's ids"), the
records' slots (`pick`) and the whole `Application.__call__`, us a request by
`time.thread_time`; the median (best) of the rounds.

`LAYOUTS=1` (CODE the old tree, whose indexes hold the records' own id objects) measures
the layouts in this one process instead, on one heap at one moment: the script makes the
score index's id sublists and the author buckets afresh in their order itself (as
`own_ints` does), then each round times the rows under each of four layouts in turn
(records' ids; the score index's own; the buckets' own; both), the layouts' order rotated
round by round, the index's kept parts dropped at each swap (`OrderedIndex.grown(0)`, the
buckets' kept sets). What differs between two layouts' figures is the layout alone.
`SERVED=1` starts `dbsvc.py serve` from CODE on DATA instead (http_bench.py `start_dbsvc`,
SERVICE_SYNC=off; DATA a fresh copy, the open may write) and prints the server's RSS once
it listens and 5 s later (the heap advised by then): the RSS the 5% limit is read against;
`HUGE=off` serves with SERVICE_HUGE_PAGES=off (no transparent huge pages: steadier RSS).
bench/README.md, "Own ints", has the figures.
"""

import gc
import itertools
import os
import random
import statistics
import sys
import time

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from array import array  # noqa: E402

from pages_kit import open_app, request  # noqa: E402

try:
    from dbsvc.cursors import encode_cursor  # noqa: E402
except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
    from dbsvc.operators import encode_cursor  # noqa: E402
from dbsvc.storage.bucketplan import bucket_operators  # noqa: E402
from dbsvc.storage.heap import advise_heap  # noqa: E402
from dbsvc.storage.idmap import pick  # noqa: E402
from dbsvc.storage.seek import plan_operators  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "3"))
LAYOUTS = os.environ.get("LAYOUTS", "") == "1"
SERVED = os.environ.get("SERVED", "") == "1"
N = int(os.environ.get("N", "4000"))
RECORDS = 1_000_000


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def spread(pages: list[list[int]]) -> int:
    """The median distance in bytes between neighbouring ids' objects over `pages`."""
    gaps = [abs(id(b) - id(a)) for page in pages for a, b in zip(page, page[1:])]
    return int(statistics.median(gaps))


def steps(app, table, model, make) -> tuple[float, float, float]:
    """(plan, pick, app()) us a request over N new targets of `make`, each step over all in turn."""
    tt = time.thread_time
    asked = [request(make()) for _ in range(N)]
    t0 = tt()
    for r in asked:
        app(r)
    whole = (tt() - t0) / N * 1e6
    listings = [app.queries.listing(model, request(make())) for _ in range(N)]
    t1 = tt()
    plans = []
    for listing in listings:
        q = listing.query
        planned = bucket_operators(table, q)
        plans.append(planned if planned is not None else plan_operators(table, q))
    t2 = tt()
    for page_ids, _total, _more in plans:
        pick(table.live, page_ids)
    t3 = tt()
    return (t2 - t1) / N * 1e6, (t3 - t2) / N * 1e6, whole


def report(label: str, got: list[tuple[float, float, float]]) -> None:
    cells = []
    for i, name in enumerate(("plan", "pick", "app()")):
        cells.append(f"{name} {statistics.median(g[i] for g in got):.2f} ({min(g[i] for g in got):.2f})")
    print(f"{label}: " + ", ".join(cells), flush=True)


def timed(app, table, model, rows) -> None:
    figures: dict[str, list[tuple[float, float, float]]] = {row: [] for row in rows}
    for k in range(ROUNDS):
        for row, make in rows.items():
            figures[row].append(steps(app, table, model, make))
        print(f"round {k + 1} done, load {os.getloadavg()[0]:.1f}", flush=True)
    for row, got in figures.items():
        report(row, got)


def layouts(app, table, model, rows) -> None:
    """The four layouts of the module docstring, alternated in one process."""
    score = table.ordered["score"]
    hashed = table.hashes["author_id"]
    subs = score.id_sublists
    kept = {"ordered": list(subs), "buckets": dict(hashed.buckets)}
    own = {
        "ordered": [array("q", sub).tolist() for sub in subs],
        "buckets": {k: array("q", b).tolist() for k, b in hashed.buckets.items()},
    }

    def use(ordered: bool, buckets: bool) -> None:
        subs[:] = (own if ordered else kept)["ordered"]
        hashed.buckets.update((own if buckets else kept)["buckets"])
        score.grown(0)
        hashed.kept_sets.clear()

    ways = {
        "records' ids": (False, False),
        "score own": (True, False),
        "buckets own": (False, True),
        "both": (True, True),
    }
    names = list(ways)
    figures: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for k in range(ROUNDS):
        for name in itertools.islice(itertools.cycle(names), k % len(names), k % len(names) + len(names)):
            use(*ways[name])
            for row, make in rows.items():
                figures.setdefault((row, name), []).append(steps(app, table, model, make))
        print(f"round {k + 1} done, load {os.getloadavg()[0]:.1f}", flush=True)
    use(False, False)
    for row in rows:
        for name in names:
            report(f"{row} | {name}", figures[(row, name)])


def served() -> None:
    """The server's RSS after its open (module docstring)."""
    from pathlib import Path

    from http_bench import start_dbsvc, stop_server

    started = time.perf_counter()
    env = {"SERVICE_DATA": DATA, "SERVICE_SYNC": "off", "SERVICE_HUGE_PAGES": os.environ.get("HUGE", "on")}
    proc, _port, _log = start_dbsvc(env, timeout=280, code=Path(CODE))
    wall = time.perf_counter() - started
    try:
        listening = served_rss(proc.pid)
        time.sleep(5)
        later = served_rss(proc.pid)
        print(
            f"{CODE}: served, huge pages {env['SERVICE_HUGE_PAGES']}, open {wall:.1f} s, RSS {listening:.0f} MiB, {later:.0f} 5 s later"
        )
    finally:
        stop_server(proc)


def served_rss(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def main() -> None:
    if SERVED:
        served()
        return
    started = time.perf_counter()
    app, store, _opened = open_app(CODE, DATA)
    wall = time.perf_counter() - started
    gc.collect()
    before = rss_mib()
    advise_heap()
    after = rss_mib()
    table = store.table("BlogPost")
    model = app.models["blog-post"]
    rng = random.Random(5)
    score = table.ordered["score"]
    score_pages = [score.ids_slice(at, at + 21) for at in (rng.randrange(RECORDS - 21) for _ in range(2000))]
    buckets = table.hashes["author_id"].buckets
    bucket_pages = []
    for _ in range(2000):
        bucket = buckets[rng.randint(1, 1000)]
        at = rng.randrange(len(bucket) - 21)
        bucket_pages.append(bucket[at : at + 21])
    print(
        f"{CODE}: open {wall:.1f} s, RSS {before:.0f} MiB (advised {after:.0f} MiB); neighbours' distance: "
        f"score {spread(score_pages)} B, buckets {spread(bucket_pages)} B",
        flush=True,
    )
    made = random.Random(36)  # matrix_bench.py `varied_shapes`' cursors
    ids = [made.randint(1, RECORDS) for _ in range(5000)]
    by_id = [encode_cursor("BlogPost", (), [], i) for i in ids]
    by_score = [encode_cursor("BlogPost", (("score", True),), [round(made.uniform(0, 100), 2)], i) for i in ids]
    pick_rng = random.Random(7)
    rows = {
        "-score": lambda: f"/api/blog-post?sort=-score&limit=20&cursor={pick_rng.choice(by_score)}",
        "+ filter": lambda: (
            f"/api/blog-post?author_id={pick_rng.randint(1, 1000)}&limit=20&cursor={pick_rng.choice(by_id)}"
        ),
    }
    for make in rows.values():  # warm the code paths, not the data: few targets
        for _ in range(500):
            assert app(request(make())).status == 200
    if LAYOUTS:
        layouts(app, table, model, rows)
    else:
        timed(app, table, model, rows)
    store.close()


if __name__ == "__main__":
    main()
