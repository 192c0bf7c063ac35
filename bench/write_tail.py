"""The service bench's alone PATCH run with the tenant's compaction inside it, phase by phase
(issue 36 item 3's write tail).

    python bench/write_tail.py [--code DIR] [--duration 8] [--huge-pages off]

Why: `service_bench.py --only post,put,patch --write-schemas peers` grows its 20,000-post
peers tenant by POST (to ~83,000 live posts) and PUT until the size rule (64 MiB of log)
compacts it, and where that compaction falls in the runs depends on the host's speed. Here
the same server lives through the same writes, but they stop by size: POSTs (wrk, 1 s at a
time) until `--posts` posts are live, PUTs until the log is `--grow-to` bytes, then one
PATCH run of `--duration` s at 64 connections (wrk, as the service bench runs it), which
takes the log past 64 MiB in its first second: the cut, every step and the heap's collapse
after the switch fall inside it. The server runs under served_tail.py's `--wrap` (each
step, group fsync, late loop tick, late probe thread wake, collection and collapse piece
timed, on CLOCK_MONOTONIC), pinned to core 0 with wrk on core 1 as the other benches pin
them; the PATCH run's wrk script adds a `response` hook that writes each answer's
CLOCK_MONOTONIC time (LuaJIT's ffi), so answers and marks share one clock.

Printed: wrk's p50 / p99 / max of the PATCH run, and a line a phase (before the cut, each
step over 50 ms, the collapse, after it): its length, answers/s, the gaps between two
answers over 20 ms and the longest (with group commit, answers come in bursts one fsync
apart: a gap is a fsync or a stall), the group fsyncs (count, p50, over 15 ms, longest),
late loop ticks and probe wakes, collections over 3 ms, and the collapse's pieces (count,
wall p50 / longest, thread CPU longest).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from http_bench import measure, start_dbsvc, stop_server  # noqa: E402
from served_tail import LETTERS, Marks  # noqa: E402
from service_bench import WRITE_SCHEMAS, script_for, seed  # noqa: E402

# Appended to the PATCH script: each answer's CLOCK_MONOTONIC time (clock id 1 on Linux).
ANSWERS_LUA = """
local ffi = require("ffi")
ffi.cdef[[ typedef struct { long tv_sec; long tv_nsec; } wt_ts; int clock_gettime(int, wt_ts *); ]]
local ts = ffi.new("wt_ts")
local out = io.open("ANSWERS", "w")
local n = 0
response = function(status, headers, body)
  ffi.C.clock_gettime(1, ts)
  out:write(string.format("%d.%09d\\n", tonumber(ts.tv_sec), tonumber(ts.tv_nsec)))
  n = n + 1
  if n % 200 == 0 then out:flush() end
end
"""


def phase(name: str, a: float, b: float, answers: list[float], marks: Marks) -> str:
    """One line of the report for the marks and answers between `a` and `b`."""

    def within(kind: str) -> list[float]:
        return [m[2] - m[1] for m in marks if m[0] == kind and a <= m[1] < b]

    def longest(values: list[float]) -> str:
        return f"{max(values, default=0.0) * 1e3:.1f}"

    got = [t for t in answers if a <= t < b]
    gaps = [y - x for x, y in zip(got, got[1:])]
    fsyncs, late, gil = within("fsync"), within("late"), within("gil")
    collections = [m[2] - m[1] for m in marks if m[0].startswith("gc") and a <= m[1] < b]
    pieces = [(m[2] - m[1], m[3]) for m in marks if m[0] == "collapse.piece" and a <= m[1] < b]
    line = (
        f"  {name:15s} {(b - a) * 1e3:5.0f} ms {len(got) / max(b - a, 1e-9):5.0f}/s; gaps > 20 ms "
        f"{sum(g > 0.02 for g in gaps):3d}, longest {longest(gaps)}; group fsyncs {len(fsyncs)}, p50 "
        f"{statistics.median(fsyncs) * 1e3 if fsyncs else 0.0:.1f}, > 15 ms {sum(f > 0.015 for f in fsyncs)}, "
        f"longest {longest(fsyncs)}; late ticks {len(late)} ({longest(late)}), wakes {len(gil)} ({longest(gil)}); "
        f"gc > 3 ms {sum(c > 0.003 for c in collections)} ({longest(collections)})"
    )
    if pieces:
        walls = sorted(p[0] for p in pieces)
        line += (
            f"; collapse pieces {len(pieces)}, wall p50 {walls[len(walls) // 2] * 1e3:.1f} / longest "
            f"{walls[-1] * 1e3:.1f}, CPU longest {max(p[1] for p in pieces) * 1e3:.1f}"
        )
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=HERE.parent, help="the checkout whose server is measured")
    parser.add_argument("--records", type=int, default=20_000, help="posts seeded")
    parser.add_argument("--posts", type=int, default=82_500, help="live posts after the POSTs")
    parser.add_argument("--grow-to", type=int, default=64 * 2**20 - 3_000_000, help="log bytes after the PUTs")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of the PATCH run")
    parser.add_argument("--huge-pages", default="on", help="SERVICE_HUGE_PAGES (off: no collapse after the switch)")
    args = parser.parse_args()
    code = args.code.resolve()
    schema = WRITE_SCHEMAS["peers"][0]
    with tempfile.TemporaryDirectory(prefix="dbsvc-write-tail-") as tmp:
        work = Path(tmp)
        seed(work / "data", args.records, schema=schema)
        os.sync()  # the seed's writeback is not the run's (docs/decisions.md, wt-pace2)
        marks_path = work / "marks.json"
        proc, port, log = start_dbsvc(
            {"SERVICE_DATA": str(work / "data"), "SERVICE_HUGE_PAGES": args.huge_pages},
            schema,
            code=code,
            python=[sys.executable, str(HERE / "served_tail.py"), "--wrap", str(marks_path), str(code)],
        )
        url = f"http://127.0.0.1:{port}"
        log_file = work / "data" / "default" / "log"
        answers_path = work / "answers.txt"
        patch = Path(str(script_for(work, "patch", args.records)))
        timed = work / "patch_answers.lua"
        timed.write_text(patch.read_text() + ANSWERS_LUA.replace("ANSWERS", str(answers_path)))
        try:
            for _ in range(120):  # bounded: at most 120 one-second runs each
                rows = json.loads(urllib.request.urlopen(f"{url}/metrics").read())["rows_per_model"]
                if rows["BlogPost"] >= args.posts:
                    break
                measure(proc, url, 1, 64, script=script_for(work, "post", args.records))
            for _ in range(120):
                if log_file.stat().st_size >= args.grow_to:
                    break
                measure(proc, url, 1, 64, script=script_for(work, "put", args.records))
            print(f"{code.name}: {rows['BlogPost']} posts, log {log_file.stat().st_size} bytes before the PATCH run")
            low = time.perf_counter()
            run = measure(proc, url, args.duration, 64, script=str(timed))
            high = time.perf_counter()
        finally:
            stop_server(proc)
        marks = [tuple(m) for m in json.loads(marks_path.read_text())] if marks_path.exists() else []
        answers = sorted(float(line) for line in answers_path.read_text().split())
    p50, p99 = run["p50_ms"], run["p99_ms"]
    print(
        f"  PATCH alone: {run['rps']:.0f} req/s, p50 {p50:.2f} / p99 {p99:.2f} ({p99 / p50:.1f}x) / max {run['max_ms']:.1f} ms"
    )
    steps = [m for m in marks if m[0] in LETTERS]
    if not steps:
        print(phase("no compaction", low, high, answers, marks))
    else:
        cut, end = min(m[1] for m in steps), max(m[2] for m in steps)
        print(phase("before the cut", low, cut, answers, marks))
        for name, start, stop, _cpu in steps:
            if stop - start > 0.05:
                print(phase("collapse" if name == "advise_heap" else name, start, stop, answers, marks))
        if end < high:
            print(phase("after", end, high, answers, marks))
    for line in log:
        if "compacted online" in line:
            print(f"  {line.strip()}")
    print(f"  load average {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
