"""A GET's CPU in process, by the application alone: the record sent as its stored text
against its dict encoded (issue 36 item 2, session 28, wt-getjson).

    python bench/get_text.py CODE DATA
    RECORDS=1000000 ROUNDS=5 N=50000 python bench/get_text.py /tmp/old-tree /tmp/copy-of-1m

Times `Application.__call__` of GETs as the connection hands them over (bench/pages_kit.py:
the tenant opened read-only, the heap settled as a server settles it), each over every
target of a round (`time.thread_time` around the loop, us a request), best round printed
with every round: the matrix's "GET one record" (one id, again and again), its "GET one
record, ids at random" (1..RECORDS), and ids at random `as_of` half the model's watermark
(a read of the past: the ids that lived then). Before the rounds, N GETs at random warm the
caches as a matrix round does. Also a digest of every body asked of each row, so two
checkouts run side by side (old and new) show the same answers byte for byte. CODE is the
checkout to import, DATA a tenant seeded by `service_bench.py --matrix --data DATA`.
bench/README.md, "A GET sent as its stored text" (session 28), has the figures.
"""

import hashlib
import os
import random
import sys
import time

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import open_app, request  # noqa: E402

RECORDS = int(os.environ.get("RECORDS", "1000000"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
N = int(os.environ.get("N", "50000"))


def main() -> None:
    app, store, opened = open_app(CODE, DATA)
    print(f"{CODE}: open {opened:.1f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    mark = store.watermarks()["BlogPost"] // 2  # the seed wrote posts in id order: 1..mark lived then
    rng = random.Random(28)
    rows = [
        ("GET one record", lambda: f"/api/blog-post/{RECORDS // 2}"),
        ("GET one record, ids at random", lambda: f"/api/blog-post/{rng.randint(1, RECORDS)}"),
        ("GET as_of, ids at random", lambda: f"/api/blog-post/{rng.randint(1, mark)}?as_of={mark}"),
    ]
    for r in [request(f"/api/blog-post/{rng.randint(1, RECORDS)}") for _ in range(N)]:
        assert app(r).status == 200
    tt = time.thread_time
    for label, make in rows:
        spent, digest = [], hashlib.sha256()
        for _ in range(ROUNDS):
            targets = [request(make()) for _ in range(N)]
            start = tt()
            answers = [app(r) for r in targets]
            spent.append((tt() - start) / N * 1e6)
            for answer in answers:
                digest.update(b"%d %s\n" % (answer.status, answer.body))
        rounds = " ".join(f"{s:.2f}" for s in spent)
        print(f"{label:32} {min(spent):6.2f} us (rounds {rounds}) digest {digest.hexdigest()[:12]}", flush=True)
    store.close()


if __name__ == "__main__":
    main()
