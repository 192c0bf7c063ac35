"""A replaced file freed whole or in pieces while group commits fsync beside it (issue 36
item 3: the release step of an online compaction, storage/freeing.py).

    PYTHONPATH=. python bench/free_bench.py [--mib 68] [--rounds 6] [--dir /tmp/free-bench]

Each round writes a file of `--mib` MiB, fsyncs it and unlinks it with a descriptor still
open (as the switch's renames leave the old log), while a thread appends 27 KB to a small
log and fsyncs it in a loop (a group commit of 64 PATCHes does about that). 300 ms into
the loop the file is freed: `whole` closes the descriptor (what the old tree does),
`pieces` runs freeing.free (FREE_BYTES at a time, FREE_PAUSE between) and then closes it.
The loop runs 300 ms more. Printed per round: the mode, the free's wall time, the longest
small fsync that overlapped the free (and 50 ms after it), and the longest in the 300 ms
before it (the host's own noise at that moment). The modes alternate, whole first in odd
rounds, so each pair is taken at one moment of the shared machine's load.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

from dbsvc.storage import freeing

PIECE = 27_000  # bytes a group commit of 64 PATCHes appends (~420 bytes of frame each)


def small_fsyncs(path: Path, stop: threading.Event, spans: list[tuple[float, float]]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    data = b"x" * PIECE
    try:
        while not stop.is_set():
            os.write(fd, data)
            start = time.perf_counter()
            os.fsync(fd)
            spans.append((start, time.perf_counter()))
    finally:
        os.close(fd)


def big_file(path: Path, mib: int) -> int:
    """A file of `mib` MiB on disk, unlinked, its descriptor open (read-write, as held)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(1 << 20)
    for i in range(mib):
        os.write(fd, block)
        if i % 4 == 3:
            os.fsync(fd)
    os.fsync(fd)
    os.unlink(path)
    return fd


def one(directory: Path, mib: int, mode: str) -> tuple[float, float, float]:
    fd = big_file(directory / "old", mib)
    time.sleep(0.2)  # the big file's writeback settles
    spans: list[tuple[float, float]] = []
    stop = threading.Event()
    thread = threading.Thread(target=small_fsyncs, args=(directory / "log", stop, spans))
    thread.start()
    time.sleep(0.3)
    start = time.perf_counter()
    if mode == "pieces":
        freeing.free(fd, lambda: False)
    os.close(fd)
    end = time.perf_counter()
    time.sleep(0.3)
    stop.set()
    thread.join()
    during = max((b - a for a, b in spans if a < end + 0.05 and b > start), default=0.0)
    before = max((b - a for a, b in spans if start - 0.3 <= a and b <= start), default=0.0)
    return end - start, during, before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=68)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--dir", type=Path, default=Path(f"/tmp/free-bench-{os.getpid()}"))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    try:
        for r in range(1, args.rounds + 1):
            order = ("whole", "pieces") if r % 2 else ("pieces", "whole")
            for mode in order:
                took, during, before = one(args.dir, args.mib, mode)
                load = Path("/proc/loadavg").read_text().split()[0]
                print(
                    f"round {r} {mode:6s}: free {took * 1e3:6.1f} ms, longest small fsync during it "
                    f"{during * 1e3:6.1f} ms (before it {before * 1e3:5.1f} ms), load {load}",
                    flush=True,
                )
    finally:
        for name in ("old", "log"):
            try:
                os.unlink(args.dir / name)
            except FileNotFoundError:
                pass
        os.rmdir(args.dir)


if __name__ == "__main__":
    main()
