"""A read replica's reading thread alone, in process: the CPU a frame of its read and cut
(ws/client.py `receive_many`) and of its checks (replica/groups.py `checked`), tree by tree.

    python bench/replication_reader.py                       # this tree, 3 rounds
    python bench/replication_reader.py --code /tmp/old,. --rounds 4   # two trees alternated, B/A
    python bench/replication_reader.py --log /path/to/tenant/log --frames 100000

Why: a served replica's thread table (replication_threads.py) gives its reading thread's CPU
a frame (1.3-1.5 us at load 9-13), and py-spy's samples of that thread sit mostly in
`Condition.wait`, which read as GIL hand-overs. They are not: py-spy's samples on this host
are not time on a core (it samples a thread asleep in `time.sleep`, and a thread runnable
and waiting for its core), and perf by thread (cpu-clock, only while on a core) puts the
thread's own work at ~99% of its CPU (bench/README.md, session 27, wt-rep25).
This bench measures that work without a server, a loop or the other threads: a writer thread
sends the frames of a tenant's log as the primary does (one binary WebSocket frame each, a
16-bit length) over a socketpair, and the reader takes groups as the follower does
(`receive_many(BATCH, BATCH_BYTES)`, then `checked`), timing each with `thread_time`.

The log: `--log`, or the first cached tenant of bench/replication_bench.py under `--cache`
(build one with `python bench/replication_bench.py --events 200000 --only inprocess`).
Each tree runs in a process of its own (both are `dbsvc`); with two trees the processes
alternate, which goes first swapped each round, and B/A is read pair by pair. Imports
dbsvc only in the child, from the tree it is given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG_HEADER = 40  # storage/logfile.py: the log's own header before its frames
WRITE_PIECE = 1 << 20
READ_WAIT = 5.0  # a bound on each group's first message: the writer never stalls that long


def frames_of(log: Path, limit: int) -> list[bytes]:
    """The first `limit` frames (header and payload) of a tenant's log, as written."""
    data = log.read_bytes()
    at, frames = LOG_HEADER, []
    while at + 16 <= len(data) and len(frames) < limit:
        length = int.from_bytes(data[at + 12 : at + 16], "big")
        frames.append(data[at : at + 16 + length])
        at += 16 + length
    return frames


def child(tree: str, log: Path, limit: int) -> dict:
    """One round in this process, `tree` first on sys.path: CPU a frame of each part."""
    sys.path.insert(0, tree)
    import socket
    import threading

    from wsproto import WSConnection
    from wsproto.connection import ConnectionType

    from dbsvc.http.ws.client import ClientWebSocket
    from dbsvc.replica.consumer import BATCH, BATCH_BYTES
    from dbsvc.replica.groups import checked

    frames = frames_of(log, limit)
    stream = b"".join(b"\x82\x7e" + len(f).to_bytes(2, "big") + f for f in frames)
    writer_end, reader_end = socket.socketpair()

    def write() -> None:
        for at in range(0, len(stream), WRITE_PIECE):
            writer_end.sendall(stream[at : at + WRITE_PIECE])

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    ws = ClientWebSocket(reader_end, WSConnection(ConnectionType.CLIENT), 80 << 20, 75.0)
    clock = time.thread_time
    read = check = 0.0
    expected, groups = 1, 0
    deadline = time.monotonic() + 120
    while expected <= len(frames) and time.monotonic() < deadline:
        start = clock()
        batch = ws.receive_many(BATCH, BATCH_BYTES, READ_WAIT)
        middle = clock()
        group = checked(batch, expected, 1 << 20)
        read, check = read + middle - start, check + clock() - middle
        expected += len(group)
        groups += 1
    writer.join(timeout=10)
    writer_end.close()
    reader_end.close()
    got = expected - 1
    if got != len(frames):
        raise SystemExit(f"read {got} of {len(frames)} frames within the bound")
    return {"read_us": read / got * 1e6, "check_us": check / got * 1e6, "per_group": got / groups}


def run_child(tree: str, log: Path, limit: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", tree, "--log", str(log), "--frames", str(limit)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__)
    parser.add_argument("--code", default=str(ROOT), help="one tree, or two (A,B) alternated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--log", default=None, help="a tenant's log file (default: the bench cache's)")
    parser.add_argument("--cache", default="/tmp/dbsvc-replication-bench")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.log is None:
        found = sorted(Path(args.cache).glob("users-*/data/default/log"))
        if not found:
            parser.error(f"no cached tenant under {args.cache}: pass --log, or build one (module docstring)")
        args.log = str(found[0])
    if args.child:
        print(json.dumps(child(args.child, Path(args.log), args.frames)))
        return 0
    trees = args.code.split(",")
    print(f"log {args.log}, {args.frames:,} frames; load {os.getloadavg()[0]:.1f}", flush=True)
    seen: dict[str, list[dict]] = {tree: [] for tree in trees}
    for round_ in range(args.rounds):
        order = trees if round_ % 2 == 0 else trees[::-1]
        for tree in order:
            figure = run_child(tree, Path(args.log), args.frames)
            seen[tree].append(figure)
            print(
                f"round {round_ + 1} {tree}: read and cut {figure['read_us']:.3f} us a frame, "
                f"check {figure['check_us']:.3f}, {figure['per_group']:.0f} frames a group",
                flush=True,
            )
    for tree, figures in seen.items():
        read = statistics.median(f["read_us"] for f in figures)
        check = statistics.median(f["check_us"] for f in figures)
        print(f"{tree}: medians read and cut {read:.3f} us a frame, check {check:.3f}, both {read + check:.3f}")
    if len(trees) == 2:
        a, b = (seen[tree] for tree in trees)
        for part in ("read_us", "check_us"):
            ratios = [y[part] / x[part] for x, y in zip(a, b)]
            print(f"B/A {part[:-3]}: {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) by pair")
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
