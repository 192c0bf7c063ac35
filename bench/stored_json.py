"""A record that misses both record caches, in process: its stored bytes -> its JSON by the
path a list page takes today (rows.unpack, the model's decode into a dict, runtime.json_bytes)
against the stored text's value slices put into the model's object layout (issue 36 item 2's
"serve a page's records from their stored text": docs/decisions.md, wt-rand2), and against
the way built in session 17 (wt-rand3): `rows.record_json`, the stored bytes
split at their commas and put into the layout as bytes. A CODE without
`record_json` (a tree before it) measures the first three only.

    python bench/stored_json.py CODE DATA [RECORDS]

CODE is the checkout to import, DATA a tenant of schemas/blog.dbs posts seeded by
`service_bench.py --matrix` (opened read-only: use a copy), RECORDS its count of posts
(default 20,000). ids are drawn at random (2,000 a round, 7 rounds, a new draw each round,
so at 1,000,000 posts each record read is cold as a random page's are); both ways are
checked to give the same bytes for every record; the best round's `time.thread_time` a
record is printed for each way and for `unpack` alone; "cut again" is the built way over
the same records a second time, warm: the difference from "cut" is what reaching a cold
record costs that way.
"""

import json
import os
import random
import sys
import time

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
RECORDS = int(sys.argv[3]) if len(sys.argv) > 3 else 20000
sys.path[:0] = [CODE]
from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.runtime import json_bytes  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402
from dbsvc.storage import Store  # noqa: E402
from dbsvc.storage.idmap import pick  # noqa: E402
from dbsvc.storage.rows import SCAN, layout, unpack  # noqa: E402

try:
    from dbsvc.storage.rows import record_json  # noqa: E402
except ImportError:  # a tree before session 17
    record_json = None  # type: ignore[assignment]

module = compile_schema(load_schema(CODE + "/schemas/blog.dbs"))
store = Store.open(os.path.join(DATA, "default"), module.MODELS, module.DESCRIPTION, readonly=True)
table, model = store.table("BlogPost"), module.BY_NAME["BlogPost"]
HEADS = [("{" if i == 0 else ",") + json.dumps(name) + ":" for i, name in enumerate(model.fields)]


def decoded(stored: bytes) -> bytes:
    """Today's miss: the values, the dict, its JSON."""
    return json_bytes(model.decode(unpack(stored)))


def sliced(stored: bytes) -> bytes:
    """Each value's text found by the JSON scanner, put after its field's name."""
    text = stored.decode("utf-8")
    parts, at = [], 1
    for head in HEADS:
        _value, end = SCAN(text, at)
        parts.append(head)
        parts.append(text[at:end])
        at = end + 1
    parts.append("}")
    return "".join(parts).encode("utf-8")


LAYOUT, COUNT = layout(model.fields).encode("utf-8"), len(model.fields)


def cut(stored: bytes) -> bytes | None:
    """The built way (rows.record_json): None where it leaves the record to the decode."""
    return record_json(LAYOUT, COUNT, stored)


WAYS = [("decoded", decoded), ("sliced", sliced), ("unpack", unpack)]
if record_json is not None:
    WAYS.append(("cut", cut))
rng = random.Random(36)
best = dict.fromkeys([name for name, _way in WAYS], 9e9)
for _round in range(7):
    for name, way in WAYS:
        records = pick(table.live, [rng.randint(1, RECORDS) for _ in range(2000)])
        if _round == 0 and name == "decoded":
            assert all(decoded(r) == sliced(r) for r in records)
            if record_json is not None:
                cuts = [cut(r) for r in records]
                assert all(c is None or c == decoded(r) for c, r in zip(cuts, records))
                print(f"cut: {sum(c is not None for c in cuts)} of {len(records)} records (the rest decoded)")
        start = time.thread_time()
        for stored in records:
            way(stored)
        best[name] = min(best[name], (time.thread_time() - start) / len(records) * 1e6)
        if name == "cut":  # the same records again, now in the CPU's caches: the cold share
            start = time.thread_time()
            for stored in records:
                way(stored)
            best["cut again"] = min(best.get("cut again", 9e9), (time.thread_time() - start) / len(records) * 1e6)
for name, us in best.items():
    print(f"{name:8} {us:6.2f} us a record ({RECORDS} posts, ids at random)")
store.close()
