"""A sort field's ids at an offset in process: the walk of the sublists (`sublist_slice`, what
`OrderedIndex.ids_slice` did before wt-ids) against `ids_slice` now (a Fenwick descent past
FOUND_FROM), on an index of N entries built directly (no store to open).

    PYTHONPATH=. python bench/ordered_deep_slices.py [N] [ROUNDS]

N (1,000,000) random float keys with ids 1..N (a `score` sort field's index), one page of
20 at each offset in OFFSETS. Each round times CALLS calls of each (offset, way), the two
ways alternated in order from round to round, by `time.thread_time` (a loaded host's waits
do not count), and prints us a call with the load average beside it. The answers are
compared first: the bench refuses to time two ways that disagree. Also printed once: the
tree's build (the first deep slice after a split pays it).
"""

from __future__ import annotations

import os
import random
import sys
import time

from usage import check_argv

from dbsvc.storage.fenwick import Fenwick
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.sortedlist import sublist_slice

OFFSETS = (0, 1_000, 100_000, 900_000)
PAGE = 20
CALLS = 2_000


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    rng = random.Random(36)
    t0 = time.perf_counter()
    ids = list(range(1, n + 1))
    keys = [rng.random() for _ in ids]
    index = OrderedIndex.from_columns(keys, ids, "d")
    print(f"built {n:,} entries in {time.perf_counter() - t0:.1f} s, {len(index.id_sublists):,} sublists")
    t0 = time.thread_time()
    Fenwick(map(len, index.id_sublists))
    print(f"tree build: {(time.thread_time() - t0) * 1e6:.0f} us")

    def walk(start: int) -> list[int]:
        return sublist_slice(index.id_sublists, start, min(start + PAGE, len(index)))

    def descent(start: int) -> list[int]:
        return index.ids_slice(start, start + PAGE)

    ways = {"walk": walk, "descent": descent}
    for offset in OFFSETS:
        if walk(offset) != descent(offset) or len(walk(offset)) != min(PAGE, max(n - offset, 0)):
            raise SystemExit(f"the two ways disagree at offset {offset}")
    print("round | load | " + " | ".join(f"{o:,} walk / descent" for o in OFFSETS))
    for r in range(rounds):
        order = list(ways) if r % 2 == 0 else list(reversed(ways))
        took: dict[tuple[str, int], float] = {}
        for offset in OFFSETS:
            for name in order:
                way = ways[name]
                t0 = time.thread_time()
                for _ in range(CALLS):
                    way(offset)
                took[name, offset] = (time.thread_time() - t0) / CALLS * 1e6
        load = os.getloadavg()[0]
        cells = " | ".join(f"{took['walk', o]:.2f} / {took['descent', o]:.2f}" for o in OFFSETS)
        print(f"{r + 1} ({order[0]} first) | {load:.1f} | {cells}", flush=True)


if __name__ == "__main__":
    check_argv(__doc__, 0)
    main()
