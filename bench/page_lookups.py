"""A filtered page's per-record reads at 1M, by way, in one process: the IdMap slots
(`pick`), the record cache's hash probe of the page's ids (storage/shown.py
`_texts_page`, `map(self._shown.get, ids)`), and the candidate a list indexed by the id's
slot would give (issue 36 item 2, wt-slot; refused, docs/decisions.md).

    python bench/page_lookups.py CODE DATA
    ROUNDS=8 N=4000 WARM=20000 python bench/page_lookups.py . /tmp/copy-of-1m

One open of DATA (a tenant seeded by `service_bench.py --matrix --records 1000000 --data
DATA`, opened read-only as pages_kit.py opens it), then WARM pages of the matrix's "cursor
at random + filter" row (page_misses.py's targets), which fill the record cache; then a
list as long as the IdMap's slots holding each kept id's entry, built once (read only:
the ways below write nothing, so it stays the cache's). ROUNDS rounds, each taking every
way in turn (the order reversed every other round) over N new targets' ids, planned
before the clock starts, CPU a page by `time.thread_time`. The costs are cold reads (the
slot, the stored record's header, the hash table, the entry tuple), so every way gets
fresh pages. bench/README.md, "A 1M page's cache lookups and slot reads", has figures.
"""

import os
import sys
import time
from operator import is_, itemgetter

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import filtered_cursor_targets, open_app, request  # noqa: E402

from dbsvc.storage.bucketplan import bucket_operators  # noqa: E402
from dbsvc.storage.seek import plan_operators  # noqa: E402

RECORDS = int(os.environ.get("RECORDS", "1000000"))
ROUNDS = int(os.environ.get("ROUNDS", "8"))
N = int(os.environ.get("N", "4000"))
WARM = int(os.environ.get("WARM", "20000"))
_first = itemgetter(0)


def main() -> None:
    app, store, opened = open_app(CODE, DATA)
    print(f"{CODE}: open {opened:.1f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    model, table = app.models["blog-post"], store.table("BlogPost")
    target = filtered_cursor_targets(RECORDS)
    for _ in range(WARM):
        app(request(target()))
    shown, slots = table.dicts._shown, table.live.slots
    index: list = [None] * len(slots)
    for id_, entry in shown.items():
        index[id_] = entry
    get, at, slot = shown.get, index.__getitem__, slots.__getitem__

    def pages() -> list[list[int]]:
        queries = [app.queries.listing(model, request(target())).query for _ in range(N)]
        plans = (bucket_operators(table, q) or plan_operators(table, q) for q in queries)
        return [ids for ids, _total, _more in plans if ids]

    def tested(all_ids: list[list[int]], lookup) -> None:  # noqa: ANN001
        for ids in all_ids:
            page, found = list(map(slot, ids)), list(map(lookup, ids))
            if None not in found:
                all(map(is_, map(_first, found), page))

    ways = {
        "pick": lambda all_ids: [list(map(slot, ids)) for ids in all_ids],
        "shown.get": lambda all_ids: [list(map(get, ids)) for ids in all_ids],
        "index[]": lambda all_ids: [list(map(at, ids)) for ids in all_ids],
        "pick+get+test": lambda all_ids: tested(all_ids, get),
        "pick+index+test": lambda all_ids: tested(all_ids, at),
    }
    figures: dict[str, list[float]] = {name: [] for name in ways}
    tt = time.thread_time
    for round_ in range(ROUNDS):
        for name in list(ways) if round_ % 2 == 0 else list(ways)[::-1]:
            all_ids = pages()
            start = tt()
            ways[name](all_ids)
            figures[name].append((tt() - start) / len(all_ids) * 1e6)
    print(f"load {os.getloadavg()[0]:.1f}; kept {len(shown)}; the index {sys.getsizeof(index)} bytes")
    for name, runs in figures.items():
        ordered = sorted(runs)
        print(
            f"{name:16} best {ordered[0]:5.2f} median {ordered[len(ordered) // 2]:5.2f} us a page"
            f" (rounds {' '.join(f'{f:.2f}' for f in runs)})"
        )
    store.close()


if __name__ == "__main__":
    main()
