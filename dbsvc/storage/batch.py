"""Batch inserts: many records judged as one set, then written with one fsync.

`Store.insert_batch(rows)` is how offline tools (`dbsvc import`) load records. A batch is
not N inserts, for two reasons: an import file may list a child before its parent, or
records that reference each other, so a @ref can only be judged against the whole batch;
and N writes would cost N frames built one by one and N trips through the commit queue.

Checks (`plan`), every row, every problem collected; when there is any, `BatchRejected`
lists them all and nothing is written:

1. the model exists; an `int` id left out (None) gets the next automatic id, as a create
   would (one more than the largest used so far, the batch's own rows included);
2. the id is new: not in the store, not earlier in the batch;
3. every @unique value is used neither in the store nor by an earlier row of the batch;
4. every @ref value names a record in the store or a row anywhere in the batch;
5. the record is no larger than a store's record limit (events.py "Sizes": at most
   `record_limit(max_payload)` bytes of compact JSON), so that its frame, and any update's
   or delete's frame that carries it later, fits: `PayloadTooLarge`, "record too large".

The messages are the ones a single insert would give (store.py), so a tool can show them
next to the row they belong to.

Frames (`frames`): the rows take consecutive offsets after the head, and each row the
next watermark of its model, exactly as that many inserts would; every payload is made by
`event_payload` (events.py), as `ChangeEvent.payload()` makes an insert's. Frames are produced in chunks of about 1 MiB, so a batch of
a million rows never sits in memory as one string.

Imports storage's own modules and the runtime only (never the compiler).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dbsvc.errors import (
    BatchRejected,
    ConstraintViolation,
    ForeignKeyViolation,
    NotFound,
    RequestError,
    UniqueViolation,
)
from dbsvc.runtime import INT64_MAX, compact_json
from dbsvc.storage.commit import CommitQueue
from dbsvc.storage.events import HEAD_RESERVE, EventKind, event_payload, size_refusal
from dbsvc.storage.logfile import MAX_PAYLOAD, encode_frame
from dbsvc.storage.rows import Values
from dbsvc.storage.table import Table

CHUNK_BYTES = 1 << 20

Problem = tuple[int, RequestError, "int | None"]


def plan(
    tables: Mapping[str, Table], rows: Sequence[tuple[str, dict]], max_payload: int = MAX_PAYLOAD, measure: bool = True
) -> list[tuple[Table, dict]]:
    """The batch as (table, record with its id) pairs in row order; `BatchRejected` when
    any row fails a check (module docstring). `measure=False` leaves rule 5 to `frames`,
    which sees each payload anyway (`Store.insert_batch`: an import measured its rows in
    `check_batch` already, and one JSON encoding per row is a tenth of an import's time)."""
    problems: list[Problem] = []
    planned: list[tuple[Table, dict]] = []
    indexes: list[int] = []  # row index of each planned
    ids: dict[str, dict[Any, int]] = {name: {} for name in tables}  # id -> row index
    uniques: dict[tuple[str, str], dict[Any, tuple[Any, int]]] = {}  # key -> (id, row)
    next_ids = {name: t.max_id for name, t in tables.items()}
    for index, (name, record) in enumerate(rows):
        table = tables.get(name)
        if table is None:
            problems.append((index, NotFound(f"unknown model {name!r}: expected one of {', '.join(tables)}"), None))
            continue
        model = table.model
        idf = model.id_field
        id_ = record[idf]
        if id_ is None:
            id_ = next_ids[name] + 1
            if model.id_type != "int" or id_ > INT64_MAX:
                why = (
                    "is required"
                    if model.id_type != "int"
                    else f"no automatic id is left: the largest id used is {next_ids[name]}; give an unused id"
                )
                problems.append((index, ConstraintViolation([{"field": idf, "message": why}]), None))
                continue
            record = dict(record)
            record[idf] = id_
        if type(id_) is int and id_ > next_ids[name]:
            next_ids[name] = id_
        seen = ids[name]
        earlier = seen.get(id_)
        if earlier is not None or id_ in table.live:
            problems.append(
                (index, UniqueViolation(f"{idf} {id_!r} is already used by {model.kebab} {id_!r}", field=idf), earlier)
            )
            continue
        seen[id_] = index
        clash = _unique_problem(table, record, index, uniques)
        if clash is not None:
            problems.append(clash)
            continue
        # Rule 5. A character is at most 4 bytes of UTF-8: only a record whose text could be
        # near half the limit is measured exactly.
        text = compact_json(record) if measure else ""
        if 8 * len(text) + HEAD_RESERVE > max_payload:
            # No payload is built here: it is reckoned at its largest, a whole frame, so the
            # record is measured against its limit even when a long id lowers that limit
            # (the record's own size alone let such a record through, which `frames` refused).
            too_large = size_refusal(EventKind.INSERT, name, id_, record, max_payload, max_payload, text)
            if too_large is not None:
                problems.append((index, too_large, None))
                continue
        planned.append((table, record))
        indexes.append(index)
    problems += _reference_problems(tables, planned, indexes, ids)
    if problems:
        problems.sort(key=lambda p: p[0])
        raise BatchRejected(problems, len(rows))
    return planned


def _unique_problem(
    table: Table, record: dict, index: int, uniques: dict[tuple[str, str], dict[Any, tuple[Any, int]]]
) -> Problem | None:
    clash = table.unique_clash(table.model.row(record))
    if clash is not None:
        f, other = clash
        return (
            index,
            UniqueViolation(f"{f} {record[f]!r} is already used by {table.model.kebab} {other!r}", field=f),
            None,
        )
    id_ = record[table.id_field]
    keys = table.keys
    for f in table.model.unique_fields:
        value = record[f]
        if value is None:
            continue
        used = uniques.setdefault((table.name, f), {})
        key = keys[f](value)
        holder = used.get(key)
        if holder is not None:
            return (
                index,
                UniqueViolation(f"{f} {value!r} is already used by {table.model.kebab} {holder[0]!r}", field=f),
                holder[1],
            )
        used[key] = (id_, index)
    return None


def _reference_problems(
    tables: Mapping[str, Table], planned: list[tuple[Table, dict]], indexes: list[int], ids: dict[str, dict[Any, int]]
) -> list[Problem]:
    """Rule 4, once every id of the batch is known (a row may name a later one)."""
    problems: list[Problem] = []
    for (table, record), index in zip(planned, indexes):
        for f, parent in table.model.refs:
            value = record[f]
            if value is None or value in tables[parent].live or value in ids[parent]:
                continue
            problems.append(
                (
                    index,
                    ForeignKeyViolation(f"{f} {value!r} does not match any {tables[parent].model.kebab}", field=f),
                    None,
                )
            )
            break
    return problems


def frames(
    planned: list[tuple[Table, dict]],
    first_offset: int,
    position: int,
    every: int,
    checkpoints: list[tuple[int, int]],
    max_payload: int = MAX_PAYLOAD,
) -> Iterator[bytes]:
    """The insert frames of `planned` in chunks of about CHUNK_BYTES. `position`: the log
    size before the first one; (offset, byte position) of every frame whose offset is a
    multiple of `every` is appended to `checkpoints` (the epoch keeps them for replay: epoch.py).
    A record over the record limit (rule 5, when `plan` did not measure) raises
    `BatchRejected` naming its row before its frame is yielded; the commit queue cuts a batch
    that raises back to the log's acknowledged end, so nothing of it stays."""
    watermarks = {t.name: t.watermark for t, _r in planned}
    offset = first_offset
    chunk: list[bytes] = []
    size = 0
    for table, record in planned:
        name = table.name
        watermark = watermarks[name] + 1
        watermarks[name] = watermark
        payload = event_payload(EventKind.INSERT, name, offset, watermark, record[table.id_field], record)
        if 2 * len(payload) + HEAD_RESERVE > max_payload:
            too_large = size_refusal(EventKind.INSERT, name, record[table.id_field], record, len(payload), max_payload)
            if too_large is not None:
                raise BatchRejected([(offset - first_offset, too_large, None)], len(planned))
        frame = encode_frame(offset, payload)
        if offset % every == 0:
            checkpoints.append((offset, position))
        chunk.append(frame)
        position += len(frame)
        size += len(frame)
        offset += 1
        if size >= CHUNK_BYTES:
            yield b"".join(chunk)
            chunk, size = [], 0
    if chunk:
        yield b"".join(chunk)


def write(
    commit: CommitQueue,
    planned: list[tuple[Table, dict]],
    first_offset: int,
    every: int,
    checkpoints: list[tuple[int, int]],
    max_payload: int,
) -> None:
    """Append the frames of `planned` (from `first_offset` on) as one batch with one fsync
    (`CommitQueue.append_batch`), then apply the rows to their tables, each table's rows in
    one `insert_many`; the checkpoints of the new frames are added to `checkpoints` only
    once the batch is written. Raises as `append_batch` does, with nothing applied."""
    found: list[tuple[int, int]] = []
    commit.append_batch(frames(planned, first_offset, commit.writer.written, every, found, max_payload), len(planned))
    by_table: dict[str, tuple[Table, list[Values], list[int]]] = {}
    for offset, (table, record) in enumerate(planned, first_offset):
        entry = by_table.setdefault(table.name, (table, [], []))
        entry[1].append(table.model.row(record))
        entry[2].append(offset)
    for table, values, offsets in by_table.values():
        table.insert_many(values)
        table.stamp_inserts(offsets)  # each record's version: its row's offset (versions.py)
    checkpoints.extend(found)
