"""A replica's kept record texts (followrun.py rule 6), measured on the replication bench's tenant.

    PYTHONPATH=. python bench/kept_texts.py share DATA        # pack_many against the check, a record
    PYTHONPATH=TREE python bench/kept_texts.py apply DATA     # TREE's in-process apply, CPU a frame

DATA is a cached tenant's data directory (replication_bench.py builds it:
/tmp/dbsvc-replication-bench/users-200000-*/data). `share` takes the log's first 100
groups of 1,024 frames and times, group by group and in alternating order, `pack_many` of the
records' values against `stored_from_texts` of their texts (with the slice of each text out of
its payload), asserting both give the same bytes: medians in us a record. `apply` is the
in-process loop of `--only inprocess` for whichever tree PYTHONPATH names (a fresh store, sync
off, a replica's collector thresholds, groups of 1,024, each awaited after the next is
applied), printing its thread CPU a frame and the records kept as their frames carried them
(None: a tree without the counter); run it for two trees in turn to pair them.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import tempfile
import time
from itertools import repeat
from operator import getitem
from pathlib import Path

from usage import check_argv

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replication_replica import log_frames  # noqa: E402

from dbsvc import service  # noqa: E402
from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402

GROUP = 1024


def _model(name: str):  # noqa: ANN202 (a compiled model)
    import dbsvc

    schema = Path(dbsvc.__file__).resolve().parent.parent / "schemas" / "blog.dbs"
    module = compile_schema(load_schema(str(schema)))
    return module, next(m for m in module.MODELS if m.name == name)


def share(data: Path) -> None:
    try:
        from dbsvc.storage.followrun import rows_and_columns
    except ImportError:  # a tree from before the name was public
        from dbsvc.storage.followrun import _rows as rows_and_columns
    from dbsvc.storage.rows import SCAN, pack_many, stored_from_texts

    _module, model = _model("User")
    frames = log_frames(data)[GROUP : GROUP * 101]  # the first group teaches the value types
    gc.freeze()
    gc.set_threshold(*getattr(service, "FOLLOWER_GC_THRESHOLDS", service.GC_THRESHOLDS))
    old: list[float] = []
    new: list[float] = []
    for at in range(0, len(frames), GROUP):
        texts = [frame[16:].decode() for frame in frames[at : at + GROUP]]
        starts = [text.find('"record":') + 9 for text in texts]
        values, columns = rows_and_columns(model, [SCAN(text, start)[0] for text, start in zip(texts, starts)])

        def packed() -> list[bytes] | None:
            return pack_many(model.fields, values)

        def kept() -> list[bytes] | None:
            records = list(map(getitem, texts, map(slice, starts, repeat(-1))))
            return stored_from_texts(model.fields, columns, records)

        pairs = [(packed, old), (kept, new)]
        for way, figures in pairs if at // GROUP % 2 else reversed(pairs):
            started = time.perf_counter()
            way()
            figures.append((time.perf_counter() - started) / len(texts) * 1e6)
        assert packed() == kept()
    a, b = statistics.median(old), statistics.median(new)
    print(f"{len(old)} groups of {GROUP}: pack_many {a:.2f} us a record, the kept texts' check {b:.2f} ({b / a:.2f})")


def apply(data: Path) -> None:
    from dbsvc.storage import Store
    from dbsvc.storage.tenants import create_tenant

    module, _model_ = _model("User")
    frames = log_frames(data)
    gc.freeze()
    gc.set_threshold(*getattr(service, "FOLLOWER_GC_THRESHOLDS", service.GC_THRESHOLDS))
    tenant = create_tenant(tempfile.mkdtemp(prefix="dbsvc-kept-"), "t")
    store = Store.open(tenant, module.MODELS, module.DESCRIPTION, sync="off", replication=True)

    async def main() -> None:
        pending = None
        for at in range(0, len(frames), GROUP):
            future = store.apply_replicated_frames(frames[at : at + GROUP])
            if pending is not None:
                await pending
            pending = future
        if pending is not None:
            await pending

    started = time.thread_time()
    asyncio.run(main())
    cpu = (time.thread_time() - started) / len(frames) * 1e6
    print(f"{cpu:.3f} us of loop CPU a frame; kept {store.stats().get('kept_texts')}")
    store.close()


if __name__ == "__main__":
    check_argv(__doc__, 2, ("share", "apply"))
    {"share": share, "apply": apply}[sys.argv[1]](Path(sys.argv[2]))
