"""A missed record's JSON from its stored text when its values hold commas, two trees in one
process (issue 36 item 2, lead 2: docs/decisions.md, wt-rand4): the peers' posts carry a
300-character body that usually holds commas, which `rows.record_json` before session 18 left
to the decode (its one split at the commas gave more pieces than fields).

    python bench/record_cut.py OLD NEW
    python bench/record_cut.py --pages TREE   # once for each tree, both started at one moment

It measures the array form: since session 27 (2d72e25f) a stored record is its object,
`rows.record_json` is gone, and OLD and NEW must be checkouts before it (e.g. c99385c).

OLD and NEW are checkouts; each one's `rows.record_json` is loaded from its file, followed
by the decode where it gives None, as `ShownDicts._missed_text` does. Records are made here,
the peers' shape (a 40-character title, a 300-character body of words, a float score), with
commas placed at random in the body and the title, and one case with a `json` array of two
items. Every way is checked against decode + encode (the dict path) on every record; the
printed figure is the best of 25 interleaved rounds of `time.thread_time` over 2,000
records, us a record, warm (the records made just before).

`--pages TREE`: that tree's whole miss of a page instead, `ShownDicts.page(..., texts=True)`
then `EncodedRecords.encode_page`, over 500 pages of 20 records neither cache keeps (both
full, capacity 2), bodies with no comma and with 5; best of 7 rounds, us a page. A tree
before session 17 has no texts (its `page` takes no `texts`): not measured this way.
"""

import importlib.util
import random
import sys
import time

from usage import check_argv

check_argv(__doc__, 2)
PAGES = sys.argv[1] == "--pages"
OLD, NEW = sys.argv[2] if PAGES else sys.argv[1], sys.argv[2]
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


MODULE = compile_schema(load_schema(NEW + "/schemas/blog.dbs"))
model = MODULE.BY_NAME["BlogPost"]
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


def pages() -> None:
    """The `--pages` figure of this process's tree (module docstring)."""
    from dbsvc.readcache import EncodedRecords
    from dbsvc.storage.shown import ShownDicts

    for commas in (0, 5):
        dicts = ShownDicts(model.decode, capacity=2, window=64, fields=model.fields)
        encoded = EncodedRecords(MODULE.MODELS, capacity=2)
        full = [900001, 900002]
        encoded.encode_page(model, dicts.page(full, [pack((i, 1, "t", "b", True, 1.5, None)) for i in full]))
        # ids never asked twice within the window of 64: every record refused
        asked = [[p * 20 + i for i in range(20)] for p in range(500)]
        stored = [
            [pack([i, 7, words(40, 0), words(300, commas), True, rng.random() * 100, None]) for i in ids]
            for ids in asked
        ]
        best = 9e9
        for _round in range(7):
            start = time.thread_time()
            for ids, page in zip(asked, stored):
                encoded.encode_page(model, dicts.page(ids, page, texts=True))
            best = min(best, (time.thread_time() - start) / len(asked) * 1e6)
        print(f"{NEW}: {commas} commas in the body: {best:.1f} us a page (page + encode)", flush=True)


if PAGES:
    pages()
    raise SystemExit(0)
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
