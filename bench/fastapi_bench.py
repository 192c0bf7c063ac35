"""Durable write latency beside FastAPI + SQLite doing the same work (issue 13, item 5).

    python bench/fastapi_bench.py [--records 20000] [--duration 3] [--rounds 3] [--variant async|sync|both]

Issue 13 item 5 says "a single-connection durable POST should cost little more than its
fsync; today 0.8 ms p50 where FastAPI + SQLite async answers in 0.6 ms". This script
measures that yardstick on this machine instead of quoting it:

1. Seeds the same 1,000 users and N blog posts (service_bench.seed's generator, seed 7)
   into a dbsvc tenant (through the Store API, fsync off) and into a SQLite file
   (executemany, one transaction), copied once per FastAPI variant.
2. Starts `dbsvc serve schemas/blog.dbs` (SERVICE_SYNC=full, RUST_LOG=info by default) and
   `bench/fastapi_sqlite_app.py` (FastAPI under uvicorn's defaults, SQLite in WAL mode with
   synchronous=FULL, one INSERT + COMMIT per POST: the same durability), both pinned to
   core 0, wrk on core 1. `--variant async` is aiosqlite behind `async def` endpoints,
   `sync` plain sqlite3 behind `def` endpoints (Starlette's thread pool); `both` runs the
   figures once per variant. Before loading, one POST of the wrk script's shape and one GET
   go to each server and must answer 201 and 200.
3. Figures, each server with service_bench's wrk scripts (the same POST body for both):
   - POST, one connection: the two servers alone, one after the other, `--rounds` times
     (alternating, so both see the same stretch of the host); the median of rounds of
     req/s, p50, p99 and server CPU per request, beside the p50 of one 200-byte append +
     fsync on the same disk (service_bench.fsync_p50_ms). Not side by side: at one
     connection the figure is latency, and a second busy server on the core would be in it.
   - POST and GET one record, 64 connections: each server alone (req/s, p50, p99, max,
     CPU per request), then `--rounds` rounds side by side (http_bench.side_by_side: both on
     one core, each with its own wrk, so the host's drift is the same for both); the figure
     is the median of the per-round ratios of requests/s, dbsvc / FastAPI.
4. Counts the rows each SQLite file gained against the 2xx POSTs wrk saw, and reads
   dbsvc's shutdown summary for acknowledged writes per fsync (dbsvc commits in groups;
   the FastAPI app fsyncs once per POST, as one connection's commits must).

Versions of FastAPI, Starlette, pydantic, uvicorn, uvloop, httptools, aiosqlite and SQLite
are printed first; the app prints the event loop and HTTP protocol uvicorn picked.
`pip install fastapi 'uvicorn[standard]' aiosqlite` brings them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from fastapi_sqlite_app import create_schema  # noqa: E402
from http_bench import measure, side_by_side, start_dbsvc, start_server, stop_server  # noqa: E402
from service_bench import fsync_p50_ms, group_commit, script_for, seed  # noqa: E402

APP = ROOT / "bench" / "fastapi_sqlite_app.py"
USERS = 1000
VARIANTS = {"async": "aiosqlite, async def endpoints", "sync": "sqlite3, def endpoints in the thread pool"}


def versions() -> str:
    parts = [f"python {sys.version.split()[0]}"]
    for name in ("fastapi", "starlette", "pydantic", "uvicorn", "uvloop", "httptools", "aiosqlite"):
        try:
            parts.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{name} (not installed)")
    parts.append(f"SQLite {sqlite3.sqlite_version}")
    return ", ".join(parts)


def seed_sqlite(path: Path, posts: int, users: int = USERS) -> None:
    """The same users and posts as service_bench.seed (same generator, same order, ids 1..N)."""
    create_schema(str(path))
    rng = random.Random(7)
    joined = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows = []
    for i in range(posts):
        rows.append(
            (rng.randint(1, users), f"post {i}", "lorem ipsum " * 8, rng.random() < 0.5, round(rng.random() * 100, 2))
        )
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        conn.executemany(
            "INSERT INTO user (email, name, joined) VALUES (?, ?, ?)",
            ((f"u{i}@bench.io", f"user {i}", joined) for i in range(users)),
        )
        conn.executemany(
            "INSERT INTO blog_post (author_id, title, body, published, score) VALUES (?, ?, ?, ?, ?)", rows
        )
        conn.commit()
    finally:
        conn.close()


def post_count(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM blog_post").fetchone()[0]
    finally:
        conn.close()


def preflight(name: str, url: str, get_id: int) -> str:
    """One POST of the wrk script's shape and one GET; both must succeed."""
    body = json.dumps({"author_id": 1, "title": "bench preflight", "body": "b", "score": 1.5}).encode()
    request = urllib.request.Request(
        f"{url}/api/blog-post", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            status, text = answer.status, answer.read().decode()
        with urllib.request.urlopen(f"{url}/api/blog-post/{get_id}", timeout=10) as answer:
            got = answer.status
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"{name}: preflight failed: {exc.code} {exc.read().decode()[:300]}") from None
    if status != 201 or got != 200:
        raise SystemExit(f"{name}: preflight POST {status}, GET {got}")
    return f"{name} POST 201 {text}"


def fmt(result: dict) -> str:
    return (
        f"{result['rps']:7.0f} req/s  p50 {result.get('p50_ms', 0.0):6.2f} ms  "
        f"p99 {result.get('p99_ms', 0.0):6.2f} ms  max {result.get('max_ms', 0.0):7.2f} ms  "
        f"cpu {result['cpu_us_per_request']:4.0f} us/req  errors {result['errors']}"
    )


def median_of(results: list[dict]) -> dict:
    keys = ("rps", "p50_ms", "p99_ms", "max_ms", "cpu_us_per_request")
    out = {key: statistics.median(r.get(key, 0.0) for r in results) for key in keys}
    out["errors"] = sum(r["errors"] for r in results)
    out["requests"] = sum(r["requests"] for r in results)
    return out


def run_variant(variant: str, db: Path, dbsvc: tuple, args: argparse.Namespace, work: Path, floor: float) -> None:
    print(f"\n== FastAPI + SQLite, variant {variant} ({VARIANTS[variant]}) ==", flush=True)
    fast, fast_port = start_server(
        [sys.executable, str(APP)], env={"FASTAPI_BENCH_DB": str(db), "FASTAPI_BENCH_VARIANT": variant}
    )
    fast_url = f"http://127.0.0.1:{fast_port}"
    d_proc, d_url = dbsvc
    post = script_for(work, "post", args.records)
    get_id = args.records // 2
    posts_2xx = 1  # the preflight's
    try:
        rows_before = post_count(db)
        print("preflight: " + preflight("dbsvc", d_url, get_id))
        print("preflight: " + preflight("FastAPI", fast_url, get_id))
        for proc, url in ((d_proc, d_url), (fast, fast_url)):  # warm-up
            measure(proc, f"{url}/api/blog-post/{get_id}", duration=2, connections=64)
            result = measure(proc, url, duration=1, connections=1, script=post)
            if proc is fast:
                posts_2xx += result["requests"] - result["errors"]

        print(
            f"POST durable, one connection ({args.rounds} alternating rounds of {args.duration:g} s, "
            f"median of rounds; one 200-byte append + fsync here: p50 {floor:.2f} ms)"
        )
        single: dict[str, list[dict]] = {"dbsvc": [], "FastAPI": []}
        for _round in range(args.rounds):
            single["dbsvc"].append(measure(d_proc, d_url, args.duration, 1, script=post))
            single["FastAPI"].append(measure(fast, fast_url, args.duration, 1, script=post))
            posts_2xx += single["FastAPI"][-1]["requests"] - single["FastAPI"][-1]["errors"]
        for name, results in single.items():
            mid = median_of(results)
            rounds = ", ".join(f"{r.get('p50_ms', 0.0):.2f}" for r in results)
            print(f"  {name:8s} {fmt(mid)}   p50 {mid['p50_ms'] - floor:+.2f} ms over the fsync; rounds' p50: {rounds}")
        p50_d = statistics.median(r.get("p50_ms", 0.0) for r in single["dbsvc"])
        p50_f = statistics.median(r.get("p50_ms", 0.0) for r in single["FastAPI"])
        print(f"  p50 dbsvc / FastAPI: {p50_d / p50_f if p50_f else 0.0:.2f}")

        figures = [
            ("POST durable, 64 connections", "", post),
            ("GET one record, 64 connections", f"/api/blog-post/{get_id}", None),
        ]
        for title, path, script in figures:
            print(title)
            alone_d = measure(d_proc, d_url + path, args.duration, 64, script=script)
            alone_f = measure(fast, fast_url + path, args.duration, 64, script=script)
            figure = side_by_side(
                (fast, fast_url + path),
                (d_proc, d_url + path),
                args.rounds,
                args.duration,
                64,
                script=script,
                baseline_script=script,
            )
            if script:
                posts_2xx += alone_f["requests"] - alone_f["errors"]
                posts_2xx += figure["base"]["requests"] - figure["base"]["errors"]
            print(f"  alone         dbsvc   {fmt(alone_d)}")
            print(f"  alone         FastAPI {fmt(alone_f)}")
            print(f"  side by side  dbsvc   {fmt(figure['subject'])}")
            print(f"  side by side  FastAPI {fmt(figure['base'])}")
            spread = ", ".join(f"{r:.2f}" for r in figure["ratios"])
            print(
                f"  req/s dbsvc / FastAPI: alone {alone_d['rps'] / max(alone_f['rps'], 1e-9):.2f}, "
                f"side by side {figure['ratio']:.2f} (rounds {spread})",
                flush=True,
            )
    finally:
        stop_server(fast)
    added = post_count(db) - rows_before
    lost = "" if added >= posts_2xx else "  ACKNOWLEDGED WRITES MISSING"
    print(
        f"SQLite rows added: {added}; 2xx POSTs wrk counted: {posts_2xx} (rows may exceed it by the "
        f"requests in flight when each wrk run stopped){lost}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--duration", type=float, default=3, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure")
    parser.add_argument("--variant", choices=("async", "sync", "both"), default="both")
    parser.add_argument("--log-level", default="info", help="RUST_LOG for dbsvc (uvicorn's access log is off)")
    args = parser.parse_args(argv)
    variants = ["async", "sync"] if args.variant == "both" else [args.variant]

    print(versions())
    print(f"load average before: {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="dbsvc-fastapi-bench-") as tmp:
        work = Path(tmp)
        data = work / "data"
        started = time.perf_counter()
        seed(data, args.records, users=USERS)
        seeded_dbsvc = time.perf_counter() - started
        started = time.perf_counter()
        seed_sqlite(work / "seed.sqlite", args.records)
        for variant in variants:
            shutil.copy(work / "seed.sqlite", work / f"{variant}.sqlite")
        print(
            f"seeded {USERS} users and {args.records} posts: dbsvc {seeded_dbsvc:.1f} s, "
            f"SQLite {time.perf_counter() - started:.1f} s"
        )
        floor = fsync_p50_ms(work)
        proc, port, log = start_dbsvc({"SERVICE_DATA": str(data), "SERVICE_SYNC": "full", "RUST_LOG": args.log_level})
        try:
            for variant in variants:
                run_variant(variant, work / f"{variant}.sqlite", (proc, f"http://127.0.0.1:{port}"), args, work, floor)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        commits = group_commit(log)
        if commits:
            print(f"\ndbsvc group commit: {commits}")
        print(f"one 200-byte append + fsync after the run: p50 {fsync_p50_ms(work):.2f} ms")
    print(f"load average after: {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
