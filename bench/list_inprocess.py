"""Application.__call__ in process on the list matrix's shapes: the CPU a list costs the app.

    python bench/list_inprocess.py DATA RECORDS [shape ...]
    NOCACHE=1 N=300 python bench/list_inprocess.py /tmp/m20k 20000 expand search

DATA is a tenant seeded by `service_bench.py --matrix --data DATA` (or query_bench.py's
`seeded`), opened read-only; RECORDS its post count (the GET's id and the cursor's middle).
Each URL is asked 50 times to warm, then the best of 5 rounds of N (300) calls is printed,
timed by `time.thread_time`, so a loaded host's waits do not count. `NOCACHE=1` empties the
app's kept answers of the present before each call (readcache.py `PresentPages`): the cost
of a list asked after a write; without it every call after the first is a kept answer.
`FLUSH_MB=64` writes that many MB between calls and times each call alone: the cost with the
caches and the TLB cold, nearer a served request's at 1M than the hot loop (a served range
sorted by another field spent 47 us in its plan where this loop says 13; docs/decisions.md,
"Huge pages for the heap", wt-rng). `SETTLE=1` settles the heap as the server does before
serving (service.py `settle_heap`: frozen, GC thresholds, huge pages). `STAGES=1` adds, for
each list, the best of the same rounds of its parts called alone on the same page: the
query's parse (`ParsedQueries.listing`), the store's `list_page` (plan and records), the
page's records (`Table.shown_all` of its ids) and their JSON (`encode_page`, or `projected`).
Shape arguments select rows by a part of their label.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from usage import check_argv

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from query_bench import vocabulary  # noqa: E402

from dbsvc.app import Application  # noqa: E402
from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.cursors import encode_cursor  # noqa: E402
from dbsvc.http.message import split_target  # noqa: E402
from dbsvc.http.types import Request  # noqa: E402
from dbsvc.realtime.broker import Broker  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402
from dbsvc.service import settle_heap  # noqa: E402
from dbsvc.storage import Store  # noqa: E402
from dbsvc.storage.query import list_page  # noqa: E402


def shapes(app: Application, records: int) -> list[tuple[str, str]]:
    """(label, target) of the matrix's list shapes (matrix_bench.py `matrix_shapes`), and a
    few neighbours: `limit=20` alone, a sorted search, an expand of one author's posts."""
    middle = json.loads(call(app, f"/api/blog-post?sort=-score&limit=1&offset={records // 2}").body)["data"][0]
    cursor = encode_cursor("BlogPost", (("score", True),), [middle["score"]], middle["id"])
    words, _weights = vocabulary()
    one = "/api/blog-post?author_id=7"
    two = f"{words[49]}%20{words[199]}"
    return [
        ("GET one record", f"/api/blog-post/{records // 2}"),
        ("limit=20", "/api/blog-post?limit=20"),
        ("filter + sort", f"{one}&sort=-score&limit=20"),
        ("two filters", f"{one}&published=true&limit=20"),
        ("filter + two sort keys", f"{one}&sort=-score,title&limit=20"),
        ("sort only", "/api/blog-post?sort=-score&limit=20"),
        ("deep offset (1,000)", "/api/blog-post?sort=-score&limit=20&offset=1000"),
        ("projection", f"{one}&sort=-score&limit=20&projection=summary"),
        ("range, sorted by it", "/api/blog-post?score__gte=50&sort=-score&limit=20"),
        ("range, another sort", "/api/blog-post?score__gte=50&sort=title&limit=20"),
        ("range + filter", "/api/blog-post?score__gte=50&author_id=7&limit=20"),
        ("prefix, id order", "/api/blog-post?title__prefix=ab&limit=20"),
        ("prefix, sorted by it", "/api/blog-post?title__prefix=ab&sort=title&limit=20"),
        ("prefix, another sort", "/api/blog-post?title__prefix=ab&sort=-score&limit=20"),
        ("search (two words)", f"/api/blog-post?search={two}&limit=20"),
        ("search, sorted", f"/api/blog-post?search={two}&sort=-score&limit=20"),
        ("cursor (the middle page)", f"/api/blog-post?sort=-score&limit=20&cursor={cursor}"),
        ("expand", "/api/blog-post?limit=20&expand=author_id"),
        ("expand, filter + sort", f"{one}&sort=-score&limit=20&expand=author_id"),
    ]


def call(app: Application, target: str):  # noqa: ANN201 (a Response)
    path, pairs = split_target(target)
    return app(Request("GET", target, path, pairs, []))


def best_of(call: Callable[[], object], n: int, flush: bytearray, before: Callable[[], object] | None = None) -> float:
    """The best of 5 rounds of `n` calls, us a call by `time.thread_time`; with `flush`,
    each call timed alone after the caches were filled with other bytes (a byte a line)."""
    best = []
    for _ in range(5):
        spent = 0.0 if flush else -time.thread_time()
        for _ in range(n):
            if before is not None:
                before()
            if flush:
                flush[::64] = bytes(len(flush) // 64)
                start = time.thread_time()
                call()
                spent += time.thread_time() - start
            else:
                call()
        best.append((spent if flush else spent + time.thread_time()) / n * 1e6)
    return min(best)


def stages(app: Application, store: Store, request: Request, n: int, flush: bytearray) -> str:
    """The list's parts called alone (module docstring, `STAGES=1`)."""
    model = app.models[request.path.rsplit("/", 1)[-1]]
    table, query = store.table(model.name), app.queries.listing(model, request).query
    records = list_page(table, query)[0]
    ids = [r[model.id_field] for r in records]
    if query.projection is not None:
        encode = lambda: app.encoded.projected(model, query.projection, records)  # noqa: E731
    else:
        encode = lambda: app.encoded.encode_page(model, records)  # noqa: E731
    parts = {
        "parse": lambda: app.queries.listing(model, request),
        "list_page": lambda: list_page(table, query),
        "records": lambda: table.shown_all(ids),
        "encode": encode,
    }
    return "  ".join(f"{name} {best_of(call, n, flush):.1f}" for name, call in parts.items())


def main(argv: list[str]) -> int:
    data, records, only = argv[0], int(argv[1]), argv[2:]
    module = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
    store = Store.open(os.path.join(data, "default"), module.MODELS, module.DESCRIPTION, readonly=True)
    app = Application(module, store, Broker(store, module.BY_NAME, 64))
    nocache, n = bool(os.environ.get("NOCACHE")), int(os.environ.get("N", "300"))
    flush = bytearray(int(os.environ.get("FLUSH_MB", "0")) << 20)
    if os.environ.get("SETTLE"):
        settle_heap()
    for label, target in shapes(app, records):
        if only and not any(o in label for o in only):
            continue
        path, pairs = split_target(target)
        request = Request("GET", target, path, pairs, [])
        for _ in range(50):
            assert app(request).status == 200, target
        spent = best_of(partial(app, request), n, flush, app.present._entries.clear if nocache else None)
        parts = stages(app, store, request, n, flush) if os.environ.get("STAGES") and "?" in target else ""
        print(f"{label:28} {spent:8.1f} us  {parts}".rstrip())
    store.close()
    return 0


if __name__ == "__main__":
    check_argv(__doc__, 2)
    raise SystemExit(main(sys.argv[1:]))
