"""bench/replication_bench.py's steady mode: a replica's CPU split by thread, the host's speed
beside it, and the median of several runs.

Why: the served replica's figure moved by +-15% between runs of the same code on a quiet
host (session 19: 42.4-58.1k frames/s, 17.0-22.1 us a frame while applying), more than any
lever measured. These parts say what a run's CPU went to, so that a run's spread can be
told apart from a change's effect:

- `ThreadSample`/`threads(pid)`: per thread of a process, from /proc/PID/task/TID: CPU time
  in ns (`schedstat`: time on a core, and time runnable but waiting for one), slices,
  voluntary and involuntary context switches (`status`), migrations between cores (`sched`),
  minor page faults, and the user/system split (`stat`, in clock ticks).
- `roles(pid)`: which thread is which. /proc names every thread of a Python 3.11 process
  `python`, so each one's blocking system call is read a few times once the replica is
  caught up: the main thread is the process's own id, the reading thread waits in a poll
  or a receive on its socket (follower.py), the fsync thread on a lock (`futex`,
  storage/fsyncthread.py); anything else is `other`.
- `summary(runs)`: median and spread of the figures of several runs, among them each run's
  calibration (replication_replica.calibrate: the apply of a fixed slice of the log in this
  process, on the replica's core, just before the run) and the run's figure over it; that
  ratio was no steadier than the run's own figure at load (the host changes within a run),
  so it is shown, not used.
- `paired(runs_a, runs_b)`: two trees' replicas run in turn (`--replica-code`), B over A
  pair by pair. At load these ratios spread as widely as the runs (the host's speed changes
  within seconds, so two runs in turn do not share it): the steady A/B is two replicas at
  once, replication_pair.py (`--side-by-side`).

Imports nothing of dbsvc and no other replication_* module.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
# x86_64 system call numbers a thread is blocked in (/proc/PID/task/TID/syscall, first field)
READING_CALLS = {"0", "7", "23", "45", "47", "232", "270", "271", "281"}  # read, poll, select, recv*, epoll, ppoll
FUTEX = "202"


@dataclass(frozen=True)
class ThreadSample:
    """One thread's counters at one moment (module docstring)."""

    run_ns: int
    wait_ns: int
    slices: int
    voluntary: int
    involuntary: int
    migrations: int
    minflt: int
    utime: float
    stime: float


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # the thread ended meanwhile
        return ""


def thread_sample(task: Path) -> ThreadSample | None:
    schedstat, status, stat, sched = (_read(task / name) for name in ("schedstat", "status", "stat", "sched"))
    if not (schedstat and status and stat):
        return None
    run_ns, wait_ns, slices = (int(x) for x in schedstat.split()[:3])
    fields = stat.rsplit(")", 1)[1].split()
    switches = {}
    for line in status.splitlines():
        if "ctxt_switches" in line:
            name, _, value = line.partition(":")
            switches[name.strip()] = int(value)
    migrations = 0
    for line in sched.splitlines():
        if line.startswith("se.nr_migrations"):
            migrations = int(line.split(":")[1])
    return ThreadSample(
        run_ns,
        wait_ns,
        slices,
        switches.get("voluntary_ctxt_switches", 0),
        switches.get("nonvoluntary_ctxt_switches", 0),
        migrations,
        int(fields[7]),
        int(fields[11]) / TICK,
        int(fields[12]) / TICK,
    )


def threads(pid: int) -> dict[int, ThreadSample]:
    """Every thread of `pid` now, by thread id."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        sample = thread_sample(task)
        if sample is not None:
            out[int(task.name)] = sample
    return out


def roles(pid: int, looks: int = 10, every: float = 0.01) -> dict[int, str]:
    """Each thread's role, from the system calls it blocks in (module docstring); read
    while the process is idle (the replica caught up)."""
    seen: dict[int, list[str]] = {}
    for _ in range(looks):
        for task in Path(f"/proc/{pid}/task").iterdir():
            call = _read(task / "syscall").split(" ", 1)[0]
            seen.setdefault(int(task.name), []).append(call)
        time.sleep(every)
    named = {}
    for tid, calls in seen.items():
        if tid == pid:
            named[tid] = "main"
        elif any(call in READING_CALLS for call in calls):
            named[tid] = "reading"
        elif all(call == FUTEX for call in calls):
            named[tid] = "fsync"
        else:
            named[tid] = "other"
    if list(named.values()).count("fsync") > 1 or list(named.values()).count("reading") > 1:
        named = {tid: (role if role == "main" else "other") for tid, role in named.items()}
    return named


def split(before: dict[int, ThreadSample], after: dict[int, ThreadSample], named: dict[int, str], frames: int) -> dict:
    """Per role, over `frames` frames: us of CPU a frame (schedstat), us waiting for a core
    a frame, switches (voluntary, involuntary), migrations, minor faults a frame, system
    share of its ticks."""
    out: dict[str, dict] = {}
    frames = max(frames, 1)
    for tid, end in after.items():
        start = before.get(tid, ThreadSample(0, 0, 0, 0, 0, 0, 0, 0.0, 0.0))
        role = named.get(tid, "other")
        into = out.setdefault(
            role, {"us": 0.0, "wait_us": 0.0, "vol": 0, "invol": 0, "migr": 0, "minflt": 0.0, "user": 0.0, "sys": 0.0}
        )
        into["us"] += (end.run_ns - start.run_ns) / frames / 1e3
        into["wait_us"] += (end.wait_ns - start.wait_ns) / frames / 1e3
        into["vol"] += end.voluntary - start.voluntary
        into["invol"] += end.involuntary - start.involuntary
        into["migr"] += end.migrations - start.migrations
        into["minflt"] += (end.minflt - start.minflt) / frames
        into["user"] += end.utime - start.utime
        into["sys"] += end.stime - start.stime
    return out


def describe(parts: dict) -> str:
    order = ["main", "reading", "fsync", "other"]
    return "; ".join(
        f"{role} {p['us']:.2f} us (wait {p['wait_us']:.2f}, sys {100 * p['sys'] / max(p['user'] + p['sys'], 1e-9):.0f}%, "
        f"switches {p['vol']}/{p['invol']}, migr {p['migr']}, flt {p['minflt']:.2f})"
        for role in order
        if (p := parts.get(role))
    )


def median_spread(values: list[float]) -> str:
    """'median (min-max, +-half the range as % of the median)'."""
    if not values:
        return "n/a"
    mid = statistics.median(values)
    half = (max(values) - min(values)) / 2
    return f"{mid:.2f} ({min(values):.2f}-{max(values):.2f}, +-{100 * half / mid if mid else 0:.1f}%)"


def summary(runs: list[dict]) -> dict:
    """The median and spread over several replica runs (replication_replica.measure_replica's
    results): frames/s, CPU a frame while applying, the same by thread, the calibration."""
    out = {
        "runs": len(runs),
        "rate": [r["rate"] for r in runs],
        "us_applying": [r["replica_cpu_us_applying"] for r in runs],
        "calibration_us": [r["calibration_us"] for r in runs],
    }
    for role in ("main", "reading", "fsync"):
        out[f"{role}_us"] = [r["threads"][role]["us"] for r in runs if role in r["threads"]]
    out["wait_us"] = [sum(p["wait_us"] for p in r["threads"].values()) for r in runs]
    out["normalized"] = [r["replica_cpu_us_applying"] / r["calibration_us"] for r in runs]
    return out


def print_summary(what: str, figures: dict) -> None:
    print(f"  {what}, median of {figures['runs']} runs (min-max, +-half the range):", flush=True)
    print(f"    frames/s               {median_spread([r / 1000 for r in figures['rate']])} k", flush=True)
    print(f"    us a frame applying    {median_spread(figures['us_applying'])} (CPU, user+sys)", flush=True)
    one_core = [1e3 / us for us in figures["us_applying"] if us > 0]
    print(f"      = on one core        {median_spread(one_core)} k frames/s (60k: 16.7 us a frame)", flush=True)
    for role in ("main", "reading", "fsync"):
        if figures[f"{role}_us"]:
            print(f"      {role:<8} thread     {median_spread(figures[f'{role}_us'])}", flush=True)
    print(f"    waiting for a core     {median_spread(figures['wait_us'])} us a frame", flush=True)
    print(f"    calibration            {median_spread(figures['calibration_us'])} us a frame in process", flush=True)
    print(f"    served / calibration   {median_spread(figures['normalized'])}", flush=True)


def paired(runs_a: list[dict], runs_b: list[dict]) -> dict:
    """B against A run by run (the runs alternate A, B, A, B, ...: each pair ran within a
    minute of itself): ratios of the CPU a frame while applying, of the main thread's, and
    of frames/s; medians and spread."""
    pairs = list(zip(runs_a, runs_b))
    return {
        "pairs": len(pairs),
        "us_applying": [b["replica_cpu_us_applying"] / a["replica_cpu_us_applying"] for a, b in pairs],
        "main_us": [b["threads"]["main"]["us"] / a["threads"]["main"]["us"] for a, b in pairs],
        "rate": [b["rate"] / a["rate"] for a, b in pairs],
        "b_lower": sum(b["replica_cpu_us_applying"] < a["replica_cpu_us_applying"] for a, b in pairs),
    }


def print_paired(a: str, b: str, figures: dict) -> None:
    print(f"  {b} / {a}, {figures['pairs']} alternated pairs (median, min-max, +-half the range):", flush=True)
    print(
        f"    us a frame applying    {median_spread(figures['us_applying'])}; B lower in {figures['b_lower']}",
        flush=True,
    )
    print(f"    main thread            {median_spread(figures['main_us'])}", flush=True)
    print(f"    frames/s               {median_spread(figures['rate'])}", flush=True)
