"""The in-process application of the page benches (varied_pages.py, cursor_steps.py,
page_steps.py, cursor_plan.py).

Both time `Application.__call__` or its steps over a blog tenant seeded by
`service_bench.py --matrix --data DATA`, in this process, as a server holds it: the tenant
opened read-only, no list answers kept (`list_cache_bytes=0`, so every page is made), the
start-up heap frozen and the GC's thresholds a server's (service.py `settle_heap`, set here
by value so that an older tree, whose `settle_heap` may differ, is measured the same way).

Imported after the script has put CODE (the checkout under measure) first on `sys.path`:
`dbsvc` is CODE's. A CODE older than this module lacks it, and the script's own bench
folder, further down the path, gives it.
"""

import gc
import os
import random
import time
from collections.abc import Callable

from dbsvc.app import Application
from dbsvc.compiler import compile_schema
from dbsvc.http.message import split_target
from dbsvc.http.types import Request

try:
    from dbsvc.cursors import encode_cursor
except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
    from dbsvc.operators import encode_cursor
from dbsvc.realtime.broker import Broker
from dbsvc.schema import load_schema
from dbsvc.storage import Store

GC_THRESHOLDS = (2_000, 10, 100)  # service.py GC_THRESHOLDS, a primary's


def open_app(code: str, data: str) -> tuple[Application, Store, float]:
    """CODE's blog schema compiled, DATA's tenant opened read-only and the application over
    it, the heap then settled as a server settles it; and the seconds the open took."""
    module = compile_schema(load_schema(code + "/schemas/blog.dbs"))
    started = time.perf_counter()
    store = Store.open(os.path.join(data, "default"), module.MODELS, module.DESCRIPTION, readonly=True)
    opened = time.perf_counter() - started
    app = Application(module, store, Broker(store, module.BY_NAME, 64), list_cache_bytes=0)
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    return app, store, opened


def request(target: str) -> Request:
    """A GET of `target` as the connection hands it to the application."""
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])


def filtered_cursor_targets(records: int) -> Callable[[], str]:
    """The matrix's "cursor at random + filter" row in process: each call a target of an
    author at random (1-1,000) and a cursor at one of 5,000 ids at random in 1..`records`,
    seeded, so that two ways compared in one process ask the same pages (page_misses.py,
    page_lookups.py, query_copies.py)."""
    made = random.Random(36)
    cursors = [encode_cursor("BlogPost", (), [], made.randint(1, records)) for _ in range(5000)]
    rng = random.Random(7)

    def target() -> str:
        return f"/api/blog-post?author_id={rng.randint(1, 1000)}&limit=20&cursor={rng.choice(cursors)}"

    return target
