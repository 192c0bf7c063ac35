"""Durable writes, before and after, side by side (issue 13, items 5 and 7).

    python bench/tail_bench.py --code DIR [--records 100000] [--duration 5] [--rounds 3]
    python bench/tail_bench.py --code DIR --figures post,put,patch,delete --connections 64
    python bench/tail_bench.py --code DIR --figures patch --connections 64 --rounds 1 --log-mib 61

Seeds one tenant of `--records` posts (through the Store API, fsync off), then for 32 and
64 connections starts two servers on copies of it, one from the checkout `--code` (before)
and one from this one (after), both pinned to the same core, and loads both at once with
wrk (http_bench.side_by_side): each round's load on the shared machine is the same for both.
Prints req/s, CPU microseconds per request, p50, p99 and max of each, and the ratio of
after's requests/s to before's. `--figures` picks the writes (service_bench's wrk scripts;
default POST). `--schema` picks the posts' schema: `peers` (bench/peers_blog.dbs, the
issue's, the default) or `search` (schemas/blog.dbs, whose title and body are `@search`).
`--log-mib N` grows the seeded tenant's log to N MiB first (replaces through the Store API,
fsync off), so that each server's online compaction (at 64 MiB) lands inside its first round:
the compactions each server logged are printed with its figures (PATCH writes ~845 bytes
of log a request, bench/README.md wt-wr2). Why side by side: this machine is shared with other jobs,
and back-to-back runs of the same server differ by more than the effect measured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from http_bench import side_by_side, start_dbsvc, stop_server  # noqa: E402
from service_bench import WRITE_SCHEMAS, script_for, seed  # noqa: E402   the same tenants and writes as the throughput figures


def start(code: Path, data: Path, schema: Path) -> tuple[subprocess.Popen, str, list[str]]:
    """`CODE/dbsvc.py serve SCHEMA` on port 0 over `data`, durable, pinned to the server core:
    the process, its URL and its log lines (http_bench.start_dbsvc)."""
    proc, port, lines = start_dbsvc({"SERVICE_DATA": str(data), "SERVICE_SYNC": "full"}, schema, code=code)
    return proc, f"http://127.0.0.1:{port}", lines


def grow(seeded: Path, records: int, mib: float, schema: Path) -> None:
    """Replace posts at random (a new score each) until the tenant's log is `mib` MiB."""
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.storage import Store

    module = compile_schema(load_schema(str(schema)))
    store = Store.open(str(seeded / "default"), module.MODELS, module.DESCRIPTION, sync="off")
    log_path = seeded / "default" / "log"
    rng = random.Random(5)

    async def fill() -> None:
        while log_path.stat().st_size < mib * (1 << 20):
            waits = []
            for _ in range(1000):
                key = rng.randint(1, records)
                record = dict(store.get("BlogPost", key)[0] or {})
                record["score"] = rng.randint(0, 99) + 0.25
                waits.append(store.apply_replace("BlogPost", key, record)[2])
            await asyncio.gather(*waits)
        await store.aclose()

    asyncio.run(fill())


def compare(
    tmp: Path, seeded: Path, figure_name: str, connections: int, before_code: Path, args: argparse.Namespace
) -> None:
    """One write figure at `connections`: both checkouts on copies of the seeded tenant, each
    loaded by its own wrk (its own copy of the script: DELETE's walk keeps its state there)."""
    servers, scripts = [], []
    for name, code in (("before", before_code), ("after", ROOT)):
        data = tmp / f"{name}-{figure_name}-{connections}"
        shutil.copytree(seeded, data)
        servers.append(start(code, data, WRITE_SCHEMAS[args.schema][0]))
        workdir = tmp / f"{name}-{figure_name}-{connections}-script"
        workdir.mkdir()
        scripts.append(script_for(workdir, figure_name, args.records))
    try:
        (before, before_url, _), (after, after_url, _) = servers
        figure = side_by_side(
            (before, f"{before_url}/api/blog-post"),
            (after, f"{after_url}/api/blog-post"),
            rounds=args.rounds,
            duration=args.duration,
            connections=connections,
            script=scripts[1],
            baseline_script=scripts[0],
        )
    finally:
        for proc, _url, _lines in servers:
            stop_server(proc)
    for name, key in (("before", "base"), ("after", "subject")):
        r = figure[key]
        print(
            f"{figure_name:6s} c{connections:<3d} {name:6s}: {r['rps']:6.0f} req/s  "
            f"cpu {r['cpu_us_per_request']:4.0f} us/req  p50 {r['p50_ms']:6.2f} ms  "
            f"p99 {r['p99_ms']:7.2f} ms  max {r['max_ms']:7.2f} ms  p99/p50 "
            f"{r['p99_ms'] / max(r['p50_ms'], 1e-9):5.1f}  errors {r['errors']}"
        )
    for name, (_proc, _url, lines) in zip(("before", "after"), servers):
        for line in lines:  # a compaction in a round costs that round (bench/README.md, wt-wr2)
            if "compacted online" in line:
                print(f"compaction ({name}): {line.strip()}")
    print(
        f"{figure_name:6s} c{connections:<3d} after/before req/s {figure['ratio']:.2f} "
        f"(rounds in time order {', '.join(f'{r:.2f}' for r in figure['in_order'])})"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", required=True, help="the checkout measured as 'before'")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", default="32,64")
    parser.add_argument("--figures", default="post", help="comma list of post, put, patch, delete")
    parser.add_argument("--schema", default="peers", choices=sorted(WRITE_SCHEMAS), help="the posts' schema")
    parser.add_argument("--log-mib", type=float, default=0, help="grow the tenant's log to this many MiB first")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dbsvc-tail-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        seeded = Path(tmp) / "seed"
        seed(seeded, args.records, schema=WRITE_SCHEMAS[args.schema][0])
        if args.log_mib:
            grow(seeded, args.records, args.log_mib, WRITE_SCHEMAS[args.schema][0])
        for figure_name in args.figures.split(","):
            for connections in [int(c) for c in args.connections.split(",")]:
                compare(Path(tmp), seeded, figure_name, connections, Path(args.code).resolve(), args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
