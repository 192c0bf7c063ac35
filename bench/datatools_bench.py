"""Import and export speed of the data tools (docs/data-tools.md) at N records.

    python bench/datatools_bench.py [--records 1000000] [--users-share 0.1] [--sync full] [--keep DIR]
                                    [--no-size-check]

Writes a JSON Lines file of the blog schema (`schemas/blog.dbs`): N/10 users, then the rest
as blog posts each referencing a user, every record in its canonical form and in id order,
i.e. exactly what `dbsvc export` writes. Then, in this process, with the library calls the
commands make:

1. `import_file` into a fresh tenant (SERVICE_SYNC=full by default: the one fsync of the
   batch included), timed per phase: read + validate, set checks (with the read-only open),
   write (with the writer open, frames, fsync, in-memory apply);
2. `export_to_path` of the whole tenant to a file (its locked read-only open included,
   which replays the import's log rows), and a check that the export is byte for byte the
   file imported (the round trip);
3. `compact_tenant` (what `dbsvc compact` runs), then the export again: the open now reads
   a snapshot, as a server's start-up does after compaction.

`--no-size-check` runs the import without the record-size rule (storage/events.py
"Sizes"; batch.py rule 5): the check step's measure of each record and the write step's
per-frame test are switched off in this process only, to price the rule (bench/README.md).

Prints records/s for both (wall clock) and records per CPU second of this process, plus a
JSON line with every figure. These machines are shared: when neighbours load both cores the
wall-clock rates fall with them, while the CPU-time rates stay close to what an idle
machine gives (the one fsync of the import waits off the CPU, a few ms). The load average
is printed alongside.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.datatools.export import export_to_path  # noqa: E402
from dbsvc.datatools.lines import encode_line, line_head  # noqa: E402
from dbsvc.datatools.load import import_file  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402
from dbsvc.storage.tenants import compact_tenant, create_tenant  # noqa: E402


def write_input(path: str, records: int, users_share: float) -> tuple[int, int]:
    users = max(1, int(records * users_share))
    posts = records - users
    user_head, post_head = line_head("User"), line_head("BlogPost")
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        batch = []
        for i in range(1, users + 1):
            batch.append(
                encode_line(
                    user_head,
                    {
                        "id": i,
                        "email": f"user{i}@example.com",
                        "name": f"User number {i}",
                        "age": 20 + i % 60,
                        "role": ("admin", "editor", "reader")[i % 3],
                        "joined": f"2025-{1 + i % 12:02d}-01T08:30:00Z",
                        "profile": {"bio": "writes about databases", "links": [i]} if i % 4 == 0 else None,
                    },
                )
            )
            if len(batch) == 4096:
                out.write("".join(batch))
                batch.clear()
        for i in range(1, posts + 1):
            batch.append(
                encode_line(
                    post_head,
                    {
                        "id": i,
                        "author_id": 1 + i % users,
                        "title": f"Post {i} about storage engines",
                        "body": "A paragraph of text that stands for a blog post body. " * 2,
                        "published": i % 2 == 0,
                        "score": (i % 1000) / 7,
                        "tags": ["db", "python"] if i % 3 == 0 else None,
                    },
                )
            )
            if len(batch) == 4096:
                out.write("".join(batch))
                batch.clear()
        out.write("".join(batch))
    return users, posts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--users-share", type=float, default=0.1)
    parser.add_argument("--sync", choices=("full", "off"), default="full")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary directory)")
    parser.add_argument("--no-size-check", action="store_true", help="price the record-size rule: run without it")
    args = parser.parse_args()
    if args.no_size_check:
        _without_size_check()
    module = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
    work = args.keep or tempfile.mkdtemp(prefix="dbsvc-datatools-")
    os.makedirs(work, exist_ok=True)
    source = os.path.join(work, "input.jsonl")
    started = time.monotonic()
    users, posts = write_input(source, args.records, args.users_share)
    size = os.path.getsize(source)
    print(
        f"input: {users:,} users + {posts:,} posts, {size / 1e6:.1f} MB, written in "
        f"{time.monotonic() - started:.1f} s; load average {os.getloadavg()[0]:.2f}"
    )

    directory = create_tenant(os.path.join(work, "data"), "bench")
    cpu = time.process_time()
    report = import_file(directory, module, source, sync=args.sync, quiet=True)
    cpu = time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes (Linux reports KiB)
    import_rate = report.records / report.seconds
    print(
        f"import: {report.records:,} records in {report.seconds:.2f} s = {import_rate:,.0f} records/s "
        f"(read+validate {report.read_seconds:.2f} s, checks {report.check_seconds:.2f} s, "
        f"write {report.write_seconds:.2f} s); CPU {cpu:.2f} s = {report.records / cpu:,.0f} records per CPU second; "
        f"peak memory {peak / 1e6:,.0f} MB = {peak / report.records:,.0f} bytes per record"
    )

    exported = os.path.join(work, "export.jsonl")
    first = _export(directory, module, exported, "after the import (the open replays the import's log rows)")
    same = _same_bytes(source, exported)
    print(f"round trip: export {'is' if same else 'IS NOT'} byte-identical to the imported file")
    print(compact_tenant(os.path.dirname(directory), "bench"))
    second = _export(directory, module, exported, "after `dbsvc compact` (the open reads the snapshot)")
    same = same and _same_bytes(source, exported)
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(
        json.dumps(
            {
                "records": report.records,
                "sync": args.sync,
                "size_check": not args.no_size_check,
                "import_records_per_s": round(import_rate),
                "import_records_per_cpu_s": round(report.records / cpu),
                "import_peak_rss_bytes": peak,
                "import_read_s": round(report.read_seconds, 2),
                "import_check_s": round(report.check_seconds, 2),
                "import_write_s": round(report.write_seconds, 2),
                "export_after_import": first,
                "export_after_compact": second,
                "round_trip_identical": same,
            }
        )
    )
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0 if same else 1


def _without_size_check() -> None:
    """Switch the record-size rule off in this process (the figure without it)."""
    from dbsvc.storage import batch

    plan = batch.plan
    batch.plan = lambda tables, rows, max_payload=batch.MAX_PAYLOAD, measure=True: plan(
        tables, rows, max_payload, False
    )
    batch.size_refusal = lambda *args, **kwargs: None


def _export(directory: str, module, path: str, when: str) -> dict:
    cpu = time.process_time()
    report = export_to_path(directory, module, path, list(module.MODELS), {}, quiet=True)
    cpu = time.process_time() - cpu
    write = report.seconds - report.open_seconds
    figures = {
        "records_per_s": round(report.records / report.seconds),
        "seconds": round(report.seconds, 2),
        "open_s": round(report.open_seconds, 2),
        "write_records_per_s": round(report.records / write),
        "records_per_cpu_s": round(report.records / cpu),
    }
    print(
        f"export {when}: {report.records:,} records in {report.seconds:.2f} s = {figures['records_per_s']:,} "
        f"records/s (open {report.open_seconds:.2f} s; writing alone {figures['write_records_per_s']:,} "
        f"records/s); CPU {cpu:.2f} s = {figures['records_per_cpu_s']:,} records per CPU second"
    )
    return figures


def _same_bytes(a: str, b: str) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


if __name__ == "__main__":
    raise SystemExit(main())
