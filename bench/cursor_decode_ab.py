"""A cursor's decode alone, two checkouts side by side, in process (issue 36 item 1, session 23).

    python bench/cursor_decode_ab.py OLD NEW
    ROUNDS=6 N=200000 python bench/cursor_decode_ab.py /tmp/old-e1109d3 /work/wt-tidy8

Each round runs one child per checkout, in turn (old, new, old, new ...), so both meet the
same load: the child compiles schemas/blog.dbs with its own compiler, makes one cursor per
list (BlogPost by -score, by title then score, by id) and times N calls of the generated
`decode_cursor_blog_post(text, sort)` over them (`time.perf_counter`, GC off as a server
runs it). It prints the best round of each checkout in ns a decode and `uptime` before and
after: on a shared machine the figure is noisy, and only the pair taken together means
anything. The answers of the two checkouts are compared once (they must be equal).
"""

import json
import os
import subprocess
import sys

from usage import check_argv

CHILD = r"""
import gc, json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from dbsvc.compiler import compile_schema
try:
    from dbsvc.cursors import encode_cursor
except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
    from dbsvc.operators import encode_cursor
from dbsvc.schema import parse_schema
root = Path(sys.argv[1])
module = compile_schema(parse_schema((root / "schemas/blog.dbs").read_text(), "blog.dbs"))
decode = module.decode_cursor_blog_post
lists = [
    ((("score", True),), [2.5], 7),
    ((("title", False), ("score", True)), ["a title", 1.0], 8),
    ((), [], 9),
]
pairs = [(encode_cursor("BlogPost", sort, keys, id_), sort) for sort, keys, id_ in lists]
n = int(sys.argv[2])
gc.disable()
start = time.perf_counter()
for _ in range(n // len(pairs)):
    for text, sort in pairs:
        decode(text, sort)
took = time.perf_counter() - start
print(json.dumps({"ns": took / (n // len(pairs) * len(pairs)) * 1e9,
                  "answers": [list(decode(t, s)) for t, s in pairs]}))
"""


def _run(tree: str, n: int) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, tree, str(n)], capture_output=True, text=True, env=env, timeout=300
    )
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr}")
    return json.loads(done.stdout)


def main() -> None:
    old, new = sys.argv[1], sys.argv[2]
    rounds, n = int(os.environ.get("ROUNDS", "6")), int(os.environ.get("N", "200000"))
    print("before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    best = {old: float("inf"), new: float("inf")}
    answers = {}
    for round_ in range(rounds):
        for tree in (old, new) if round_ % 2 == 0 else (new, old):
            got = _run(tree, n)
            answers[tree] = got["answers"]
            best[tree] = min(best[tree], got["ns"])
            print(f"round {round_ + 1} {tree}: {got['ns']:.0f} ns a decode", flush=True)
    print("after: ", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    assert answers[old] == answers[new], answers
    for tree in (old, new):
        print(f"best {tree}: {best[tree]:.0f} ns a decode")
    print(f"new/old: {best[new] / best[old]:.3f}")


if __name__ == "__main__":
    check_argv(__doc__, 2)
    main()
