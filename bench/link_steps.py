"""A next page's `Link` (cursors.py `NextLinks.after`) and `encode_cursor` by key kind, in
process: thread CPU ns a call, the best of ROUNDS rounds of N records each (every record a
new object, so the maker's kept last text never answers).

    python bench/link_steps.py CODE
    ROUNDS=7 N=20000 python bench/link_steps.py /tmp/old-tree

CODE is the checkout to import (run two, alternated, for a before/after); its own
schemas/blog.dbs gives the key functions. Kinds: id order, one float key (-score, 57.25-like
values), a str key, a nullable int (half nulls), a datetime, two keys. bench/README.md,
"A next page's `Link` cursor written by one bytes `%`", has the figures.
"""

import gc
import os
import random
import sys
import time

from usage import check_argv

check_argv(__doc__, 1)
CODE = sys.argv[1]
sys.path[:0] = [CODE]
from dbsvc.compiler import compile_schema  # noqa: E402

try:
    from dbsvc.cursors import NextLinks, encode_cursor, link_prefix  # noqa: E402
except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
    from dbsvc.operators import NextLinks, encode_cursor, link_prefix  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402

mod = compile_schema(load_schema(CODE + "/schemas/blog.dbs"))
post = mod.BY_NAME["BlogPost"]
user = mod.BY_NAME["User"]
N = int(os.environ.get("N", "20000"))
ROUNDS = int(os.environ.get("ROUNDS", "7"))
rng = random.Random(5)


def recs(make):
    return [make(i) for i in range(1, N + 1)]


cases = [
    ("id order", post, (), recs(lambda i: {"id": i * 37})),
    ("-score float 57.25", post, (("score", True),), recs(lambda i: {"id": i, "score": round(rng.uniform(0, 100), 2)})),
    ("title str", post, (("title", False),), recs(lambda i: {"id": i, "title": "post number %d" % i})),
    ("age int|null", user, (("age", False),), recs(lambda i: {"id": i, "age": None if i % 2 else i % 100})),
    (
        "joined datetime",
        user,
        (("joined", False),),
        recs(lambda i: {"id": i, "joined": "2026-11-%02dT10:00:%02d.123456Z" % (i % 28 + 1, i % 60)}),
    ),
    (
        "-score,title",
        post,
        (("score", True), ("title", False)),
        recs(lambda i: {"id": i, "score": float(i % 97), "title": "t%d" % i}),
    ),
]
prefix = link_prefix("/api/blog-post", [("sort", "-score"), ("limit", "20")])
gc.disable()
for label, model, sort, records in cases:
    links = NextLinks(prefix, model.name, sort, model.keys, model.id_field)
    after = links.after
    keyf = [(f, model.keys[f]) for f, _d in sort]
    best_l = best_e = 1e9
    for _ in range(ROUNDS):
        t = time.thread_time_ns()
        for r in records:
            after(r)
        best_l = min(best_l, (time.thread_time_ns() - t) / N)
        t = time.thread_time_ns()
        for r in records:
            encode_cursor(model.name, sort, [k(r[f]) for f, k in keyf], r["id"])
        best_e = min(best_e, (time.thread_time_ns() - t) / N)
    print(f"{label:22s} after {best_l:7.0f} ns   encode_cursor {best_e:7.0f} ns")
