"""The service bench's alone PATCH run with the tenant's compaction inside it, phase by phase
(issue 36 item 3's write tail).

    python bench/write_tail.py [--code DIR] [--duration 8] [--huge-pages off] [--strace]

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
wall p50 / longest, thread CPU longest; the share of the phase a piece was in flight, the
answers/s while one was and between pieces; the pieces under half present before their call
and their CPU against the whole collapse's, from served_tail.py's "collapse.present"; the
huge pages it merged, from the process's AnonHugePages before and after: "collapse.huge").
The two reads cost the collapse's thread a 4 KiB pagemap read a piece and one smaps_rollup
walk at each end, outside the pieces' timing.

`--strace` (strace installed, run as root or with ptrace allowed): for the PATCH run, strace
(`-T`) is attached to every thread of the server but the loop's, tracing fsync and
fdatasync, and each phase's line adds `syscall`: the group fsyncs' time inside the kernel
(strace's `<seconds>`, the fsync thread's: count, p50, over 15 ms, longest), the steps' own
fsyncs, the group fsyncs that ran beside a step's fsync, and "marks past the call": each
group fsync's mark (the wall of `os.fsync` in Python) less the call inside it, the wait for
the GIL and the core after the kernel returned. That tells the disk from the process's own
threads (bench/README.md, wt-tail6). The loop's thread is left alone: stopping on each of its
socket calls would be the run. (strace stops the traced threads at each of their system
calls, futex waits included: the fsync thread is slower by a few tens of microseconds a call.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
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


SLACK = 0.0005  # seconds: a traced call is inside a mark when within this of its ends
SYSCALL = re.compile(r"^(\d+)\s+(\d+\.\d+) (fsync|fdatasync)\((\d+)\)\s+= (-?\d+).*<(\d+\.\d+)>$")


class Tracer:
    """strace (`-T`, fsync and fdatasync only) on every thread of `pid` but its first (the
    loop's), one strace a thread, each writing `out.<tid>`; a watcher thread attaches to the
    threads born during the run (asyncio's executor threads that run the compaction's steps)
    within POLL seconds of their birth. `--strace` only."""

    POLL = 0.02

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = pid, out
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.done = threading.Event()
        self.attach()
        time.sleep(0.5)  # the attach, before the run it is for
        self.watcher = threading.Thread(target=self.watch, daemon=True)
        self.watcher.start()

    def attach(self) -> None:
        for name in os.listdir(f"/proc/{self.pid}/task"):
            tid = int(name)
            if tid != self.pid and tid not in self.procs:
                command = ["strace", "-qq", "-T", "-ttt", "-e", "trace=fsync,fdatasync", "-p", name]
                self.procs[tid] = subprocess.Popen(
                    [*command, "-o", f"{self.out}.{tid}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )

    def watch(self) -> None:
        deadline = time.monotonic() + 120  # bounded, whatever happens to the run
        while not self.done.wait(self.POLL) and time.monotonic() < deadline:
            try:
                self.attach()
            except FileNotFoundError:  # the server is gone
                return

    def stop(self) -> None:
        self.done.set()
        self.watcher.join(timeout=5)
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            proc.wait(timeout=10)


def read_strace(out: Path, offset: float) -> Marks:
    """The traced calls as marks on the perf_counter clock: ("sys.fsync", start, end, 0.0),
    `offset` = time.time() - time.perf_counter() when read. The fsync thread is the thread
    with the most calls (the compaction's steps fsync a few times a step)."""
    calls: list[tuple[int, float, float]] = []  # (thread id, start, end)
    for path in out.parent.glob(out.name + ".*"):
        tid = int(path.suffix[1:])
        for line in path.read_text().splitlines():
            m = SYSCALL.match(f"{tid} {line.strip()}")
            if m:
                start = float(m.group(2)) - offset
                calls.append((tid, start, start + float(m.group(6))))
    if not calls:
        return []
    counts: dict[int, int] = {}
    for tid, _a, _b in calls:
        counts[tid] = counts.get(tid, 0) + 1
    group = max(counts, key=lambda t: counts[t])
    calls.sort(key=lambda c: c[1])
    return [("sys.fsync" if tid == group else "sys.fsync.step", a, b, 0.0) for tid, a, b in calls]


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
    traced, steps = within("sys.fsync"), within("sys.fsync.step")
    line = (
        f"  {name:15s} {(b - a) * 1e3:5.0f} ms {len(got) / max(b - a, 1e-9):5.0f}/s; gaps > 20 ms "
        f"{sum(g > 0.02 for g in gaps):3d}, longest {longest(gaps)}; group fsyncs {len(fsyncs)}, p50 "
        f"{statistics.median(fsyncs) * 1e3 if fsyncs else 0.0:.1f}, > 15 ms {sum(f > 0.015 for f in fsyncs)}, "
        f"longest {longest(fsyncs)}; late ticks {len(late)} ({longest(late)}), wakes {len(gil)} ({longest(gil)}); "
        f"gc > 3 ms {sum(c > 0.003 for c in collections)} ({longest(collections)})"
    )
    if traced or steps:
        line += (
            f"; syscall: group fsyncs {len(traced)}, p50 {statistics.median(traced) * 1e3 if traced else 0.0:.1f}, "
            f"> 15 ms {sum(f > 0.015 for f in traced)}, longest "
            f"{longest(traced)}; step fsyncs {len(steps)}, longest {longest(steps)}"
        )
        calls = [m for m in marks if m[0] == "sys.fsync" and a <= m[1] < b]
        pieces_sys = [m for m in marks if m[0] == "sys.fsync.step" and a <= m[1] < b]
        beside = [m[2] - m[1] for m in calls if any(p[1] < m[2] and m[1] < p[2] for p in pieces_sys)]
        if beside:  # the group fsyncs in the kernel while a step's fsync was
            line += f"; beside a step fsync {len(beside)}, p50 {statistics.median(beside) * 1e3:.1f}, longest {longest(beside)}"
        # each group fsync's mark paired with the call inside it (the two clocks agree to well
        # under SLACK): what the mark held past the call, the wait for the GIL and the core
        groups = [m for m in marks if m[0] == "fsync" and a <= m[1] < b]
        past = [
            (g[2] - g[1]) - (c[2] - c[1])
            for g in groups
            for c in calls
            if g[1] - SLACK <= c[1] and c[2] <= g[2] + SLACK
        ]
        line += (
            f"; marks past the call ({len(past)} paired) > 5 ms {sum(p > 0.005 for p in past)}, longest {longest(past)}"
        )
    if pieces:
        walls = sorted(p[0] for p in pieces)
        line += (
            f"; collapse pieces {len(pieces)}, wall p50 {walls[len(walls) // 2] * 1e3:.1f} / longest "
            f"{walls[-1] * 1e3:.1f}, CPU longest {max(p[1] for p in pieces) * 1e3:.1f}"
        )
        # The loop's answers while a piece is in flight (the kernel's copy under the mapping's
        # lock, on the core the loop shares) against those in the pauses between pieces: a
        # gap's overlap with a piece says little (a 20 ms gap spans a piece and its pause by
        # chance), a rate does.
        spans = [(m[1], m[2]) for m in marks if m[0] == "collapse.piece" and a <= m[1] < b]
        in_pieces = sum(e - s for s, e in spans)
        during = sum(1 for t in got if any(s <= t < e for s, e in spans))
        between = max(b - a - in_pieces, 1e-9)
        line += (
            f"; pieces in flight {in_pieces / max(b - a, 1e-9):.0%} of the phase, answers/s there "
            f"{during / max(in_pieces, 1e-9):.0f}, between pieces {(len(got) - during) / between:.0f}"
        )
        # each piece's share of pages present before its call (served_tail.py), beside its CPU
        shares = [m[3] for m in marks if m[0] == "collapse.present" and a <= m[1] < b]
        cpus = [p[1] for p in pieces]
        huge = [m[3] for m in marks if m[0] == "collapse.huge" and a - 0.5 <= m[1] <= b + 0.5]
        if len(huge) == 2 and min(huge) >= 0:
            line += f"; merged {(huge[1] - huge[0]) / 2**21:.0f} huge pages ({huge[0] / 2**20:.0f} -> {huge[1] / 2**20:.0f} MiB)"
        if len(shares) == len(cpus):
            sparse = [c for f, c in zip(shares, cpus) if 0 <= f < 0.5]
            line += (
                f"; pieces under half present {len(sparse)} ({sum(sparse) * 1e3:.0f} of "
                f"{sum(cpus) * 1e3:.0f} ms CPU), present p50 {statistics.median(shares):.0%}"
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
    parser.add_argument("--strace", action="store_true", help="time the fsyncs in the kernel too (strace -T)")
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
        tracer = None
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
            tracer = Tracer(proc.pid, work / "strace") if args.strace and shutil.which("strace") else None
            offset = time.time() - time.perf_counter()
            low = time.perf_counter()
            run = measure(proc, url, args.duration, 64, script=str(timed))
            high = time.perf_counter()
        finally:
            if tracer is not None:
                tracer.stop()
            stop_server(proc)
        traced = read_strace(work / "strace", offset) if args.strace else []
        marks = [tuple(m) for m in json.loads(marks_path.read_text())] if marks_path.exists() else []
        answers = sorted(float(line) for line in answers_path.read_text().split())
    marks = marks + traced
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
