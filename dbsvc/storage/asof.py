"""A table's past: its records as they were after the epoch's first n rows (`as_of` reads).

The table (table.py) keeps its epoch's history as `base_ids`, the snapshot's record ids
ascending (rows 1..len(base_ids)), and `rows`, one `Row` (id, stored | None, previous
stored | None) per insert, update or delete after the snapshot, with `prior` beside them
(array('q'): the version of each row's previous record, 0 for none). This module reads
them; it never writes them. Plain data, no I/O; it imports rows.py, idmap.py and
versions.py, never table.py (whose `get_as_of` and `state_as_of` call it).

History and `as_of` (docs/guide/queries.md#reading-the-past-watermarks-and-as_of). Rows after the snapshot are kept as 3-tuples that
share their stored records with the live state, so history costs a tuple and a list slot
per row (bench/README.md has the bytes) plus the superseded stored records themselves; snapshot rows cost one
list slot (8 bytes) each. History is bounded by compaction, which starts a new epoch whose
`rows` are only those written after its cut: at open, by `dbsvc compact`, and while serving
(online.py) as soon as the log is over `compact_bytes` (64 MiB) and holds more than twice
as many rows as there are live records, or more than twice the snapshot's bytes
(recovery.py `needs_compaction`). So `rows` never holds much more than
max(2 x live records, the rows of a `compact_bytes` log) plus the rows written during one
compaction. Costs:

- `record_as_of(..., id, n)` (`Table.get_as_of`): O(rows after n), a scan for the first later row touching `id`
  (its `previous` is the answer, `prior` that record's version; none means the live
  record is).
- `records_as_of(..., n)` (`Table.state_as_of`): O(live records + rows after n): copy the live map, undo later rows.
  A list at a past watermark then filters, sorts and pages that map (see query.py).

Snapshot rows: a snapshot record counts as one row, in id order, so `as_of=n` below the
snapshot's count sees the first n records by id, each as it was when the snapshot was taken.

"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Any

from dbsvc.storage.idmap import LiveMap
from dbsvc.storage.rows import Stored
from dbsvc.storage.versions import Versions

Row = tuple[Any, "Stored | None", "Stored | None"]


def record_as_of(
    base_ids: list[Any], rows: list[Row], prior: array, live: LiveMap, versions: Versions, id_: Any, n: int
) -> tuple[Stored | None, int]:
    """The record `id_` as it was after the first `n` rows, and its version then (0 with
    no record)."""
    base = len(base_ids)
    start = max(n - base, 0)
    for i, (row_id, _record, previous) in enumerate(rows[start:], start):
        if row_id == id_:
            found, version = previous, prior[i]
            break
    else:
        found = live.get(id_)
        version = versions.get(id_)
    if found is None:
        return None, 0
    if n < base:
        i = bisect_left(base_ids, id_)
        if i >= n or base_ids[i] != id_:
            return None, 0
    return found, version


def records_as_of(base_ids: list[Any], rows: list[Row], live: LiveMap, n: int) -> dict[Any, Stored]:
    """id -> stored record of every record live after the first `n` rows: a copy of the
    live map with the later rows undone, newest first."""
    base = len(base_ids)
    state = live.copy()
    for row_id, _record, previous in reversed(rows[max(n - base, 0) :]):
        if previous is None:
            del state[row_id]
        else:
            state[row_id] = previous
    if n < base:
        state = {i: state[i] for i in base_ids[:n]}
    return state
