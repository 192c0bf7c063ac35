"""GET and list throughput of one tenant served by 1 and by 2 processes (`serve --workers N`).

    python bench/workers_bench.py [--records 20000] [--duration 5] [--rounds 3] [--connections 64]

1. Seeds a tenant with 1,000 users and `--records` blog posts through the Store API
   (service_bench.seed: fsync off for the seeding only).
2. For N = 1 (`dbsvc serve`, no flag: one process) and N = 2 (`dbsvc serve --workers 2`: a
   supervisor, a writer and a reader on one port) in turn, serves that tenant with default
   settings, unpinned, and loads it with wrk (`-t2`, `--connections`), unpinned as well: on
   a 2-core machine the servers and wrk share both cores, so N = 2 can at best use what wrk
   leaves of them. GET one record (`/api/blog-post/<middle id>`), the commonest list
   (`?published=true&sort=-score&limit=20`) and a durable POST (SERVICE_SYNC=full: with N = 2
   the connections that land on the reader are forwarded to the writer), `--rounds` rounds
   of `--duration` seconds each.
3. With N = 2, one connection to the writer and one to the reader (each found by asking a
   new connection's `/health` which worker it reached), `--writes` POSTs one after another
   on each: the p50 and p99 of a write answered by the writer itself and of one forwarded
   by the reader (answered once the reader has applied it).
4. Prints, per N and figure, the median requests/s of the rounds (and each round's), p50
   and p99, the server's CPU microseconds per request (every process of the tree: the
   supervisor and its workers, from /proc), and the tree's RSS after the load; plus the
   host's load average before each run, since other work shares the machine.

The CPU per request is the figure to scale from: N workers on C free cores answer at most
about min(N, C) / (CPU seconds per request) requests/s (bench/README.md, "Workers").
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from http_bench import process_cpu_seconds, run_wrk  # noqa: E402
from service_bench import POST_LUA, seed  # noqa: E402

SCHEMA = ROOT / "schemas" / "blog.dbs"
READY = re.compile(r"all \d+ workers ready on http://[^:]+:(\d+)|listening on http://[^:]+:(\d+) \(tenant")


def tree_pids(pid: int) -> list[int]:
    """`pid` and its descendants (the supervisor's workers), from /proc."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        for child in children:
            pids.extend(tree_pids(int(child)))
    return pids


def tree_cpu(pid: int) -> float:
    total = 0.0
    for each in tree_pids(pid):
        try:
            total += process_cpu_seconds(each)
        except FileNotFoundError:
            pass
    return total


def tree_rss_mb(pid: int) -> float:
    total = 0
    for each in tree_pids(pid):
        for line in Path(f"/proc/{each}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def start(data: Path, workers: int) -> tuple[subprocess.Popen, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update({"SERVICE_PORT": "0", "SERVICE_DATA": str(data), "RUST_LOG": "warn,dbsvc=info,dbsvc.http.request=warn"})
    command = [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(SCHEMA)]
    if workers > 1:
        command += ["--workers", str(workers)]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        match = READY.search(line)
        if match and (workers == 1 or match.group(1)):
            port = int(match.group(1) or match.group(2))
            import threading

            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
            return proc, port
    proc.kill()
    raise RuntimeError(f"dbsvc serve --workers {workers} did not start")


def measure_tree(proc: subprocess.Popen, url: str, duration: float, connections: int, script: str | None) -> dict:
    before = tree_cpu(proc.pid)
    result = run_wrk(url, duration=duration, connections=connections, threads=2, core="0-1", script=script)
    result["cpu_us_per_request"] = (tree_cpu(proc.pid) - before) / max(1, result["requests"]) * 1e6
    return result


def pinned_connection(port: int, label: str) -> http.client.HTTPConnection:
    """A keep-alive connection the worker `label` accepted (at most 400 tries)."""
    for _ in range(400):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/health")
        if json.loads(conn.getresponse().read())["worker"]["label"] == label:
            return conn
        conn.close()
    raise RuntimeError(f"no connection reached {label}")


def write_latency(port: int, label: str, writes: int) -> tuple[float, float]:
    """(p50, p99) in ms of `writes` sequential POSTs on one connection to `label`."""
    conn = pinned_connection(port, label)
    times = []
    for n in range(writes):
        body = json.dumps({"author_id": n % 1000 + 1, "title": f"lat {label} {n}", "body": "b", "score": 1.5})
        started = time.perf_counter()
        conn.request("POST", "/api/blog-post", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        times.append(time.perf_counter() - started)
        assert response.status == 201, response.status
    conn.close()
    times.sort()
    return times[len(times) // 2] * 1000, times[int(len(times) * 0.99)] * 1000


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--writes", type=int, default=300)
    args = parser.parse_args(argv)
    figures = {
        "GET one": (f"/api/blog-post/{args.records // 2}", None),
        "list": ("/api/blog-post?published=true&sort=-score&limit=20", None),
        "POST": ("/", "post.lua"),
    }
    with tempfile.TemporaryDirectory(prefix="dbsvc-workers-bench-") as tmp:
        data = Path(tmp) / "data"
        (Path(tmp) / "post.lua").write_text(POST_LUA)
        print(f"seeding {args.records} posts ...", flush=True)
        seed(data, args.records)
        print(f"cores: {os.cpu_count()}; wrk -t2 -c{args.connections}, unpinned, shares them with the servers")
        for workers in (1, 2):
            load = os.getloadavg()
            proc, port = start(data, workers)
            try:
                for name, (path, lua) in figures.items():
                    url = f"http://127.0.0.1:{port}{path}"
                    script = str(Path(tmp) / lua) if lua else None
                    run_wrk(url, duration=1, connections=args.connections, threads=2, core="0-1", script=script)
                    results = [
                        measure_tree(proc, url, args.duration, args.connections, script) for _ in range(args.rounds)
                    ]
                    rps = sorted(r["rps"] for r in results)
                    mid = results[[r["rps"] for r in results].index(rps[len(rps) // 2])]
                    cpu = sorted(r["cpu_us_per_request"] for r in results)[len(results) // 2]
                    errors = sum(r["errors"] for r in results)
                    print(
                        f"N={workers} {name:8s} {rps[len(rps) // 2]:9.0f} req/s (rounds {', '.join(f'{x:.0f}' for x in rps)})"
                        f"  p50 {mid.get('p50_ms', 0):6.2f} ms  p99 {mid.get('p99_ms', 0):6.2f} ms"
                        f"  cpu {cpu:6.1f} us/req  rss {tree_rss_mb(proc.pid):6.1f} MB"
                        f"  errors {errors}  load before {load[0]:.2f}",
                        flush=True,
                    )
                if workers > 1:
                    for label in ("writer", "reader-1"):
                        p50, p99 = write_latency(port, label, args.writes)
                        how = "answered by the writer" if label == "writer" else "forwarded by the reader"
                        print(f"N={workers} one connection, POST {how}: p50 {p50:.2f} ms  p99 {p99:.2f} ms", flush=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
