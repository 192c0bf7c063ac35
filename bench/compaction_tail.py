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
thread's CPU between two of its pauses. `--code DIR` runs another checkout: run two in
turns for an A/B pair; one run's wave times mean little on a loaded host, the ratios do.
"""

from __future__ import annotations

import argparse
import asyncio
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
STEPS = ("take_cut", "write_snapshot", "write_retained", "start_log", "hold_old_files", "finish_log", "drop_slowly")
_NULL = os.open(os.devnull, os.O_WRONLY)


class SendingTransport(WaveTransport):
    """Each response written with a syscall that lets the GIL go, as a socket's send does."""

    sends: list[tuple[float, float]] = []  # (start, seconds) of each write: the GIL's wait after it

    def write(self, data: bytes) -> None:
        start = time.perf_counter()
        os.write(_NULL, data)
        SendingTransport.sends.append((start, time.perf_counter() - start))
        super().write(data)


def _timed(online: Any, marks: dict[str, list[float]], slices: list[float]) -> None:
    """Wrap the compaction's steps (their start and end on the wall clock) and the pacer."""

    def timed(name: str, fn: Any) -> Any:
        def step(*args: Any) -> Any:
            marks[name] = [time.perf_counter(), 0.0]
            try:
                return fn(*args)
            finally:
                marks[name][1] = time.perf_counter()

        return step

    for name in STEPS:
        setattr(online, name, timed(name, getattr(online, name)))
    if hasattr(online, "Pacer"):
        pause = online.Pacer.__call__

        def paced(self: Any) -> None:
            slices.append(time.thread_time() - self.mark)
            pause(self)

        online.Pacer.__call__ = paced


async def run(data: Path, waves: int, at: int) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
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
    for wave in range(waves):
        inputs = [request_bytes("patch", wave * CONNECTIONS + i, rng, 20_000) for i in range(CONNECTIONS)]
        if wave == at:
            task = store.compact_now()
        WaveTransport.expected = WaveTransport.writes + CONNECTIONS
        waiter = WaveTransport.waiter = loop.create_future()
        start = time.perf_counter()
        for connection, piece in zip(connections, inputs):
            connection.data_received(piece)
        await waiter
        waited.append((start, time.perf_counter() - start))
    if task is not None:
        await task
    pauses = list(store.compactor.pauses)
    await store.aclose()
    return waited, pauses


def _overlapping(waited: list[tuple[float, float]], start: float, end: float) -> list[float]:
    return [seconds for at, seconds in waited if at < end and at + seconds > start]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--code", type=Path, default=HERE.parent)
    parser.add_argument("--waves", type=int, default=200)
    parser.add_argument("--at", type=int, default=100, help="the wave at which the compaction starts")
    args = parser.parse_args()
    sys.path[:0] = [str(args.code.resolve()), str(HERE)]
    from dbsvc.logs import configure_logging
    from dbsvc.storage import online

    configure_logging("warn", "text", stream=open(os.devnull, "w"))  # noqa: SIM115
    marks: dict[str, list[float]] = {}
    slices: list[float] = []
    _timed(online, marks, slices)
    copy = Path(os.environ.get("PHASES_DIR", "/dev/shm/compaction-tail"))
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(args.data, copy)
    try:
        waited, pauses = asyncio.run(run(copy, args.waves, args.at))
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    median = statistics.median(seconds for _at, seconds in waited[10 : args.at])
    snapshot = _overlapping(waited, *marks["write_snapshot"])
    whole = _overlapping(waited, marks["take_cut"][0], marks["drop_slowly"][1])
    start, end = marks["write_snapshot"]
    print(
        f"{args.code.resolve().name}: median wave {median * 1e3:.1f} ms | snapshot {(end - start) * 1e3:.0f} ms, "
        f"{len(snapshot)} waves, mean {statistics.mean(snapshot) / median:.2f}x, largest {max(snapshot) / median:.2f}x"
        f" | whole compaction {(marks['drop_slowly'][1] - marks['take_cut'][0]) * 1e3:.0f} ms, largest "
        f"{max(whole) / median:.2f}x | pauses (cut, switch) "
        + ", ".join(f"{cut * 1e3:.1f} + {switch * 1e3:.1f} ms" for cut, switch in pauses)
    )
    inside = sorted(seconds for at, seconds in SendingTransport.sends if start < at < end)
    before = sorted(seconds for at, seconds in SendingTransport.sends if at < marks["take_cut"][0])
    print(
        "  a response's write (the syscall and the GIL back): before the compaction p99 "
        f"{before[int(len(before) * 0.99)] * 1e3:.2f} ms; during the snapshot p50 {inside[len(inside) // 2] * 1e3:.2f},"
        f" p99 {inside[int(len(inside) * 0.99)] * 1e3:.2f}, largest {inside[-1] * 1e3:.2f} ms, over 1 ms "
        f"{sum(seconds > 1e-3 for seconds in inside) / len(inside):.1%} of {len(inside)}"
    )
    if slices:
        slices.sort()
        print(
            f"  thread CPU between two pauses: median {slices[len(slices) // 2] * 1e3:.2f} ms, "
            f"largest {slices[-1] * 1e3:.2f} ms, {len(slices)} pauses"
        )
    print(f"  load average {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
