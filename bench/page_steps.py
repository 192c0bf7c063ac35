"""Per-step CPU of a list page of 20 made afresh against a GET, in process.

    python bench/page_steps.py CODE DATA TARGET ...
    N=2000 python bench/page_steps.py . /tmp/m20k /api/blog-post/10000 "/api/blog-post?sort=-score&limit=20"

CODE is the checkout to import (run two at once for a before/after: this host's speed
drifts between rounds), DATA a tenant seeded by `service_bench.py --matrix --data DATA`,
opened read-only; the app keeps no list answers (`list_cache_bytes=0`). For each target:
the whole call, the call and the response's bytes (`encode_response` through the fast
path's `respond`), then each step of `Application.list` alone: the parse, the store's page
(its plan, query.py's or, with operators, bucketplan.py's or seek.py's, and its dicts), the
page's JSON, the body, the headers and the `Link`. Best of 5 rounds of N calls, timed by
`time.thread_time`, after `gc.freeze()`. bench/README.md, "A page of 20 made afresh", has the
figures. `CALLS=1` prints instead the Python and C calls of one app call per target, counted by
`sys.setprofile` (exact, where a timing on a loaded host is not: "A list's fixed cost, counted").
"""

import os
import sys
import time

from usage import check_argv

check_argv(__doc__, 3)
CODE = sys.argv[1]
DATA = sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import open_app, request

from dbsvc.http.fastpath import FastWire
from dbsvc.http.message import encode_response

try:
    from dbsvc.cursors import encode_cursor
except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
    from dbsvc.operators import encode_cursor
from dbsvc.storage.bucketplan import bucket_operators
from dbsvc.storage.query import _plan_live
from dbsvc.storage.seek import has_operators, plan_operators

app, store, _opened = open_app(CODE, DATA)
N = int(os.environ.get("N", "2000"))


def best(fn):
    out = []
    for _ in range(5):
        t = time.thread_time()
        for _ in range(N):
            fn()
        out.append((time.thread_time() - t) / N * 1e6)
    return min(out)


def plan(table, q):
    """The store's plan of a live list alone (storage/query.py `list_page` without the dicts):
    seek.py's or bucketplan.py's for a query with operators, query.py's otherwise."""
    if has_operators(q):
        planned = bucket_operators(table, q)
        return (planned if planned is not None else plan_operators(table, q))[:2]
    return _plan_live(table, q)


model = app.models["blog-post"]
wire = FastWire.__new__(FastWire)  # only its `respond` is called: the two fields it reads
for slot, v in (("_client_close", False), ("closing", False)):
    setattr(wire, slot, v)


def respond(resp, r):
    if hasattr(wire, "encode"):  # the fast path's response in one step (session 9)
        return wire.encode(resp, r, "abc123", None, False)
    return encode_response(wire.respond, resp, r, "abc123", None, False)


def calls(fn):
    """(Python calls, C calls) of one `fn()`, counted by `sys.setprofile` (comprehension
    frames are Python calls): CALLS=1 prints them per target instead of the timings."""
    counts = [0, 0]

    def profile(frame, event, arg):
        if event == "call":
            counts[0] += 1
        elif event == "c_call":
            counts[1] += 1

    sys.setprofile(profile)
    fn()
    sys.setprofile(None)
    return counts[0] - 1, counts[1] - 1  # fn's own frame and setprofile(None) left out


for target in sys.argv[3:]:
    r = request(target)
    if os.environ.get("CALLS"):
        for _ in range(50):
            app(r)
        print(f"{target:60} " + "Python calls %d, C calls %d" % calls(lambda: app(r)))  # a target may hold %20
        continue
    print(target)
    if "?" not in target:
        rows = [("app()", lambda: app(r)), ("app()+encode_response", lambda: respond(app(r), r))]
    else:
        q = app.queries.list_query(model, r)
        table = store.table(model.name)
        records, total, wm, more = store.list_page(model.name, q)
        page = app.encoded.encode_page(model, records)
        ids, _t = plan(table, q)
        resp = app(r)
        rows = [
            ("app()", lambda: app(r)),
            ("app()+encode_response", lambda: respond(app(r), r)),
            ("encode_response alone", lambda: respond(resp, r)),
            ("list_query", lambda: app.queries.list_query(model, r)),
            ("store.list_page", lambda: store.list_page(model.name, q)),
            ("  plan", lambda: plan(table, q)),
            ("  shown_all", lambda: table.shown_all(ids)),
            ("encode_page", lambda: app.encoded.encode_page(model, records)),
            ("body %", lambda: b'{"data":[%s],"total":%d,"limit":%d,"offset":%d}' % (page, total, q.limit, q.offset)),
            ("_read_headers", lambda: app._read_headers(wm, None)),
            (
                "keys+cursor",
                lambda: encode_cursor(
                    model.name, q.sort, [model.keys[f](records[-1][f]) for f, _d in q.sort], records[-1][model.id_field]
                ),
            ),
            ("next_link", lambda: app.queries.next_link(r, "abcdefabcdefabcdefabcdefabcdefabcdefabcdef")),
        ]
        if hasattr(app.queries, "link_after"):
            rows[-2:] = [("link_after (Link whole)", lambda: app.queries.link_after(model, q, r, records[-1]))]
    for label, fn in rows:
        for _ in range(200):
            fn()
        print(f"  {label:26} {best(fn):7.2f} us")
