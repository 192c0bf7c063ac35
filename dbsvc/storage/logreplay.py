"""The log's rows applied to the tables: the open's step 4, its second half (recovery.py).

`replay_log` reads the frames a `LogScan` (logfile.py) yields, oldest first, and applies
each row to its table as a write did: an insert of an absent id, an update or a delete of
a present one, each row's watermark one more than its model's, each record's version
stamped with its offset (versions.py). A row that does not fit what was replayed before
it passed its CRC, so a writer wrote it wrong: CorruptLog at its frame, before a byte of
the log is cut.

Each record is rebuilt from the log's JSON by the model's own `CompiledModel.row`, so it
holds the model's key strings as a write's would (`_rebuilder`); a migrating model's
records are first brought to its current fields (`_migrated`).

Batches (events.py "Batches"): the rows of a batch carry its mark, checked row by row
(`_batch_row`); a log that ends inside a batch had none of it acknowledged, so its rows
are undone and the scan's end moved back to its first frame (`_cut_batch`, logfile.py
rule 5), which the open then truncates like a torn tail.

Numbers: json.loads reads `NaN`, `Infinity` and `1e400` (as inf), which no writer writes
(`compact_json` refuses them) and a log edited by hand may hold. Such a record is refused
where it is packed (`rows.pack`, in the table's insert or replace: its ValueError), as
CorruptLog at its frame with the strict decoder's words (dbsvc/strictjson.py), rather than
decoding every row strictly: the refusal costs nothing on an ordinary open (a strict
decode is one Python call a float). Nothing is cut and the open serves nothing.

Not to be confused with replay.py, which reads committed frames back for a consumer
(`/replicate`, feeds' `after=`) and changes no table.
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dbsvc import runtime
from dbsvc.errors import CorruptLog
from dbsvc.storage.logfile import Damage, LogScan
from dbsvc.storage.rows import Values
from dbsvc.storage.table import Table
from dbsvc.strictjson import strict_loads


def _rebuilder(table: Table, migrating: bool) -> Callable[[dict], Values]:
    """The values a record read from the log is stored from (the generated
    `CompiledModel.row`, as a write takes them). A migrating model's records are first
    brought to its current fields."""
    row = table.model.row
    if migrating:
        return lambda record: row(_migrated(table, record))
    return row


def replay_log(
    tables: dict[str, Table],
    scan: LogScan,
    ring_capacity: int,
    checkpoints: list[tuple[int, int]],
    migrating: set[str],
    checkpoint_every: int,
) -> deque:
    """Every row of `scan` applied to `tables`, in offset order; the payloads of the last
    `ring_capacity` rows returned. One (offset, byte position) is appended to `checkpoints`
    every `checkpoint_every` offsets (recovery.py `CHECKPOINT_EVERY`, which the caller reads
    when it calls, so a test that lowers it there lowers it here). A log that ends inside a
    batch is cut back to the batch's first frame (`_cut_batch`)."""
    recent: deque = deque(maxlen=max(ring_capacity, 0))
    loads = json.loads
    rebuild = {name: _rebuilder(table, name in migrating) for name, table in tables.items()}
    batch: _OpenBatch | None = None  # a batch whose last row is still to come
    for offset, payload in scan.records():
        position = scan.end
        if offset % checkpoint_every == 0:
            checkpoints.append((offset, position))
        ev = loads(payload)
        mark = ev.get("batch")
        if mark is not None or batch is not None:
            batch = _batch_row(scan.path, position, offset, mark, batch)
        table = tables.get(ev["model"])
        if table is None:
            raise CorruptLog(scan.path, position, f"row for model {ev['model']!r}, which the schema does not declare")
        if ev["watermark"] != table.watermark + 1:
            raise CorruptLog(
                scan.path, position, f"row watermark {ev['watermark']}, expected {table.watermark + 1} for {table.name}"
            )
        kind, id_ = ev["kind"], ev["id"]
        current = table.live.get(id_)
        max_id = table.max_id
        try:
            if kind == "insert" and current is None:
                table.insert(_stored(rebuild[table.name], ev["record"], scan.path, position))
            elif kind == "update" and current is not None:
                table.replace(current, _stored(rebuild[table.name], ev["record"], scan.path, position))
            elif kind == "delete" and current is not None:
                table.delete(id_, current)
            else:
                raise CorruptLog(
                    scan.path, position, f"{kind} of {table.name} {id_!r} does not fit the records replayed so far"
                )
        except (TypeError, OverflowError) as exc:  # a value no index can take (see snapshotload.py `install_snapshot`)
            raise CorruptLog(
                scan.path, position, f"{kind} of {table.name} {id_!r} holds a value its indexes cannot take ({exc})"
            ) from None
        except ValueError as exc:  # a record no writer writes: NaN or 1e400 (module docstring)
            raise CorruptLog(scan.path, position, f"{kind} of {table.name} {id_!r}: {_refusal(payload, exc)}") from None
        table.stamp(offset)  # the record's version (versions.py)
        if ring_capacity:
            recent.append(payload)
        if batch is not None:
            if offset == batch.last:
                batch = None
            else:
                batch.undo.append((table, max_id))
    if batch is not None:
        _cut_batch(scan, batch, checkpoints, recent)
    return deque((bytes(p) for p in recent), maxlen=max(ring_capacity, 0))


@dataclass(slots=True)
class _OpenBatch:
    """The rows replayed so far of a batch (events.py "Batches") whose last row is not yet seen."""

    first: int
    last: int
    position: int  # byte position of its first frame
    undo: list[tuple[Table, int]] = dataclasses.field(default_factory=list)  # (table, max id before the row)


def _batch_row(path: str, position: int, offset: int, mark: Any, batch: _OpenBatch | None) -> _OpenBatch:
    """The batch row `offset` belongs to, from its `mark` and the batch replay has open
    (events.py "Batches"): inside an open batch every row carries that batch's mark; outside
    one, a mark opens a batch of two or more rows at its own row. A mark that breaks either
    rule passed its CRC, so a writer wrote it wrong: CorruptLog at the row's frame, before a
    byte is cut (cutting on its word could drop acknowledged rows)."""
    span = _span(mark)
    shown = "no batch mark" if mark is None else f"batch mark {runtime.compact_json(mark)}"
    if batch is not None:
        if span != (batch.first, batch.last):
            raise CorruptLog(
                path,
                position,
                f'row {offset}: {shown}, expected {{"first":{batch.first},"last":{batch.last}}}: '
                f"row {offset} is inside the batch of rows {batch.first} to {batch.last}",
            )
        return batch
    if span is None:
        raise CorruptLog(path, position, f'row {offset}: {shown} is not {{"first":F,"last":L}} with integers F < L')
    if span[0] != offset:
        raise CorruptLog(
            path,
            position,
            f"row {offset}: {shown} names rows {span[0]} to {span[1]}, "
            f"but no batch is open and row {offset} does not start one",
        )
    return _OpenBatch(offset, span[1], position)


def _span(mark: Any) -> tuple[int, int] | None:
    """(first, last) of a well-formed batch mark: an object of two integers, first < last."""
    if type(mark) is dict:
        first, last = mark.get("first"), mark.get("last")
        if type(first) is int and type(last) is int and first < last:
            return first, last
    return None


def _cut_batch(scan: LogScan, batch: _OpenBatch, checkpoints: list[tuple[int, int]], recent: deque) -> None:
    """The log ends inside a batch: a crash before its one fsync covered it, so none of it
    was acknowledged. Its rows are undone, last first, and the scan's end and damage moved
    to its first frame, so the open cuts it like a torn tail (logfile.py rule 5)."""
    for table, max_id in reversed(batch.undo):
        table.undo_last(max_id)
    while checkpoints and checkpoints[-1][0] >= batch.first:
        checkpoints.pop()
    for _ in range(min(len(batch.undo), len(recent))):
        recent.pop()
    reason = f"unfinished batch: rows {batch.first} to {batch.last}, the log ends after row {scan.next_offset - 1}" + (
        f" ({scan.damage.reason} there)" if scan.damage is not None else ""
    )
    size = len(scan.source) if not isinstance(scan.source, int) else scan.end
    scan.damage = Damage(batch.position, size, reason)
    scan.end = batch.position
    scan.next_offset = batch.first


def _refusal(payload: bytes | memoryview, exc: ValueError) -> str:
    """Why a row's record could not be stored: the strict decoder's words for the number it
    holds (strictjson.py), else the packer's own."""
    try:
        strict_loads(bytes(payload))
    except ValueError as strict:
        return f"the row is not JSON a writer writes: {strict}"
    return str(exc)


def _stored(rebuild: Callable[[dict], Values], record: dict, path: str, position: int) -> Values:
    try:
        return rebuild(record)
    except KeyError as exc:
        raise CorruptLog(path, position, f"record without its field {exc.args[0]!r}: {record!r}") from None


def _migrated(table: Table, record: dict) -> dict:
    """`record` as written under an older schema, brought to the table's current fields."""
    assert table.fixup is not None, f"{table.name} is migrating but has no fixup"
    return table.fixup(record)
