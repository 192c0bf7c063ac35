"""The check step of an import alone (`Store.check_batch`), measuring each record or not.

    python bench/import_check_bench.py [--records 300000] [--rounds 3]

Writes the blog input of datatools_bench.py, validates every line as `dbsvc import` does,
then times `Store.check_batch(rows, measure=...)` on a read-only open of an empty tenant,
`measure=True` (every record's compact JSON encoded and measured against the record size
limit: batch.py rule 5) and `measure=False` (what datatools/load.py passes when no line is
long enough to hold a record near the limit), in CPU seconds, alternating, `--rounds` times.
Figures in bench/README.md ("The record-size check's price").
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from datatools_bench import write_input  # noqa: E402

from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.datatools.lines import decode_lines  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402
from dbsvc.storage import Store  # noqa: E402
from dbsvc.storage.tenants import create_tenant  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    module = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
    work = tempfile.mkdtemp(prefix="dbsvc-import-check-")
    try:
        source = os.path.join(work, "input.jsonl")
        write_input(source, args.records, 0.1)
        validators = {m.name: m.validate_create for m in module.MODELS}
        with open(source, "rb") as f:
            good, _bad = decode_lines(f.readlines(), 1)
        rows = [(name, validators[name](body)) for _line, name, body in good]
        directory = create_tenant(os.path.join(work, "data"), "bench")
        store = Store.open(directory, module.MODELS, module.DESCRIPTION, readonly=True, ring_capacity=0)
        try:
            for round_ in range(args.rounds):
                for measure in (True, False):
                    cpu = time.process_time()
                    store.check_batch(rows, measure=measure)
                    cpu = time.process_time() - cpu
                    print(
                        f"round {round_} measure={measure}: {cpu:.3f} CPU s = {cpu / len(rows) * 1e6:.2f} us a record"
                    )
        finally:
            store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
