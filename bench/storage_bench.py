"""Storage figures (contract section 7), measured on the library directly, no HTTP.

    python bench/storage_bench.py [--sizes 100000,1000000] [--list-sizes 10000,1000000]

1. Durable creates per second (sync="full") with 1, 16 and 64 concurrent writers, the
   fsyncs per acknowledged write, beside a baseline of one write + one fsync per record
   in the same run and directory.
2. Open time (after compaction) and resident memory for N records of the BlogPost shape,
   each measured in a fresh interpreter: bytes per record = RSS growth / N.
3. List p50 (filter published=true, sort -score, limit 20) at each list size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from dbsvc.compiler import compile_schema
from dbsvc.schema import load_schema

BLOG = compile_schema(load_schema(os.path.join(ROOT, "schemas", "blog.dbs")))


def _post(i: int | None, rnd: random.Random) -> dict:
    return {"id": i, "author_id": 1 + (i or 0) % 100, "title": f"post number {i} about {rnd.randrange(10**6)}",
            "body": "lorem ipsum dolor sit amet " * 4, "published": rnd.random() < 0.5,
            "score": round(rnd.random() * 100, 2), "tags": ["a", "b"]}


def _user(i: int) -> dict:
    return {"id": i, "email": f"u{i}@example.com", "name": f"user {i}", "age": 30, "role": "reader",
            "joined": "2026-01-01T00:00:00Z", "profile": None}


def bench_creates(seconds: float = 2.0) -> None:
    from dbsvc.storage import Store
    from dbsvc.storage.tenants import create_tenant

    base = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    try:
        # Baseline: one write + one fsync per record, same directory, same frame size.
        path = os.path.join(base, "baseline")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        frame = b"x" * 260
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            os.write(fd, frame)
            os.fsync(fd)
            n += 1
        base_rate = n / (time.perf_counter() - t0)
        os.close(fd)
        print(f"baseline write+fsync per record: {base_rate:8.0f} /s")
        for writers in (1, 16, 64):
            tenant = create_tenant(base, f"w{writers}")
            store = Store.open(tenant, BLOG.MODELS, BLOG.DESCRIPTION, sync="full")
            rnd = random.Random(writers)

            async def run() -> tuple[int, float]:
                await store.insert("User", _user(1))
                done = 0
                stop = time.perf_counter() + seconds

                async def writer() -> None:
                    nonlocal done
                    while time.perf_counter() < stop:
                        await store.insert("BlogPost", _post(None, rnd))
                        done += 1
                start = time.perf_counter()
                fs0 = store.stats()["fsyncs"]
                await asyncio.gather(*(writer() for _ in range(writers)))
                return done, time.perf_counter() - start, store.stats()["fsyncs"] - fs0

            done, elapsed, fsyncs = asyncio.run(run())
            store.close()
            print(f"durable creates, {writers:2d} writers: {done / elapsed:8.0f} /s  "
                  f"({fsyncs / max(done, 1):.3f} fsyncs per ack, {done / max(fsyncs, 1):.1f} acks per fsync, "
                  f"{done / elapsed / base_rate:.1f}x baseline)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def build_tenant(base: str, n: int) -> str:
    """A compacted tenant with 100 users and n posts, written as a snapshot directly."""
    from dbsvc.storage import Store, compact
    from dbsvc.storage.snapshot import ModelImage, SnapshotImage
    from dbsvc.storage.tenants import create_tenant

    tenant = create_tenant(base, f"n{n}")
    Store.open(tenant, BLOG.MODELS, BLOG.DESCRIPTION).close()     # log + schema.json
    rnd = random.Random(n)
    fields = list(BLOG.MODELS[1].fields)
    users = [[_user(i)[f] for f in BLOG.MODELS[0].fields] for i in range(1, 101)]
    posts = []
    for i in range(1, n + 1):
        p = _post(i, rnd)
        posts.append([p[f] for f in fields])
    image = SnapshotImage(compact.new_epoch(), n + 100, [
        ModelImage("User", list(BLOG.MODELS[0].fields), users, 100),
        ModelImage("BlogPost", fields, posts, n),
        ModelImage("Comment", list(BLOG.MODELS[2].fields), [], 0),
    ])
    compact.install(tenant, image)
    return tenant


CHILD = r"""
import json, os, resource, statistics, sys, time
sys.path.insert(0, {root!r})
sys.argv = ["x"]
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
from dbsvc.compiler import compile_schema
from dbsvc.schema import load_schema
from dbsvc.runtime import Query
from dbsvc.storage import Store
blog = compile_schema(load_schema(os.path.join({root!r}, "schemas", "blog.dbs")))
before = rss()
t0 = time.perf_counter()
s = Store.open({tenant!r}, blog.MODELS, blog.DESCRIPTION)
opened = time.perf_counter() - t0
after = rss()
q = Query(filters={{"published": frozenset([True])}}, sort=(("score", True),), limit=20)
times = []
for i in range(300):
    q2 = Query(filters=q.filters, sort=q.sort, limit=20, offset=(i % 5) * 20)
    t = time.perf_counter(); s.list("BlogPost", q2); times.append(time.perf_counter() - t)
s.close()
print(json.dumps({{"open_s": opened, "rss_bytes": after - before, "list_p50_us": statistics.median(times) * 1e6}}))
"""


def bench_open(sizes: list[int]) -> None:
    base = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    try:
        for n in sizes:
            tenant = build_tenant(base, n)
            size = os.path.getsize(os.path.join(tenant, "snapshot"))
            out = subprocess.run([sys.executable, "-c", CHILD.format(root=ROOT, tenant=tenant)],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out)
            print(f"{n:>9,} posts: open {r['open_s']:6.2f} s, RSS +{r['rss_bytes'] / 2**20:7.1f} MiB "
                  f"({r['rss_bytes'] / n:6.0f} bytes/record; snapshot {size / n:.0f} bytes/record), "
                  f"list p50 (filter, sort, limit 20) {r['list_p50_us']:7.1f} us")
            shutil.rmtree(tenant, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--skip-creates", action="store_true")
    args = parser.parse_args()
    if not args.skip_creates:
        bench_creates(args.seconds)
    bench_open([int(x) for x in args.sizes.split(",") if x])


if __name__ == "__main__":
    main()
