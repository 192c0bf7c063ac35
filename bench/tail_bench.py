"""Tail latency of durable POST, before and after, side by side (issue 13, item 5).

    python bench/tail_bench.py --code DIR [--records 100000] [--duration 5] [--rounds 3]

Seeds one tenant of `--records` posts (through the Store API, fsync off), then for 32 and
64 connections starts two servers on copies of it, one from the checkout `--code` (before)
and one from this one (after), both pinned to the same core, and loads both at once with
wrk (http_bench.side_by_side): each round's load on the shared machine is the same for both.
Prints p50, p99 and max of each. Why side by side: this machine is shared with other jobs,
and back-to-back runs of the same server differ by more than the effect measured.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from http_bench import side_by_side, start_dbsvc, stop_server  # noqa: E402
from service_bench import POST_LUA, seed  # noqa: E402   the same tenant and POST as the throughput figure

SCHEMA = ROOT / "schemas" / "blog.dbs"


def start(code: Path, data: Path) -> tuple[subprocess.Popen, str]:
    """`CODE/dbsvc.py serve` on port 0 over `data`, durable, pinned to the server core."""
    proc, port, _log = start_dbsvc({"SERVICE_DATA": str(data), "SERVICE_SYNC": "full"}, SCHEMA, code=code)
    return proc, f"http://127.0.0.1:{port}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", required=True, help="the checkout measured as 'before'")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", default="32,64")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dbsvc-tail-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        seeded = Path(tmp) / "seed"
        seed(seeded, args.records)
        script = Path(tmp) / "post.lua"
        script.write_text(POST_LUA)
        for connections in [int(c) for c in args.connections.split(",")]:
            servers = []
            for name, code in (("before", Path(args.code).resolve()), ("after", ROOT)):
                data = Path(tmp) / f"{name}-{connections}"
                shutil.copytree(seeded, data)
                servers.append(start(code, data))
            try:
                (before, before_url), (after, after_url) = servers
                figure = side_by_side((before, f"{before_url}/api/blog-post"), (after, f"{after_url}/api/blog-post"),
                                      rounds=args.rounds, duration=args.duration, connections=connections,
                                      script=str(script), baseline_script=str(script))
            finally:
                for proc, _url in servers:
                    stop_server(proc)
            for name, key in (("before", "base"), ("after", "subject")):
                r = figure[key]
                print(f"c{connections:<3d} {name:6s}: {r['rps']:6.0f} req/s  p50 {r['p50_ms']:6.2f} ms  "
                      f"p99 {r['p99_ms']:7.2f} ms  max {r['max_ms']:7.2f} ms  p99/p50 "
                      f"{r['p99_ms'] / max(r['p50_ms'], 1e-9):5.1f}  errors {r['errors']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
