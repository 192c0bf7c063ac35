"""Records held in their object form (session 27, wt-objform): what one tree pays, in process.

    PYTHONPATH=TREE python bench/object_form.py open DATA [--pages N] [--rounds R]
    PYTHONPATH=TREE python bench/object_form.py compact DATA

Run it once per tree (the tree at c99385c and this one), each on its own copy of the same
data directory (bench/query_bench.py's `seeded`, tenant `default`), alternated; it imports
dbsvc's storage only, as both trees have it.

`open`: the tenant opened read-only (wall and process CPU seconds, RSS after), then the
many-target pages of bench/matrix_bench.py `varied_shapes` asked of the store as the
application asks a list (`Store.list_page(..., texts=True)`: a cursor at random in id order,
a cursor at random sorted by -score, a cursor at random under an author filter, an offset at
random), N pages a shape a round, R rounds alternating the shapes' order; CPU us a page
(`time.thread_time`, median of the rounds, best in brackets), the page's bytes checked
against a digest over every page (the same targets in both trees: the digests must agree).
RSS after the pages.

`compact`: the tenant compacted offline (storage/tenants.py `compact_tenant`: the snapshot
step's CPU, its wall; the tree's own snapshot format), then opened again (wall, CPU, RSS).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def open_store(data: Path):  # noqa: ANN201 (a Store)
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.storage import Store

    mod = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
    wall, cpu = time.perf_counter(), time.process_time()
    store = Store.open(str(data / "default"), mod.MODELS, mod.DESCRIPTION, readonly=True)
    return store, time.perf_counter() - wall, time.process_time() - cpu


def body(page: list) -> bytes:
    """The page's records as the application joins them (readcache.py `encode_page` with
    texts): bytes as they are, a SentRecord's text, a dict encoded."""
    from dbsvc.runtime import json_bytes

    return b",".join(r if type(r) is bytes else getattr(r, "text", None) or json_bytes(r) for r in page)


def shapes(records: int, pages: int):  # noqa: ANN201 (label -> queries)
    from dbsvc.runtime import Query

    rng = random.Random(36)
    ids = [rng.randint(1, records) for _ in range(pages)]
    scores = [round(rng.uniform(0, 100), 2) for _ in range(pages)]
    authors = [rng.randint(1, 1000) for _ in range(pages)]
    offsets = [rng.randint(0, min(records, 100_000) - 20) for _ in range(pages)]
    score = (("score", True),)
    return {
        "cursor": [Query(limit=20, cursor=((), i)) for i in ids],
        "cursor -score": [Query(limit=20, sort=score, cursor=((s,), i)) for s, i in zip(scores, ids)],
        "cursor + filter": [
            Query(limit=20, filters={"author_id": frozenset([a])}, cursor=((), i)) for a, i in zip(authors, ids)
        ],
        "offset": [Query(limit=20, offset=o) for o in offsets],
    }


def pages(args: argparse.Namespace) -> None:
    store, wall, cpu = open_store(args.data)
    print(f"open: {wall:.2f} s wall, {cpu:.2f} s CPU, RSS {rss_mb():.0f} MB")
    records = len(store.table("BlogPost").live)
    asked = shapes(records, args.pages)
    times: dict[str, list[float]] = {label: [] for label in asked}
    digests: dict[str, str] = {}
    order = list(asked)
    for r in range(args.rounds):
        for label in order if r % 2 == 0 else order[::-1]:
            digest = hashlib.sha256()
            start = time.thread_time()
            for query in asked[label]:
                page = store.list_page("BlogPost", query, True)[0]
                digest.update(body(page))
            times[label].append((time.thread_time() - start) / len(asked[label]) * 1e6)
            assert digests.setdefault(label, digest.hexdigest()) == digest.hexdigest(), label
    for label, got in times.items():
        print(f"{label:16s} {statistics.median(got):7.1f} ({min(got):.1f}) us a page  {digests[label][:16]}")
    print(f"RSS after the pages {rss_mb():.0f} MB")
    store.close()


def compact(args: argparse.Namespace) -> None:
    from dbsvc.storage.tenants import compact_tenant

    wall, cpu = time.perf_counter(), time.process_time()
    compact_tenant(str(args.data), "default")
    print(f"compact: {time.perf_counter() - wall:.2f} s wall, {time.process_time() - cpu:.2f} s CPU")
    store, wall, cpu = open_store(args.data)
    print(f"open after: {wall:.2f} s wall, {cpu:.2f} s CPU, RSS {rss_mb():.0f} MB")
    store.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["open", "compact"])
    parser.add_argument("data", type=Path)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    import dbsvc

    print(f"tree {Path(dbsvc.__file__).parent.parent}  load {os.getloadavg()[0]:.1f}")
    (pages if args.mode == "open" else compact)(args)
    return 0


if __name__ == "__main__":
    sys.path[:0] = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    raise SystemExit(main(sys.argv[1:]))
