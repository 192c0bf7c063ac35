"""bench/replication_bench.py's side-by-side replicas (`--side-by-side`): two trees' replicas
following one primary at the same moment, on the same core, measured over the same span.

Why: on this host the CPU a frame of one replica moves by +-13-26% between runs of the same
code, and the in-process apply of the same frames (no socket, no thread) moves as much, a
second apart (bench/README.md, session 20, wt-rep16): the spread is the host's speed, which
changes within seconds, so two runs one after the other do not share it. Two replicas on
one core share it: the scheduler hands the core to each in turn every few ms, so each
slower or faster second falls on both, and their ratio keeps only what differs between
the trees (and, symmetrically, what each costs the other's caches).

The span: from the first poll in which both replicas answer `/metrics` to the first poll
in which either has applied the primary's head. Each one's CPU (process and per thread,
replication_threads.py) and frames applied over that span give its CPU a frame; the ratio
B / A is the figure, one per round; rounds swap which tree starts first. Which thread is
which is read once both are caught up (a thread's role is read from where it waits idle).

Imports replication_kit and replication_threads; nothing of dbsvc.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from replication_kit import ARGS, Server, Servers, loadavg
from replication_threads import median_spread, roles, split, threads


class _Side:
    """One replica of the pair and its samples."""

    def __init__(self, code: Path, data: Path) -> None:
        self.code, self.data = code, data
        self.server: Server | None = None
        self.error: BaseException | None = None
        self.first: tuple[int, float, dict] | None = None  # (applied, cpu, threads) at the span's start
        self.last: tuple[int, float, dict] | None = None

    def start(self, sync: str, primary: Server, servers: Servers) -> None:
        try:
            self.server = servers.add(
                Server(
                    f"replica ({self.code})",
                    {"SERVICE_DATA": str(self.data), "SERVICE_SYNC": sync},
                    ("--follow", primary.url),
                    core=ARGS.replica_core,
                    code=self.code,
                )
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the caller's thread
            self.error = exc

    def sample(self) -> tuple[int, bool]:
        """(frames applied, caught up), with this replica's CPU and threads noted."""
        assert self.server is not None
        state = self.server.get_json("/metrics").get("replica") or {}
        if state.get("state") == "stopped":
            raise RuntimeError(f"the replica of {self.code} stopped following: {state}")
        applied = state.get("primary_offset", 0) - state.get("lag_offsets", 0)
        self.last = (applied, self.server.cpu(), threads(self.server.proc.pid))
        return applied, state.get("lag_offsets") == 0


def measure_pair(
    servers: Servers, primary: Server, head: int, sync: str, workdir: Path, codes: list[Path], swap: bool
) -> dict:
    """One round: the two trees' replicas from empty, side by side (module docstring)."""
    sides = [_Side(code, workdir / f"pair-{i}") for i, code in enumerate(codes)]
    for side in sides:
        shutil.rmtree(side.data, ignore_errors=True)
    load0 = loadavg()
    order = sides[::-1] if swap else sides
    starters = [threading.Thread(target=s.start, args=(sync, primary, servers)) for s in order]
    for starter in starters:
        starter.start()
        time.sleep(0.05)  # the first-named starts first
    for starter in starters:
        starter.join()
    for side in sides:
        if side.error is not None:
            raise RuntimeError(f"the replica of {side.code} did not start") from side.error
    deadline = time.monotonic() + ARGS.timeout
    while time.monotonic() < deadline:
        done = False
        for side in sides:
            applied, caught_up = side.sample()
            if side.first is None:
                side.first = side.last
            done = done or (caught_up and applied >= head)
        if done:
            break
        time.sleep(0.1)
    else:
        raise RuntimeError(f"no replica of the pair caught up within {ARGS.timeout:.0f} s")
    window = [(side.first, side.last) for side in sides]
    for side in sides:  # roles are read idle (replication_threads.roles): the other one catches up first
        while time.monotonic() < deadline and not side.sample()[1]:
            time.sleep(0.1)
    figures = []
    for side, (first, last) in zip(sides, window):
        assert side.server is not None and first is not None and last is not None
        frames = last[0] - first[0]
        by_thread = split(first[2], last[2], roles(side.server.proc.pid), frames)
        figures.append(
            {
                "code": str(side.code),
                "frames": frames,
                "us": (last[1] - first[1]) / max(frames, 1) * 1e6,
                "main_us": by_thread.get("main", {}).get("us", float("nan")),
                "threads": by_thread,
            }
        )
    for side in sides:
        servers.stop(side.server)
        shutil.rmtree(side.data, ignore_errors=True)
    a, b = figures
    ratio, main_ratio = b["us"] / a["us"], b["main_us"] / a["main_us"]
    print(
        f"  side by side ({'B' if swap else 'A'} first): A {a['us']:.2f} us a frame (main {a['main_us']:.2f}, "
        f"{a['frames']:,} frames), B {b['us']:.2f} (main {b['main_us']:.2f}, {b['frames']:,} frames): "
        f"B/A {ratio:.3f}, main {main_ratio:.3f}; load average {load0}",
        flush=True,
    )
    return {"a": a, "b": b, "ratio": ratio, "main_ratio": main_ratio, "load": load0}


def measure_pairs(servers: Servers, primary: Server, head: int, sync: str, workdir: Path, codes: list[Path]) -> dict:
    """`--repeat` rounds of `measure_pair`, the first tree starting first in every other one."""
    print(f"  A = {codes[0]}, B = {codes[1]}, both on core {ARGS.replica_core}, SERVICE_SYNC={sync}:", flush=True)
    rounds = [measure_pair(servers, primary, head, sync, workdir, codes, bool(i % 2)) for i in range(ARGS.repeat)]
    ratios = [r["ratio"] for r in rounds]
    mains = [r["main_ratio"] for r in rounds]
    print(f"  B/A over {len(rounds)} rounds: CPU a frame {median_spread(ratios)}", flush=True)
    print(f"                      main thread {median_spread(mains)}", flush=True)
    for side in ("a", "b"):
        us = [r[side]["us"] for r in rounds]
        print(
            f"    {side.upper()}'s own: {median_spread(us)} us a frame (CPU, user+sys), on one core "
            f"{median_spread([1e3 / u for u in us if u > 0])} k frames/s (60k: 16.7 us a frame)",
            flush=True,
        )
    return {"rounds": rounds, "ratios": ratios, "main_ratios": mains}
