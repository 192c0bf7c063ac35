"""A missed record's JSON from its stored text when its values hold commas, two trees in one
process (issue 36 item 2, lead 2: docs/decisions.md, wt-rand4): the peers' posts carry a
300-character body that usually holds commas, which `rows.record_json` before session 18 left
to the decode (its one split at the commas gave more pieces than fields).

    python bench/record_cut.py OLD NEW

OLD and NEW are checkouts; each one's `rows.record_json` is loaded from its file, followed
by the decode where it gives None, as `ShownDicts._missed_text` does. Records are made here,
the peers' shape (a 40-character title, a 300-character body of words, a float score), with
commas placed at random in the body and the title, and one case with a `json` array of two
items. Every way is checked against decode + encode (the dict path) on every record; the
printed figure is the best of 25 interleaved rounds of `time.thread_time` over 2,000
records, us a record, warm (the records made just before).
"""

import importlib.util
import random
import sys
import time

OLD, NEW = sys.argv[1], sys.argv[2]
sys.path[:0] = [NEW]
from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.runtime import json_bytes  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402
from dbsvc.storage.rows import layout, pack, unpack  # noqa: E402


def record_json_of(tree: str):  # noqa: ANN201 (the tree's function)
    spec = importlib.util.spec_from_file_location(f"rows_{len(tree)}_{hash(tree)}", tree + "/dbsvc/storage/rows.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.record_json


model = compile_schema(load_schema(NEW + "/schemas/blog.dbs")).BY_NAME["BlogPost"]
LAYOUT, COUNT = layout(model.fields).encode("utf-8"), len(model.fields)
rng = random.Random(4)
WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor".split()


def words(size: int, commas: int) -> str:
    out: list[str] = []
    while len(" ".join(out)) < size:
        out.append(rng.choice(WORDS))
    for _ in range(commas):
        out[rng.randrange(len(out))] += ","
    return " ".join(out)[:size]


def decoded(stored: bytes) -> bytes:
    return json_bytes(model.decode(unpack(stored)))


def cut_by(record_json):  # noqa: ANN001, ANN201
    def cut(stored: bytes) -> bytes:
        text = record_json(LAYOUT, COUNT, stored)
        return text if text is not None else decoded(stored)

    return cut


CASES = {
    "no comma in a value": (0, 0, None),
    "5 commas in the body": (0, 5, None),
    "1 in the title, 5 in the body": (1, 5, None),
    "15 commas in the body": (0, 15, None),
    "tags [a,b], 5 in the body": (0, 5, ["a", "b"]),
}
WAYS = [("decode", decoded), ("old", cut_by(record_json_of(OLD))), ("new", cut_by(record_json_of(NEW)))]
for name, (in_title, in_body, tags) in CASES.items():
    records = [
        pack([i, rng.randint(1, 1000), words(40, in_title), words(300, in_body), True, rng.random() * 100, tags])
        for i in range(2000)
    ]
    for _way, way in WAYS:
        assert all(way(r) == decoded(r) for r in records)
    best = dict.fromkeys([w for w, _ in WAYS], 9e9)
    for _round in range(25):
        for way_name, way in WAYS:
            start = time.thread_time()
            for stored in records:
                way(stored)
            best[way_name] = min(best[way_name], (time.thread_time() - start) / len(records) * 1e6)
    print(f"{name:32}" + "  ".join(f"{w} {us:5.2f}" for w, us in best.items()), flush=True)
