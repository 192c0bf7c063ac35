"""What a forked snapshot writer would cost a 1,000,000-record store, against the paced
snapshot thread it would replace (issue 36 item 3; docs/decisions.md, wt-rel's design).

    PYTHONPATH=. python bench/fork_cost.py DATA [--rounds 3] [--writers 64]

DATA is a tenant of the peers' blog posts (/tmp/pristine-1m); it is copied to `FORK_COST_DIR`
(default /tmp/fork-cost) and opened in process with SERVICE_SYNC=full, its heap settled as
a server's is (`settle_heap`: frozen, advised for huge pages). Then, per round:

1. the fork alone: `os.fork()` timed in the parent (the loop would pay it), the child
   leaving at once (`os._exit`), five times;
2. the same cut's snapshot written twice, the two ways alternating, into a scratch
   directory, while `--writers` coroutines replace random posts durably and a ticker
   measures the loop's lateness every millisecond: (a) `thread`, today's paced thread
   (`online.write_snapshot` in `asyncio.to_thread`, the writes noting what they replace);
   (b) `fork`, a child forked at the cut writing it unpaced at nice 10 and leaving with
   `os._exit(0)`, the parent waiting in a thread. For each: the step's wall seconds, the
   writes' p50 / p99 / max, the loop's largest lateness, the parent's minor page faults
   meanwhile (copy-on-write and ordinary faults both; 4 KiB a fault) and, for the child,
   its own minor faults (every page whose refcounts the child touched is copied) and CPU.

Nothing here is the product: the fork is the bench's own, to decide whether to build it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def writes_during(store: Any, writers: int, records: int, step: Any) -> dict[str, Any]:
    """Run `step()` (a coroutine) while `writers` coroutines replace random posts and a
    ticker notes the loop's lateness; returns the figures of the module docstring."""
    rng = random.Random(5)
    latencies: list[float] = []
    late = [0.0]
    done = asyncio.Event()

    async def writer() -> None:
        while not done.is_set():
            i = rng.randint(1, records)
            record = dict(store.get("BlogPost", i)[0])
            record["score"] = rng.randint(0, 99) + 0.25
            start = time.perf_counter()
            await store.replace("BlogPost", i, record)
            latencies.append(time.perf_counter() - start)

    async def ticker() -> None:
        while not done.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            late[0] = max(late[0], time.perf_counter() - start - 0.001)

    tasks = [asyncio.create_task(writer()) for _ in range(writers)] + [asyncio.create_task(ticker())]
    await asyncio.sleep(1.0)  # the writers' steady state before the step
    before = list(latencies)
    latencies.clear()
    late[0] = 0.0
    minflt = faults()
    start = time.perf_counter()
    extra = await step()
    wall = time.perf_counter() - start
    minflt = faults() - minflt
    done.set()
    await asyncio.gather(*tasks)
    ordered = sorted(latencies)
    return {
        "wall s": round(wall, 2),
        "writes": len(ordered),
        "p50 before ms": round(statistics.median(before) * 1e3, 1) if before else None,
        "p50 / p99 / max ms": (
            f"{ordered[len(ordered) // 2] * 1e3:.1f} / {ordered[int(len(ordered) * 0.99)] * 1e3:.1f} / {ordered[-1] * 1e3:.1f}"
        ),
        "loop late max ms": round(late[0] * 1e3, 1),
        "parent minflt": minflt,
        **extra,
    }


def child_writes(scratch: str, cut: Any) -> None:
    """In the forked child: the snapshot, unpaced, at nice 10; never returns."""
    from dbsvc.storage import files, online

    try:
        os.nice(10)
        online.PACE = 0.0
        cpu = time.process_time()
        online.write_snapshot(scratch, cut, online.Progress(), files.NO_FAULTS)
        Path(scratch, "child").write_text(f"{time.process_time() - cpu:.2f}")
    except BaseException:
        os._exit(1)
    os._exit(0)


async def round_of(store: Any, scratch: str, mode: str, writers: int, records: int) -> dict[str, Any]:
    from dbsvc.storage import online

    tables = dict(store.tables)
    compactor = store.compactor

    async def step() -> dict[str, Any]:
        cut = online.take_cut(tables, store.applied_offset, 0)
        if mode == "thread":
            compactor.cut = {tc.table.name: tc for tc in cut.tables}
            try:
                await asyncio.to_thread(online.write_snapshot, scratch, cut, online.Progress(), store.compactor.faults)
            finally:
                compactor.cut = None
                online.end_cut(tables)
            return {}
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            child_writes(scratch, cut)
        forked = time.perf_counter() - start
        online.end_cut(tables)  # the child's memory is the image: the parent's writes note nothing
        _pid, status, usage = await asyncio.to_thread(os.wait4, pid, 0)
        return {
            "fork ms": round(forked * 1e3, 1),
            "exit": os.waitstatus_to_exitcode(status),
            "child CPU s": Path(scratch, "child").read_text(),
            "child minflt": usage.ru_minflt,
            "child maxrss MB": round(usage.ru_maxrss / 1024),
        }

    return await writes_during(store, writers, records, step)


async def run(data: Path, rounds: int, writers: int) -> None:
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.service import settle_heap
    from dbsvc.storage import Store

    module = compile_schema(load_schema(str(HERE / "peers_blog.dbs")))
    start = time.perf_counter()
    store = Store.open(str(data / "default"), module.MODELS, module.DESCRIPTION, sync="full", replication=True)
    settle_heap()
    records = len(store.tables["BlogPost"].live)
    print(f"opened {records} posts in {time.perf_counter() - start:.0f} s, RSS {rss_mb():.0f} MB", flush=True)
    scratch = str(data / "scratch")
    os.makedirs(scratch, exist_ok=True)
    for r in range(rounds):
        spans = []
        for _ in range(5):
            t0 = time.perf_counter()
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            spans.append((time.perf_counter() - t0) * 1e3)
            os.waitpid(pid, 0)
        print(f"round {r + 1}: fork alone ms {' '.join(f'{s:.1f}' for s in spans)}", flush=True)
        for mode in ("fork", "thread") if r % 2 == 0 else ("thread", "fork"):
            gc.collect(0)
            figures = await round_of(store, scratch, mode, writers, records)
            load = Path("/proc/loadavg").read_text().split()[0]
            print(f"round {r + 1} {mode}: {figures} load {load}", flush=True)
    await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writers", type=int, default=64)
    args = parser.parse_args()
    sys.path[:0] = [str(HERE)]
    from dbsvc.logs import configure_logging

    configure_logging("warn", "text", stream=open(os.devnull, "w"))  # noqa: SIM115
    copy = Path(os.environ.get("FORK_COST_DIR", "/tmp/fork-cost"))
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(args.data, copy)
    try:
        asyncio.run(run(copy, args.rounds, args.writers))
    finally:
        shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    main()
