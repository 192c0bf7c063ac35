"""The snapshot file: every live record at one offset, in checksummed lines.

Layout (UTF-8 text; every line is `CRC SP JSON LF`, CRC = 8 hex digits of crc32(JSON)).
Format 4, the one written::

    1a2b3c4d {"format":4,"epoch":"<32 hex>","head_offset":1234,"block_rows":2048,
              "models":[{"name":"User","fields":["id","email",...],"count":2,"max_id":7,
                         "keys":["id","email","name",...]}, ...]}
    then, for each entry of "models" in that order, its records in blocks of
    "block_rows" rows (the last block of a model may be shorter; a model without
    records has none), each block three lines:
    9abc0123 [[1,7],["a@b.c","x@y.z"],["Ann","Xi"],...]          the keys line
    5e6f7081 [{"id":1,"email":"a@b.c",...},<TAB>{"id":7,...}]     the rows line
    0f1e2d3c [12,1187]                                           the versions line

A rows line holds the block's records as objects (rows.py's stored form: every one of
"fields", in that order, compact), ascending by id, each but the last followed by ",<TAB>". The keys line holds, for each field named in
the model's "keys" (its id and every field an index or a reference count is built on:
`Table.key_fields`), that field's values of the block's rows, in row order: the columns
the indexes are built from, so that opening never parses a row (below). A column of
consecutive integers a, a+1, ..., a+n-1 (the ids of a block without gaps) is written as
{"first":a,"count":n}. The versions line holds each row's version, the log offset of
its record's last write (versions.py: a record's ETag), in row order, a column like the
keys line's (a run of consecutive offsets, an import's, as {"first":a,"count":n}); each
is from 1 to "head_offset". The writer cuts each stored record's keys out of its text
(keycut.py: the texts of its indexed values, joined into the keys line with no parse and
no encoding; a record not in the stored form is parsed), so an online compaction's thread
still reads every record once, but no longer makes its values objects (online.py;
bench/README.md has the figures).

Format 3 (written before session 27; still read): format 4 with each row an array of its
values in the "fields" order (`[1,"a@b.c","Ann",null,...]`), which the reader makes the
object (rows.py `row_object`). Format 2 (written before versions; still read): format 3
without the versions lines, two lines a block. Format 1 (written before that; still read): the header without
"block_rows" and "keys", and then one line per model holding all its rows, as one rows
line. The records of a format 1 or 2 file get "head_offset" as their version
(`model_versions`): no record was written after it, and the next compaction writes that
version down, so it stays the record's until the record changes (versions.py).

The epoch named here is the epoch of the log that continues it (the log header carries the
same id and `head_offset` as its base). Rows are in id order because each snapshot record
is one row of the new epoch (table.py): `as_of=n` below the snapshot's count sees the first
n records by id.

Rows as stored records: a format-4 row's text is exactly a stored record (rows.py), so the
writer joins the tables' stored records with ",TAB" and the reader splits at ",TAB" and
keeps each piece of text as a stored record. A JSON string never holds a raw TAB (it must be
escaped), and compact JSON holds no whitespace at all, so in a line this writer wrote
",TAB" is only ever a row's end.

Crash rules: a snapshot is only ever written under a `.new` name, fsynced, and renamed
into place by compaction (compact.py), so a torn snapshot never carries the real name. A
checksum failure is damage, never a torn tail: loading refuses with `CorruptLog(path,
byte offset of the line, reason)`.

Reading a snapshot back (the two ways to read a model, the windows, what is checked) is
snapshotreader.py's; this module draws the format and writes it (compaction: compact.py
offline, online.py in a thread; a follower's base, follow.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dbsvc.runtime import compact_json
from dbsvc.storage.files import write_all
from dbsvc.storage.keycut import column_text, cutter, key_texts
from dbsvc.storage.rows import Stored, pack

FORMAT = 4
BLOCK_ROWS = 2048  # rows per block (formats 2-4): a keys line, a rows line (and a versions line)
ROW_END = b",\t"  # what ends every row of a rows line but its last
_BYTES = {bytes}  # the one type of a block of stored records
PIECE_ROWS = 256  # stored records whose keys are cut in one call (a block's CPU comes in pieces)


@dataclass(slots=True)
class ModelImage:
    """One model's part of a snapshot: rows are lists of values in `fields` order (read
    from a file by `decode_snapshot`, or made by an offline tool), or a table's stored
    records (bytes, rows.py), which are their row texts already. `keys` names the fields whose columns
    the file carries (module docstring): the table's indexed fields (`Table.key_fields`);
    with none, a reader parses the rows."""

    name: str
    fields: list[str]
    rows: Sequence[Sequence[Any]]
    max_id: int
    keys: list[str] = field(default_factory=list)
    versions: Sequence[int] | None = None  # each row's version; None: the image's head offset


@dataclass(slots=True)
class SnapshotImage:
    epoch: str
    head_offset: int
    models: list[ModelImage]


def _line(text: bytes) -> bytes:
    return b"%08x " % zlib.crc32(text) + text + b"\n"


def _header(epoch: str, head_offset: int, models: Iterable[tuple[str, list[str], int, int, list[str]]]) -> bytes:
    header = {
        "format": FORMAT,
        "epoch": epoch,
        "head_offset": head_offset,
        "block_rows": BLOCK_ROWS,
        "models": [
            {"name": name, "fields": fields, "count": count, "max_id": max_id, "keys": keys}
            for name, fields, count, max_id, keys in models
        ],
    }
    return _line(compact_json(header).encode("utf-8"))


def _no_pause() -> None:
    pass


def _block(
    fields: Sequence[str],
    rows: Sequence[Stored | Sequence[Any]],
    versions: Sequence[int],
    positions: list[int],
    pause: Callable[[], None] = _no_pause,
) -> bytes:
    """A block's three lines from its rows and their versions: its keys line (the columns
    at `positions`), its rows line and its versions line. Stored records give their keys
    as texts cut out of them (`_key_columns`, keycut.py: a compaction's only read of a record),
    PIECE_ROWS at a time, and its keys are joined a column at a time, with `pause()` after
    each piece: one cut of the whole block is a single stretch of ~3 ms holding the GIL,
    whatever the switch interval (write_snapshot_stream). A block of stored records (an
    online compaction's) runs no Python code a row: it is checked to be one by one C pass
    over their types (rows as lists are packed one by one, with `fields`). The rows line's
    checksum is taken over its parts, so its ~0.75 MB (2,048 peers' posts) is copied once
    into the joined rows and once into the block, not seven times."""
    texts: Sequence[Any] = rows  # sliced and joined below, never copied whole
    if set(map(type, rows)) != _BYTES:
        texts = [r if type(r) is bytes else _row_text(fields, r) for r in rows]
    columns = []
    if positions and type(rows[0]) is bytes:
        for column in _key_columns(fields, texts, positions, pause):
            columns.append(column_text(column))
            pause()
    elif positions:  # rows as lists: their values are at hand
        by_field = list(zip(*rows))
        for p in positions:  # one column at a time: the block's keys as one call is ~1.3 ms
            columns.append(compact_json(_column(by_field[p])).encode("utf-8", "surrogatepass"))
            pause()
    keys = b"[" + b",".join(columns) + b"]"
    written = compact_json(_column(versions)).encode("ascii")
    joined = ROW_END.join(texts)
    crc = zlib.crc32(b"]", zlib.crc32(joined, zlib.crc32(b"[")))  # the line's text is [joined]
    return b"".join((_line(keys), b"%08x [" % crc, joined, b"]\n", _line(written)))


def _key_columns(
    fields: Sequence[str], texts: Sequence[Stored], positions: list[int], pause: Callable[[], None]
) -> list[Sequence[bytes]]:
    """The texts of the stored records' values at `positions`, a column a position in
    that order: cut out of the records PIECE_ROWS at a time (keycut.py), with `pause()`
    after each piece."""
    asked = sorted(set(positions))
    pattern = cutter(fields, asked)
    cut: list[tuple[bytes, ...]] = []
    for i in range(0, len(texts), PIECE_ROWS):
        cut += key_texts(pattern, asked, texts[i : i + PIECE_ROWS])
        pause()
    by_field = list(zip(*cut))
    return [by_field[asked.index(p)] for p in positions]


def _row_text(fields: Sequence[str], row: Any) -> bytes:
    """A row given as its values, as its record's object (rows.py `pack`); anything but
    a list of one value a field (an image edited by hand) as its own JSON, which the reader
    refuses as not a row of the model (snapshotreader.py `_values`), as it was given."""
    if type(row) in (list, tuple) and len(row) == len(fields):
        return pack(fields, row)
    return compact_json(row).encode("utf-8", "surrogatepass")


def _column(values: Sequence[Any]) -> Sequence[Any] | dict[str, int]:
    """A keys line's column: the values, or {"first": a, "count": n} when they are the
    integers a, a+1, ..., a+n-1 (a block of ids without gaps: read as a range, with nothing
    to parse and nothing to check for order)."""
    first = values[0]
    if (
        type(first) is int
        and type(values[-1]) is int
        and values[-1] - first == len(values) - 1
        and list(values) == list(range(first, first + len(values)))
    ):
        return {"first": first, "count": len(values)}
    return values


def _blocks(
    fields: Sequence[str],
    chunks: Iterable[tuple[Sequence[Stored | Sequence[Any]], Sequence[int]]],
    positions: list[int],
    pause: Callable[[], None] = _no_pause,
) -> Iterator[bytes]:
    """The blocks of a model's rows, BLOCK_ROWS at a time, from chunks of (rows, their
    versions) of whatever sizes: a chunk of exactly BLOCK_ROWS that starts a block (an
    online compaction's, CHUNK rows) is that block as it is; others are gathered and cut
    by slices, never a row at a time."""
    rows: list[Any] = []
    versions: list[int] = []
    for chunk, stamps in chunks:
        assert len(chunk) == len(stamps), f"{len(chunk)} rows, {len(stamps)} versions"
        if not rows and len(chunk) == BLOCK_ROWS:
            yield _block(fields, chunk, stamps, positions, pause)
            continue
        rows += chunk
        versions += stamps
        while len(rows) >= BLOCK_ROWS:
            yield _block(fields, rows[:BLOCK_ROWS], versions[:BLOCK_ROWS], positions, pause)
            del rows[:BLOCK_ROWS], versions[:BLOCK_ROWS]
    if rows:
        yield _block(fields, rows, versions, positions, pause)


def key_positions(fields: list[str], keys: list[str]) -> list[int]:
    return [fields.index(k) for k in keys]


def encode_snapshot(image: SnapshotImage) -> Iterator[bytes]:
    """The file's bytes, a block at a time (so 1,000,000 rows never sit in one string)."""
    yield _header(
        image.epoch, image.head_offset, ((m.name, m.fields, len(m.rows), m.max_id, m.keys) for m in image.models)
    )
    for m in image.models:
        chunks = (
            (
                m.rows[i : i + BLOCK_ROWS],
                [image.head_offset] * len(m.rows[i : i + BLOCK_ROWS])
                if m.versions is None
                else m.versions[i : i + BLOCK_ROWS],
            )
            for i in range(0, len(m.rows), BLOCK_ROWS)
        )
        yield from _blocks(m.fields, chunks, key_positions(m.fields, m.keys))


@dataclass(slots=True)
class ModelStream:
    """One model's part of a snapshot written piecewise: rows arrive in chunks (lists of
    rows, ascending by id, and their versions), `count` of them in all."""

    name: str
    fields: list[str]
    count: int
    max_id: int
    chunks: Iterable[tuple[Sequence[Stored | Sequence[Any]], Sequence[int]]]
    keys: list[str] = field(default_factory=list)


def write_snapshot_stream(
    fd: int, epoch: str, head_offset: int, models: list[ModelStream], pause: Callable[[], None] = _no_pause
) -> None:
    """Write a snapshot to `fd` (at position 0, empty file) in the same format as
    `encode_snapshot`, a block at a time. `pause()` is called between pieces of the work,
    each well under a millisecond or two of CPU, so that a thread writing it can give the
    GIL and the core back to the event loop there (online.py `Pacer`)."""
    write_all(fd, _header(epoch, head_offset, ((m.name, m.fields, m.count, m.max_id, m.keys) for m in models)))
    for m in models:
        written = 0
        for block in _blocks(m.fields, m.chunks, key_positions(m.fields, m.keys), pause):
            write_all(fd, block)
            pause()
            written += 1
        blocks = -(-m.count // BLOCK_ROWS)
        assert written == blocks, f"{m.name}: {written} blocks streamed, {blocks} for {m.count} rows"
