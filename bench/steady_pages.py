"""How long the matrix's id-order rows over many targets take to reach their steady figure
after a fresh open, in process: round by round, the CPU a page, the records a page missed in
the table's record cache (storage/shown.py) and the RSS.

    python bench/steady_pages.py CODE DATA
    ROUNDS=12 PAGES=5000 python bench/steady_pages.py /tmp/old-tree /tmp/copy-of-1m

CODE is the checkout to import (two at once, each on its own copy of DATA, for a
before/after); DATA a tenant seeded by `service_bench.py --matrix --records 1000000 --data
DATA`, opened read-only as varied_pages.py opens it (pages_kit.py). The rows are the
matrix's own (matrix_bench.py `varied_shapes`, in its order): a page of 20 in id order at
one of its 5,000 cursors (ids at random over the table, its seed), then a page of 20 at an
offset at random in [0, min(RECORDS, 100,000) - 20]. Each row runs ROUNDS (12) rounds of
PAGES (5,000) pages from the moment the open ends: a round is about what a served 5-s
round of the matrix asks side by side at 1,000,000 posts (~1,000 requests/s), so round k
here is the state the served row is in after ~5k s of requests, whatever the host's speed.

A page's misses are the records the cache did not hold: the entries it gained plus the
records it refused (`refused`); while the kept entries weigh less than the table's share
(SHOWN_SHARE bytes a live record, printed beside) nothing is evicted, so that count is exact. RECORDS (default
1,000,000) is the tenant's count of posts.
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
from dbsvc.storage.shown import SHOWN_SHARE  # noqa: E402

RECORDS = int(os.environ.get("RECORDS", "1000000"))
ROUNDS = int(os.environ.get("ROUNDS", "12"))
PAGES = int(os.environ.get("PAGES", "5000"))


def rss_mb() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS"))


def rows() -> list[tuple[str, object]]:
    """(label, a target at random) of the two rows, as matrix_bench.py `varied_shapes` makes them."""
    made = random.Random(36)
    ids = [made.randint(1, RECORDS) for _ in range(5000)]
    cursors = [encode_cursor("BlogPost", (), [], i) for i in ids]
    pick = random.Random(24)
    top = min(RECORDS, 100_000) - 20
    return [
        ("a page at a cursor at random", lambda: f"/api/blog-post?limit=20&cursor={pick.choice(cursors)}"),
        ("a page at an offset at random", lambda: f"/api/blog-post?limit=20&offset={pick.randint(0, top)}"),
    ]


def main() -> None:
    app, store, opened = open_app(CODE, DATA)
    table = store.table("BlogPost")
    dicts = table.dicts
    share = SHOWN_SHARE * len(table.live) / 2**20  # the kept entries' weight allowed past SHOWN, MB
    print(f"{CODE}: open {opened:.1f} s, RSS {rss_mb()} MB, load {os.getloadavg()[0]:.1f}", flush=True)
    for label, make in rows():
        print(f"{label} ({PAGES:,} pages a round)")
        for k in range(1, ROUNDS + 1):
            targets = [request(make()) for _ in range(PAGES)]
            kept, refused = len(dicts.ids), dicts.refused
            start = time.thread_time()
            for r in targets:
                app(r)
            spent = (time.thread_time() - start) / PAGES * 1e6
            missed = (len(dicts.ids) - kept + dicts.refused - refused) / PAGES
            print(
                f"  round {k:2}: {spent:6.1f} us a page, missed {missed:5.2f} of 20, kept {len(dicts.ids):,} "
                f"(weight {dicts.weighs / 2**20:.0f} of {share:.0f} MB), RSS {rss_mb()} MB, "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    store.close()


if __name__ == "__main__":
    main()
