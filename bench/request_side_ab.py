"""A list page's request side at a cursor, two checkouts side by side, in process (issue 36
item 2, "cursor at random + filter", session 31, wt-filt; bench/README.md,
"Cursor texts kept decoded per list").

    python bench/request_side_ab.py OLD NEW
    ROUNDS=6 N=20000 python bench/request_side_ab.py /work/main /work/wt-filt

What `Application.list` does for such a page before the store is asked and after the page is
made, and nothing else: `ParsedQueries.listing` (the list found without its cursor, the
cursor decoded, the page's `Query` copied, the admission of the page apart) and
`PresentPages.admits_page` (whether its answer is kept). No store is opened: the blog
schema is compiled by the child's own compiler, and the targets are the matrix's
many-target rows (matrix_bench.py `varied_shapes`, cursor_steps.py): a page of 20 at one
of 5,000 id-order cursors under `author_id=<1..1,000>`, and a page sorted by -score at
one of 5,000 -score cursors. Each round times N new requests (made beforehand from their
targets, as the connection hands them over) by `time.thread_time`, GC frozen and set as a
server sets it, after N warm ones; the best round of each row is printed in us a request.

Each round runs one child per checkout, in turn (old, new; new, old; ...), so both meet
the same load; `uptime` is printed before and after. The two checkouts' answers (each
page's `Query.cursor` and filters) are compared once: they must be equal.
"""

import json
import os
import subprocess
import sys

from usage import check_argv

CHILD = r"""
import gc, json, random, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from dbsvc.compiler import compile_schema
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
try:
    from dbsvc.cursors import encode_cursor
except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
    from dbsvc.operators import encode_cursor
from dbsvc.parsedlists import ParsedQueries
from dbsvc.readcache import PresentPages
from dbsvc.schema import parse_schema
root = Path(sys.argv[1])
n, records = int(sys.argv[2]), int(sys.argv[3])
module = compile_schema(parse_schema((root / "schemas/blog.dbs").read_text(), "blog.dbs"))
model = module.BY_NAME["BlogPost"]
keys = random.Random(36)
cursors = [encode_cursor("BlogPost", (), [], keys.randint(1, records)) for _ in range(5000)]
scored = random.Random(36)
made = [scored.randint(1, records) for _ in range(5000)]
by_score = [encode_cursor("BlogPost", (("score", True),), [round(scored.uniform(0, 100), 2)], i) for i in made]
rng = random.Random(7)
rows = {
    "cursor at random + filter": lambda: f"/api/blog-post?author_id={rng.randint(1, 1000)}&limit=20&cursor={rng.choice(cursors)}",
    "cursor at random, sort=-score": lambda: f"/api/blog-post?sort=-score&limit=20&cursor={rng.choice(by_score)}",
}
def request(target):
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])
queries, present = ParsedQueries(), PresentPages()
def side(requests):
    listing, admits = queries.listing, present.admits_page
    start = time.thread_time()
    for r in requests:
        page = listing(model, r)
        if page.base is not None:
            admits(r)
    return (time.thread_time() - start) / len(requests) * 1e6
gc.freeze()
gc.set_threshold(2_000, 10, 100)
out, answers = {}, []
for label, make in rows.items():
    side([request(make()) for _ in range(n)])  # warm: the lists parsed, the cursors seen
    out[label] = min(side([request(make()) for _ in range(n)]) for _ in range(3))
    q = queries.listing(model, request(make())).query
    answers.append([label, repr(q.cursor), repr(q.filters), q.limit])
print(json.dumps({"us": out, "answers": answers}))
"""


def _run(tree: str, n: int, records: int) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, tree, str(n), str(records)], capture_output=True, text=True, env=env, timeout=300
    )
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr}")
    return json.loads(done.stdout)


def main() -> None:
    old, new = sys.argv[1], sys.argv[2]
    rounds, n = int(os.environ.get("ROUNDS", "6")), int(os.environ.get("N", "20000"))
    records = int(os.environ.get("RECORDS", "1000000"))
    print("before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    best: dict[str, dict[str, float]] = {old: {}, new: {}}
    answers = {}
    for round_ in range(rounds):
        for tree in (old, new) if round_ % 2 == 0 else (new, old):
            got = _run(tree, n, records)
            answers[tree] = got["answers"]
            for label, us in got["us"].items():
                best[tree][label] = min(best[tree].get(label, float("inf")), us)
            shown = ", ".join(f"{label} {us:.2f}" for label, us in got["us"].items())
            print(f"round {round_ + 1} {tree}: {shown} (us a request)", flush=True)
    print("after: ", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    assert answers[old] == answers[new], answers
    for label in best[old]:
        o, w = best[old][label], best[new][label]
        print(f"{label:30} best old {o:.2f} us, new {w:.2f} us, new/old {w / o:.3f}")


if __name__ == "__main__":
    check_argv(__doc__, 2)
    main()
