"""A tenant's read-only open, two checkouts alternated, each open in a process of its own
(issue 36 item 2 of session 28: the open's word index built from the stored texts).

    python bench/open_words.py DATA --old /tmp/old-febb9ee [--new .] [--rounds 3]

DATA is a data directory of the blog schema (bench/query_bench.py's `seeded`, tenant
`default`; a format-3 seed as it is, or a copy compacted by this tree into format 4): it
is only read. Each round opens it once with each checkout (`Store.open(..., readonly=True)`
in a fresh `python` with that checkout first on its path), the order alternating, and
prints the open's wall and process CPU seconds, the CPU of its word index's build alone
(`WordIndex.build` / `build_stored`, timed by a wrapper), the RSS after, the load, and a
digest of the word index (every word with its ids, sorted) and of the live records: the
two checkouts' must be equal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import hashlib, json, os, sys, time
from dbsvc.compiler import compile_schema
from dbsvc.schema import load_schema
from dbsvc.storage import Store, words

built = [0.0]
for name in ("build", "build_stored"):
    inner = getattr(words.WordIndex, name, None)
    if inner is None:
        continue
    def timed(self, *args, _inner=inner, **kwargs):
        start = time.process_time()
        try:
            return _inner(self, *args, **kwargs)
        finally:
            built[0] += time.process_time() - start
    setattr(words.WordIndex, name, timed)
mod = compile_schema(load_schema(sys.argv[2]))
wall, cpu = time.perf_counter(), time.process_time()
store = Store.open(sys.argv[1], mod.MODELS, mod.DESCRIPTION, readonly=True)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
with open("/proc/self/statm") as f:
    rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
table = store.table("BlogPost")
digest = hashlib.sha256()
for word in sorted(table.words.postings):
    digest.update(word.encode("utf-8", "surrogatepass") + b"\0" + repr(sorted(table.words.postings[word])).encode())
live = hashlib.sha256()
for id_ in sorted(table.live):
    live.update(table.live[id_])
print(json.dumps({"wall": wall, "cpu": cpu, "words": built[0], "rss": rss, "digest": digest.hexdigest()[:16],
                  "live": live.hexdigest()[:16], "count": len(table.live), "distinct": len(table.words)}))
store.close()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, default=HERE.parent)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    seen: dict[str, set[tuple[str, str]]] = {"old": set(), "new": set()}
    for r in range(args.rounds):
        for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
            tree = trees[name]
            env = dict(os.environ, PYTHONPATH=str(tree))
            load = os.getloadavg()[0]
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(args.data / "default"), str(tree / "schemas" / "blog.dbs")],
                env=env,
                capture_output=True,
                text=True,
                timeout=1200,
                check=True,
            ).stdout
            got = json.loads(out.strip().splitlines()[-1])
            seen[name].add((got["digest"], got["live"]))
            print(
                f"round {r + 1} {name}: open {got['wall']:.1f} s wall, {got['cpu']:.2f} s CPU, word index "
                f"{got['words']:.2f} s CPU, RSS {got['rss']:.0f} MB; {got['count']} posts, {got['distinct']} words; "
                f"words {got['digest']} live {got['live']}; load {load:.1f}",
                flush=True,
            )
    print("equal" if seen["old"] == seen["new"] and len(seen["new"]) == 1 else f"DIFFERENT {seen}")


if __name__ == "__main__":
    main()
