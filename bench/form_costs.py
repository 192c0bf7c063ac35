"""What holding a table's stored records in object form (`{"id":1,...}`) would cost its
other readers, a record at a time, over a seed's own stored texts (issue 36 item 2,
session 26, wt-objform; the census in docs/decisions.md):

- at open: a snapshot's row (the array) turned into the object (`rows.record_json`: the
  layout filled with the array's cut values, no decode);
- at a snapshot: the object turned back into the array for the rows line (the block's keys
  parse, `json.loads` of PIECE_ROWS joined texts, now gives dicts; the rows line is then
  their values encoded, a piece at a time, in one C call each, or each row's values cut
  out of its object by one match of the layout, as `record_json` cuts the other way)
  against the block's parse now, and the parse of objects alone (a snapshot format whose
  rows were objects: joined as they are);
- `unpack` (an index's keys on an update or a delete, a filter the indexes do not answer,
  an as_of state): the values out of the array (now) and out of the object.

    python bench/form_costs.py CODE DATA
    ROUNDS=5 COPIES=50 python bench/form_costs.py . /tmp/copy-of-20k

It measures the array form: since session 27 (2d72e25f) a stored record is its object,
`rows.record_json` is gone, and CODE must be a checkout before it (e.g. c99385c).

DATA: a tenant seeded by `service_bench.py --matrix` (the 20k seed: its 20,000 stored
texts, repeated COPIES times as distinct bytes objects so the run reads as many records as
a 1M table; the reads run in table order, as an open and a snapshot read them). Each round
takes every way in turn, the order reversed every other round; CPU by `time.thread_time`,
us a record, and the whole table's seconds at 1,000,000 records.
"""

import json
import os
import re
import sys
import time
from typing import Any

from usage import check_argv

check_argv(__doc__, 2)
CODE, DATA = sys.argv[1], sys.argv[2]
sys.path[:0] = [CODE, CODE + "/bench"]
from pages_kit import open_app  # noqa: E402

from dbsvc.runtime import compact_json  # noqa: E402
from dbsvc.storage.rows import SCAN, layout, record_json  # noqa: E402
from dbsvc.storage.snapshot import PIECE_ROWS  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "5"))
COPIES = int(os.environ.get("COPIES", "50"))


def main() -> None:
    app, store, _ = open_app(CODE, DATA)
    table = store.table("BlogPost")
    fields = table.model.fields
    layout_bytes, count = layout(fields).encode("utf-8"), len(fields)
    seed = [s for s in table.live.slots if s is not None]
    arrays = [bytes(bytearray(s)) for _ in range(COPIES) for s in seed]  # distinct objects
    objects = [record_json(layout_bytes, count, s) for s in arrays]
    assert all(o is not None for o in objects)
    n = len(arrays)
    print(f"{n} records; arrays {sum(map(len, arrays)) / n:.0f} B, objects {sum(map(len, objects)) / n:.0f} B a text")

    def to_objects() -> None:
        for s in arrays:
            record_json(layout_bytes, count, s)

    def block_parse_arrays() -> None:  # the snapshot block's keys parse now
        for i in range(0, n, PIECE_ROWS):
            json.loads(b"[" + b",".join(arrays[i : i + PIECE_ROWS]) + b"]")

    def block_parse_objects_only() -> None:  # a format of object rows: the keys parse alone
        for i in range(0, n, PIECE_ROWS):
            json.loads(b"[" + b",".join(objects[i : i + PIECE_ROWS]) + b"]")

    def block_parse_objects() -> None:  # the same parse of objects, the rows line made again
        for i in range(0, n, PIECE_ROWS):
            parsed = json.loads(b"[" + b",".join(objects[i : i + PIECE_ROWS]) + b"]")
            values = [list(d.values()) for d in parsed]
            compact_json(values).encode("utf-8", "surrogatepass")

    value = rb'("[^"\\]*+(?:\\.[^"\\]*+)*+"|[^,"\[\]{}]++)'  # rows.py `_flat`'s value
    keys = [re.escape(compact_json(f).encode("utf-8")) + b":" for f in fields]
    whole = re.compile(rb"\{" + b",".join(k + value for k in keys) + rb"\}")
    assert all(b"[" + b",".join(whole.fullmatch(o).groups()) + b"]" == a for o, a in zip(objects, arrays))  # type: ignore[union-attr]

    def block_cut_objects() -> None:  # the rows line's texts cut out of the objects, flat values: one match each
        for i in range(0, n, PIECE_ROWS):
            piece = objects[i : i + PIECE_ROWS]
            json.loads(b"[" + b",".join(piece) + b"]")
            [b"[" + b",".join(m.groups()) + b"]" for m in map(whole.fullmatch, piece)]  # type: ignore[union-attr]

    def unpack_arrays() -> None:
        for s in arrays:
            SCAN(s.decode("utf-8", "surrogatepass"), 0)

    def unpack_objects() -> None:
        for s in objects:
            list(SCAN(s.decode("utf-8", "surrogatepass"), 0)[0].values())

    ways: dict[str, Any] = {
        "array -> object (open)": to_objects,
        "block parse, arrays (snapshot now)": block_parse_arrays,
        "block parse, objects only": block_parse_objects_only,
        "block parse, objects + rows line": block_parse_objects,
        "block parse, objects + rows cut": block_cut_objects,
        "unpack, array": unpack_arrays,
        "unpack, object": unpack_objects,
    }
    figures: dict[str, list[float]] = {w: [] for w in ways}
    tt = time.thread_time
    for round_ in range(ROUNDS):
        for way in list(ways) if round_ % 2 == 0 else list(ways)[::-1]:
            start = tt()
            ways[way]()
            figures[way].append((tt() - start) / n * 1e6)
    print(f"load {os.getloadavg()[0]:.1f}")
    for way, runs in figures.items():
        ordered = sorted(runs)
        print(
            f"{way:36} best {ordered[0]:5.2f} median {ordered[len(ordered) // 2]:5.2f} us a record"
            f" ({ordered[len(ordered) // 2]:.1f} s at 1M; rounds {' '.join(f'{f:.2f}' for f in runs)})"
        )
    store.close()


if __name__ == "__main__":
    main()
