"""The service's HTTP figures, as ratios to a bare asyncio + h11 server loaded in the same run.

    python bench/service_bench.py [--records 100000] [--duration 3] [--rounds 5] [--connections 64]
    python bench/service_bench.py --matrix [--records 20000] [--rounds 3] [--data DIR] [--only-shapes a,b] [--code DIR]

1. Seeds a tenant with 1,000 users and N blog posts through the Store API directly
   (SERVICE_SYNC=off for the seeding only), so seeding does not dominate the run.
2. Starts the yardstick, `bench/bare_h11_server.py` (asyncio + h11 answering a canned
   53-byte body: none of our code, so it does not move when this repository does), the
   canned server (`bench/canned_server.py`: the same body through `dbsvc.http`) and
   `python dbsvc.py serve schemas/blog.dbs` serving that tenant, all pinned to core 0 (wrk
   on core 1), the service with default settings (SERVICE_SYNC=full, RUST_LOG=info).
3. For the canned server, GET one record, list (filter + sort + limit 20), durable POST and
   PUT: first the server alone for `--duration` seconds (its own req/s, p50, p99, CPU per
   request), then `--rounds` rounds with it and the yardstick loaded at the same time, each
   by its own wrk; the figure is the median of the per-round ratios of requests/s
   (http_bench.side_by_side says why). Each figure prints both servers' CPU microseconds
   per request and p50/p99/max latency.
4. Stops the servers and reads the service's shutdown summary to count fsyncs per
   acknowledged write.

`--matrix` (issue 36 item 2) runs every list shape instead, each side by side with the bare
h11 server: bench/matrix_bench.py (the shapes, their wrk scripts, the driver) says what it asks.

Targets, as ratios to the bare h11 server (issue 13; the HTTP fast path, dbsvc/http/fastpath.py):
GET one >= 2.0, list >= 1.2, durable creates with 64 connections >= 0.8 with at most one fsync
per 8 acknowledged writes; issue 36 item 3 raised the writes' on the peers' blog post (`BODY`:
a 300-character body, a `@ref`, a float `@sort`, seeded and written): POST >= 0.9, PUT and
PATCH >= 0.8, and p99 <= 4x p50 at 64 connections. The issue's figures were filed on the blog
schema before text search (issue 34 added `@search` to title and body), so the write figures
run on the peers' schema, `bench/peers_blog.dbs` (schemas/blog.dbs without `@search`), and
again on schemas/blog.dbs as a second row, "with a search index on title and body"
(`--write-schemas peers,search` picks the rows; each schema has its own seeded tenant and
server). `--only post,put,patch` runs the write figures alone and prints them as one table
(`write_table`: ratio, rounds, p50/p99 alone and side by side). The older targets against the canned server
(docs/guide/operations.md#performance: GET one >= 75%, list >= 50%, POST >= 40%) are printed
too, as this run's ratio to bare h11 divided by the canned server's.
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

from http_bench import canned_command, measure, side_by_side, start_dbsvc, start_server, stop_server  # noqa: E402
from matrix_bench import run_matrix  # noqa: E402

BARE_H11 = ROOT / "bench" / "bare_h11_server.py"

SCHEMA = ROOT / "schemas" / "blog.dbs"
PEERS_SCHEMA = ROOT / "bench" / "peers_blog.dbs"  # blog.dbs without `@search` (issue 36 item 3)
# --write-schemas name -> (schema, the label its write rows carry)
WRITE_SCHEMAS = {"peers": (PEERS_SCHEMA, ""), "search": (SCHEMA, ", with a search index on title and body")}
SUMMARY = re.compile(r"storage: (\d+) writes acknowledged, (\d+) fsyncs")

# The peers' blog post (issue 36 item 3): a 300-character body of words (on schemas/blog.dbs,
# where BlogPost.body is `@search`, each write indexes them), a `@ref` (author_id) and a float
# `@sort` (score).
BODY = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et "
    "dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip ex ea "
    "commodo consequat duis aute irure in reprehenderit voluptate velit esse cillum fugiat nulla pariatur"
)[:300]
assert len(BODY) == 300


def seed(data_dir: Path, posts: int, users: int = 1000, schema: Path = SCHEMA) -> None:
    """Write the tenant `default` of `schema` through the Store API with fsync off."""
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.storage import Store, tenants

    module = compile_schema(load_schema(str(schema)))
    directory = tenants.create_tenant(str(data_dir), "default")
    store = Store.open(str(directory), module.MODELS, module.DESCRIPTION, sync="off")
    user, post = module.BY_NAME["User"], module.BY_NAME["BlogPost"]
    rng = random.Random(7)

    async def fill() -> None:
        for i in range(users):
            await store.insert("User", user.validate_create({"email": f"u{i}@bench.io", "name": f"user {i}"}))
        for i in range(posts):
            body = {
                "author_id": rng.randint(1, users),
                "title": f"post {i}",
                "body": BODY,
                "published": rng.random() < 0.5,
                "score": round(rng.random() * 100, 2),
            }
            await store.insert("BlogPost", post.validate_create(body))
        await store.aclose()

    asyncio.run(fill())


def group_commit(log: list[str]) -> str:
    """'W acknowledged writes, F fsyncs, R writes per fsync' from the shutdown summary of a
    dbsvc server just stopped (its drained stderr, http_bench.start_dbsvc); "" without one."""
    time.sleep(0.2)  # the drain thread reads the last lines
    summary = next((SUMMARY.search(line) for line in log if SUMMARY.search(line)), None)
    if summary is None:
        return ""
    writes, fsyncs = int(summary.group(1)), int(summary.group(2))
    return f"{writes} acknowledged writes, {fsyncs} fsyncs, {writes / max(fsyncs, 1):.1f} writes per fsync"


def script_for(workdir: Path, figure: str, records: int) -> str | None:
    """The figure's wrk Lua script written into `workdir` (RECORDS, STATE and BODY filled in)."""
    text = FIGURE_SCRIPTS[figure][1]
    if text is None:
        return None
    path = workdir / f"{figure}.lua"
    text = text.replace("RECORDS", str(records)).replace("STATE", str(workdir / f"{figure}.state"))
    path.write_text(text.replace("BODY", BODY))
    return str(path)


def fsync_p50_ms(directory: Path, count: int = 200) -> float:
    """p50 of appending 200 bytes to a file and fsyncing it, in `directory`: what one durable
    write must cost at the least on this disk."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            os.write(fd, b"x" * 200)
            os.fsync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return sorted(times)[len(times) // 2] * 1000


POST_LUA = """
counter = 0
request = function()
  counter = counter + 1
  local body = string.format('{"author_id": %d, "title": "bench %d-%d", "body": "BODY", "score": %d.5}',
                             (counter % 1000) + 1, math.random(1, 1000000000), counter, math.random(0, 99))
  return wrk.format("POST", "/api/blog-post", {["Content-Type"] = "application/json"}, body)
end
"""

# RECORDS is replaced by the number of seeded posts (ids 1..RECORDS), BODY by BODY.
PUT_LUA = """
request = function()
  local id = math.random(1, RECORDS)
  local body = string.format('{"author_id": %d, "title": "put %d", "body": "BODY", "score": %d.5}',
                             (id % 1000) + 1, id, math.random(0, 99))
  return wrk.format("PUT", "/api/blog-post/" .. id, {["Content-Type"] = "application/json"}, body)
end
"""

PATCH_LUA = """
request = function()
  local id = math.random(1, RECORDS)
  local body = string.format('{"score": %d.25}', math.random(0, 99))
  return wrk.format("PATCH", "/api/blog-post/" .. id, {["Content-Type"] = "application/json"}, body)
end
"""

# Every DELETE takes a live id: wrk runs one thread, whose counter walks the ids upwards.
# STATE, a file, carries the walk on from one wrk run to the next: `init` starts 500 past the
# last id written there, `request` writes its counter every 500 requests (ids run out after
# RECORDS; the figure then shows non-2xx answers).
DELETE_LUA = """
init = function(args)
  local f = io.open("STATE", "r")
  local last = f and tonumber(f:read("*l")) or 0
  if f then f:close() end
  counter = last + 500
end
request = function()
  counter = counter + 1
  if counter % 500 == 0 then
    local f = io.open("STATE", "w")
    f:write(tostring(counter))
    f:close()
  end
  return wrk.format("DELETE", "/api/blog-post/" .. counter)
end
"""

# figure -> (path, wrk Lua script or None): `RECORDS` in the path is the middle id.
FIGURE_SCRIPTS = {
    "get": ("/api/blog-post/RECORDS", None),
    "list": ("/api/blog-post?published=true&sort=-score&limit=20", None),
    "post": ("/", POST_LUA),
    "put": ("/", PUT_LUA),
    "patch": ("/", PATCH_LUA),
    "delete": ("/", DELETE_LUA),
}


def _latency(result: dict) -> str:
    p50, p99 = result.get("p50_ms", 0.0), result.get("p99_ms", 0.0)
    return (
        f"p50 {p50:6.2f} ms  p99 {p99:6.2f} ms ({p99 / p50 if p50 else 0.0:4.1f}x p50)  "
        f"max {result.get('max_ms', 0.0):7.2f} ms"
    )


def report(
    name: str, alone: dict, figure: dict, target: float | None, canned_ratio: float | None, old_target: float | None
) -> None:
    mine, base = figure["subject"], figure["base"]
    goal = f" (target >= {target:.2f})" if target else ""
    spread = ", ".join(f"{r:.2f}" for r in figure["in_order"])  # in time order, not sorted
    print(f"{name}")
    print(
        f"  alone:        {alone['rps']:7.0f} req/s  {_latency(alone)}  "
        f"cpu {alone['cpu_us_per_request']:4.0f} us/req  errors {alone['errors']}"
    )
    print(
        f"  side by side: {mine['rps']:7.0f} req/s  {_latency(mine)}  cpu {mine['cpu_us_per_request']:4.0f} us/req"
        f"  errors {mine['errors']}"
    )
    print(f"  bare h11:     {base['rps']:7.0f} req/s  {_latency(base)}  cpu {base['cpu_us_per_request']:4.0f} us/req")
    line = f"  ratio to bare h11 {figure['ratio']:5.2f}{goal}   rounds: {spread}"
    if canned_ratio:
        old = f" (old target >= {old_target:.0%})" if old_target else ""
        line += f"   ~ {figure['ratio'] / canned_ratio:.0%} of canned{old}"
    print(line)


def write_table(rows: list[tuple[str, float | None, dict, dict]]) -> str:
    """The write figures as a Markdown table (bench/README.md takes it as printed): the
    ratio to bare h11 side by side, and each write's p50, p99 and p99/p50 at the run's
    connections, alone and side by side (issue 36 item 3: p99 <= 4x p50)."""
    lines = [
        "| figure | ratio to bare h11 (target) | rounds | alone req/s | alone p50 / p99 ms (p99/p50) "
        "| side by side p50 / p99 ms (p99/p50) | cpu us/req service / bare |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, target, alone, figure in rows:
        mine, base = figure["subject"], figure["base"]
        goal = f" (>= {target:.1f})" if target else ""
        spread = "-".join(f"{r:.2f}" for r in (figure["ratios"][0], figure["ratios"][-1]))

        def tail(result: dict) -> str:
            p50, p99 = result.get("p50_ms", 0.0), result.get("p99_ms", 0.0)
            return f"{p50:.2f} / {p99:.2f} ({p99 / p50 if p50 else 0.0:.1f}x)"

        lines.append(
            f"| {name} | {figure['ratio']:.2f}{goal} | {spread} | {alone['rps']:.0f} | {tail(alone)} | {tail(mine)} "
            f"| {mine['cpu_us_per_request']:.0f} / {base['cpu_us_per_request']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--duration", type=float, default=3, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=5, help="side-by-side rounds per figure")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--log-level", default="info", help="RUST_LOG for the measured server")
    parser.add_argument(
        "--only", default="canned,get,list,post,put,patch,delete,post1", help="comma list of figures to run"
    )
    parser.add_argument(
        "--write-schemas", default="peers,search", help="comma list: peers (bench/peers_blog.dbs), search (blog.dbs)"
    )
    parser.add_argument("--http-parser", default="fast", help="SERVICE_HTTP_PARSER for the service")
    parser.add_argument("--matrix", action="store_true", help="every list shape side by side (issue 36 item 2)")
    parser.add_argument(
        "--data", type=Path, default=None, help="--matrix: keep the seeded posts here (default $TMPDIR/dbsvc-matrix-N)"
    )
    parser.add_argument(
        "--only-shapes",
        default="",
        help="--matrix: comma list of shape numbers or labels (a label with a comma: alone)",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="--matrix: no kept list answers (SERVICE_LIST_CACHE_BYTES=0)"
    )
    parser.add_argument(
        "--code", type=Path, default=None, help="--matrix: the checkout whose server is measured (a before/after)"
    )
    parser.add_argument(
        "--cold-rounds",
        type=int,
        default=1,
        help="--matrix: rounds of each many-target row from its first request, printed apart (matrix_bench.py)",
    )
    args = parser.parse_args(argv)
    if args.matrix:
        if "--rounds" not in argv:
            args.rounds = 3
        if "--records" not in argv:
            args.records = 20_000
        return run_matrix(args)
    only = set(args.only.split(","))
    write_keys = {"post", "put", "patch", "delete", "post1"}
    write_schemas = [name for name in args.write_schemas.split(",") if name] if only & write_keys else []

    with tempfile.TemporaryDirectory(prefix="dbsvc-service-bench-") as tmp:
        data = Path(tmp) / "data"
        started = time.perf_counter()
        seed(data, args.records)
        for name in write_schemas:
            if WRITE_SCHEMAS[name][0] != SCHEMA:
                seed(Path(tmp) / f"data-{name}", args.records, schema=WRITE_SCHEMAS[name][0])
        print(
            f"seeded {args.records} posts ({', '.join(['blog.dbs', *(str(WRITE_SCHEMAS[n][0].name) for n in write_schemas if WRITE_SCHEMAS[n][0] != SCHEMA)])}) in {time.perf_counter() - started:.1f} s"
        )
        env = {"RUST_LOG": args.log_level, "SERVICE_HTTP_PARSER": args.http_parser}
        bare, bare_port = start_server([sys.executable, str(BARE_H11)])
        canned, canned_port = start_server(canned_command(), env={"SERVICE_HTTP_PARSER": args.http_parser})
        proc, port, log = start_dbsvc({"SERVICE_DATA": str(data), **env})
        url = f"http://127.0.0.1:{port}"
        # The write rows' servers: blog.dbs's is `proc`; another schema has its own tenant and server.
        writers: dict[str, tuple] = {}
        for name in write_schemas:
            schema, _label = WRITE_SCHEMAS[name]
            if schema == SCHEMA:
                writers[name] = (proc, url, log, data)
            else:
                other = Path(tmp) / f"data-{name}"
                w_proc, w_port, w_log = start_dbsvc({"SERVICE_DATA": str(other), **env}, schema)
                writers[name] = (w_proc, f"http://127.0.0.1:{w_port}", w_log, other)
        yardstick = (bare, f"http://127.0.0.1:{bare_port}/")
        figures = [
            ("canned", "canned server (dbsvc.http)", canned, f"http://127.0.0.1:{canned_port}/", None, None, None),
            ("get", "GET one", proc, f"{url}/api/blog-post/{args.records // 2}", None, 2.0, 0.75),
            (
                "list",
                "list filter+sort+limit 20",
                proc,
                f"{url}/api/blog-post?published=true&sort=-score&limit=20",
                None,
                1.2,
                0.50,
            ),
        ]
        for name in write_schemas:
            label = WRITE_SCHEMAS[name][1]
            w_proc, w_url = writers[name][:2]
            workdir = Path(tmp) / f"scripts-{name}"
            workdir.mkdir()
            figures += [
                (
                    "post",
                    f"POST durable (SERVICE_SYNC=full){label}",
                    w_proc,
                    w_url,
                    script_for(workdir, "post", args.records),
                    0.9,
                    0.40,
                ),
                ("put", f"PUT durable{label}", w_proc, w_url, script_for(workdir, "put", args.records), 0.8, None),
                (
                    "patch",
                    f"PATCH durable{label}",
                    w_proc,
                    w_url,
                    script_for(workdir, "patch", args.records),
                    0.8,
                    None,
                ),
                (
                    "delete",
                    f"DELETE durable{label}",
                    w_proc,
                    w_url,
                    script_for(workdir, "delete", args.records),
                    None,
                    None,
                ),
            ]
        canned_ratio = None
        writes: list[tuple[str, float | None, dict, dict]] = []
        try:
            for server, target_url in (yardstick, (canned, figures[0][3]), (proc, figures[1][3])):  # warm-up
                measure(server, target_url, duration=2, connections=args.connections)
            alone = measure(bare, yardstick[1], args.duration, args.connections)
            print(
                f"bare h11 server alone: {alone['rps']:7.0f} req/s  {_latency(alone)}  "
                f"cpu {alone['cpu_us_per_request']:4.0f} us/req"
            )
            for key, name, server, target_url, script, goal, old_goal in figures:
                if key in only:
                    alone = measure(server, target_url, args.duration, args.connections, script=script)
                    figure = side_by_side(
                        yardstick, (server, target_url), args.rounds, args.duration, args.connections, script=script
                    )
                    if key == "canned":
                        canned_ratio = figure["ratio"]
                    report(name, alone, figure, goal, None if key == "canned" else canned_ratio, old_goal)
                    if script is not None:
                        writes.append((name, goal, alone, figure))
            if "post1" in only:
                for name in write_schemas:
                    w_proc, w_url, _log, w_data = writers[name]
                    workdir = Path(tmp) / f"scripts-{name}"
                    single = measure(w_proc, w_url, args.duration, 1, script=script_for(workdir, "post", args.records))
                    floor = fsync_p50_ms(w_data)
                    print(
                        f"POST durable{WRITE_SCHEMAS[name][1]}, one connection: {single['rps']:7.0f} req/s  "
                        f"{_latency(single)}  cpu {single['cpu_us_per_request']:4.0f} us/req; one write + fsync on "
                        f"this disk: p50 {floor:.2f} ms (the POST's p50 is {single.get('p50_ms', 0.0) - floor:+.2f} ms over it)"
                    )
        finally:
            stop_server(bare)
            stop_server(canned)
            for server in {proc, *(w[0] for w in writers.values())}:
                server.send_signal(signal.SIGTERM)
                server.wait(60)
        if writes:
            print()
            print(f"{args.records} posts, {args.connections} connections, {args.rounds} rounds of {args.duration:g} s")
            print(write_table(writes))
        for name, server_log in [("blog", log)] + [(n, w[2]) for n, w in writers.items() if w[0] is not proc]:
            commits = group_commit(server_log)
            if commits:
                print(f"group commit ({name}): {commits} (target >= 8)")
            for line in server_log:  # a compaction in a round costs that round (bench/README.md, wt-wr2)
                if "compacted online" in line:
                    print(f"compaction ({name}): {line.strip()}")
        print(f"load average: {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
