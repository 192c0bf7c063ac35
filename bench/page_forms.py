"""The ceiling of a many-target page's records at 1M and 20k, three ways in one process:
(a) main as it is (the record cache holding its share, storage/shown.py); (b) the record
cache allowed every record, every record's JSON kept in it before the rounds ("no
misses"); (c) every record's object JSON (`{"id":1,...}`, `record_json` of its stored
text) held in a map laid out as the IdMap, so the page is the slots picked and joined:
no cache lookup, no entry, no cut, no admission ("records held in their object form"),
the last record of a sorted page decoded from its object text for its `Link` (issue 36
item 2, session 26, wt-objform; docs/decisions.md).

    python bench/page_forms.py CODE DATA
    ROW=score RECORDS=20000 ROUNDS=8 N=2000 WARM=4000 python bench/page_forms.py . /tmp/copy-of-20k

It measures the array form: since session 27 (2d72e25f) a stored record is its object,
`rows.record_json` is gone, and CODE must be a checkout before it (e.g. c99385c).

ROW: rows, comma separated, each measured in turn after one open: `filter` (the matrix's "cursor at random + filter": an author at random, one of
5,000 id cursors at random, limit 20) or `score` ("cursor at random, sort=-score": one
of 5,000 cursors of a score and an id at random). One open of DATA (a tenant seeded by
`service_bench.py --matrix --records RECORDS --data DATA`, opened read-only as
pages_kit.py opens it), WARM pages through (a) to fill its cache to its share, then (b)'s
cache and (c)'s map built once (RSS before and after each), WARM pages through each.
ROUNDS rounds, each taking every way in turn (the order reversed every other round) over
N new targets: the whole `Application.__call__`, and the page's records alone
(`Table.shown_all` with texts over ids planned before the clock starts), CPU a request by
`time.thread_time`. Every way answers byte for byte alike (checked on a few targets
first). Ways (b) and (c) are stand-ins measured in this process, never the package's
code: (b) is a second `ShownDicts` swapped in as the table's, (c) `Table.shown_all`
replaced for its rounds.
"""

import gc
import os
import random
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import filtered_cursor_targets, open_app, request  # noqa: E402

try:
    from dbsvc.cursors import encode_cursor  # noqa: E402
except ImportError:  # a checkout from before cursors.py: its cursors were operators.py's
    from dbsvc.operators import encode_cursor  # noqa: E402
from dbsvc.storage.bucketplan import bucket_operators  # noqa: E402
from dbsvc.storage.idmap import IdMap, pick  # noqa: E402
from dbsvc.storage.rows import SCAN, layout, record_json  # noqa: E402
from dbsvc.storage.seek import plan_operators  # noqa: E402
from dbsvc.storage.shown import SentRecord, ShownDicts  # noqa: E402
from dbsvc.storage.table import Table  # noqa: E402

ROW = os.environ.get("ROW", "filter")
RECORDS = int(os.environ.get("RECORDS", "1000000"))
ROUNDS = int(os.environ.get("ROUNDS", "8"))
N = int(os.environ.get("N", "4000"))
WARM = int(os.environ.get("WARM", "20000"))


def rss_mb() -> float:
    """This process's resident set now, in MB (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def scored_cursor_targets(records: int) -> Callable[[], str]:
    """The matrix's "cursor at random, sort=-score" row in process (matrix_bench.py
    `varied_shapes`): 5,000 cursors of a score at random (0-100) and an id at random."""
    made = random.Random(36)
    ids = [made.randint(1, records) for _ in range(5000)]
    cursors = [encode_cursor("BlogPost", (("score", True),), [round(made.uniform(0, 100), 2)], i) for i in ids]
    rng = random.Random(7)

    def target() -> str:
        return f"/api/blog-post?sort=-score&limit=20&cursor={rng.choice(cursors)}"

    return target


def answer(response: Any) -> tuple[Any, ...]:
    """A response's status, headers and body bytes, to compare the ways' answers."""
    body = response.body
    return response.status, response.headers, body if isinstance(body, bytes) else b"".join(body)


def main() -> None:
    app, store, opened = open_app(CODE, DATA)
    print(f"{CODE}: rows {ROW}, open {opened:.1f} s, load {os.getloadavg()[0]:.1f}, rss {rss_mb():.0f} MB", flush=True)
    model, table = app.models["blog-post"], store.table("BlogPost")
    first = ROW.split(",")[0]
    warming = (filtered_cursor_targets if first == "filter" else scored_cursor_targets)(RECORDS)
    for _ in range(WARM):
        app(request(warming()))
    main_dicts = table.dicts
    fields = table.model.fields
    layout_bytes, count = layout(fields).encode("utf-8"), len(fields)
    live = table.live
    assert isinstance(live, IdMap) and not live.far, "an int-id table of ids 1..n"
    print(f"(a) warm: kept {len(main_dicts.ids)}, weighs {main_dicts.weighs / 1e6:.0f} MB, rss {rss_mb():.0f} MB")

    # (b): a cache holding every record's JSON (capacity past the table: `admits` always)
    before = rss_mb()
    full = ShownDicts(
        table.model.decode, capacity=len(live) + 1, fields=fields, id_field=table.model.id_field, sized=live.__len__
    )
    for id_, stored in enumerate(live.slots):
        if stored is not None:
            full.remember(id_, stored, None, record_json(layout_bytes, count, stored))
    gc.freeze()
    print(f"(b) built: kept {len(full.ids)}, weighs {full.weighs / 1e6:.0f} MB, rss +{rss_mb() - before:.0f} MB")

    # (c): every record's object JSON in a map laid out as the live one
    before = rss_mb()
    objects = IdMap()
    started = time.thread_time()
    slots: list[Any] = [None if s is None else record_json(layout_bytes, count, s) for s in live.slots]
    made = time.thread_time() - started
    objects._slots, objects._count = slots, len(live)  # noqa: SLF001  # a stand-in, built once
    gc.freeze()
    array_bytes = sum(len(s) for s in live.slots if s is not None)
    object_bytes = sum(len(s) for s in slots if s is not None)
    print(
        f"(c) built in {made:.1f} s of CPU: rss +{rss_mb() - before:.0f} MB; stored arrays {array_bytes / 1e6:.0f} MB of text,"
        f" objects {object_bytes / 1e6:.0f} MB ({(object_bytes - array_bytes) / max(len(live), 1):.0f} B a record more)"
    )
    original = Table.shown_all
    id_field = table.model.id_field

    def object_form(self: Table, ids: list[Any], texts: bool = False, keyed: bool = True) -> list[Any]:
        """(c): the page's object texts picked; the last as a `SentRecord`, its dict read out
        of its object text when the page is sorted (its `Link` reads its keys)."""
        if not texts or self is not table or not ids:
            return original(self, ids, texts, keyed)
        out: list[Any] = pick(objects, ids)
        text = out[-1]
        if keyed:
            sent = SentRecord(SCAN(text.decode("utf-8", "surrogatepass"), 0)[0])
        else:
            sent = SentRecord()
            sent[id_field] = ids[-1]
        sent.text = text
        out[-1] = sent
        return out

    def use(way: str) -> None:
        table.dicts = full if way == "(b) all kept" else main_dicts
        Table.shown_all = object_form if way == "(c) object form" else original  # type: ignore[method-assign]

    def measure(target: Callable[[], str]) -> None:
        """The rounds of one row: answers compared, each way warmed, then alternated."""
        check = [request(target()) for _ in range(50)]
        answers: dict[str, list[bytes]] = {}
        for way in ways:
            use(way)
            answers[way] = [answer(app(r)) for r in check]
            for _ in range(WARM):
                app(request(target()))
        use("(a) main")
        same = all(answers[w] == answers[ways[0]] for w in ways)
        print(f"answers alike over {len(check)} targets: {same}; load {os.getloadavg()[0]:.1f}", flush=True)

        whole: dict[str, list[float]] = {w: [] for w in ways}
        records: dict[str, list[float]] = {w: [] for w in ways}
        tt = time.thread_time
        try:
            for round_ in range(ROUNDS):
                for way in ways if round_ % 2 == 0 else ways[::-1]:
                    use(way)
                    targets = [request(target()) for _ in range(N)]
                    start = tt()
                    for r in targets:
                        app(r)
                    whole[way].append((tt() - start) / N * 1e6)
                    queries = [app.queries.listing(model, request(target())).query for _ in range(N)]
                    plans = [bucket_operators(table, q) or plan_operators(table, q) for q in queries]
                    pages = [(ids, bool(q.sort)) for (ids, _total, _more), q in zip(plans, queries) if ids]
                    shown_all = table.shown_all
                    start = tt()
                    for ids, keyed in pages:
                        shown_all(ids, True, keyed)
                    records[way].append((tt() - start) / N * 1e6)
        finally:
            use("(a) main")
        print(f"load {os.getloadavg()[0]:.1f}; (a) kept {len(main_dicts.ids)}, refused {main_dicts.refused} in all")
        print(f"rss {rss_mb():.0f} MB, peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.0f} MB")
        for way in ways:
            for label, figures in (("app()", whole[way]), ("records", records[way])):
                ordered = sorted(figures)
                print(
                    f"{way:16} {label:7} best {ordered[0]:6.1f} median {ordered[len(ordered) // 2]:6.1f} us"
                    f" (rounds {' '.join(f'{f:.1f}' for f in figures)})"
                )

    ways = ["(a) main", "(b) all kept", "(c) object form"]
    for row in ROW.split(","):
        target = (filtered_cursor_targets if row == "filter" else scored_cursor_targets)(RECORDS)
        print(f"-- {row} row, load {os.getloadavg()[0]:.1f}", flush=True)
        measure(target)

    store.close()


if __name__ == "__main__":
    main()
