"""The read path's caches when clients ask many pages of a table larger than they are
(issue 36 item 2 at 1,000,000 posts; bench/README.md, "Pages that miss the caches").

- Every miss evicts, so an eviction must cost about what an insertion does: a plain dict's
  `next(iter(d))` after many deletions from its front walked every empty slot before the
  first live one (~160 us an eviction at 65,536 entries once the dict had resized, against
  ~1 us to encode a small record; readcache.py's module docstring). The bound is CPU time
  (`time.thread_time`) with a wide margin: 120,000 evictions (past the dict's first resize,
  where the walk is longest) cost over six seconds before, under half a second now.

Fixture-free, in process."""

from __future__ import annotations

import time

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.readcache import EncodedRecords
from dbsvc.schema import parse_schema

MODULE = compile_schema(
    parse_schema(
        """
model Note {
  id    int   @id
  title str   @filter @sort
  score float @sort
  @projection(card, id)
}
""",
        "pages.dbs",
    )
)
NOTE = MODULE.BY_NAME["Note"]
EVICTIONS = 120_000


def cpu_seconds(run) -> float:  # noqa: ANN001 (a callable)
    start = time.thread_time()
    run()
    return time.thread_time() - start


def note(id_: int, title: str = "t", score: float = 1.5) -> dict:
    return {"id": id_, "title": title, "score": score}


# -- evictions -----------------------------------------------------------------------------


def test_encoded_records_evict_in_constant_time_when_full():
    cache = EncodedRecords([NOTE])  # the default capacity, 65,536
    for id_ in range(cache.capacity):
        cache.encode(NOTE, note(id_))
    records = [note(cache.capacity + i) for i in range(EVICTIONS)]
    spent = cpu_seconds(lambda: [cache.encode(NOTE, record) for record in records])
    assert spent < 3.0, f"{EVICTIONS} evictions took {spent:.2f} s of CPU"
    last = records[-1]
    assert cache.encode(NOTE, last) == b'{"id":%d,"title":"t","score":1.5}' % last["id"]


@pytest.mark.slow  # the same eviction as `encode`'s: another second of CPU
def test_projected_records_evict_in_constant_time_when_full():
    cache = EncodedRecords([NOTE])
    cache.projected(NOTE, "card", [note(id_) for id_ in range(cache.capacity)])
    records = [note(cache.capacity + i) for i in range(EVICTIONS)]
    spent = cpu_seconds(lambda: cache.projected(NOTE, "card", records))
    assert spent < 3.0, f"{EVICTIONS} evictions took {spent:.2f} s of CPU"
