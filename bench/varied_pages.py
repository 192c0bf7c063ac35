"""Application.__call__ in process over MANY targets at 1,000,000 posts: the caches in their
steady state (full, every miss evicting), where list_inprocess.py and page_steps.py ask one
target whose records are always cached.

    python bench/varied_pages.py CODE DATA
    ONLY=random python bench/varied_pages.py /tmp/old-tree /tmp/copy-of-1m
    RECORDS=20000 ONLY=cursor PROFILE=1 python bench/varied_pages.py CODE /tmp/copy-of-20k

CODE is the checkout to import (run two at once, each on its own copy of DATA, for a
before/after: this host's speed drifts); DATA a tenant seeded by `service_bench.py --matrix
--records 1000000 --data DATA`, opened read-only; the app keeps no list answers
(`list_cache_bytes=0`), the GC is set as a server sets it (service.py `settle_heap`). For
each row: a warm pass over N targets made at random, then ROUNDS (3) rounds of N new ones; the best
round's CPU a request (`time.thread_time`) and the process's RSS after it are printed.
RECORDS (default 1,000,000) is the tenant's count of posts; ONLY runs the rows whose label
holds that text (or one of several, `|` between them); PROFILE=1 prints cProfile's 25 costliest functions of each row's last round.
COUNTS=1 asks one more round of N new targets under cProfile and prints, a page, the
records handed out, the store's dicts made and refused (storage/shown.py), the texts cut
(the model's record layout filled, whatever path cut them: `CountedLayout`; on a tree whose
table keeps no `_layout`, rows.py `record_json`'s calls, and the row says so) and the
dicts' JSON encoded (`json_bytes`) and refused by the app (readcache.py `EncodedRecords`):
the two record caches' hit rates (runs on any tree whose functions have these names).
The cursor rows ask one of 5,000 cursors at random (made here from ids and scores at random:
a cursor holds keys, so any keys seek into the list), as a client walking many lists does.
bench/README.md, "Pages that miss the caches at 1,000,000 posts", has the figures.
"""

import cProfile
import os
import pstats
import random
import sys
import time

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import open_app, request  # noqa: E402

from dbsvc.app import Application  # noqa: E402
from dbsvc.http.types import Request  # noqa: E402

try:
    from dbsvc.cursors import encode_cursor  # noqa: E402
except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
    from dbsvc.operators import encode_cursor  # noqa: E402
from dbsvc.storage import Store  # noqa: E402

RECORDS = int(os.environ.get("RECORDS", "1000000"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
rng = random.Random(7)
CURSORS = 5000
ROWS = [  # (label, N, a target made at random)
    ("GET one (the same id)", 20000, lambda: "/api/blog-post/500000"),
    ("GET an id at random", 100000, lambda: f"/api/blog-post/{rng.randint(1, RECORDS)}"),
    ("filter + sort (the same page)", 3000, lambda: "/api/blog-post?author_id=7&sort=-score&limit=20"),
    (
        "filter + sort, author and offset at random",
        6000,
        lambda: (
            f"/api/blog-post?author_id={rng.randint(1, 1000)}&sort=-score&limit=20&offset={20 * rng.randint(0, 40)}"
        ),
    ),
    (
        "sort only, offset at random",
        6000,
        lambda: f"/api/blog-post?sort=-score&limit=20&offset={20 * rng.randint(0, 50)}",
    ),
    ("limit=20, offset at random", 6000, lambda: f"/api/blog-post?limit=20&offset={20 * rng.randint(0, 5000)}"),
    ("cursor at random, id order", 6000, lambda: f"/api/blog-post?limit=20&cursor={cursor(())}"),
    ("cursor at random, sort=-score", 6000, lambda: f"/api/blog-post?sort=-score&limit=20&cursor={cursor(SCORE)}"),
    (
        "cursor at random + filter (author 1-1,000)",
        6000,
        lambda: f"/api/blog-post?author_id={rng.randint(1, 1000)}&limit=20&cursor={cursor(())}",
    ),
]
SCORE = (("score", True),)
_made: dict[tuple, list[str]] = {}


def cursor(sort: tuple) -> str:
    """One of CURSORS cursors of a list sorted by `sort`, at random (made on first use)."""
    made = _made.get(sort)
    if made is None:
        keys = random.Random(36)
        made = _made[sort] = [
            encode_cursor("BlogPost", sort, [round(keys.uniform(0, 100), 2)] if sort else [], keys.randint(1, RECORDS))
            for _ in range(CURSORS)
        ]
    return made[rng.randrange(CURSORS)]


def rss_mb() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS"))


COUNTED = ("remember", "record_json", "json_bytes", "unpack")


class CountedLayout(bytes):
    """A table's record layout (rows.py `layout`, `{"id":%s,...}` as bytes) that counts its
    fills. Every text cut from a stored record is this layout filled with the values' texts,
    by whatever path cut them (rows.py `record_json`'s split, its regular expression or its
    scanner, or a cut made elsewhere, one by one or mapped over a page), and a cut that gives
    up (`record_json` None: a lone surrogate may be held) fills nothing: so the fills are the
    texts cut, where `record_json`'s calls are the cuts tried by that one function."""

    fills = 0

    def __mod__(self, values: object) -> bytes:
        CountedLayout.fills += 1
        return bytes.__mod__(self, values)


def caches_counted(app: Application, store: Store, targets: list[Request]) -> str:
    """COUNTS=1: the record caches' work a page over `targets` (module docstring), the
    calls counted by cProfile; a list page's records are counted from its body."""
    table = store.table("BlogPost")
    dicts, encoded = table.dicts, app.encoded
    refused, app_refused, records = dicts.refused, encoded.refused, 0
    layout = getattr(dicts, "_layout", None)
    if layout is not None:
        dicts._layout = CountedLayout(layout)
        CountedLayout.fills = 0
    profile = cProfile.Profile()
    try:
        for r in targets:
            answer = profile.runcall(app, r)
            records += answer.body.count(b'"author_id":')
    finally:
        if layout is not None:
            dicts._layout = layout
    calls = dict.fromkeys(COUNTED, 0)
    for entry in profile.getstats():
        name = getattr(entry.code, "co_name", "")
        if name in calls:
            calls[name] += entry.callcount
    # a miss is kept (`remember`: these rounds write nothing, so every call is an admission)
    # or refused: counted so on any tree, whatever its functions of a miss are called
    made = calls["remember"] + dicts.refused - refused
    n = len(targets)
    cut = (
        f"texts cut {CountedLayout.fills / n:.2f} (record_json calls {calls['record_json'] / n:.2f})"
        if layout is not None
        else f"texts cut (record_json calls) {calls['record_json'] / n:.2f}"
    )
    return (
        f"records {records / n:.2f}, store dicts kept (hit) {(records - made) / n:.2f}, "
        f"missed {made / n:.2f} (refused {(dicts.refused - refused) / n:.2f}), "
        f"{cut}, unpack {calls['unpack'] / n:.2f}, "
        f"dicts' JSON encoded {calls['json_bytes'] / n:.2f} (app refused {(encoded.refused - app_refused) / n:.2f})"
    )


def main() -> None:
    app, store, opened = open_app(CODE, DATA)
    print(f"{CODE}: open {opened:.1f} s, RSS {rss_mb()} MB", flush=True)
    only = [part for part in os.environ.get("ONLY", "").split("|") if part]
    for label, n, make in ROWS:
        if only and not any(part in label for part in only):
            continue
        rng.seed(7)
        warm = [request(make()) for _ in range(n)]
        rng.seed(11)
        rounds = [[request(make()) for _ in range(n)] for _ in range(ROUNDS)]
        for r in warm:
            assert app(r).status == 200, r.target
        spent = []
        for targets in rounds:
            start = time.thread_time()
            for r in targets:
                app(r)
            spent.append((time.thread_time() - start) / n * 1e6)
        if os.environ.get("PROFILE"):
            profile = cProfile.Profile()
            profile.runcall(lambda: [app(r) for r in rounds[-1]])
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        if os.environ.get("COUNTS"):
            rng.seed(13)
            counted = [request(make()) for _ in range(n)]
            print(f"  {label}: " + caches_counted(app, store, counted), flush=True)
        each = " ".join(f"{s:.1f}" for s in spent)
        print(f"{label:44} {min(spent):8.1f} us  (rounds {each})  RSS {rss_mb()} MB", flush=True)
    store.close()


if __name__ == "__main__":
    main()
