"""Watermarks across models at one moment: what `as_of` on one model means for the others.

A watermark counts one model's rows; `as_of=N` reads that model after its first N rows. A
read that also shows records of other models (`expand=`, dbsvc/expand.py) reads each of
them at the same moment, and `watermarks_at(store, model, n)` says which: every model's
watermark at the *last* moment `model`'s watermark was `n`, that is just before its row
`n + 1` was written (or now, when `model` has no row `n + 1`). So `as_of` at the current
watermark reads every model in the present, as a read without `as_of` does.

Rules:

1. `n` at or past the model's watermark: the present (`Store.watermarks()`).
2. `n` inside the epoch's snapshot (at most the model's snapshot rows): the moment of the
   snapshot, each model at its snapshot row count. Rows of a snapshot have no order across
   models (they stand for one moment), so this is the only moment they name.
3. Otherwise the epoch's log is read from its start (`Store.frames_after(log base)`) up to
   the frame of row `n + 1` of `model`, counting each model's rows on the way: O(log
   rows) read from disk, no JSON decoded (the model's name is read from the frame's
   fixed head, events.py). A log is bounded by compaction (64 MiB), so is this read; the
   caller caches answers for past watermarks, which never change within an epoch.

Imports only storage's own modules and the stdlib.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from dbsvc.storage.epoch import Epoch
from dbsvc.storage.logfile import FRAME_HEADER_SIZE
from dbsvc.storage.table import Table


class Source(Protocol):
    """What this module reads of a store (store.py implements it; never imported here)."""

    @property
    def tables(self) -> Mapping[str, Table]: ...

    @property
    def epoch_state(self) -> Epoch: ...

    def watermarks(self) -> dict[str, int]: ...

    def frames_after(self, offset: int) -> Iterator[bytes]: ...


_MODEL = b'"model":"'


def frame_model(frame: bytes) -> str:
    """The model a log frame's row belongs to, read from the payload's head."""
    start = frame.index(_MODEL, FRAME_HEADER_SIZE) + len(_MODEL)
    return frame[start : frame.index(b'"', start)].decode("utf-8")


def watermarks_at(store: Source, model: str, n: int) -> dict[str, int]:
    """Every model's watermark at the last moment `model`'s was `n` (module docstring)."""
    tables = store.tables
    if n >= tables[model].watermark:
        return store.watermarks()  # rule 1
    counts = {name: len(table.base_ids) for name, table in tables.items()}
    seen = counts[model]
    if n < seen:
        return counts  # rule 2
    for frame in store.frames_after(store.epoch_state.log_base):  # rule 3
        name = frame_model(frame)
        if name == model:
            if seen == n:
                break
            seen += 1
        counts[name] += 1
    return counts
