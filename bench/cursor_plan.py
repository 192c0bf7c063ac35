"""The plan alone of a page at a cursor at random sorted by -score (storage/seek.py
`plan_operators`), or the whole request (ROW=1: `Application.__call__`), in process: what
the matrix's "cursor at random, sort=-score" row spends, at 20,000 or 1,000,000 posts.

    python bench/cursor_plan.py CODE DATA
    ROUNDS=5 DUMP=/tmp/answers.pkl python bench/cursor_plan.py /tmp/old-tree /tmp/copy-of-20k
    RECORDS=1000000 ROW=1 python bench/cursor_plan.py CODE /tmp/copy-of-1m
    python bench/cursor_plan.py --pair OLD NEW DATA    # alternated rounds, both opened once

CODE is the checkout to import; DATA a tenant seeded by `service_bench.py --matrix
--records RECORDS` (a copy of /tmp/pristine-20k or /tmp/pristine-1m), opened read-only.
The 5,000 cursors are made as matrix_bench.py `varied_shapes` makes them (ids at random in
1-RECORDS, then keys uniform in 0-100 at two decimals, Random(36)); ASKED of them at random
a round (as wrk's `math.random` picks them) after a warm pass of 5,000 (the sublists'
descending orders kept from their second ask, keptparts.py `_whole_descending`). Prints
each round's CPU a plan or request (`time.thread_time`) and the best, and the RSS before
and after the warm pass (what the kept orders take). DUMP writes the (ids, total, more) of
each of the 5,000 cursors, asked three times over, to hold two trees' answers to each other.

`--pair OLD NEW DATA` opens DATA once in each of two child processes (one a tree, both at
once: 1,000,000 posts take minutes to open at load), then asks them for ROUNDS rounds each,
one tree after the other, the first alternating, and prints each pair with the host's load
(`os.getloadavg`) beside it: the A/B of the plan (or the row, ROW=1) in one run.
FILTER=1 asks the matrix's "cursor at random + filter" row instead: the same cursors' ids
in id order under `author_id` at random in 1-1,000 (each ask its own author).
PATHS=1 (alone, not with --pair) first sorts the 5,000 -score cursors by where a page of
21 after them lies in the score index (inside the cursor's run; in a run that goes on past
its sublist's end; below the run) and prints each kind's count and its plan's best round,
each kind's cursors asked three times a round (warm: shares of the index each kind reads,
not the row's figure).
bench/README.md, "A cursor's page at -score ..." (sessions 21 and 22), has the figures.
"""

import os
import pickle
import random
import statistics
import subprocess
import sys
import time
from bisect import bisect_left, bisect_right

from usage import check_argv

CURSORS = 5000
ASKED = int(os.environ.get("ASKED", "20000"))
RECORDS = int(os.environ.get("RECORDS", "20000"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
FILTER = bool(os.environ.get("FILTER"))  # the "+ filter" row instead (module docstring)
ROW_NAME = "id order + author filter" if FILTER else "sort=-score"


def rss_mb() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS"))


def cursors() -> list[tuple[float, int]]:
    """(score, id) of matrix_bench.py `varied_shapes`' 5,000 cursors sorted by -score."""
    rng = random.Random(36)
    ids = [rng.randint(1, RECORDS) for _ in range(CURSORS)]
    return [(round(rng.uniform(0, 100), 2), i) for i in ids]


def child(code: str, data: str, paired: bool) -> None:
    sys.path[:0] = [code]
    from pages_kit import open_app, request  # this script's own bench folder's, over CODE's dbsvc

    try:
        from dbsvc.cursors import encode_cursor
    except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
        from dbsvc.operators import encode_cursor
    from dbsvc.runtime import Query
    from dbsvc.storage.seek import plan_operators

    app, store, opened = open_app(code, data)
    table = store.table("BlogPost")
    made = cursors()
    queries = [Query(sort=(("score", True),), limit=20, cursor=((key,), id_)) for key, id_ in made]
    rng = random.Random(11)
    picks = [rng.randrange(CURSORS) for _ in range(ASKED)]
    authors = [rng.randint(1, 1000) for _ in range(ASKED)]
    if FILTER:  # the matrix's "cursor at random + filter": id order under an author at random
        plans = [
            Query(filters={"author_id": frozenset({a})}, limit=20, cursor=((), made[n][1]))
            for n, a in zip(picks, authors)
        ]
    else:
        plans = [queries[n] for n in picks]
    if os.environ.get("PATHS") and not paired:
        paths(table, queries, plan_operators)
    before = rss_mb()
    for query in plans[:CURSORS]:
        plan_operators(table, query)
    print(f"{code}: open {opened:.0f} s, RSS {before} MB before the warm pass, {rss_mb()} MB after", flush=True)

    def plan_round() -> float:
        start = time.thread_time()
        for query in plans:
            plan_operators(table, query)
        return (time.thread_time() - start) / ASKED * 1e6

    rounds = [plan_round]
    if os.environ.get("ROW"):  # the whole request, as the app answers it (no list answers kept)
        targets = []
        for key, id_ in made:
            cursor = encode_cursor("BlogPost", (("score", True),), [key], id_)
            targets.append(request(f"/api/blog-post?sort=-score&limit=20&cursor={cursor}"))
        requests = [targets[n] for n in picks]
        if FILTER:
            requests = []
            for n, author in zip(picks, authors):
                cursor = encode_cursor("BlogPost", (), [], made[n][1])
                requests.append(request(f"/api/blog-post?author_id={author}&limit=20&cursor={cursor}"))
        for asked in requests[:CURSORS]:
            assert app(asked).status == 200, asked.target

        def row_round() -> float:
            start = time.thread_time()
            for asked in requests:
                app(asked)
            return (time.thread_time() - start) / ASKED * 1e6

        rounds.append(row_round)
        print(f"{code}: RSS {rss_mb()} MB after the requests' warm pass", flush=True)

    if paired:
        print("ready", flush=True)
        for line in sys.stdin:
            if line.strip() != "round":
                break
            print(" ".join(f"{one():.2f}" for one in rounds), flush=True)
    else:
        for one, what in zip(rounds, ("plan", "request")):
            spent = [one() for _ in range(ROUNDS)]
            each = " ".join(f"{s:.2f}" for s in spent)
            print(f"{code}: {what} at a cursor at random, {ROW_NAME} {min(spent):.2f} us (rounds {each})", flush=True)
    if os.environ.get("DUMP"):
        queries = [Query(sort=(("score", True),), limit=20, cursor=((key,), id_)) for key, id_ in made]
        if FILTER:
            queries = plans[:CURSORS]
        with open(os.environ["DUMP"], "wb") as out:
            pickle.dump([plan_operators(table, query) for query in queries * 3], out)
    print(f"{code}: RSS {rss_mb()} MB at the end", flush=True)
    store.close()


def paths(table, queries: list, plan_operators) -> None:
    """PATHS=1: the -score cursors by where their page lies in the index, each kind's
    count and plan (module docstring); reads the index's sublists as any tree holds them."""
    index = table.ordered["score"]
    lastkeys, keys, ids = index.last_keys, index.key_sublists, index.id_sublists
    kinds: dict[str, list] = {"inside the run": [], "the run crosses a sublist's end": [], "below the run": []}
    print(f"score index: {len(keys)} sublists, {len(index)} entries", flush=True)
    for query in queries:
        (key,), id_ = query.cursor
        i = bisect_left(lastkeys, key)
        if i == len(lastkeys):
            kinds.setdefault("above every key", []).append(query)
            continue
        lo = bisect_left(keys[i], key)
        hi = bisect_right(keys[i], key, lo)
        if hi == len(keys[i]) and i + 1 < len(keys) and keys[i + 1][0] == key:
            kinds["the run crosses a sublist's end"].append(query)
        elif hi - bisect_right(ids[i], id_, lo, hi) < 21:
            kinds["below the run"].append(query)
        else:
            kinds["inside the run"].append(query)
    for kind, asked in kinds.items():
        if not asked:
            continue
        spent = []
        for _ in range(ROUNDS):
            start = time.thread_time()
            for query in asked * 3:
                plan_operators(table, query)
            spent.append((time.thread_time() - start) / (3 * len(asked)) * 1e6)
        print(f"  {kind:32} {len(asked):5} cursors, plan {min(spent):.2f} us (best of {ROUNDS})", flush=True)


def pair(old: str, new: str, data: str) -> None:
    """Both trees opened at once, then ROUNDS alternated pairs (module docstring)."""
    procs = {}
    for code in (old, new):
        procs[code] = subprocess.Popen(
            [sys.executable, __file__, code, data, "--paired"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    for code, proc in procs.items():
        assert proc.stdout is not None
        while (line := proc.stdout.readline().strip()) != "ready":
            if not line:
                raise SystemExit(f"{code} ended before it was ready")
            print(line, flush=True)
    row = bool(os.environ.get("ROW"))
    head = "| pair | load | plan old us | plan new us | new / old |" + (
        " request old us | request new us | new / old |" if row else ""
    )
    print(head, flush=True)
    print("|---" * (head.count("|") - 1) + "|", flush=True)
    kept: dict[str, list[list[float]]] = {old: [], new: []}
    for n in range(ROUNDS):
        load = os.getloadavg()[0]
        figures = {}
        for code in (old, new) if n % 2 == 0 else (new, old):
            proc = procs[code]
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("round\n")
            proc.stdin.flush()
            figures[code] = [float(f) for f in proc.stdout.readline().split()]
        cells = " | ".join(f"{a:.2f} | {b:.2f} | {b / a:.2f}" for a, b in zip(figures[old], figures[new]))
        first = "old first" if n % 2 == 0 else "new first"
        print(f"| {n + 1} ({first}) | {load:.1f} | {cells} |", flush=True)
        for code in (old, new):
            kept[code].append(figures[code])
    for name, pick in (("best", min), ("median", statistics.median)):
        best = {code: [pick(column) for column in zip(*rows)] for code, rows in kept.items()}
        cells = " | ".join(f"{a:.2f} | {b:.2f} | {b / a:.2f}" for a, b in zip(best[old], best[new]))
        print(f"| {name} of {ROUNDS} | | {cells} |", flush=True)
    for proc in procs.values():
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        print(proc.stdout.read().strip(), flush=True)
        proc.wait(timeout=120)


if __name__ == "__main__":
    check_argv(__doc__, 4 if sys.argv[1:2] == ["--pair"] else 2)
    if sys.argv[1] == "--pair":
        pair(*sys.argv[2:5])
    else:
        child(sys.argv[1], sys.argv[2], sys.argv[3:] == ["--paired"])
