"""What a -score page's last record costs, in process: the ceiling of reading its `Link`
keys without its dict (issue 36 item 2, session 28, wt-getjson).

    python bench/last_record.py CODE DATA
    ROUNDS=5 N=6000 python bench/last_record.py /work/wt-getjson /tmp/copy-of-1m

A page sent whole (storage/shown.py `ShownDicts.page` with texts) is its stored texts; only
its last record is made a dict (a `SentRecord`), because the next page's `Link` reads its
sort keys: a copy of the kept dict when this version's is kept, else its text scanned. In id
order (`keyed=False`) it holds its id alone. The difference between the two over the same
pages is the most that reading the keys another way (the table's key columns by id, or a
scan that stops at the fields needed) could save. Over the matrix's "cursor at random,
sort=-score" row (its 5,000 cursors, matrix_bench.py `varied_shapes`), after each cursor's
page was asked twice (the steady state of a matrix round: every last record kept):

    keyed      `page(ids, stored, texts=True)` as the app asks it
    id alone   `page(..., keyed=False)`: no keys read (the floor)
    + column   id alone, then the sort key read from the score index's key column by id
    cold       keyed, with no dict kept (every last record scanned, then kept)

each over every target of a round (`time.thread_time` around the loop, us a page), the
best round printed with every round; and how many of the targets' last records were kept.
CODE is the checkout to import, DATA a tenant seeded by `service_bench.py --matrix
--records 1000000 --data DATA` (opened read-only; bench/pages_kit.py). bench/README.md,
"A GET sent as its stored text" (session 28), has the figures.
"""

import os
import random
import sys
import time

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import open_app, request  # noqa: E402

try:
    from dbsvc.cursors import encode_cursor  # noqa: E402
except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
    from dbsvc.operators import encode_cursor  # noqa: E402
from dbsvc.storage.bucketplan import bucket_operators  # noqa: E402
from dbsvc.storage.idmap import pick  # noqa: E402
from dbsvc.storage.seek import plan_operators  # noqa: E402

RECORDS = int(os.environ.get("RECORDS", "1000000"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
N = int(os.environ.get("N", "6000"))


def main() -> None:
    app, store, opened = open_app(CODE, DATA)
    print(f"{CODE}: open {opened:.1f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    model = app.models["blog-post"]
    table = store.table("BlogPost")
    scored = random.Random(36)  # matrix_bench.py `varied_shapes`' -score cursors: ids, then keys
    made = [scored.randint(1, RECORDS) for _ in range(5000)]
    cursors = [encode_cursor("BlogPost", (("score", True),), [round(scored.uniform(0, 100), 2)], i) for i in made]
    for _ in range(2):  # every cursor's page asked twice: its last record kept, as in a matrix round
        for cursor in cursors:
            assert app(request(f"/api/blog-post?sort=-score&limit=20&cursor={cursor}")).status == 200
    rng = random.Random(7)
    targets = [request(f"/api/blog-post?sort=-score&limit=20&cursor={rng.choice(cursors)}") for _ in range(N)]
    plans = []
    for r in targets:
        q = app.queries.listing(model, r).query
        planned = bucket_operators(table, q)
        plans.append(planned if planned is not None else plan_operators(table, q))
    pages = [(ids, pick(table.live, ids)) for ids, _total, _more in plans if ids]
    kept = sum(1 for ids, stored in pages if table.dicts._shown.get(ids[-1], (None,))[0] is stored[-1])
    print(f"{len(pages)} pages, last record kept for {kept}", flush=True)
    column = table.ordered["score"].column
    page, tt = table.dicts.page, time.thread_time

    def keyed() -> None:
        for ids, stored in pages:
            page(ids, stored, True, True)

    def alone() -> None:
        for ids, stored in pages:
            page(ids, stored, True, False)

    def with_column() -> None:
        get = column.get
        for ids, stored in pages:
            page(ids, stored, True, False)
            get(ids[-1])

    def cold() -> None:
        table.dicts._shown.clear()
        table.dicts._weight = 0
        for ids, stored in pages:
            page(ids, stored, True, True)

    ways = [("keyed", keyed), ("id alone", alone), ("+ column", with_column), ("cold", cold)]
    spent: dict[str, list[float]] = {name: [] for name, _f in ways}
    for _ in range(ROUNDS):
        for name, way in ways:
            if name == "keyed":  # every last record kept again after a cold round
                for _twice in range(2):
                    keyed()
            start = tt()
            way()
            spent[name].append((tt() - start) / len(pages) * 1e6)
    for name, each in spent.items():
        print(f"{name:10} {min(each):6.2f} us a page (rounds {' '.join(f'{e:.2f}' for e in each)})", flush=True)
    store.close()


if __name__ == "__main__":
    main()
