"""Storage figures (docs/guide/operations.md#performance), measured on the library directly, no HTTP.

    python bench/storage_bench.py [--sizes 100000,1000000] [--list-sizes 10000,1000000]

1. Durable creates per second (sync="full") with 1, 16 and 64 concurrent writers, the
   fsyncs per acknowledged write, beside a baseline of one write + one fsync per record
   in the same run and directory.
2. Open time (after compaction) and resident memory for N records of the BlogPost shape,
   each measured in a fresh interpreter: bytes per record = RSS growth / N. `--rounds R`
   opens the same files R times and ends with the medians (a shared machine's noise).
3. List p50 (filter published=true, sort -score, limit 20) at each list size.
4. Restart (`--restart N`, default 200,000; 0 skips): one interpreter writes N posts and
   then updates each once (every update frame carries the record twice, the shape that
   the row-count compaction rule never compacted), reporting its RSS growth ("live"), log
   bytes and online compactions; then two fresh interpreters open the tenant in turn,
   reporting open time and RSS growth. `--code DIR` runs the three interpreters against
   another checkout of dbsvc (say `git archive HEAD dbsvc | tar -x -C DIR`), for a
   before/after on the same machine.
5. Pauses (`--pause N`, default 0 = skipped; 1,000,000 for the issue-13 figure): a fresh
   interpreter opens a compacted tenant of N posts, keeps a light durable update load
   going and runs one online compaction, while a timer task asks to wake every 1 ms and
   records its own lateness: the longest loop pause during the compaction, the next
   largest ones, the time spent in the cyclic GC, and the store's own cut/switch timings.
   With `--code DIR` (and `--code2 DIR2`) the same tenant is measured under each checkout
   in turn, so a before/after shares the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
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
    return {
        "id": i,
        "author_id": 1 + (i or 0) % 100,
        "title": f"post number {i} about {rnd.randrange(10**6)}",
        "body": "lorem ipsum dolor sit amet " * 4,
        "published": rnd.random() < 0.5,
        "score": round(rnd.random() * 100, 2),
        "tags": ["a", "b"],
    }


def _user(i: int) -> dict:
    return {
        "id": i,
        "email": f"u{i}@example.com",
        "name": f"user {i}",
        "age": 30,
        "role": "reader",
        "joined": "2026-01-01T00:00:00Z",
        "profile": None,
    }


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
            print(
                f"durable creates, {writers:2d} writers: {done / elapsed:8.0f} /s  "
                f"({fsyncs / max(done, 1):.3f} fsyncs per ack, {done / max(fsyncs, 1):.1f} acks per fsync, "
                f"{done / elapsed / base_rate:.1f}x baseline)"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def build_tenant(base: str, n: int) -> str:
    """A compacted tenant with 100 users and n posts, written as a snapshot directly."""
    from dbsvc.storage import Store, compact
    from dbsvc.storage.snapshot import ModelImage, SnapshotImage
    from dbsvc.storage.table import Table
    from dbsvc.storage.tenants import create_tenant

    tenant = create_tenant(base, f"n{n}")
    Store.open(tenant, BLOG.MODELS, BLOG.DESCRIPTION).close()  # log + schema.json
    rnd = random.Random(n)
    fields = list(BLOG.MODELS[1].fields)
    users = [[_user(i)[f] for f in BLOG.MODELS[0].fields] for i in range(1, 101)]
    posts = []
    for i in range(1, n + 1):
        p = _post(i, rnd)
        posts.append([p[f] for f in fields])
    keys = [Table(m).key_fields for m in BLOG.MODELS]  # what the store's own compaction writes
    image = SnapshotImage(
        compact.new_epoch(),
        n + 100,
        [
            ModelImage("User", list(BLOG.MODELS[0].fields), users, 100, keys[0]),
            ModelImage("BlogPost", fields, posts, n, keys[1]),
            ModelImage("Comment", list(BLOG.MODELS[2].fields), [], 0, keys[2]),
        ],
    )
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
t0, c0 = time.perf_counter(), time.process_time()
s = Store.open({tenant!r}, blog.MODELS, blog.DESCRIPTION)
opened, opened_cpu = time.perf_counter() - t0, time.process_time() - c0
after = rss()
q = Query(filters={{"published": frozenset([True])}}, sort=(("score", True),), limit=20)
times = []
for i in range(300):
    q2 = Query(filters=q.filters, sort=q.sort, limit=20, offset=(i % 5) * 20)
    t = time.perf_counter(); s.list_records("BlogPost", q2); times.append(time.perf_counter() - t)
s.close()
print(json.dumps({{"open_s": opened, "open_cpu_s": opened_cpu, "rss_bytes": after - before,
                  "list_p50_us": statistics.median(times) * 1e6}}))
"""


def bench_open(sizes: list[int], rounds: int = 1) -> None:
    """Open a compacted tenant of n posts in a fresh interpreter, `rounds` times (the same
    files each time); with several rounds a last line gives the medians."""
    base = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    try:
        for n in sizes:
            tenant = build_tenant(base, n)
            size = os.path.getsize(os.path.join(tenant, "snapshot"))
            results = []
            for _ in range(rounds):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD.format(root=ROOT, tenant=tenant)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                results.append(json.loads(out))
                _print_open(n, size, results[-1], "")
            if rounds > 1:
                median = {k: statistics.median(r[k] for r in results) for k in results[0]}
                _print_open(n, size, median, f" (median of {rounds})")
            shutil.rmtree(tenant, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _print_open(n: int, size: int, r: dict, note: str) -> None:
    print(
        f"{n:>9,} posts: open {r['open_s']:6.2f} s (CPU {r['open_cpu_s']:5.2f} s), "
        f"RSS +{r['rss_bytes'] / 2**20:7.1f} MiB "
        f"({r['rss_bytes'] / n:6.0f} bytes/record; snapshot {size / n:.0f} bytes/record), "
        f"list p50 (filter, sort, limit 20) {r['list_p50_us']:7.1f} us{note}"
    )


RESTART_CHILD = r"""
import asyncio, gc, json, random, sys, time
sys.path.insert(0, {code!r})
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
from dbsvc.compiler import compile_schema
from dbsvc.schema import load_schema
from dbsvc.storage import Store
blog = compile_schema(load_schema({schema!r}))
n, mode = {n}, {mode!r}
gc.collect()
before = rss()
t0 = time.perf_counter()
s = Store.open({tenant!r}, blog.MODELS, blog.DESCRIPTION, sync="off")
opened = time.perf_counter() - t0
if mode == "write":
    rnd = random.Random(n)
    def post(i, v):
        return {{"id": i, "author_id": 1, "title": f"post number {{i}} v{{v}} about {{rnd.randrange(10**6)}}",
                 "body": "lorem ipsum dolor sit amet " * 4, "published": rnd.random() < 0.5,
                 "score": round(rnd.random() * 100, 2), "tags": ["a", "b"]}}
    async def write():
        await s.insert("User", {{"id": 1, "email": "a@b.c", "name": "u", "age": 1, "role": "reader",
                                 "joined": "2026-01-01T00:00:00Z", "profile": None}})
        for v in (0, 1):
            for i in range(1, n + 1):
                if v == 0:
                    s.apply_insert("BlogPost", post(i, v))
                else:
                    s.apply_replace("BlogPost", i, post(i, v))
                if i % 1000 == 0:
                    await asyncio.sleep(0)
        log_bytes.append(s.stats()["log_bytes"])
        await s.aclose()                  # waits for a running compaction, then closes
    log_bytes = []
    asyncio.run(write())
else:
    log_bytes = [s.stats()["log_bytes"]]
    s.close()
gc.collect()
after = rss()
stats = s.stats()
print(json.dumps({{"open_s": opened, "rss_bytes": after - before, "log_bytes": log_bytes[0],
                  "compactions": s.compactions, "compacted_on_open": s.compacted_on_open,
                  "history_rows": stats["history_rows"]}}))
"""


def bench_restart(n: int, code: str) -> None:
    from dbsvc.storage.tenants import create_tenant

    base = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    try:
        tenant = create_tenant(base, "restart")
        schema = os.path.join(ROOT, "schemas", "blog.dbs")
        for mode in ("write", "open", "open"):
            out = subprocess.run(
                [sys.executable, "-c", RESTART_CHILD.format(code=code, schema=schema, n=n, mode=mode, tenant=tenant)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            r = json.loads(out)
            what = "live (wrote)" if mode == "write" else "restart (open)"
            print(
                f"{n:>9,} posts, {what:15s}: open {r['open_s']:6.2f} s, RSS +{r['rss_bytes'] / 2**20:7.1f} MiB, "
                f"log {r['log_bytes'] / 2**20:7.1f} MiB, history {r['history_rows']:,} rows, "
                f"online compactions {r['compactions']}, compacted on open {r['compacted_on_open']}"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


PAUSE_CHILD = r"""
import asyncio, gc, json, random, sys, time
sys.path.insert(0, {code!r})
from dbsvc.compiler import compile_schema
from dbsvc.schema import load_schema
from dbsvc.storage import Store, online
blog = compile_schema(load_schema({schema!r}))
n = {n}
s = Store.open({tenant!r}, blog.MODELS, blog.DESCRIPTION, sync="full")
gc_time = [0.0, 0.0, 0.0, 0]               # during the compaction: seconds in the cyclic GC,
def on_gc(phase, info, _t=[0.0]):          # recording?, longest collection, full collections
    if phase == "start":
        _t[0] = time.perf_counter()
    elif gc_time[1]:
        took = time.perf_counter() - _t[0]
        gc_time[0] += took
        gc_time[2] = max(gc_time[2], took)
        gc_time[3] += info["generation"] == 2
gc.callbacks.append(on_gc)

def start(store):
    begin = getattr(store, "start_compaction", None) or getattr(store, "compact_now", None)
    if begin is not None:
        return begin()
    progress = online.Progress()           # a checkout from before Store.start_compaction
    store._compaction_progress = progress
    store._compaction = asyncio.get_running_loop().create_task(store._compact(progress))
    return store._compaction

async def main():
    lateness = []
    recording = [False]
    stop = [False]
    async def timer():
        while not stop[0]:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            if recording[0]:
                lateness.append(time.perf_counter() - t - 0.001)
    async def writer():
        rnd = random.Random(1)
        while not stop[0]:
            i = rnd.randrange(1, n + 1)
            rec = dict(s.get("BlogPost", i)[0])
            rec["score"] = round(rnd.random() * 100, 2)
            _prev, _rec, durable = s.apply_replace("BlogPost", i, rec)
            await durable
    tasks = [asyncio.create_task(timer()), asyncio.create_task(writer())]
    await asyncio.sleep(0.5)
    recording[0] = True
    gc_time[1] = 1.0
    t0 = time.perf_counter()
    await start(s)
    took = time.perf_counter() - t0
    recording[0] = False
    gc_time[1] = 0.0
    stop[0] = True
    await asyncio.gather(*tasks)
    await s.aclose()
    lateness.sort(reverse=True)
    cut, switch = s.compaction_pauses[-1] if s.compaction_pauses else (0.0, 0.0)
    print(json.dumps({{"compactions": s.compactions, "took_s": took, "max_ms": lateness[0] * 1e3,
                      "top_ms": [round(x * 1e3, 1) for x in lateness[1:6]], "ticks": len(lateness),
                      "gc_ms": gc_time[0] * 1e3, "gc_max_ms": gc_time[2] * 1e3, "gc_full": gc_time[3], "cut_ms": cut * 1e3, "switch_ms": switch * 1e3}}))
asyncio.run(main())
"""


def bench_pause(n: int, codes: list[str]) -> None:
    """The loop's longest pause during one online compaction at n records (item 5 above)."""
    base = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    try:
        tenant = build_tenant(base, n)
        schema = os.path.join(ROOT, "schemas", "blog.dbs")
        for code in codes:
            out = subprocess.run(
                [sys.executable, "-c", PAUSE_CHILD.format(code=code, schema=schema, n=n, tenant=tenant)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(
                f"{n:>9,} posts, online compaction ({code}): took {r['took_s']:5.2f} s, longest loop pause "
                f"{r['max_ms']:6.1f} ms (next {r['top_ms']}), cyclic GC {r['gc_ms']:6.1f} ms "
                f"({r['gc_full']} full, longest {r['gc_max_ms']:5.1f} ms), "
                f"store's cut {r['cut_ms']:6.1f} ms + switch {r['switch_ms']:5.1f} ms, "
                f"{r['ticks']} timer ticks"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--skip-creates", action="store_true")
    parser.add_argument("--restart", type=int, default=200_000, help="posts for the restart figure (0 skips)")
    parser.add_argument("--code", default=ROOT, help="the dbsvc checkout the restart and pause figures run")
    parser.add_argument("--code2", default="", help="a second checkout for the pause figure (side by side)")
    parser.add_argument("--pause", type=int, default=0, help="posts for the compaction-pause figure (0 skips)")
    parser.add_argument("--skip-open", action="store_true")
    parser.add_argument("--rounds", type=int, default=1, help="opens per size, same files; the last line gives medians")
    args = parser.parse_args()
    if not args.skip_creates:
        bench_creates(args.seconds)
    if not args.skip_open:
        bench_open([int(x) for x in args.sizes.split(",") if x], args.rounds)
    if args.restart:
        bench_restart(args.restart, os.path.abspath(args.code))
    if args.pause:
        bench_pause(args.pause, [os.path.abspath(c) for c in (args.code, args.code2) if c])


if __name__ == "__main__":
    main()
