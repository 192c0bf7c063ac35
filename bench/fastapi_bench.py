"""dbsvc beside FastAPI + SQLite doing the same work: durable writes, GET one, the commonest list.

Durable writes are issue 13's item 5; the list, a parent's children best first, issue 36's.

    python bench/fastapi_bench.py [--records 20000] [--duration 3] [--rounds 3] [--variant async|sync|both]
                                  [--figures list,post-1,post,get]

Issue 13 item 5 says "a single-connection durable POST should cost little more than its
fsync; today 0.8 ms p50 where FastAPI + SQLite async answers in 0.6 ms"; issue 36 asks for
the list figures with the peers' beside them, whose run measured
`GET /api/blog-post?author_id=N&sort=-score&limit=20` at 100,000 posts. This script
measures those yardsticks on this machine instead of quoting them:

1. Seeds the same 1,000 users and N blog posts (service_bench.seed's generator, seed 7, its
   300-character body) into a dbsvc tenant (through the Store API, fsync off) and into a
   SQLite file (executemany, one transaction); both are copied once per FastAPI variant.
2. Per variant, starts `dbsvc serve schemas/blog.dbs` on its copy (SERVICE_SYNC=full,
   RUST_LOG=info by default) and `bench/fastapi_sqlite_app.py` on its own (FastAPI under
   uvicorn's defaults, SQLite in WAL mode with synchronous=FULL, one INSERT + COMMIT per
   POST: the same durability), both pinned to core 0, wrk on core 1. `--variant async` is
   aiosqlite behind `async def` endpoints, `sync` plain sqlite3 behind `def` endpoints
   (Starlette's thread pool); `both` runs the figures once per variant. A dbsvc per variant,
   so each pair starts from the same posts (the first variant's writes would otherwise be
   in the second's lists).
3. Figures (`--figures`, a comma list, picks them; default all), in this order:
   - `list`, 64 connections: `author_id=<1..1000 at random>&sort=-score&limit=20` from a wrk
     Lua script, the same for both servers. It runs first, while both hold the seeded
     posts alone. Before loading, one such list for one author goes to each server: both
     must answer 200 with 20 records, the same records in the same order (ties on score
     broken by id ascending, dbsvc's rule; the author is one whose first page holds a tie
     when there is one) and the same total; SQLite's plan for the query is printed.
   - `post-1`, POST, one connection: the two servers alone, one after the other, `--rounds`
     times (alternating, so both see the same stretch of the host); the median of rounds
     of req/s, p50, p99 and server CPU per request, beside the p50 of one 200-byte append +
     fsync on the same disk (service_bench.fsync_p50_ms). Not side by side: at one
     connection the figure is latency, and a second busy server on the core would be in it.
   - `post` and `get` (one record), 64 connections, with service_bench's wrk scripts (the
     same POST body for both). Before them, one POST of the wrk script's shape and one GET
     go to each server and must answer 201 and 200.
   Each 64-connection figure: each server alone (req/s, p50, p99, max, CPU per request),
   then `--rounds` rounds side by side (http_bench.side_by_side: both on one core, each
   with its own wrk, so the host's drift is the same for both); the figure is the median
   of the per-round ratios of requests/s, dbsvc / FastAPI, printed with the side-by-side
   ratios of p50, p99 and CPU per request.
4. After a write figure, counts the rows the SQLite file gained against the 2xx POSTs wrk
   saw, and reads dbsvc's shutdown summary for acknowledged writes per fsync (dbsvc commits
   in groups; the FastAPI app fsyncs once per POST, as one connection's commits must).

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
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from fastapi_sqlite_app import create_schema, list_sql  # noqa: E402
from http_bench import measure, side_by_side, start_dbsvc, start_server, stop_server  # noqa: E402
from service_bench import BODY, fsync_p50_ms, group_commit, script_for, seed  # noqa: E402

APP = ROOT / "bench" / "fastapi_sqlite_app.py"
USERS = 1000
VARIANTS = {"async": "aiosqlite, async def endpoints", "sync": "sqlite3, def endpoints in the thread pool"}
Server = tuple[subprocess.Popen, str]  # the process and its base URL

# --figures name -> title, in the order they run: the list first, while both servers hold the
# seeded posts alone (every write figure adds posts, each server at its own speed).
FIGURES = {
    "list": "list: author_id filter, sort=-score, limit 20, 64 connections",
    "post-1": "POST durable, one connection",
    "post": "POST durable, 64 connections",
    "get": "GET one record, 64 connections",
}

# The commonest list (issue 36): a parent's children, best first.
LIST_PAGE = 20
LIST_QUERY = f"sort=-score&limit={LIST_PAGE}"
LIST_LUA = """
request = function()
  return wrk.format("GET", "/api/blog-post?author_id=" .. math.random(1, USERS) .. "&LIST_QUERY")
end
"""


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
    """The same users and posts as service_bench.seed (same generator, same order, the same
    300-character body, ids 1..N): a list page holds the same records on both servers."""
    create_schema(str(path))
    rng = random.Random(7)
    joined = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows = []
    for i in range(posts):
        rows.append((rng.randint(1, users), f"post {i}", BODY, rng.random() < 0.5, round(rng.random() * 100, 2)))
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


def list_author(path: Path) -> tuple[int, str]:
    """The author whose first page the list preflight compares: the first with a tie on score
    inside its first 20 posts best first (so the page shows the tie rule), else the one with
    the most posts; and a note naming the tie."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT author_id, score, id FROM blog_post").fetchall()
    finally:
        conn.close()
    by_author: dict[int, list[tuple[float, int]]] = {}
    for author, score, post in rows:
        by_author.setdefault(author, []).append((-score, post))
    for author in sorted(by_author):
        page = sorted(by_author[author])[:LIST_PAGE]
        scores = [-key for key, _post in page]
        tied = next((score for score in scores if scores.count(score) > 1), None)
        if len(page) == LIST_PAGE and tied is not None:
            ids = [post for key, post in page if -key == tied]
            return author, f"a tie on score {tied} between ids {ids}"
    author = max(by_author, key=lambda a: len(by_author[a]))
    if len(by_author[author]) < LIST_PAGE:
        raise SystemExit(
            f"list figure: no author has {LIST_PAGE} posts (at most {len(by_author[author])}); "
            f"seed more with --records (20000 gives about 20 an author)"
        )
    return author, f"no author has a tie on score in its first {LIST_PAGE}"


def preflight_list(servers: dict[str, str], author: int) -> dict:
    """One list request to each server: 200 with LIST_PAGE records, and the same page from
    both (ids in the same order, the same records, the same total)."""
    pages = {}
    for name, url in servers.items():
        try:
            with urllib.request.urlopen(f"{url}/api/blog-post?author_id={author}&{LIST_QUERY}", timeout=10) as answer:
                status, page = answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            raise SystemExit(f"{name}: list preflight failed: {exc.code} {exc.read().decode()[:300]}") from None
        if status != 200 or len(page["data"]) != LIST_PAGE:
            raise SystemExit(f"{name}: list preflight {status} with {len(page['data'])} records, expected {LIST_PAGE}")
        pages[name] = page
    (one, first), (other, second) = pages.items()
    ids = [[record["id"] for record in page["data"]] for page in (first, second)]
    if ids[0] != ids[1]:
        raise SystemExit(f"list preflight: author {author}'s first page differs: {one} {ids[0]}, {other} {ids[1]}")
    for mine, theirs in zip(first["data"], second["data"], strict=True):
        if mine != theirs:
            raise SystemExit(f"list preflight: post {mine['id']} differs: {one} {mine}, {other} {theirs}")
    if (first["total"], first["limit"]) != (second["total"], second["limit"]):
        raise SystemExit(f"list preflight: total, limit differ: {one} {first}, {other} {second}")
    return {"ids": ids[0], "total": first["total"]}


def list_script(work: Path) -> str:
    path = work / "list.lua"
    path.write_text(LIST_LUA.replace("USERS", str(USERS)).replace("LIST_QUERY", LIST_QUERY))
    return str(path)


def sqlite_plan(path: Path, author: int) -> str:
    """EXPLAIN QUERY PLAN of the app's list SELECT for the figure's query."""
    select, _count, where_args = list_sql(author, "-score")
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(f"EXPLAIN QUERY PLAN {select}", (*where_args, LIST_PAGE, 0)).fetchall()
    finally:
        conn.close()
    return "; ".join(row[-1] for row in rows)


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


def ratio(mine: dict, theirs: dict, key: str) -> float:
    return mine.get(key, 0.0) / max(theirs.get(key, 0.0), 1e-9)


def figure_64(title: str, dbsvc: Server, fast: Server, path: str, script: str | None, args: argparse.Namespace) -> int:
    """One figure at 64 connections: each server alone, then `--rounds` rounds side by side;
    the ratios dbsvc / FastAPI. Returns FastAPI's 2xx answers (its rows, for a POST figure)."""
    print(title)
    alone_d = measure(dbsvc[0], dbsvc[1] + path, args.duration, 64, script=script)
    alone_f = measure(fast[0], fast[1] + path, args.duration, 64, script=script)
    figure = side_by_side(
        (fast[0], fast[1] + path),
        (dbsvc[0], dbsvc[1] + path),
        args.rounds,
        args.duration,
        64,
        script=script,
        baseline_script=script,
    )
    mine, theirs = figure["subject"], figure["base"]
    print(f"  alone         dbsvc   {fmt(alone_d)}")
    print(f"  alone         FastAPI {fmt(alone_f)}")
    print(f"  side by side  dbsvc   {fmt(mine)}")
    print(f"  side by side  FastAPI {fmt(theirs)}")
    spread = ", ".join(f"{r:.2f}" for r in figure["ratios"])
    print(
        f"  req/s dbsvc / FastAPI: alone {ratio(alone_d, alone_f, 'rps'):.2f}, "
        f"side by side {figure['ratio']:.2f} (rounds {spread})"
    )
    print(
        f"  side by side, dbsvc / FastAPI: p50 {ratio(mine, theirs, 'p50_ms'):.2f}, "
        f"p99 {ratio(mine, theirs, 'p99_ms'):.2f}, CPU per request {ratio(mine, theirs, 'cpu_us_per_request'):.2f}",
        flush=True,
    )
    return alone_f["requests"] - alone_f["errors"] + theirs["requests"] - theirs["errors"]


def list_figure(dbsvc: Server, fast: Server, db: Path, args: argparse.Namespace, work: Path) -> None:
    author, tie = list_author(db)
    page = preflight_list({"dbsvc": dbsvc[1], "FastAPI": fast[1]}, author)
    print(
        f"preflight: list author_id={author}&{LIST_QUERY}: both 200, the same {LIST_PAGE} records in the "
        f"same order (ids {page['ids']}), total {page['total']}; {tie}"
    )
    print(f"SQLite plan: {sqlite_plan(db, author)}")
    script = list_script(work)
    for proc, url in (dbsvc, fast):  # warm-up
        measure(proc, url, duration=1, connections=64, script=script)
    figure_64(FIGURES["list"] + f" (author_id at random in 1..{USERS})", dbsvc, fast, "", script, args)


def write_and_get_figures(
    figures: list[str], dbsvc: Server, fast: Server, args: argparse.Namespace, work: Path, floor: float
) -> int:
    """The POST and GET figures; returns the POSTs FastAPI answered 2xx (the preflight's included)."""
    d_proc, d_url = dbsvc
    fast_proc, fast_url = fast
    post = script_for(work, "post", args.records)
    get_id = args.records // 2
    posts_2xx = 1  # the preflight's
    print("preflight: " + preflight("dbsvc", d_url, get_id))
    print("preflight: " + preflight("FastAPI", fast_url, get_id))
    for proc, url in (dbsvc, fast):  # warm-up
        measure(proc, f"{url}/api/blog-post/{get_id}", duration=2, connections=64)
        result = measure(proc, url, duration=1, connections=1, script=post)
        if proc is fast_proc:
            posts_2xx += result["requests"] - result["errors"]

    if "post-1" in figures:
        print(
            f"{FIGURES['post-1']} ({args.rounds} alternating rounds of {args.duration:g} s, "
            f"median of rounds; one 200-byte append + fsync here: p50 {floor:.2f} ms)"
        )
        single: dict[str, list[dict]] = {"dbsvc": [], "FastAPI": []}
        for _round in range(args.rounds):
            single["dbsvc"].append(measure(d_proc, d_url, args.duration, 1, script=post))
            single["FastAPI"].append(measure(fast_proc, fast_url, args.duration, 1, script=post))
            posts_2xx += single["FastAPI"][-1]["requests"] - single["FastAPI"][-1]["errors"]
        for name, results in single.items():
            mid = median_of(results)
            rounds = ", ".join(f"{r.get('p50_ms', 0.0):.2f}" for r in results)
            print(f"  {name:8s} {fmt(mid)}   p50 {mid['p50_ms'] - floor:+.2f} ms over the fsync; rounds' p50: {rounds}")
        p50_d = statistics.median(r.get("p50_ms", 0.0) for r in single["dbsvc"])
        p50_f = statistics.median(r.get("p50_ms", 0.0) for r in single["FastAPI"])
        print(f"  p50 dbsvc / FastAPI: {p50_d / p50_f if p50_f else 0.0:.2f}")

    if "post" in figures:
        posts_2xx += figure_64(FIGURES["post"], dbsvc, fast, "", post, args)
    if "get" in figures:
        figure_64(FIGURES["get"], dbsvc, fast, f"/api/blog-post/{get_id}", None, args)
    return posts_2xx


def run_variant(variant: str, db: Path, data: Path, args: argparse.Namespace, work: Path, floor: float) -> None:
    """One FastAPI variant beside a dbsvc server of its own, both on fresh copies of the seed."""
    print(f"\n== FastAPI + SQLite, variant {variant} ({VARIANTS[variant]}) ==", flush=True)
    rows_before = post_count(db)
    posts_2xx: int | None = None  # the POSTs FastAPI answered 2xx, when a write figure ran
    env = {"SERVICE_DATA": str(data), "SERVICE_SYNC": "full", "RUST_LOG": args.log_level}
    if args.fresh:
        env["SERVICE_LIST_CACHE_BYTES"] = "0"  # every dbsvc list made afresh, as FastAPI makes each
    d_proc, d_port, log = start_dbsvc(env)
    try:
        fast, fast_port = start_server(
            [sys.executable, str(APP)], env={"FASTAPI_BENCH_DB": str(db), "FASTAPI_BENCH_VARIANT": variant}
        )
        dbsvc, fastapi = (d_proc, f"http://127.0.0.1:{d_port}"), (fast, f"http://127.0.0.1:{fast_port}")
        try:
            if "list" in args.figures:  # first: while both hold the seeded posts alone
                list_figure(dbsvc, fastapi, db, args, work)
            if set(args.figures) & {"post-1", "post", "get"}:
                posts_2xx = write_and_get_figures(args.figures, dbsvc, fastapi, args, work, floor)
        finally:
            stop_server(fast)
    finally:
        d_proc.send_signal(signal.SIGTERM)
        d_proc.wait(60)
    if posts_2xx is not None:
        added = post_count(db) - rows_before
        lost = "" if added >= posts_2xx else "  ACKNOWLEDGED WRITES MISSING"
        print(
            f"SQLite rows added: {added}; 2xx POSTs wrk counted: {posts_2xx} (rows may exceed it by the "
            f"requests in flight when each wrk run stopped){lost}"
        )
        commits = group_commit(log)
        if commits:
            print(f"dbsvc group commit: {commits}")


def figure_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in FIGURES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown figure {unknown or text!r}; expected some of {', '.join(FIGURES)}")
    return names


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--duration", type=float, default=3, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure")
    parser.add_argument("--variant", choices=("async", "sync", "both"), default="both")
    parser.add_argument(
        "--figures",
        type=figure_names,
        default=list(FIGURES),
        help=f"comma list of figures to run, of {', '.join(FIGURES)} (default: all)",
    )
    parser.add_argument("--log-level", default="info", help="RUST_LOG for dbsvc (uvicorn's access log is off)")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="dbsvc keeps no list answers (SERVICE_LIST_CACHE_BYTES=0): each made afresh",
    )
    args = parser.parse_args(argv)
    variants = ["async", "sync"] if args.variant == "both" else [args.variant]

    print(versions())
    print(f"load average before: {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="dbsvc-fastapi-bench-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        seed(work / "seed-data", args.records, users=USERS)
        seeded_dbsvc = time.perf_counter() - started
        started = time.perf_counter()
        seed_sqlite(work / "seed.sqlite", args.records)
        for variant in variants:
            shutil.copytree(work / "seed-data", work / f"{variant}-data")
            shutil.copy(work / "seed.sqlite", work / f"{variant}.sqlite")
        print(
            f"seeded {USERS} users and {args.records} posts: dbsvc {seeded_dbsvc:.1f} s, "
            f"SQLite {time.perf_counter() - started:.1f} s"
        )
        floor = fsync_p50_ms(work)
        for variant in variants:
            run_variant(variant, work / f"{variant}.sqlite", work / f"{variant}-data", args, work, floor)
        print(f"\none 200-byte append + fsync after the run: p50 {fsync_p50_ms(work):.2f} ms")
    print(f"load average after: {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
