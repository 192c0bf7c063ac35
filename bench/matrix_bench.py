"""The list matrix of `service_bench.py --matrix`: its shapes, the wrk scripts of its rows
over many targets, and the run that measures them (service_bench.py keeps the command line).

`service_bench.py --matrix` (issue 36 item 2) runs every list shape, each side by side with the bare
h11 server (`--rounds` rounds, default 3 there), on the query bench's posts (bench/query_bench.py
`seed`: random six-letter titles, Zipf bodies, scores 0-100, 1,000 authors; batched and
compacted, so 1,000,000 records seed in minutes; kept in `--data DIR`, by default
`$TMPDIR/dbsvc-matrix-<records>`, and reused by the next run of the same count): GET one record;
one filter + sort on another field; two filters; a filter + two sort keys; sort only; a deep
`offset`; an `as_of` list (before 100 POSTs made for it, one of them by author 7); a projection; a range, a prefix and
their neighbours (another sort, another filter); a search; a cursor; an `expand`. It prints
one table, `matrix_table`: the median ratio of requests/s to bare h11, the rounds, both
servers' requests/s and CPU microseconds a request, the service's p50 and p99. Target: every
list >= 1.2, GET one >= 2.0. It also prints the service's RSS after the open and after the
shapes (what the lists built: bucket orders, storage/buckets.py). `--code DIR` serves from
another checkout (an export of an older commit), for a before/after on the same data.
More rows ask MANY targets (`varied_shapes`, a wrk Lua script each): a GET of an id at
random, a page of 20 in id order at a cursor at random (5,000 cursors), and since session 13
its neighbours (sorted by -score, under an author filter, at an offset at random), each after 10 s
of warm-up alone (on a quiet host enough to fill the app's 65,536 encoded records; at a load
of 20 it is not, and the row is then the cost of misses without evictions). Each such row's
first `--cold-rounds` rounds (default 1), side by side from its first request, before the
warm-up, are printed too, as the row's own line `..., first round(s) (cold)` with the RSS
after each: at 1,000,000 posts the record cache (storage/shown.py, sized to the table within
a share since session 23) is still filling through the rounds, so the cold figure and the
warm one are both the row's (bench/README.md, wt-offs session 24, has how many rounds
the fill takes; bench/steady_pages.py counts it in process). At 1,000,000 posts
their records mostly miss the app's encoded records (65,536 kept) where the one-URL shapes
always hit: the figure of clients reading many pages (bench/README.md, "Pages that miss the
caches"). Each other shape asks one URL over and over with no write between, so its lists are the app's kept
answers of the present (dbsvc/readcache.py `PresentPages`): the figure of a polled list.
`--fresh` serves with SERVICE_LIST_CACHE_BYTES=0, so every list is made afresh, as a list
asked right after a write or each new cursor of a walk is: the figure of a list of an
application that writes.

"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from http_bench import measure, side_by_side, start_dbsvc, start_server, stop_server  # noqa: E402

BARE_H11 = ROOT / "bench" / "bare_h11_server.py"


def matrix_shapes(port: int, records: int, as_of: int) -> list[tuple[str, str]]:
    """(label, path) of every list shape of issue 36 item 2 over the query bench's posts,
    GET one record first. Author 7 holds ~N/1,000 posts; `ab` starts ~N/676 titles."""
    from query_bench import get_json, vocabulary

    from dbsvc.cursors import encode_cursor

    middle = get_json(port, f"/api/blog-post?sort=-score&limit=1&offset={records // 2}")["data"][0]
    cursor = encode_cursor("BlogPost", (("score", True),), [middle["score"]], middle["id"])
    words, _weights = vocabulary()
    one = "/api/blog-post?author_id=7"
    return [
        ("GET one record", f"/api/blog-post/{records // 2}"),
        ("filter + sort on another field", f"{one}&sort=-score&limit=20"),
        ("two filters", f"{one}&published=true&limit=20"),
        ("filter + two sort keys", f"{one}&sort=-score,title&limit=20"),
        ("sort only", "/api/blog-post?sort=-score&limit=20"),
        ("deep offset (1,000)", "/api/blog-post?sort=-score&limit=20&offset=1000"),
        ("as_of list (filter + sort)", f"{one}&sort=-score&limit=20&as_of={as_of}"),
        ("projection", f"{one}&sort=-score&limit=20&projection=summary"),
        ("range, sorted by it", "/api/blog-post?score__gte=50&sort=-score&limit=20"),
        ("range, another sort", "/api/blog-post?score__gte=50&sort=title&limit=20"),
        ("range + filter", "/api/blog-post?score__gte=50&author_id=7&limit=20"),
        ("range, id order", "/api/blog-post?score__gte=50&limit=20"),
        ("prefix, id order", "/api/blog-post?title__prefix=ab&limit=20"),
        ("prefix, sorted by it", "/api/blog-post?title__prefix=ab&sort=title&limit=20"),
        ("prefix, another sort", "/api/blog-post?title__prefix=ab&sort=-score&limit=20"),
        ("search (two words)", f"/api/blog-post?search={words[49]}%20{words[199]}&limit=20"),
        ("cursor (the middle page)", f"/api/blog-post?sort=-score&limit=20&cursor={cursor}"),
        ("expand", "/api/blog-post?limit=20&expand=author_id"),
    ]


def varied_shapes(records: int) -> list[tuple[str, str]]:
    """(label, wrk Lua script) of the matrix's rows over many targets (module docstring): a
    GET of an id at random; a page of 20 in id order at one of 5,000 cursors made here
    (ids at random: 100,000 records, more than the app's 65,536 encoded ones); and its
    neighbours (session 13): the same sorted by -score (cursors of scores and ids at random:
    a cursor holds keys, so any keys seek into the list), the id-order cursors under an
    author filter at random, and a page of 20 at an offset at random (0-100,000)."""
    from dbsvc.cursors import encode_cursor

    rng = random.Random(36)
    ids = [rng.randint(1, records) for _ in range(5000)]
    cursors = ",".join(f'"{encode_cursor("BlogPost", (), [], i)}"' for i in ids)
    scored = ",".join(
        f'"{encode_cursor("BlogPost", (("score", True),), [round(rng.uniform(0, 100), 2)], i)}"' for i in ids
    )
    get = f"""
request = function()
  return wrk.format("GET", "/api/blog-post/" .. math.random(1, {records}))
end
"""

    def page(query: str, table: str = cursors) -> str:
        return f"""
cursors = {{{table}}}
request = function()
  return wrk.format("GET", "/api/blog-post?{query}limit=20&cursor=" .. cursors[math.random(1, #cursors)])
end
"""

    filtered = page('author_id=" .. math.random(1, 1000) .. "&')
    offset = f"""
request = function()
  return wrk.format("GET", "/api/blog-post?limit=20&offset=" .. math.random(0, {min(records, 100_000) - 20}))
end
"""
    return [
        ("GET one record, ids at random", get),
        ("a page at a cursor at random", page("")),
        ("cursor at random, sort=-score", page("sort=-score&", scored)),
        ("cursor at random + filter", filtered),
        ("a page at an offset at random", offset),
    ]


def matrix_table(rows: list[tuple[str, dict]]) -> str:
    """The matrix as a Markdown table (bench/README.md takes it as printed)."""
    lines = [
        "| shape | ratio to bare h11 | rounds | service req/s | bare req/s | service cpu us | bare cpu us | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, figure in rows:
        mine, base = figure["subject"], figure["base"]
        spread = "-".join(f"{r:.2f}" for r in (figure["ratios"][0], figure["ratios"][-1]))
        lines.append(
            f"| {label} | {figure['ratio']:.2f} | {spread} | {mine['rps']:.0f} | {base['rps']:.0f} | "
            f"{mine['cpu_us_per_request']:.0f} | {base['cpu_us_per_request']:.0f} | "
            f"{mine.get('p50_ms', 0.0):.2f} | {mine.get('p99_ms', 0.0):.2f} |"
        )
    return "\n".join(lines)


def rss_mb(pid: int) -> float:
    """The resident memory of process `pid`, in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_matrix(args: argparse.Namespace) -> int:
    """`--matrix` (module docstring)."""
    import json
    import urllib.request

    from query_bench import seeded

    # Seeded once through the bulk path and kept: 1,000,000 posts take minutes to seed
    # (bench/README.md), so a run without --data reuses the same directory for that count.
    data = seeded(args.data or Path(tempfile.gettempdir()) / f"dbsvc-matrix-{args.records}", args.records)
    bare, bare_port = start_server([sys.executable, str(BARE_H11)])
    code = args.code or ROOT
    env = {"SERVICE_DATA": str(data), "RUST_LOG": args.log_level}
    if args.fresh:
        env["SERVICE_LIST_CACHE_BYTES"] = "0"  # every list made afresh (module docstring)
    proc, port, _log = start_dbsvc(env, timeout=900, code=code)
    opened_rss = rss_mb(proc.pid)
    # the shapes' numbers or labels, comma-separated; the whole text is also one label, so a
    # label holding a comma ("cursor at random, sort=-score") can be passed alone
    only = set(args.only_shapes.split(",")) | {args.only_shapes} if args.only_shapes else None
    rows: list[tuple[str, dict]] = []
    try:
        url = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{url}/api/blog-post?limit=0") as reply:
            as_of = int(reply.headers["Dbsvc-Watermark"])
        for i in range(100):  # later writes, so the as_of list has history to step over
            # spread over the authors (author 7 gets one), so runs on the same --data keep
            # every shape's buckets the size they were seeded with
            author = 7 + 10 * i % 1000
            body = json.dumps({"author_id": author, "title": f"later {i}", "body": "later", "score": i / 2}).encode()
            request = urllib.request.Request(
                f"{url}/api/blog-post", body, {"Content-Type": "application/json"}, method="POST"
            )
            urllib.request.urlopen(request).close()
        yardstick = (bare, f"http://127.0.0.1:{bare_port}/")
        shapes = matrix_shapes(port, args.records, as_of)
        for server, target in (yardstick, (proc, url + shapes[0][1])):  # warm-up
            measure(server, target, duration=2, connections=args.connections)
        made = "every list made afresh" if args.fresh else "lists kept while unchanged"
        print(f"{args.records} posts; side by side with bare h11, {args.rounds} rounds of {args.duration:g} s; {made}")
        for index, (label, path) in enumerate(shapes):
            if only is not None and str(index) not in only and label not in only:
                continue
            figure = side_by_side(yardstick, (proc, url + path), args.rounds, args.duration, args.connections)
            rows.append((label, figure))
            print(f"  {label:32} {figure['ratio']:5.2f}  ({', '.join(f'{r:.2f}' for r in figure['ratios'])})  {path}")
        with tempfile.TemporaryDirectory(prefix="dbsvc-matrix-lua-") as work:
            for index, (label, lua) in enumerate(varied_shapes(args.records), start=len(shapes)):
                if only is not None and str(index) not in only and label not in only:
                    continue
                script = Path(work) / f"varied-{index}.lua"
                script.write_text(lua)
                subject = (proc, url)
                # The row from cold first, printed and kept apart: never folded into the
                # warm rounds, never dropped (module docstring)
                cold = []
                for _ in range(args.cold_rounds):
                    cold.append(side_by_side(yardstick, subject, 1, args.duration, args.connections, str(script)))
                    cold[-1]["rss_mb"] = rss_mb(proc.pid)
                if cold:
                    first = dict(cold[0], ratios=sorted(c["ratio"] for c in cold))
                    rows.append((f"{label}, first round{'s' * (len(cold) > 1)} (cold)", first))
                    each = ", ".join(f"{c['ratio']:.2f} ({c['rss_mb']:.0f} MB)" for c in cold)
                    print(f"  {label + ', cold':32} {first['ratio']:5.2f}  (rounds from the first request: {each})")
                # Warm first: the row is meant at the caches' steady state (65,536 records
                # cached, every miss evicting), which takes 65,536+ missed records to reach
                measure(proc, url, duration=10, connections=args.connections, script=str(script))
                figure = side_by_side(yardstick, subject, args.rounds, args.duration, args.connections, str(script))
                rows.append((label, figure))
                print(f"  {label:32} {figure['ratio']:5.2f}  ({', '.join(f'{r:.2f}' for r in figure['ratios'])})")
        print(f"service RSS: {opened_rss:.0f} MB after the open, {rss_mb(proc.pid):.0f} MB after the shapes ({code})")
    finally:
        stop_server(bare)
        stop_server(proc)
    print()
    print(matrix_table(rows))
    print(f"load average: {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")
    return 0
