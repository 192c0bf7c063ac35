"""What reading strictly costs two readers of stored frames: `dbsvc replicate --out FILE`'s
open of an existing FILE (dbsvc/replica/sinks.py `ReplicaFile.open`) and `dbsvc backup`
(dbsvc/datatools/backup.py `take_backup`), timed on one tree's code.

    python bench/strict_read_bench.py [--tree DIR] [--frames 200000] [--records 50000] [--runs 5] [--keep DIR]

`--tree` is the dbsvc checkout whose code is timed (default: this one), so a tree before a
change and one after it are timed on the same data: run the script once with each. The
data is made with the timed tree's library calls, as the commands make it: `import_file` of
the blog schema's users (each with a `profile` object holding a float, so the strict
decoder's per-float call is paid) into a tenant of `--frames` records, whose log without
its 40-byte header is exactly a FILE `dbsvc replicate --out` writes (sinks.py: "a log
without its header"); and two tenants of `--records` records for the backup, one with its
rows in the log, one compacted (its rows in a snapshot).
`--keep DIR` keeps both in DIR and reuses them on the next run (so both trees read the
same bytes).

Printed: for each reader, the wall-clock seconds of each run, their minimum and median, the
frames a second at the median, and the load average before and after. These machines are
shared: say the load beside the figures, and compare minimums taken close together.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HEADER_SIZE = 40  # storage/logfile.py: the log header a replica FILE does not have


def make_tenant(data: str, name: str, records: int, *, compacted: bool = False) -> str:
    """A tenant of `records` users, imported as `dbsvc import` does (then compacted, as
    `dbsvc compact` does: its rows in a snapshot, its log empty); its directory."""
    from dbsvc.compiler import compile_schema
    from dbsvc.datatools.lines import encode_line, line_head
    from dbsvc.datatools.load import import_file
    from dbsvc.schema import load_schema
    from dbsvc.storage.tenants import create_tenant, tenant_dir

    directory = tenant_dir(data, name)
    if os.path.exists(os.path.join(directory, "log")):
        return directory
    schema = Path(__file__).resolve().parents[1] / "schemas" / "blog.dbs"
    module = compile_schema(load_schema(str(schema)))
    os.makedirs(data, exist_ok=True)
    lines = os.path.join(data, f"{name}.jsonl")
    head = line_head("User")
    with open(lines, "w", encoding="utf-8") as out:
        for i in range(1, records + 1):
            record = {
                "id": i,
                "email": f"user{i}@example.com",
                "name": f"User {i}",
                "age": 20 + i % 50,
                "role": "reader",
                "joined": "2026-01-01T00:00:00Z",
                "profile": {"score": i / 7, "city": "Lyon"},
            }
            out.write(encode_line(head, record))
    directory = create_tenant(data, name)
    import_file(directory, module, lines, quiet=True)
    os.unlink(lines)
    if compacted:
        from dbsvc.storage.tenants import compact_tenant

        compact_tenant(data, name, retain_bytes=0)
    return directory


def time_runs(runs: int, action) -> list[float]:
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return seconds


def show(what: str, seconds: list[float], frames: int) -> dict:
    median = statistics.median(seconds)
    runs = " ".join(f"{s:.3f}" for s in seconds)
    print(f"{what}: runs {runs} s; min {min(seconds):.3f} s, median {median:.3f} s ({frames / median:,.0f} rows/s)")
    return {"what": what, "runs": seconds, "min": min(seconds), "median": median, "frames": frames}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]), help="the dbsvc checkout timed")
    parser.add_argument("--frames", type=int, default=200_000, help="frames of the replica FILE")
    parser.add_argument("--records", type=int, default=50_000, help="records of the tenant backed up")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", metavar="DIR", help="make the data in DIR and keep it (default: a temporary one)")
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(args.tree))

    from dbsvc.datatools.backup import take_backup
    from dbsvc.replica.sinks import ReplicaFile

    work = args.keep or tempfile.mkdtemp(prefix="strict-read-")
    os.makedirs(work, exist_ok=True)
    try:
        print(f"tree {args.tree}; load average before {os.getloadavg()}")
        big = make_tenant(os.path.join(work, "data"), "frames", args.frames)
        replica = os.path.join(work, "replica.log")
        if not os.path.exists(replica):
            with open(os.path.join(big, "log"), "rb") as log:
                Path(replica).write_bytes(log.read()[HEADER_SIZE:])

        class Quiet:
            def say(self, message: str) -> None:
                raise AssertionError(f"the FILE was cut: {message}")

        def open_file() -> None:
            ReplicaFile.open(replica, Quiet()).close()

        small = make_tenant(os.path.join(work, "data"), "backup", args.records)
        folded = make_tenant(os.path.join(work, "data"), "compacted", args.records, compacted=True)
        dest = os.path.join(work, "bk")

        def backup(tenant: str):
            def run() -> None:
                shutil.rmtree(dest, ignore_errors=True)
                take_backup(tenant, dest, "backup")

            return run

        figures = [
            show(f"replicate --out FILE open, {args.frames} frames", time_runs(args.runs, open_file), args.frames),
            show(f"backup of {args.records} records in the log", time_runs(args.runs, backup(small)), args.records),
            show(f"backup of {args.records} records in a snapshot", time_runs(args.runs, backup(folded)), args.records),
        ]
        print(f"load average after {os.getloadavg()}")
        print(json.dumps({"tree": args.tree, "figures": figures, "load": os.getloadavg()}))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
