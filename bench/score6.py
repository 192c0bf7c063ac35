"""The matrix's many-target list rows at 20,000 and at 1,000,000 posts in one process, by step.

    python bench/score6.py CODE DATA20K DATA1M
    ROUNDS=4 N=4000 ONLY='-score|filter' python bench/score6.py . /tmp/copy-20k /tmp/copy-1m

Both tenants (seeded by `service_bench.py --matrix --records R --data DATA`, copies of
/tmp/pristine-20k and /tmp/pristine-1m) are opened read-only in this one process, each with
its application as pages_kit.py opens it, then the heap is advised for huge pages as a
server advises it (service.py `settle_heap`), so the two sizes are measured on the same
heap, host and moment: the gap 20k -> 1M of a row is the size's, not the host's drift.

Rows (matrix_bench.py `varied_shapes`, the same cursors): a page of 20 in id order at a
cursor at random (the reference row, which meets its target), the same sorted by -score,
and the same in id order under `author_id` at random. Each round asks, for each size in
turn (the order swapped every other round), N new targets through `Application.__call__`
(CPU by `time.thread_time`, us a request), then N more step by step (cursor_steps.py's
steps: the parse, the plan, the page's stored records picked, their JSON, the rest), and
the plan's pieces: for -score the index's seek (`OrderedIndex.after`'s sublist and place)
and the page's ids; for the filter the bucket's count and its slice after the cursor.
Prints the median (best) of each figure over the rounds and 1M minus 20k.
bench/README.md, "The 1M many-target rows by step" (issue 36 item 2, session 28), has
the figures.
"""

import os
import random
import statistics
import sys
import time

from usage import check_argv

check_argv(__doc__, 3)
CODE, DATA20K, DATA1M = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import open_app, request  # noqa: E402

try:
    from dbsvc.cursors import encode_cursor  # noqa: E402
except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
    from dbsvc.operators import encode_cursor  # noqa: E402
from dbsvc.storage.bucketplan import bucket_operators  # noqa: E402
from dbsvc.storage.heap import advise_heap  # noqa: E402
from dbsvc.storage.idmap import pick  # noqa: E402
from dbsvc.storage.seek import plan_operators  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "4"))
N = int(os.environ.get("N", "4000"))
WARM = int(os.environ.get("WARM", "6000"))
STEPS = ("app()", "parse", "plan", "pick", "records", "rest")


def targets(records: int) -> dict[str, object]:
    """Each row's target maker over a table of `records` posts (matrix_bench.py's cursors)."""
    made = random.Random(36)
    ids = [made.randint(1, records) for _ in range(5000)]
    by_id = [encode_cursor("BlogPost", (), [], i) for i in ids]
    by_score = [encode_cursor("BlogPost", (("score", True),), [round(made.uniform(0, 100), 2)], i) for i in ids]
    rng = random.Random(7)
    return {
        "id order": lambda: f"/api/blog-post?limit=20&cursor={rng.choice(by_id)}",
        "-score": lambda: f"/api/blog-post?sort=-score&limit=20&cursor={rng.choice(by_score)}",
        "+ filter": lambda: f"/api/blog-post?author_id={rng.randint(1, 1000)}&limit=20&cursor={rng.choice(by_id)}",
    }


class Size:
    """One tenant opened, its application, and its rows' target makers."""

    def __init__(self, name: str, data: str, records: int) -> None:
        self.name = name
        self.app, self.store, opened = open_app(CODE, data)
        print(f"{name}: open {opened:.1f} s", flush=True)
        self.model = self.app.models["blog-post"]
        self.table = self.store.table("BlogPost")
        self.rows = targets(records)

    def call(self, make, n: int) -> float:
        asked = [request(make()) for _ in range(n)]
        app = self.app
        start = time.thread_time()
        for r in asked:
            app(r)
        return (time.thread_time() - start) / n * 1e6

    def steps(self, make, n: int) -> list[float]:
        """cursor_steps.py's steps over `n` new targets, each over all of them in turn."""
        app, model, table, tt = self.app, self.model, self.table, time.thread_time
        asked = [request(make()) for _ in range(n)]
        t0 = tt()
        listings = [app.queries.listing(model, r) for r in asked]
        t1 = tt()
        plans = []
        for listing in listings:
            q = listing.query
            planned = bucket_operators(table, q)
            plans.append(planned if planned is not None else plan_operators(table, q))
        t2 = tt()
        stored = [pick(table.live, ids) for ids, _total, _more in plans]
        t3 = tt()
        pages = [table.dicts.page(p[0], s, True) if p[0] else [] for p, s in zip(plans, stored)]
        t4 = tt()
        for r, listing, (_ids, total, more), records in zip(asked, listings, plans, pages):
            q = listing.query
            page = app.encoded.encode_page(model, records, True)
            body = b'{"data":[%s],"total":%d,"limit":%d,"offset":%d}' % (page, total, q.limit, q.offset)
            headers = app._read_headers(table.watermark, None)
            if more and records:
                headers.append(("Link", listing.link_after(model, r, records[-1])))
            assert body and headers
        t5 = tt()
        return [(b - a) / n * 1e6 for a, b in ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5))]


def main() -> None:
    sizes = [Size("20k", DATA20K, 20_000), Size("1M", DATA1M, 1_000_000)]
    marked = advise_heap()
    print(f"heap advised for huge pages: {marked / 2**20:.0f} MiB", flush=True)
    only = [part for part in os.environ.get("ONLY", "").split("|") if part]
    rows = [row for row in sizes[0].rows if not only or any(part in row for part in only)]
    for size in sizes:
        for row in rows:
            make = size.rows[row]
            for _ in range(WARM):
                assert size.app(request(make())).status == 200
    figures: dict[tuple[str, str], list[list[float]]] = {}
    for k in range(ROUNDS):
        for row in rows:
            for size in sizes if k % 2 == 0 else sizes[::-1]:
                make = size.rows[row]
                whole = size.call(make, N)
                figures.setdefault((size.name, row), []).append([whole, *size.steps(make, N)])
        load = os.getloadavg()[0]
        print(f"round {k + 1} done, load {load:.1f}", flush=True)
    print(f"\nus a request, median of {ROUNDS} rounds (best); N={N}")
    print(f"| row | size | {' | '.join(STEPS)} |")
    print("|---|---|" + "---|" * len(STEPS))
    for row in rows:
        medians = {}
        for size in sizes:
            got = figures[(size.name, row)]
            medians[size.name] = [statistics.median(r[i] for r in got) for i in range(len(STEPS))]
            cells = [f"{medians[size.name][i]:.1f} ({min(r[i] for r in got):.1f})" for i in range(len(STEPS))]
            print(f"| {row} | {size.name} | {' | '.join(cells)} |")
        gap = [medians["1M"][i] - medians["20k"][i] for i in range(len(STEPS))]
        print(f"| {row} | 1M - 20k | {' | '.join(f'{g:+.1f}' for g in gap)} |")
    for size in sizes:
        size.store.close()


if __name__ == "__main__":
    main()
