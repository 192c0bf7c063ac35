"""`POST /batch` against single POSTs: records/s of durable creates at 64, 8 and 1 connections.

    python bench/batch_bench.py [--duration 5] [--connections 64,8,1] [--sizes 1,10,100]

Starts `dbsvc serve schemas/blog.dbs` (SERVICE_SYNC=full: every answer after its fsync) on
a fresh tenant pinned to core 0, seeds 1,000 users with one batch, then loads it with wrk
(pinned to core 1) for `--duration` seconds per figure: for each connection count of
`--connections`, single `POST /api/blog-post`, then `POST /batch` of N blog-post creates for
each N of `--sizes`, all in one run against one server. A figure is records/s (for
a batch, requests/s times N), the answers' p50/p99, and the server's CPU microseconds per
record. The server's shutdown summary gives acknowledged writes per fsync over the whole
run. `--against CHECKOUT` starts a second server from another checkout (a before, e.g.
`git worktree add /tmp/before HEAD~3` or a `git archive` of it) and measures each figure
on both in turn, so a before/after meets the same load of a shared host. Figures go to
bench/README.md ("Batches").
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from http_bench import measure, start_dbsvc, stop_server  # noqa: E402

SUMMARY = re.compile(r"storage: (\d+) writes acknowledged, (\d+) fsyncs")
USERS = 1000

SINGLE_LUA = """
counter = 0
request = function()
  counter = counter + 1
  local body = string.format('{"author_id": %d, "title": "single %d", "body": "b", "score": 1.5}',
                             (counter % 1000) + 1, counter)
  return wrk.format("POST", "/api/blog-post", {["Content-Type"] = "application/json"}, body)
end
"""

BATCH_LUA = """
counter = 0
request = function()
  local ops = {}
  for i = 1, SIZE do
    counter = counter + 1
    ops[i] = string.format('{"op": "create", "model": "blog-post", "record": '
      .. '{"author_id": %d, "title": "batch %d", "body": "b", "score": 1.5}}', (counter % 1000) + 1, counter)
  end
  local body = '{"ops": [' .. table.concat(ops, ",") .. ']}'
  return wrk.format("POST", "/batch", {["Content-Type"] = "application/json"}, body)
end
"""


def seed_users(port: int) -> None:
    ops = [
        {"op": "create", "model": "user", "record": {"email": f"u{i}@bench.io", "name": f"user {i}"}}
        for i in range(USERS)
    ]
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/batch", json.dumps({"ops": ops}).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert reply.status == 200


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--connections", default="64,8,1", help="comma-separated connection counts")
    parser.add_argument("--sizes", default="1,10,100")
    parser.add_argument(
        "--against", metavar="CHECKOUT", help="another checkout (a before), measured figure by figure beside this one"
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    counts = [int(c) for c in args.connections.split(",")]
    trees = [("this", ROOT)] + ([("against", Path(args.against).resolve())] if args.against else [])
    figures = [("single POST", 1, SINGLE_LUA)] + [
        (f"POST /batch of {n}", n, BATCH_LUA.replace("SIZE", str(n))) for n in sizes
    ]
    with tempfile.TemporaryDirectory() as work:
        servers = []
        rows: list[tuple[str, int, str, float]] = []
        try:
            for tag, code in trees:
                data = Path(work) / tag / "data"
                (data / "default").mkdir(parents=True)
                env = {"SERVICE_DATA": str(data), "SERVICE_SYNC": "full", "RUST_LOG": "info"}
                proc, port, log = start_dbsvc(env, code=code)
                servers.append((tag, proc, port, log))
                seed_users(port)
            for connections in counts:
                for name, n, lua in figures:
                    script = Path(work) / f"{n}-{len(rows)}.lua"
                    script.write_text(lua)
                    # Each server in turn, figure by figure: both meet the same load of the host.
                    for tag, proc, port, _log in servers:
                        result = measure(
                            proc, f"http://127.0.0.1:{port}/", args.duration, connections, script=str(script)
                        )
                        records = result["rps"] * n
                        rows.append((tag, connections, name, records))
                        print(
                            f"{tag:7s} {connections:3d} conn  {name:20s} {result['rps']:8.0f} req/s "
                            f"{records:9.0f} records/s  p50 {result.get('p50_ms', 0):7.2f} ms  "
                            f"p99 {result.get('p99_ms', 0):7.2f} ms  "
                            f"cpu {result['cpu_us_per_request'] / n:6.1f} us/record  errors {result.get('errors', 0)}",
                            flush=True,
                        )
        finally:
            for _tag, proc, _port, _log in servers:
                stop_server(proc)
        for tag, _proc, _port, log in servers:
            summary = SUMMARY.search("".join(log))
            if summary:
                writes, fsyncs = int(summary.group(1)), int(summary.group(2))
                print(
                    f"{tag:7s} writes acknowledged {writes}, fsyncs {fsyncs}: {writes / max(fsyncs, 1):.1f} per fsync"
                )
        singles = {(tag, c): records for tag, c, name, records in rows if name == "single POST"}
        for tag, connections, name, records in rows:
            if name != "single POST":
                ratio = records / singles[(tag, connections)]
                print(f"{tag:7s} {connections:3d} conn  {name:20s} {ratio:5.2f}x the single POSTs' records/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
