"""Operators on feeds (issue 34 item 5): what the generated matcher costs per event, and what
a live query's Init ids cost with a range, in process.

    python bench/feed_operators_bench.py [--records 1000000]

1. The matcher: `BlogPost.match(record, filters, ranges, nulls)` on one record, best of 5
   runs of 200,000 calls, for no condition (the early return), one exact filter, one
   range, a prefix, a range plus a filter: the per-event, per-feed price of a filtered
   `/subscribe` or `/live-query` socket.
2. The Init: `Store.live_ids` (the ids a live query's Init reads its slices from) over N
   posts with random scores 0-100, for every post, `score__gte=99` (about 1% of them, a
   range scan of the score index) and `published=true` (a hash bucket, half of them),
   best of 5.

Figures in bench/README.md ("Operators on feeds").
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402
from dbsvc.storage import Store, tenants  # noqa: E402

MODULE = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
POST = MODULE.BY_NAME["BlogPost"]
CHUNK = 10_000


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matcher_figures(calls: int = 200_000) -> None:
    record = POST.validate_create({"author_id": 1, "title": "abcdef", "body": "x", "score": 42.5, "published": True})
    record["id"] = 1
    cases = {
        "no condition": [],
        "published=true": [("published", "true")],
        "score__gte=40&score__lt=50": [("score__gte", "40"), ("score__lt", "50")],
        "title__prefix=ab": [("title__prefix", "ab")],
        "published=true&score__gte=40": [("published", "true"), ("score__gte", "40")],
    }
    print(f"matcher, one call (best of 5 x {calls:,}):")
    for label, pairs in cases.items():
        query = POST.parse_feed_query(pairs)
        match, filters, ranges, nulls = POST.match, query.filters, query.ranges, query.nulls

        def run() -> None:
            for _ in range(calls):
                match(record, filters, ranges, nulls)

        print(f"  {label:32} {best(run) / calls * 1e9:7.0f} ns")


def init_figures(records: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = tenants.create_tenant(tmp, "default")
        store = Store.open(str(directory), MODULE.MODELS, MODULE.DESCRIPTION, sync="off")
        user = MODULE.BY_NAME["User"]
        store.insert_batch([("User", user.validate_create({"email": "u@bench.io", "name": "u"}))])
        rng = random.Random(34)
        for start in range(0, records, CHUNK):
            rows = []
            for _ in range(start, min(records, start + CHUNK)):
                body = {
                    "author_id": 1,
                    "title": "t",
                    "body": "x",
                    "published": rng.random() < 0.5,
                    "score": round(rng.random() * 100, 2),
                }
                rows.append(("BlogPost", POST.validate_create(body)))
            store.insert_batch(rows)
        print(f"live query Init ids over {records:,} posts (best of 5):")
        for label, pairs in {
            "every post": [],
            "score__gte=99": [("score__gte", "99")],
            "published=true": [("published", "true")],
        }.items():
            query = POST.parse_feed_query(pairs)
            ids = store.live_ids("BlogPost", query.filters, query.ranges, query.nulls)
            took = best(lambda q=query: store.live_ids("BlogPost", q.filters, q.ranges, q.nulls))
            print(f"  {label:16} {len(ids):9,} ids {took * 1e3:9.1f} ms")
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    matcher_figures()
    init_figures(args.records)


if __name__ == "__main__":
    main()
