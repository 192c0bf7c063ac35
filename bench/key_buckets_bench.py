"""A few-valued ordered index's cost in process: a replica's runs into it, and a list's reads.

    python bench/key_buckets_bench.py                          # this tree: 100 keys, 200,000 pairs
    python bench/key_buckets_bench.py --code /tmp/old-204b144  # another checkout, for an A/B
    python bench/key_buckets_bench.py --distinct 700 --entries 200000 --rounds 5

1. runs: `add_ordered_run` of `--entries` (key, id) pairs, keys at random among
   `--distinct`, ids ascending (a replica's inserts), in groups of 512 into an `OrderedIndex`
   of typecode "q" with the follower's collector thresholds (20,000, 10, 100). Only the
   second half of the pairs is timed (the index then holds half of them, laid out as it
   chose: indexes.py `bucketed`), by the thread's CPU, best of `--rounds`; printed in us a
   pair, whole, and split into the key column (`KeyColumn.set_many`), the pairs' tuples and
   sort, and their placement (runs.py `_bucket_pairs` or `_merge_pairs`), from one more
   round taken apart step by step.
2. reads: the same entries built at once (`from_columns`, an open's), then the reads a
   list on that field makes: a first page, a page at offset 5,000 both ways, a range's first
   page with its count, a cursor's page both ways, one key's ids; us a call, best of 7 x 2,000.

The figures are CPU of one thread, steadier under load than a served rate; still, take A/B
pairs at one moment and write the load beside them (bench/README.md, "A few-valued ordered
index kept one key a sublist").
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
import timeit
from pathlib import Path

GROUP = 512


def _runs(args: argparse.Namespace, keys: list[int]) -> str:
    from dbsvc.storage import runs
    from dbsvc.storage.indexes import OrderedIndex

    n = len(keys)
    half = (n // 2) // GROUP * GROUP
    best = None
    index = OrderedIndex(typecode="q")
    for _round in range(args.rounds):
        index = OrderedIndex(typecode="q")
        for at in range(0, half, GROUP):
            runs.add_ordered_run(index, keys[at : at + GROUP], list(range(at + 1, at + GROUP + 1)))
        start = time.thread_time()
        for at in range(half, n, GROUP):
            runs.add_ordered_run(index, keys[at : at + GROUP], list(range(at + 1, at + GROUP + 1)))
        spent = (time.thread_time() - start) / (n - half) * 1e6
        best = spent if best is None else min(best, spent)
    # One more round taken apart: the steps of `add_ordered_run` for these runs (no nulls).
    index = OrderedIndex(typecode="q")
    for at in range(0, half, GROUP):
        runs.add_ordered_run(index, keys[at : at + GROUP], list(range(at + 1, at + GROUP + 1)))
    parts = {"column": 0.0, "pairs": 0.0, "place": 0.0}
    for at in range(half, n, GROUP):
        group, ids = keys[at : at + GROUP], list(range(at + 1, at + GROUP + 1))
        t0 = time.thread_time()
        column = index.column
        newer = not column.far and min(ids) >= len(column.slots)
        column.set_many(ids, group)
        t1 = time.thread_time()
        pairs = list(zip(group, ids))
        pairs.sort()
        t2 = time.thread_time()
        if getattr(index, "bucketed", False):
            runs._bucket_pairs(index, pairs, newer)
        else:
            runs._merge_pairs(index, pairs, newer)
            index.grown(len(pairs))
        t3 = time.thread_time()
        parts["column"] += t1 - t0
        parts["pairs"] += t2 - t1
        parts["place"] += t3 - t2
    split = ", ".join(f"{k} {v / (n - half) * 1e6:.3f}" for k, v in parts.items())
    return f"runs: {best:.3f} us a pair (bucketed={getattr(index, 'bucketed', '-')}); taken apart: {split}"


def _reads(keys: list[int], distinct: int) -> str:
    from dbsvc.storage.indexes import OrderedIndex

    n = len(keys)
    index = OrderedIndex.from_columns(keys, list(range(1, n + 1)), "q")
    mid = distinct // 2
    held = index.run_ids(mid)
    at = held[len(held) // 2]
    cases = {
        "first page": lambda: index.ids_head((0, 0), index.end, 20),
        "offset 5000 asc": lambda: index.ids_slice(5000, 5020),
        "offset 5000 desc": lambda: index.ids_descending(5000, 5020),
        "range page + count": lambda: (
            index.ids_head(index.lower(mid, True), index.end, 20),
            index.count_span(index.lower(mid, True), index.end),
        ),
        "cursor asc": lambda: index.ids_head(index.cursor_run(mid, at)[1], index.end, 20),
        "cursor desc": lambda: list(zip(range(20), index.pairs_span_descending((0, 0), index.after(mid, at - 1)))),
        "one key's ids": lambda: index.run_ids(mid),
    }
    out = []
    for name, call in cases.items():
        best = min(timeit.repeat(call, number=2000, repeat=7)) / 2000 * 1e6
        out.append(f"{name} {best:.2f}")
    return f"reads (us a call, bucketed={getattr(index, 'bucketed', '-')}): " + "; ".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parent.parent, help="checkout to import")
    parser.add_argument("--distinct", type=int, default=100, help="distinct keys (the bench's `age`: 100)")
    parser.add_argument("--entries", type=int, default=200_000, help="pairs added")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of the runs (best taken)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.code))
    gc.set_threshold(20_000, 10, 100)  # a follower's (service.py FOLLOWER_GC_THRESHOLDS)
    rnd = random.Random(1)
    keys = [rnd.randrange(args.distinct) for _ in range(args.entries)]
    print(f"{args.code}: {args.distinct} keys, {args.entries:,} pairs; load {os.getloadavg()[0]:.1f}")
    print("  " + _runs(args, keys))
    print("  " + _reads(keys, args.distinct))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
