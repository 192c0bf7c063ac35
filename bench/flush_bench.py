"""A large file copied and fsynced in pieces while group commits fsync beside it, by way of
flushing (issue 36 item 3: an online compaction's retained copy, snapshot and log copies;
files.flush_past).

    PYTHONPATH=. python bench/flush_bench.py [--mib 128] [--rounds 4] [--modes a,b,..]

Each round and mode copies `--mib` MiB in 1 MiB writes into a new file, flushing as the
mode says, while a thread appends 27 KB to a small log and fsyncs it in a loop (a group
commit of 64 PATCHes does about that). Modes:

- `pieces`: `files.flush_past` without a pause: fsync each 4 MiB (files.FLUSH_BYTES), the
  file's last fsync at its end (the session-20 tree);
- `paced`: the same with online.py's `WallPacer` after each piece's fsync: a sleep of
  online.PACE times that fsync's wall time, so the disk has room for the group commits;
- `ahead`: each 1 MiB written is handed to writeback at once (`posix_fadvise` DONTNEED,
  which starts it without a journal commit and drops the pages once clean), fsync each
  4 MiB as `pieces`;
- `ahead-paced`: both.

Printed per round and mode: the copy's wall time, the small fsyncs during the copy (their
count, p50, p99 and longest) and the longest in the 300 ms before it (the host's own noise
at that moment). The modes rotate their order from round to round, so each round holds
every mode at about one moment of the shared machine's load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import threading
import time
from pathlib import Path

from free_bench import small_fsyncs  # the group commits' loop, the same as the release's bench

from dbsvc.storage import files, online

CHUNK = 1 << 20  # the retained copy's writes (retain.CHUNK)


def copy(path: Path, mib: int, mode: str) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(CHUNK)
    ahead = mode.startswith("ahead")
    after = online.WallPacer(online.Progress()) if mode.endswith("paced") else None
    try:
        written = flushed = 0
        for _ in range(mib):
            os.write(fd, block)
            if ahead:
                os.posix_fadvise(fd, written, CHUNK, os.POSIX_FADV_DONTNEED)
            written += CHUNK
            flushed = files.flush_past(fd, written, flushed, after)
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(path)


def one(directory: Path, mib: int, mode: str) -> str:
    spans: list[tuple[float, float]] = []
    stop = threading.Event()
    loop = threading.Thread(target=small_fsyncs, args=(directory / "small", stop, spans))
    loop.start()
    time.sleep(0.3)
    began = time.perf_counter()
    copy(directory / "big", mib, mode)
    ended = time.perf_counter()
    time.sleep(0.05)
    stop.set()
    loop.join()
    before = [b - a for a, b in spans if a < began and b > began - 0.3]
    inside = sorted(b - a for a, b in spans if a < ended and b > began)
    ms = lambda s: f"{s * 1e3:6.1f}"  # noqa: E731
    return (
        f"{mode:12s} copy {ms(ended - began)} ms; small fsyncs during it {len(inside):4d}, "
        f"p50 {ms(inside[len(inside) // 2])} p99 {ms(inside[int(len(inside) * 0.99)])} "
        f"max {ms(inside[-1])} ms; max in the 300 ms before {ms(max(before, default=0.0))} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--modes", default="pieces,paced,ahead,ahead-paced")
    parser.add_argument("--dir", type=Path, default=Path(f"/tmp/flush-bench-{os.getpid()}"))
    args = parser.parse_args()
    modes = args.modes.split(",")
    args.dir.mkdir(parents=True, exist_ok=True)
    try:
        for r in range(args.rounds):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            load = Path("/proc/loadavg").read_text().split()[0]
            print(f"round {r + 1} (load {load}, {time.strftime('%H:%M:%S', time.gmtime())} UTC)")
            for mode in order:
                print("  " + one(args.dir, args.mib, mode), flush=True)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
