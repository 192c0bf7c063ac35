"""A page at a cursor at random, with and without an author filter, step by step, in process.

    python bench/cursor_steps.py CODE DATA
    ROUNDS=5 N=6000 python bench/cursor_steps.py /tmp/old-tree /tmp/copy-of-1m

The matrix's many-target rows (bench/matrix_bench.py `varied_shapes`) at 1,000,000 posts:
a page of 20 in id order at one of 5,000 cursors at random, alone and under
`author_id=<1..1,000 at random>`, and (since session 23) the page of 20 sorted by -score at
one of the matrix's 5,000 -score cursors at random; ONLY runs the rows whose label holds
that text (or one of several, `|` between them). varied_pages.py times the whole `Application.__call__`;
this script times, for new targets made the same way, each step `Application.list` takes
for a page sent whole, each over every target of a round in turn (`time.thread_time`
around each loop, so the sum is about the request less the app's routing): the parse (`ParsedQueries.listing`), the
plan (bucketplan.py, then seek.py), the page's stored records (`pick`), their JSON
(storage/shown.py `ShownDicts.page` with texts) and the rest (the page's bytes, the
body, the headers, the `Link`). Each round asks N new targets; the best round of each
step is printed in us a request, with the whole call's best round (`time.thread_time`)
above them. CODE is the checkout to import (run two at once for a before/after), DATA a
tenant seeded by `service_bench.py --matrix --records 1000000 --data DATA`, opened
read-only; the app keeps no list answers (`list_cache_bytes=0`), the GC set as a server
sets it. RECORDS (default 1,000,000) is the tenant's count of posts. bench/README.md, "A
filtered page at a cursor at random by step", has the figures.
"""

import os
import random
import sys
import time

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import open_app, request  # noqa: E402

from dbsvc.http.types import Request  # noqa: E402

try:
    from dbsvc.cursors import encode_cursor  # noqa: E402
except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
    from dbsvc.operators import encode_cursor  # noqa: E402
from dbsvc.storage.bucketplan import bucket_operators  # noqa: E402
from dbsvc.storage.idmap import pick  # noqa: E402
from dbsvc.storage.seek import plan_operators  # noqa: E402

RECORDS = int(os.environ.get("RECORDS", "1000000"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
N = int(os.environ.get("N", "6000"))
STEPS = ("parse", "plan", "pick", "records", "rest")


def main() -> None:
    app, store, opened = open_app(CODE, DATA)
    print(f"{CODE}: open {opened:.1f} s", flush=True)
    model = app.models["blog-post"]
    table = store.table("BlogPost")
    keys = random.Random(36)
    cursors = [encode_cursor("BlogPost", (), [], keys.randint(1, RECORDS)) for _ in range(5000)]
    scored = random.Random(36)  # matrix_bench.py `varied_shapes`' -score cursors: ids, then keys
    made = [scored.randint(1, RECORDS) for _ in range(5000)]
    by_score = [encode_cursor("BlogPost", (("score", True),), [round(scored.uniform(0, 100), 2)], i) for i in made]
    rng = random.Random(7)
    rows = [
        ("cursor at random, id order", lambda: f"/api/blog-post?limit=20&cursor={rng.choice(cursors)}"),
        ("cursor at random, sort=-score", lambda: f"/api/blog-post?sort=-score&limit=20&cursor={rng.choice(by_score)}"),
        (
            "cursor at random + filter",
            lambda: f"/api/blog-post?author_id={rng.randint(1, 1000)}&limit=20&cursor={rng.choice(cursors)}",
        ),
    ]
    tt = time.thread_time

    def steps(targets: list[Request]) -> list[float]:
        """`Application.list` of pages sent whole over `targets`, step by step: each step
        over every target in turn, its CPU (us a request) taken once around the loop."""
        t0 = tt()
        listings = [app.queries.listing(model, r) for r in targets]
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
        for r, listing, (_ids, total, more), records in zip(targets, listings, plans, pages):
            q = listing.query
            page = app.encoded.encode_page(model, records, True)
            body = b'{"data":[%s],"total":%d,"limit":%d,"offset":%d}' % (page, total, q.limit, q.offset)
            headers = app._read_headers(table.watermark, None)
            if more and records:
                headers.append(("Link", listing.link_after(model, r, records[-1])))
            assert body and headers
        t5 = tt()
        return [(b - a) / len(targets) * 1e6 for a, b in ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5))]

    only = [part for part in os.environ.get("ONLY", "").split("|") if part]
    for label, make in rows:
        if only and not any(part in label for part in only):
            continue
        warm = [request(make()) for _ in range(N)]
        for r in warm:
            assert app(r).status == 200, r.target
        whole, parts = [], []
        for _ in range(ROUNDS):
            targets = [request(make()) for _ in range(N)]
            start = time.thread_time()
            for r in targets:
                app(r)
            whole.append((time.thread_time() - start) / N * 1e6)
            parts.append(steps([request(make()) for _ in range(N)]))
        best = [min(p[i] for p in parts) for i in range(len(STEPS))]
        print(f"{label:30} app() {min(whole):6.1f} us (rounds {' '.join(f'{w:.1f}' for w in whole)})", flush=True)
        print("    " + ", ".join(f"{name} {b:.1f}" for name, b in zip(STEPS, best)) + f" (sum {sum(best):.1f})")
    store.close()


if __name__ == "__main__":
    main()
