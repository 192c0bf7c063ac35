"""A filtered page's records at 1M, in process: the pick, the surrogate test, the join.

    python bench/page_records.py CODE DATA

The matrix's "cursor at random + filter" pages (pages_kit.py `filtered_cursor_targets`,
6,000 targets) planned once, then each way over every page's ids, after 64 MB walked to
push the records out of the CPU's caches, five rounds, best printed: the ways a page sent
whole may test its texts for 0xED (storage/shown.py `_texts_page`), and the served way of
CODE. bench/README.md, "A GET sent as its stored text" (session 28), has the figures.
"""

import sys
import time
from itertools import repeat

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import filtered_cursor_targets, open_app, request

from dbsvc.storage.bucketplan import bucket_operators
from dbsvc.storage.idmap import pick
from dbsvc.storage.seek import plan_operators
from dbsvc.storage.shown import SURROGATE

app, store, opened = open_app(CODE, DATA)
print("open", opened, flush=True)
model = app.models["blog-post"]
table = store.table("BlogPost")
make = filtered_cursor_targets(1_000_000)
targets = [request(make()) for _ in range(6000)]
plans = []
for r in targets:
    q = app.queries.listing(model, r).query
    p = bucket_operators(table, q)
    plans.append(p if p is not None else plan_operators(table, q))
idss = [p[0] for p in plans if p[0]]
print(len(idss), "pages, mean", sum(map(len, idss)) / len(idss), "records", flush=True)
live = table.live
tt = time.thread_time
page = table.dicts.page


def evict():  # walk 64 MB to push the records out of the CPU caches, as other requests do
    junk = bytearray(64 << 20)
    junk[::4096] = b"\1" * len(junk[::4096])


def a():
    for ids in idss:
        pick(live, ids)


def b():
    for ids in idss:
        p = pick(live, ids)
        any(map(bytes.__contains__, p, repeat(SURROGATE)))


def c():
    for ids in idss:
        p = pick(live, ids)
        any(map(bytes.__contains__, p, repeat(SURROGATE)))
        b",".join(p)


def d():
    for ids in idss:
        p = pick(live, ids)
        j = b",".join(p)
        _found = SURROGATE in j


def e():
    for ids in idss:
        out = page(ids, pick(live, ids), True, False)
        recs = out[:-1]
        recs.append(out[-1].text)
        b",".join(recs)


def f():
    for ids in idss:
        p = pick(live, ids)
        _found = SURROGATE in b"".join(p)
        b",".join(p)


def g():
    for ids in idss:
        p = pick(live, ids)
        b",".join(p)


def h():
    for ids in idss:
        p = pick(live, ids)
        for t in p:
            if SURROGATE in t:
                break
        b",".join(p)


ways = [
    ("pick + join", g),
    ("pick + one test of a first join + join", f),
    ("pick + python-loop test + join", h),
    ("pick", a),
    ("pick + surrogate test", b),
    ("pick + test + join", c),
    ("pick + join + one test of the join", d),
    ("as served: pick, page, join", e),
]
res = {n: [] for n, _ in ways}
for _round in range(5):
    for n, f in ways:
        evict()
        t0 = tt()
        f()
        res[n].append((tt() - t0) / len(idss) * 1e6)
for n, v in res.items():
    print(f"{n:40} {min(v):6.2f} us a page (rounds {' '.join(f'{x:.2f}' for x in v)})", flush=True)
