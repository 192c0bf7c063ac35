"""The service bench's alone POST run, phase by phase: where its p99 comes from (issue 36
item 3, the POST tail).

    python bench/post_tail.py [--code DIR] [--records 100000] [--runs post,post,put]
                              [--wait 12] [--sync-seed] [--duration 3]

Why: `service_bench.py --only post --rounds 3` read p99/p50 4.7-6.6x for its first
measured run, the peers' blog POST alone, in both trees, where PUT and PATCH alone and every
side-by-side run held 1.6-2.7x (bench/README.md, "Quiet figures after the session-27
merges"). This tool lives through the same start: it seeds the two tenants the service
bench seeds (blog.dbs and bench/peers_blog.dbs, `--records` posts each, through the Store
API with fsync off, as `service_bench.seed` does), waits `--wait` seconds (what the service
bench spends between its seeding's end and that run's start: the servers' start, three
warm-ups, the bare server's alone run), then serves the peers' tenant under
served_tail.py's `--wrap` and runs `--runs` one after the other at 64 connections, each
`--duration` seconds of wrk with the service bench's own Lua script plus a `response` hook
that writes each answer's CLOCK_MONOTONIC time (write_tail.py's ANSWERS_LUA).
`--sync-seed`: `os.sync()` after the seeding, before the wait.

Marked on one clock (CLOCK_MONOTONIC: `time.perf_counter` in both processes):
- in the server (served_tail.py `--wrap`): each group commit's write (`write`) and fsync
  (`fsync`, the fsync thread's wall of the call), every ftruncate, each collection of the
  cyclic collector with its generation, late loop ticks and late wakes of a probe thread;
- in this process, every SAMPLE seconds: the server's minor and major page faults
  (/proc/PID/stat), its resident size, the host's dirty and writeback bytes
  (/proc/meminfo `Dirty`, `Writeback`) and the log file's size.

Printed a run: wrk's p50 / p99 / max, the phase line of write_tail.py (answers/s, gaps
between answers over 20 ms, group fsyncs, late ticks, collections), the faults, the dirty
bytes, the writes' and fsyncs' quantiles, then the SLOWEST gaps between two answers with
the longest fsync, write, late tick and collection overlapping each and the dirty and
writeback bytes at its start. A gap as long as the fsync inside it is the disk's; one as
long as a late tick with no long fsync is the loop's (or the core's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from http_bench import measure, start_dbsvc, stop_server  # noqa: E402
from service_bench import SCHEMA, WRITE_SCHEMAS, script_for, seed  # noqa: E402
from write_tail import ANSWERS_LUA, phase  # noqa: E402

SAMPLE = 0.01  # seconds between two samples of the faults and the dirty bytes
SLOWEST = 6  # gaps between answers shown a run, longest first
# (at, minflt, majflt, rss pages, dirty kB, writeback kB, log bytes)
Sample = tuple[float, int, int, int, int, int, int]


def meminfo(names: tuple[str, ...] = ("Dirty:", "Writeback:")) -> list[int]:
    """The host's `names` from /proc/meminfo, in kB."""
    found = dict.fromkeys(names, 0)
    with open("/proc/meminfo") as info:
        for line in info:
            key = line.split(None, 1)[0]
            if key in found:
                found[key] = int(line.split()[1])
    return [found[n] for n in names]


def faults(pid: int) -> tuple[int, int, int]:
    """(minflt, majflt, rss pages) of `pid` from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7]), int(fields[9]), int(fields[21])


def sampler(pid: int, log_file: Path, out: list[Sample], stop: threading.Event, limit: float) -> None:
    """Every SAMPLE seconds until `stop` (or `limit` seconds, whatever happens): one Sample."""
    deadline = time.monotonic() + limit
    while not stop.wait(SAMPLE) and time.monotonic() < deadline:
        try:
            minflt, majflt, rss = faults(pid)
            size = log_file.stat().st_size
        except (FileNotFoundError, ProcessLookupError):
            return
        dirty, writeback = meminfo()
        out.append((time.perf_counter(), minflt, majflt, rss, dirty, writeback, size))


def quantile_line(name: str, values: list[float]) -> str:
    if not values:
        return f"{name} 0"
    ordered = sorted(values)
    return (
        f"{name} {len(ordered)}, p50 {ordered[len(ordered) // 2] * 1e3:.2f} / p99 "
        f"{ordered[int(len(ordered) * 0.99)] * 1e3:.2f} / longest {ordered[-1] * 1e3:.2f} ms"
    )


def at(samples: list[Sample], when: float) -> Sample | None:
    """The last sample taken at or before `when`."""
    before = [s for s in samples if s[0] <= when]
    return before[-1] if before else (samples[0] if samples else None)


def describe(
    name: str, run: dict, a: float, b: float, answers: list[float], marks: list, samples: list[Sample]
) -> list[str]:
    """The lines of one run (module docstring)."""
    p50, p99 = run["p50_ms"], run["p99_ms"]
    lines = [
        f"{name}: {run['rps']:.0f} req/s, p50 {p50:.2f} / p99 {p99:.2f} ({p99 / p50:.1f}x) / max {run['max_ms']:.1f} ms",
        phase(name, a, b, answers, marks),
    ]
    first, last = at(samples, a), at(samples, b)
    inside = [s for s in samples if a <= s[0] <= b]
    if first and last and inside:
        lines.append(
            f"  faults minor {last[1] - first[1]} major {last[2] - first[2]}; rss {first[3] * 4 // 1024} -> "
            f"{last[3] * 4 // 1024} MiB; log {first[6] / 2**20:.1f} -> {last[6] / 2**20:.1f} MiB; host dirty "
            f"{first[4] // 1024} MiB at the start, {max(s[4] for s in inside) // 1024} at most, writeback at most "
            f"{max(s[5] for s in inside) // 1024} MiB"
        )
    lines.append(
        "  " + quantile_line("group writes", [m[2] - m[1] for m in marks if m[0] == "write" and a <= m[1] < b])
    )
    lines.append(
        "  " + quantile_line("group fsyncs", [m[2] - m[1] for m in marks if m[0] == "fsync" and a <= m[1] < b])
    )
    # the first group fsync carries whatever of the log's pages the kernel still held dirty
    # from before the open (a seed written with fsync off); the kernel's own writeback of
    # other files shows as long fsyncs spread over the run (ext4 data=ordered: one journal)
    syncs = sorted((m[1], m[2] - m[1]) for m in marks if m[0] == "fsync" and a <= m[1] < b)
    if syncs:
        halves = [0] * (int((b - a) / 0.5) + 1)
        for start, wall in syncs:
            halves[int((start - a) / 0.5)] += wall > 0.015
        lines.append(
            f"  first group fsync {syncs[0][1] * 1e3:.1f} ms; group fsyncs over 15 ms a half second: "
            + " ".join(str(n) for n in halves)
        )
    got = [t for t in answers if a <= t < b]
    gaps = sorted(((y - x, x, y) for x, y in zip(got, got[1:])), reverse=True)[:SLOWEST]

    def longest(kind: str, x: float, y: float) -> float:
        return max((m[2] - m[1] for m in marks if m[0] == kind and m[1] < y and m[2] > x), default=0.0) * 1e3

    for gap, x, y in gaps:
        collections = [m for m in marks if m[0].startswith("gc") and m[1] < y and m[2] > x]
        held = max(collections, key=lambda m: m[2] - m[1], default=None)
        shown = f"{held[0]} {(held[2] - held[1]) * 1e3:.1f}" if held else "gc 0.0"
        s0, s1 = at(samples, x), at(samples, y)
        flt = f"{s1[1] - s0[1]} minor, {s1[2] - s0[2]} major" if s0 and s1 else "-"
        dirty = f"dirty {s0[4] // 1024} MiB, writeback {s0[5] // 1024} MiB" if s0 else "-"
        lines.append(
            f"  gap {gap * 1e3:6.1f} ms at +{(x - a) * 1e3:5.0f}: fsync {longest('fsync', x, y):5.1f}, write "
            f"{longest('write', x, y):4.1f}, late tick {longest('late', x, y):5.1f}, late wake "
            f"{longest('gil', x, y):5.1f}, {shown}; faults {flt}; {dirty}"
        )
    counts: dict[str, int] = {}
    for m in marks:
        if m[0].startswith("gc") and a <= m[1] < b:
            counts[m[0]] = counts.get(m[0], 0) + 1
    spent = {g: sum(m[2] - m[1] for m in marks if m[0] == g and a <= m[1] < b) for g in counts}
    lines.append(
        "  collections: " + (", ".join(f"{g} {counts[g]} ({spent[g] * 1e3:.1f} ms)" for g in sorted(counts)) or "none")
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=HERE.parent, help="the checkout whose server is measured")
    parser.add_argument("--records", type=int, default=100_000, help="posts seeded in each tenant")
    parser.add_argument("--runs", default="post,post,put", help="comma list of service_bench write scripts")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds a run")
    parser.add_argument("--wait", type=float, default=12.0, help="seconds from the seeding's end to the first run")
    parser.add_argument("--sync-seed", action="store_true", help="os.sync() after the seeding")
    parser.add_argument("--huge-pages", default="on", help="SERVICE_HUGE_PAGES")
    args = parser.parse_args()
    code = args.code.resolve()
    schema = WRITE_SCHEMAS["peers"][0]
    with tempfile.TemporaryDirectory(prefix="dbsvc-post-tail-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        seed(work / "data-blog", args.records, schema=SCHEMA)
        seed(work / "data", args.records, schema=schema)
        seeded = time.perf_counter()
        dirty = meminfo()[0]
        if args.sync_seed:
            os.sync()
        print(
            f"{code.name}: seeded 2 x {args.records} posts in {seeded - started:.1f} s, host dirty {dirty // 1024} MiB"
            f"{', synced' if args.sync_seed else ''}"
        )
        marks_path = work / "marks.json"
        proc, port, log = start_dbsvc(
            {"SERVICE_DATA": str(work / "data"), "SERVICE_HUGE_PAGES": args.huge_pages},
            schema,
            code=code,
            python=[sys.executable, str(HERE / "served_tail.py"), "--wrap", str(marks_path), str(code)],
        )
        url = f"http://127.0.0.1:{port}"
        samples: list[Sample] = []
        stop = threading.Event()
        limit = args.wait + len(args.runs.split(",")) * (args.duration + 5) + 60
        thread = threading.Thread(
            target=sampler, args=(proc.pid, work / "data" / "default" / "log", samples, stop, limit), daemon=True
        )
        thread.start()
        spans = []
        try:
            time.sleep(max(0.0, args.wait - (time.perf_counter() - seeded)))
            for index, figure in enumerate(args.runs.split(",")):
                script = Path(str(script_for(work, figure, args.records)))
                answers_path = work / f"answers-{index}.txt"
                timed = work / f"{figure}-{index}-answers.lua"
                timed.write_text(script.read_text() + ANSWERS_LUA.replace("ANSWERS", str(answers_path)))
                low = time.perf_counter()
                run = measure(proc, url, args.duration, 64, script=str(timed))
                spans.append((f"{index + 1} {figure}", run, low, time.perf_counter(), answers_path))
        finally:
            stop.set()
            thread.join(timeout=5)
            stop_server(proc)
        marks = [tuple(m) for m in json.loads(marks_path.read_text())] if marks_path.exists() else []
        answers = {name: sorted(float(x) for x in path.read_text().split()) for name, _r, _a, _b, path in spans}
        shutil.rmtree(work / "data-blog", ignore_errors=True)
    if spans:  # the open's own fsyncs, if any (before the first run)
        opened = [m[2] - m[1] for m in marks if m[0] == "fsync" and m[1] < spans[0][2]]
        print(f"  fsyncs before the first run {len(opened)}, longest {max(opened, default=0.0) * 1e3:.1f} ms")
    for name, run, low, high, _path in spans:
        print("\n".join(describe(name, run, low, high, answers[name], marks, samples)))
    for line in log:
        if "compacted online" in line:
            print(f"  {line.strip()}")
    print(f"  load average {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
