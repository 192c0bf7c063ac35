"""PATCH waves in process with one online compaction forced mid-run: each wave's latency
against the compaction's steps (issue 36 item 3).

    python bench/compaction_tail.py DATA [--code DIR] [--waves 200] [--at 100]

DATA is a tenant seeded by `service_bench.seed` (20,000 peers' posts, /tmp/pristine-20k);
each run copies it to `PHASES_DIR` (default /dev/shm/compaction-tail) and opens it with
SERVICE_SYNC=full. 64 `HttpConnection`s get a wave of one PATCH each (write_inprocess.py's
bytes), and each response is written with a syscall that lets the GIL go (`os.write` to
/dev/null), as the server's `send()` does: without it a thread holding the GIL would cost the
loop nothing between two waves, and the convoy the server meets would not show. At wave
`--at` the store compacts (`compact_now`); online.py's step functions are wrapped to time
them. Printed: the median wave before the compaction, then for the snapshot step and for
the whole compaction the waves that overlapped it (mean and largest as a multiple of that
median), the loop's pauses (cut, switch), and, where the checkout has `online.Pacer`, the
thread's CPU between two of its pauses, and how many of those pieces ran over 4 ms by the
function that paused after them (`snapshot` for write_snapshot_stream's own and its blocks',
`log copy` for `_copy_frames`'). `--code DIR` runs another checkout: run two in
turns for an A/B pair; one run's wave times mean little on a loaded host, the ratios do.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from standin import WaveTransport

HERE = Path(__file__).resolve().parent
STEPS = (
    "take_cut",
    "write_snapshot",
    "write_retained",
    "start_log",
    "catch_up",
    "hold_old_files",
    "finish_log",
    "release_files",
    "drop_slowly",
)
# The timeline's letters: each step's, the driver's own (the collector's freezes, the heap's
# huge-page advice) and a collection of the cyclic collector (`gc.callbacks`).
LETTERS = {
    "take_cut": "C",
    "write_snapshot": "S",
    "write_retained": "R",
    "start_log": "L",
    "catch_up": "U",
    "hold_old_files": "H",
    "finish_log": "W",
    "release_files": "F",
    "drop_slowly": "D",
    "freeze_live": "Z",
    "advise_heap": "A",
}
BUCKET = 0.05  # seconds a line of the timeline
_NULL = os.open(os.devnull, os.O_WRONLY)


class SendingTransport(WaveTransport):
    """Each response written with a syscall that lets the GIL go, as a socket's send does."""

    sends: list[tuple[float, float]] = []  # (start, seconds) of each write: the GIL's wait after it

    def write(self, data: bytes) -> None:
        start = time.perf_counter()
        os.write(_NULL, data)
        SendingTransport.sends.append((start, time.perf_counter() - start))
        super().write(data)


Marks = list[tuple[str, float, float]]  # (step, start, end) on the wall clock, in call order


LONG_PIECE = 0.004  # thread CPU seconds: a piece counted apart, by where it paused (`_where`)


def _where(frame: Any) -> str:
    """The part of a thread step a pause was called from: its caller's name, read up the
    stack to the first frame that says which step it is."""
    while frame is not None:
        name = frame.f_code.co_name
        if name in ("write_snapshot_stream", "_blocks"):
            return "snapshot"
        if name in ("_copy_frames", "catch_up", "start_log"):
            return "log copy"
        frame = frame.f_back
    return "other"


def _timed(
    online: Any, compactor: Any, marks: Marks, slices: list[float], long: list[tuple[float, str]] | None = None
) -> None:
    """Wrap the compaction's steps (online.py's, and the driver's freezes and heap advice)
    and the pacer."""

    def timed(name: str, fn: Any) -> Any:
        def step(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args)
            finally:
                marks.append((name, start, time.perf_counter()))

        return step

    for name in STEPS:
        setattr(online, name, timed(name, getattr(online, name)))
    for name in ("freeze_live", "advise_heap"):
        if hasattr(compactor, name):
            setattr(compactor, name, timed(name, getattr(compactor, name)))
    if hasattr(online, "Pacer"):
        pause = online.Pacer.__call__

        def paced(self: Any) -> None:
            used = time.thread_time() - self.mark
            slices.append(used)
            if long is not None and used > LONG_PIECE:
                long.append((used, _where(sys._getframe(1))))
            pause(self)

        online.Pacer.__call__ = paced


def _collections(marks: Marks) -> None:
    """Mark each run of the cyclic collector as a step "gc<generation>/<its CPU ms>"; the
    timeline prints "gc<generation>/<CPU ms>:<wall ms>"."""
    started = [0.0, 0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = time.perf_counter(), time.thread_time()
        else:  # its thread's CPU in the name: a wall far over it is time off the CPU
            cpu = (time.thread_time() - started[1]) * 1e3
            marks.append((f"gc{info['generation']}/{cpu:.1f}", started[0], time.perf_counter()))

    gc.callbacks.append(callback)


async def run(
    data: Path, waves: int, at: int, after: int
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    from write_inprocess import CONNECTIONS, request_bytes

    from dbsvc.app import Application
    from dbsvc.compiler import compile_schema
    from dbsvc.http.connection import HttpConnection
    from dbsvc.http.hub import Hub
    from dbsvc.http.types import HttpSettings
    from dbsvc.realtime.broker import Broker
    from dbsvc.schema import load_schema
    from dbsvc.service import settle_heap
    from dbsvc.storage import Store

    loop = asyncio.get_running_loop()
    module = compile_schema(load_schema(str(HERE / "peers_blog.dbs")))
    store = Store.open(str(data / "default"), module.MODELS, module.DESCRIPTION, sync="full", replication=True)
    records = len(store.tables["BlogPost"].live)
    broker = Broker(store, module.BY_NAME, 1024)
    broker.attach(loop.call_soon, loop.call_later)
    hub = Hub(Application(module, store, broker, replication=True), HttpSettings(port=0), loop)
    settle_heap()
    connections = []
    for _ in range(CONNECTIONS):
        connection = HttpConnection(hub)
        connection.connection_made(SendingTransport())
        connections.append(connection)
    rng = random.Random(11)
    waited: list[tuple[float, float]] = []  # (start, seconds) of each wave
    task = None
    WaveTransport.writes = 0
    left = after  # waves still sent once the compaction is done
    for wave in range(waves):
        inputs = [request_bytes("patch", wave * CONNECTIONS + i, rng, records) for i in range(CONNECTIONS)]
        if wave == at:
            task = store.compact_now()
        WaveTransport.expected = WaveTransport.writes + CONNECTIONS
        waiter = WaveTransport.waiter = loop.create_future()
        start = time.perf_counter()
        for connection, piece in zip(connections, inputs):
            connection.data_received(piece)
        await waiter
        waited.append((start, time.perf_counter() - start))
        if task is not None and task.done():
            left -= 1
            if left <= 0:
                break
    if task is not None:
        await task
    pauses = list(store.compactor.pauses)
    await store.aclose()
    return waited, pauses


def _overlapping(waited: list[tuple[float, float]], start: float, end: float) -> list[float]:
    return [seconds for at, seconds in waited if at < end and at + seconds > start]


def _span(marks: Marks, name: str) -> tuple[float, float]:
    """The first start and last end of a step's calls."""
    found = [(start, end) for step, start, end in marks if step == name]
    return found[0][0], found[-1][1]


def timeline(waited: list[tuple[float, float]], marks: Marks, median: float, pauses: list[Any]) -> list[str]:
    """A line per BUCKET from shortly before the cut to the end of the run: the waves that
    started in it (how many, their mean and largest as multiples of the median wave before
    the compaction), the steps that ran in it (LETTERS; `*` the switch on the loop), and the
    collector's runs there (generation: ms)."""
    origin = _span(marks, "take_cut")[0]
    first = origin - 10 * BUCKET
    last = max(at + seconds for at, seconds in waited)
    switch = [(start, end) for step, start, end in marks if step == "finish_log"]
    lines = []
    for b in range(int((last - first) / BUCKET) + 1):
        low, high = first + b * BUCKET, first + (b + 1) * BUCKET
        inside = [seconds for at, seconds in waited if low <= at < high]
        steps = "".join(
            sorted({LETTERS[step] for step, start, end in marks if step in LETTERS and start < high and end > low})
        )
        if any(start < high and end > low for start, end in switch):
            steps += "*"
        collected = [
            f"{step}:{(end - start) * 1e3:.1f}"
            for step, start, end in marks
            if step[:2] == "gc" and low <= start < high
        ]
        waves = (
            f"{len(inside):2d} waves mean {statistics.mean(inside) / median:5.2f}x max {max(inside) / median:5.2f}x"
            if inside
            else " 0 waves" + " " * 26
        )
        lines.append(f"  {(low - origin) * 1e3:+7.0f} ms  {waves}  {steps:8s} {' '.join(collected)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--code", type=Path, default=HERE.parent)
    parser.add_argument("--waves", type=int, default=200, help="at most this many waves")
    parser.add_argument("--at", type=int, default=100, help="the wave at which the compaction starts")
    parser.add_argument("--after", type=int, default=20, help="waves sent once the compaction is done")
    parser.add_argument(
        "--timeline", action="store_true", help=f"print the waves and steps every {BUCKET * 1e3:.0f} ms"
    )
    args = parser.parse_args()
    sys.path[:0] = [str(args.code.resolve()), str(HERE)]
    from dbsvc.logs import configure_logging
    from dbsvc.storage import compactor, online

    configure_logging("warn", "text", stream=open(os.devnull, "w"))  # noqa: SIM115
    marks: Marks = []
    slices: list[float] = []
    long: list[tuple[float, str]] = []
    _timed(online, compactor, marks, slices, long)
    copy = Path(os.environ.get("PHASES_DIR", "/dev/shm/compaction-tail"))
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(args.data, copy)
    _collections(marks)
    try:
        waited, pauses = asyncio.run(run(copy, args.waves, args.at, args.after))
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    median = statistics.median(seconds for _at, seconds in waited[10 : args.at])
    start, end = _span(marks, "write_snapshot")
    snapshot = _overlapping(waited, start, end)
    began = _span(marks, "take_cut")[0]
    ended = max(end for step, _start, end in marks if step in LETTERS)
    whole = _overlapping(waited, began, ended)
    print(
        f"{args.code.resolve().name}: median wave {median * 1e3:.1f} ms | snapshot {(end - start) * 1e3:.0f} ms, "
        f"{len(snapshot)} waves, mean {statistics.mean(snapshot) / median:.2f}x, largest {max(snapshot) / median:.2f}x"
        f" | whole compaction {(ended - began) * 1e3:.0f} ms, {len(whole)} waves, mean "
        f"{statistics.mean(whole) / median:.2f}x, largest {max(whole) / median:.2f}x | pauses (cut, switch) "
        + ", ".join(f"{cut * 1e3:.1f} + {switch * 1e3:.1f} ms" for cut, switch in pauses)
    )
    print("  steps (ms from the cut, ms):", ", ".join(
        f"{step} {(s - began) * 1e3:.0f} +{(e - s) * 1e3:.0f}" for step, s, e in marks if step in LETTERS))  # fmt: skip
    # A served p99 over a round: the waves' per-request latencies, inside the compaction and
    # over a window of as many seconds of waves before it.
    before = [seconds for at, seconds in waited[10 : args.at]]
    print(
        f"  waves p50 / p99 / max: before the compaction {_quantiles(before)}; "
        f"from the cut to the end {_quantiles(whole)}; whole run {_quantiles([s for _a, s in waited[10:]])}"
    )
    inside = sorted(seconds for at, seconds in SendingTransport.sends if start < at < end)
    before_sends = sorted(seconds for at, seconds in SendingTransport.sends if at < began)
    print(
        "  a response's write (the syscall and the GIL back): before the compaction p99 "
        f"{before_sends[int(len(before_sends) * 0.99)] * 1e3:.2f} ms; during the snapshot p50 "
        f"{inside[len(inside) // 2] * 1e3:.2f}, p99 {inside[int(len(inside) * 0.99)] * 1e3:.2f}, largest "
        f"{inside[-1] * 1e3:.2f} ms, over 1 ms {sum(seconds > 1e-3 for seconds in inside) / len(inside):.1%} of "
        f"{len(inside)}"
    )
    if slices:
        slices.sort()
        print(
            f"  thread CPU between two pauses: median {slices[len(slices) // 2] * 1e3:.2f} ms, "
            f"largest {slices[-1] * 1e3:.2f} ms, {len(slices)} pauses"
        )
        parts = sorted({where for _used, where in long})
        told = [
            f"{where} {sum(w == where for _u, w in long)} (largest {max(u for u, w in long if w == where) * 1e3:.1f} ms)"
            for where in parts
        ]
        print(f"  pieces over {LONG_PIECE * 1e3:.0f} ms of thread CPU: {', '.join(told) or 'none'}")
    if args.timeline:
        print("\n".join(timeline(waited, marks, median, pauses)))
    print(f"  load average {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")


def _quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    return (
        f"{ordered[len(ordered) // 2] * 1e3:.1f} / {ordered[int(len(ordered) * 0.99)] * 1e3:.1f} / "
        f"{ordered[-1] * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
