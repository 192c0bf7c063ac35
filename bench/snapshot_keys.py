"""The online snapshot step's CPU, two writers alternated in one process on one open store
(issue 36 item 3, session 28: the block's keys cut out of the stored texts).

    PYTHONPATH=. python bench/snapshot_keys.py DATA --old /tmp/old-febb9ee [--rounds 3] [--profile]

DATA is a data directory of the blog schema (bench/query_bench.py's `seeded`, tenant
`default`), a copy: it is opened in place with SERVICE_SYNC off, and nothing is written to
it but each round's snapshot.new, removed at the end. The store is opened once (a 1M open
is a minute or more on the shared host); then each round takes a cut and runs
`online.write_snapshot` unpaced (PACE 0) twice, once with this checkout's snapshot writer
and once with `--old`'s snapshot.py loaded beside it (its `write_snapshot_stream` put in
`online`'s place), in alternating order. Printed per run: the step's thread CPU and the
load, then the ratio new / old per round, and the sha256 of each run's snapshot.new,
written with a fixed epoch: the two writers' files must be equal byte for byte.
`--profile`: one more run of each under cProfile, the top functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import importlib.util
import io
import os
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_old(tree: Path):  # noqa: ANN201 (a module)
    """The old tree's snapshot.py as a module of its own, importing this tree's helpers
    (runtime, files, rows: the writer's only imports)."""
    spec = importlib.util.spec_from_file_location("old_snapshot", tree / "dbsvc" / "storage" / "snapshot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_snapshot"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="the data directory (its tenant `default` is opened)")
    parser.add_argument("--old", type=Path, required=True, help="the old checkout (its snapshot.py)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.storage import Store, compact, files, online

    compact.new_epoch = lambda: "0" * 32  # the same file from the same tenant, whatever the writer
    online.PACE = 0.0
    writers = {"new": online.write_snapshot_stream, "old": load_old(args.old).write_snapshot_stream}
    module = compile_schema(load_schema(str(HERE.parent / "schemas" / "blog.dbs")))
    wall = time.perf_counter()
    store = Store.open(str(args.data / "default"), module.MODELS, module.DESCRIPTION, sync="off")
    print(f"open {time.perf_counter() - wall:.1f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    tables = dict(store.tables)
    directory = str(args.data / "default")
    path = Path(directory) / (compact.SNAPSHOT_NAME + compact.NEW_SUFFIX)
    digests: dict[str, set[str]] = {"new": set(), "old": set()}

    def run(name: str, profiler: cProfile.Profile | None = None) -> float:
        online.write_snapshot_stream = writers[name]  # type: ignore[assignment]
        cut = online.take_cut(tables, store.applied_offset, 0)
        cpu = time.thread_time()
        try:
            if profiler is not None:
                profiler.runcall(online.write_snapshot, directory, cut, online.Progress(), files.NO_FAULTS)
            else:
                online.write_snapshot(directory, cut, online.Progress(), files.NO_FAULTS)
        finally:
            online.end_cut(tables)
        cpu = time.thread_time() - cpu
        digests[name].add(hashlib.sha256(path.read_bytes()).hexdigest())
        online.discard(directory)
        return cpu

    try:
        for r in range(args.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            took = {}
            for name in order:
                took[name] = run(name)
                print(f"round {r + 1} {name}: thread CPU {took[name]:.2f} s, load {os.getloadavg()[0]:.1f}", flush=True)
            print(f"round {r + 1}: new / old {took['new'] / took['old']:.2f}", flush=True)
        if args.profile:
            for name in ("old", "new"):
                profiler = cProfile.Profile()
                print(f"profile {name}: {run(name, profiler):.2f} s (under the profiler)")
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
                print("\n".join(out.getvalue().splitlines()[6:22]))
        for name, seen in digests.items():
            print(f"{name} sha256 {' '.join(sorted(seen))}")
        print("equal" if digests["new"] == digests["old"] and len(digests["new"]) == 1 else "DIFFERENT")
    finally:
        online.write_snapshot_stream = writers["new"]  # type: ignore[assignment]
        store.close()


if __name__ == "__main__":
    main()
    sys.exit(0)
