"""The service's HTTP figures of contract section 7, as ratios to the canned server in one run.

    python bench/service_bench.py [--records 100000] [--duration 10] [--connections 64]

1. Seeds a tenant with 1,000 users and N blog posts through the Store API directly
   (SERVICE_SYNC=off for the seeding only), so seeding does not dominate the run.
2. Measures the canned server (`bench/canned_server.py`, the same h11/asyncio layer).
3. Serves the tenant with `python dbsvc.py serve schemas/blog.dbs`, pinned to core 0
   (wrk on core 1), default settings (SERVICE_SYNC=full, RUST_LOG=info to /dev/null), and runs
   GET one record, list (filter + sort + limit 20), durable POST and PUT with wrk.
4. Stops the server and reads its shutdown summary to count fsyncs per acknowledged write.

Targets (contract section 7): GET one >= 75% of canned; list >= 50%; durable creates with 64
connections >= 40% with at most one fsync per 8 acknowledged writes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from http_bench import canned_baseline, measure, start_dbsvc  # noqa: E402

SCHEMA = ROOT / "schemas" / "blog.dbs"
SUMMARY = re.compile(r"storage: (\d+) writes acknowledged, (\d+) fsyncs")


def seed(data_dir: Path, posts: int, users: int = 1000) -> None:
    """Write the tenant `default` through the Store API with fsync off."""
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.storage import Store, tenants

    module = compile_schema(load_schema(str(SCHEMA)))
    directory = tenants.create_tenant(str(data_dir), "default")
    store = Store.open(str(directory), module.MODELS, module.DESCRIPTION, sync="off")
    user, post = module.BY_NAME["User"], module.BY_NAME["BlogPost"]
    rng = random.Random(7)

    async def fill() -> None:
        for i in range(users):
            await store.insert("User", user.validate_create({"email": f"u{i}@bench.io", "name": f"user {i}"}))
        for i in range(posts):
            body = {"author_id": rng.randint(1, users), "title": f"post {i}", "body": "lorem ipsum " * 8,
                    "published": rng.random() < 0.5, "score": round(rng.random() * 100, 2)}
            await store.insert("BlogPost", post.validate_create(body))
        await store.aclose()

    asyncio.run(fill())


def lua(workdir: Path, name: str, text: str) -> str:
    path = workdir / name
    path.write_text(text)
    return str(path)


POST_LUA = """
counter = 0
request = function()
  counter = counter + 1
  local body = string.format('{"author_id": %d, "title": "bench %d-%d", "body": "b", "score": 1.5}',
                             (counter % 1000) + 1, math.random(1, 1000000000), counter)
  return wrk.format("POST", "/api/blog-post", {["Content-Type"] = "application/json"}, body)
end
"""

PUT_LUA = """
request = function()
  local id = math.random(1, %d)
  local body = string.format('{"author_id": %%d, "title": "put %%d", "body": "b", "score": 2.5}',
                             (id %% 1000) + 1, id)
  return wrk.format("PUT", "/api/blog-post/" .. id, {["Content-Type"] = "application/json"}, body)
end
"""


def report(name: str, result: dict, base: dict, target: float | None) -> None:
    ratio = result["rps"] / base["rps"] if base["rps"] else 0.0
    goal = f"  (target >= {target:.0%})" if target else ""
    print(f"{name:<34} {result['rps']:8.0f} req/s  p50 {result.get('p50_ms', 0):7.2f} ms  "
          f"p99 {result.get('p99_ms', 0):7.2f} ms  cpu {result.get('cpu_us_per_request', 0):5.0f} us/req  "
          f"ratio {ratio:5.1%}{goal}  errors {result.get('errors', 0)}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--log-level", default="info", help="RUST_LOG for the measured server")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="dbsvc-service-bench-") as tmp:
        data = Path(tmp) / "data"
        started = time.perf_counter()
        seed(data, args.records)
        print(f"seeded {args.records} posts in {time.perf_counter() - started:.1f} s")
        base = canned_baseline(duration=args.duration, connections=args.connections)
        report("canned server", base, base, None)

        proc, port, log = start_dbsvc({"SERVICE_DATA": str(data), "RUST_LOG": args.log_level})
        url = f"http://127.0.0.1:{port}"
        try:
            middle = args.records // 2
            measure(proc, f"{url}/api/blog-post/{middle}", duration=2, connections=args.connections)
            report("GET one", measure(proc, f"{url}/api/blog-post/{middle}", args.duration, args.connections),
                   base, 0.75)
            report("list filter+sort+limit 20",
                   measure(proc, f"{url}/api/blog-post?published=true&sort=-score&limit=20",
                           args.duration, args.connections), base, 0.50)
            report("POST durable (SERVICE_SYNC=full)",
                   measure(proc, url, args.duration, args.connections, script=lua(Path(tmp), "post.lua", POST_LUA)),
                   base, 0.40)
            report("PUT durable",
                   measure(proc, url, args.duration, args.connections,
                           script=lua(Path(tmp), "put.lua", PUT_LUA % args.records)), base, None)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        time.sleep(0.2)
        summary = next((SUMMARY.search(line) for line in log if SUMMARY.search(line)), None)
        if summary:
            writes, fsyncs = int(summary.group(1)), int(summary.group(2))
            print(f"group commit: {writes} acknowledged writes, {fsyncs} fsyncs, "
                  f"{writes / max(fsyncs, 1):.1f} writes per fsync (target >= 8)")
        print(f"load average: {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
