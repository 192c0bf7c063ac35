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

`--in-process` measures the write path without HTTP instead, in a child process per
checkout (this one, and `--against`'s, alternating `--runs` times), by CPU time
(`time.process_time`: on a shared host the steadiest figure): over 1,000 users and at
SERVICE_SYNC=off, N single creates (body decode, validation, `Store.apply_insert`) and N
patches of random posts (get, decode, merge, `apply_replace`) of the peers' blog post
(service_bench.BODY), then N / 100 batches of 100 creates through `BatchRoute.answer`
against the same records through `Store.insert_batch` (import's path).
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
if "--in-process-child" in sys.argv:  # that checkout's dbsvc first (the bench's own helpers stay this one's)
    sys.path.insert(0, sys.argv[sys.argv.index("--in-process-child") + 1])

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


def in_process(records: int) -> dict[str, float]:
    """Microseconds of CPU per op of each in-process figure (module docstring), for the
    dbsvc first on sys.path."""
    import asyncio
    import random
    import time

    from service_bench import BODY

    from dbsvc.access import Access, Refusals
    from dbsvc.batchops import BatchRoute
    from dbsvc.bodies import decode_body
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.storage import Store, tenants

    module = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
    post, user = module.BY_NAME["BlogPost"], module.BY_NAME["User"]
    rng = random.Random(1)

    def text(i: int) -> str:
        return json.dumps(
            {"author_id": i % USERS + 1, "title": f"bench {i}", "body": BODY, "score": rng.randint(0, 99) + 0.5}
        )

    creates = [text(i) for i in range(records)]
    patches = [json.dumps({"score": rng.randint(0, 99) + 0.25}) for _ in range(records)]
    ids = [rng.randint(1, records) for _ in range(records)]
    batches = [
        json.dumps(
            {
                "ops": [
                    {"op": "create", "model": "blog-post", "record": json.loads(text(b * 100 + i))} for i in range(100)
                ]
            }
        )
        for b in range(records // 100)
    ]
    rows = [[json.loads(text(b * 100 + i)) for i in range(100)] for b in range(records // 100)]
    out: dict[str, float] = {}

    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            store = Store.open(
                str(tenants.create_tenant(tmp, "default")), module.MODELS, module.DESCRIPTION, sync="off"
            )
            store.insert_batch(
                [("User", user.validate_create({"email": f"u{i}@b.io", "name": f"u{i}"})) for i in range(USERS)]
            )
            route = BatchRoute(dict(module.ROUTES), Access(Refusals()))
            started = time.process_time()
            for body in creates:
                store.apply_insert("BlogPost", post.validate_create(decode_body(body)))
            out["single create"] = (time.process_time() - started) / len(creates) * 1e6
            await asyncio.sleep(0)
            started = time.process_time()
            for body, key in zip(patches, ids):
                current, _watermark = store.get("BlogPost", key)
                store.apply_replace("BlogPost", key, post.validate_patch(decode_body(body), current))
            out["single patch"] = (time.process_time() - started) / len(patches) * 1e6
            await asyncio.sleep(0)
            started = time.process_time()
            for body in batches:
                await route.answer(store, decode_body(body)).future
            out["batch of 100, a record"] = (time.process_time() - started) / (100 * len(batches)) * 1e6
            started = time.process_time()
            for chunk in rows:
                store.insert_batch([("BlogPost", post.validate_create(r)) for r in chunk])
            out["insert_batch (import), a record"] = (time.process_time() - started) / (100 * len(rows)) * 1e6
            await store.aclose()

    asyncio.run(run())
    return out


def compare_in_process(trees: list[tuple[str, Path]], records: int, runs: int) -> None:
    """`--in-process`: each checkout's figures in a child process of its own, alternating."""
    import subprocess

    figures: dict[str, dict[str, list[float]]] = {tag: {} for tag, _code in trees}
    for _run in range(runs):
        for tag, code in trees:
            done = subprocess.run(
                [sys.executable, __file__, "--in-process-child", str(code), "--records", str(records)],
                capture_output=True,
                text=True,
                check=True,
            )
            for name, value in json.loads(done.stdout).items():
                figures[tag].setdefault(name, []).append(value)
    for name in figures[trees[0][0]]:
        cells = "   ".join(f"{tag} {', '.join(f'{v:.1f}' for v in figures[tag][name])}" for tag, _code in trees)
        print(f"{name:34s} us: {cells}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--connections", default="64,8,1", help="comma-separated connection counts")
    parser.add_argument("--sizes", default="1,10,100")
    parser.add_argument(
        "--against", metavar="CHECKOUT", help="another checkout (a before), measured figure by figure beside this one"
    )
    parser.add_argument("--in-process", action="store_true", help="the write path without HTTP, CPU us per op")
    parser.add_argument(
        "--records", type=int, default=20_000, help="--in-process: creates, patches and batched records"
    )
    parser.add_argument("--runs", type=int, default=2, help="--in-process: runs per checkout, alternating")
    parser.add_argument("--in-process-child", metavar="CHECKOUT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.in_process_child:
        print(json.dumps(in_process(args.records)))
        return 0
    if args.in_process:
        trees = [("this", ROOT)] + ([("against", Path(args.against).resolve())] if args.against else [])
        compare_in_process(trees, args.records, args.runs)
        return 0
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
