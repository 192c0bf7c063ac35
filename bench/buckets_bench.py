"""A filter's buckets kept in sort order (storage/buckets.py), in process: plan cost and memory.

    python bench/buckets_bench.py [--records 1000000] [--repeat 200]

1. Loads N posts of the blog schema into a `Table` through `load_base` (as a snapshot's
   open does): authors 1..1,000 (author 7 holds ~N/1,000 posts), random six-letter titles,
   `published` half true, scores 0-100 with two decimals (the query bench's, without bodies).
2. For each list shape of the matrix that a filter serves (bench/service_bench.py
   `--matrix`), times `list_page` (the plan and the page's dicts) in CPU microseconds a
   call: the first call (which builds the bucket's order, once) and the median of
   `--repeat` calls after it.
3. Memory: after the (author_id, score) order of every author has been built by one list
   each (what a server that listed every author's posts by score keeps), the bytes the
   orders hold (`BucketOrders.nbytes`: sublists, arrays, objects) per entry, and RSS
   before and after.

Figures in bench/README.md ("Filter buckets in sort order").
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402
from dbsvc.storage import query as plans  # noqa: E402
from dbsvc.storage.rows import pack  # noqa: E402
from dbsvc.storage.table import Table  # noqa: E402

SHAPES = [
    ("filter + sort on another field", "author_id=7&sort=-score&limit=20"),
    ("two filters", "author_id=7&published=true&limit=20"),
    ("two filters, sorted", "author_id=7&published=true&sort=-score&limit=20"),
    ("filter + two sort keys", "author_id=7&sort=-score,title&limit=20"),
    ("filter + sort, offset 500", "author_id=7&sort=score&limit=20&offset=500"),
    ("range + filter", "score__gte=50&author_id=7&limit=20"),
    ("range + filter, sorted by it", "score__gte=50&author_id=7&sort=-score&limit=20"),
]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def loaded(records: int) -> tuple[Table, object]:
    module = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
    model = module.BY_NAME["BlogPost"]
    rng = random.Random(34)
    rows = []
    for i in range(1, records + 1):
        body = {
            "id": i,
            "author_id": rng.randint(1, 1000),
            "title": "".join(rng.choices(string.ascii_lowercase, k=6)),
            "body": "b",
            "published": rng.random() < 0.5,
            "score": round(rng.random() * 100, 2),
            "tags": None,
        }
        rows.append(model.row(body))
    table = Table(model)
    fields, keys = model.fields, table.keys
    columns = {p: [keys[fields[p]](r[p]) for r in rows] for p in table.columns}
    table.load_base([pack(model.fields, r) for r in rows], columns, records)
    return table, model


def cpu_us(call, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.process_time_ns()
        call()
        out.append((time.process_time_ns() - start) / 1000)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    table, model = loaded(args.records)
    print(f"{args.records} posts loaded in {time.perf_counter() - started:.1f} s; RSS {rss_mb():.0f} MB")
    print("| shape | first call cpu us | then, median cpu us |")
    print("|---|---|---|")
    for label, text in SHAPES:
        query = model.parse_list_query([tuple(p.split("=", 1)) for p in text.split("&")])  # type: ignore[attr-defined]
        first = cpu_us(lambda: plans.list_page(table, query), 1)[0]
        rest = cpu_us(lambda: plans.list_page(table, query), args.repeat)
        print(f"| {label} (`{text}`) | {first:.0f} | {statistics.median(rest):.0f} |")
    buckets = getattr(table, "buckets", None)
    if buckets is None:
        return 0
    before = rss_mb()
    started = time.perf_counter()
    for author in range(1, 1001):
        query = model.parse_list_query([("author_id", str(author)), ("sort", "-score"), ("limit", "20")])  # type: ignore[attr-defined]
        plans.list_page(table, query)
    after = rss_mb()
    entries, held = buckets.entries(), buckets.nbytes()
    print(
        f"every author's (author_id, score) order built in {time.perf_counter() - started:.1f} s: "
        f"{len(buckets)} buckets, {entries} entries, {held / 2**20:.1f} MB held "
        f"({held / max(entries, 1):.1f} bytes an entry); RSS {before:.0f} -> {after:.0f} MB "
        "(RSS moves little: the load's freed lists are reused)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
