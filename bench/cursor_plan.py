"""The plan alone of a page at a cursor at random sorted by -score (storage/seek.py
`plan_operators`), in process: what varied_pages.py's "cursor at random, sort=-score" row
spends before any record is read.

    python bench/cursor_plan.py CODE DATA
    ROUNDS=5 DUMP=/tmp/answers.pkl python bench/cursor_plan.py /tmp/old-tree /tmp/copy-of-20k

CODE is the checkout to import; DATA a tenant seeded by `service_bench.py --matrix
--records 20000` (a copy of /tmp/pristine-20k), opened read-only. The 5,000 cursors are
made as varied_pages.py makes them (keys uniform in 0-100 at two decimals, ids at random);
20,000 of them asked at random a round after a warm pass of 5,000 (the sublists' descending
orders kept from their second ask, keptparts.py `_whole_descending`). Prints each round's
CPU a plan (`time.thread_time`) and the best. DUMP writes the (ids, total, more) of each of
the 5,000 cursors, to hold two trees' answers to each other.
bench/README.md, "A cursor's page at -score as a slice of its sublist's kept order", has
the figures.
"""

import gc
import os
import pickle
import random
import sys
import time

CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE]
from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.runtime import Query  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402
from dbsvc.storage import Store  # noqa: E402
from dbsvc.storage.seek import plan_operators  # noqa: E402

CURSORS, ASKED = 5000, 20000


def main() -> None:
    module = compile_schema(load_schema(CODE + "/schemas/blog.dbs"))
    store = Store.open(os.path.join(DATA, "default"), module.MODELS, module.DESCRIPTION, readonly=True)
    table = store.table("BlogPost")
    gc.freeze()
    gc.set_threshold(2_000, 10, 100)
    keys = random.Random(36)
    queries = [
        Query(sort=(("score", True),), limit=20, cursor=((round(keys.uniform(0, 100), 2),), keys.randint(1, 20000)))
        for _ in range(CURSORS)
    ]
    rng = random.Random(11)
    order = [queries[rng.randrange(CURSORS)] for _ in range(ASKED)]
    for query in order[:CURSORS]:
        plan_operators(table, query)
    spent = []
    for _ in range(int(os.environ.get("ROUNDS", "3"))):
        start = time.thread_time()
        for query in order:
            plan_operators(table, query)
        spent.append((time.thread_time() - start) / ASKED * 1e6)
    each = " ".join(f"{s:.2f}" for s in spent)
    print(f"{CODE}: plan at a cursor at random, sort=-score {min(spent):.2f} us (rounds {each})", flush=True)
    if os.environ.get("DUMP"):
        with open(os.environ["DUMP"], "wb") as out:
            pickle.dump([plan_operators(table, query) for query in queries], out)
    store.close()


if __name__ == "__main__":
    main()
