"""The snapshot file: every live record at one offset, in checksummed lines.

Layout (UTF-8 text; every line is `CRC SP JSON LF`, CRC = 8 hex digits of crc32(JSON)).
Format 3, the one written::

    1a2b3c4d {"format":3,"epoch":"<32 hex>","head_offset":1234,"block_rows":2048,
              "models":[{"name":"User","fields":["id","email",...],"count":2,"max_id":7,
                         "keys":["id","email","name",...]}, ...]}
    then, for each entry of "models" in that order, its records in blocks of
    "block_rows" rows (the last block of a model may be shorter; a model without
    records has none), each block three lines:
    9abc0123 [[1,7],["a@b.c","x@y.z"],["Ann","Xi"],...]          the keys line
    5e6f7081 [[1,"a@b.c","Ann",null,...],<TAB>[7,"x@y.z",...]]   the rows line
    0f1e2d3c [12,1187]                                           the versions line

A rows line holds the block's records as rows (lists in the "fields" order), ascending by
id, each but the last followed by ",<TAB>". The keys line holds, for each field named in
the model's "keys" (its id and every field an index or a reference count is built on:
`Table.key_fields`), that field's values of the block's rows, in row order: the columns
the indexes are built from, so that opening never parses a row (below). A column of
consecutive integers a, a+1, ..., a+n-1 (the ids of a block without gaps) is written as
{"first":a,"count":n}. The versions line holds each row's version, the log offset of
its record's last write (versions.py: a record's ETag), in row order, a column like the
keys line's (a run of consecutive offsets, an import's, as {"first":a,"count":n}); each
is from 1 to "head_offset". The writer parses each stored record once for its keys, so an
online compaction's thread works several times longer than it did with format 1 (online.py;
bench/README.md has the figures).

Format 2 (written before versions; still read): format 3 without the versions lines, two
lines a block. Format 1 (written before that; still read): the header without
"block_rows" and "keys", and then one line per model holding all its rows, as one rows
line. The records of a format 1 or 2 file get "head_offset" as their version
(`model_versions`): no record was written after it, and the next compaction writes that
version down, so it stays the record's until the record changes (versions.py).

The epoch named here is the epoch of the log that continues it (the log header carries the
same id and `head_offset` as its base). Rows are in id order because each snapshot record
is one row of the new epoch (table.py): `as_of=n` below the snapshot's count sees the first
n records by id.

Rows as stored records: a row's text is exactly a stored record (rows.py), so the writer
joins the tables' stored records with ",TAB" and the reader splits at ",TAB" and keeps
each piece of text as a stored record. A JSON string never holds a raw TAB (it must be
escaped), and compact JSON holds no whitespace at all, so in a line this writer wrote
",TAB" is only ever a row's end.

Two ways to read a model (recovery.py picks):

- From the keys (`model_blocks`, format 2, when the file's "keys" hold every column the
  table indexes and its fields are the model's own): each rows line is split into texts
  that are kept as they are, and the index keys come from the keys line, so no row is
  parsed. Parsing every row to check it and take its keys was a third of an open; reading
  the keys instead saves it (bench/README.md, "Open from the keys"). What is checked instead: every line's CRC; each block's text count and
  column lengths against "block_rows"; the ids strictly ascending (recovery.py); and a
  sample of rows, every SAMPLE_EVERY-th of each block and its last, each scanned whole and
  held to be exactly one row of the model's width whose indexed values equal its keys
  line's. A line whose CRC holds was written by a dbsvc writer (a torn or damaged one
  never passes): the sample is there to catch a writer's bug, not a forger. A row the
  sample skips is trusted as far as its CRC vouches for it: were it not the row its keys
  say, a read would show the row and the indexes would follow the keys.
- From the rows (`model_windows`, format 1, and format 2 whenever the keys do not fit: a
  schema that indexes another field, a model being migrated): the rows are parsed, a
  window at a time, and each text is kept only if it scans as exactly one JSON value;
  otherwise (a line written by hand with whitespace, or by an older writer that put ",TAB"
  only after every 2,048th row) the window is parsed as JSON and its rows are encoded
  again, so the rows read are always those of `json.loads(line)`.

Windows: the rows reader takes a line WINDOW bytes at a time (cut at a ",TAB"), so a
1,000,000-row line never becomes a million parsed lists at once: parsed whole, it left the
freed lists as holes between the objects that stay, 130 bytes of RSS per record for good
(bench/README.md, "Open time and memory"). A window that does not parse hands over to the
whole line's parse, which names the error. Format 2's blocks are windows of their own.

Crash rules: a snapshot is only ever written under a `.new` name, fsynced, and renamed
into place by compaction (compact.py), so a torn snapshot never carries the real name. A
checksum failure is damage, never a torn tail: loading refuses with `CorruptLog(path,
byte offset of the line, reason)`.
"""

from __future__ import annotations

import json
import mmap
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice, repeat
from operator import itemgetter
from typing import Any

from dbsvc.errors import CorruptLog
from dbsvc.runtime import compact_json
from dbsvc.storage.files import write_all
from dbsvc.storage.rows import SCAN, Stored, pack

_VALUE, _END = itemgetter(0), itemgetter(1)

Data = bytes | mmap.mmap  # a snapshot's bytes: read, or mapped by a writer's open (recovery.py)

FORMAT = 3
READS = (1, 2, 3)  # the formats the reader takes
BLOCK_ROWS = 2048  # rows per block (format 2): one keys line and one rows line
ROW_END = b",\t"  # what ends every row of a rows line but its last
WINDOW = 1 << 19  # bytes of a format-1 model line the rows reader parses at a time
SAMPLE_EVERY = 64  # the keys reader scans this block's every SAMPLE_EVERY-th row (and its last)
PIECE_ROWS = 256  # stored records parsed for their keys in one call (a block's CPU comes in pieces)


@dataclass(slots=True)
class ModelImage:
    """One model's part of a snapshot: rows are lists of values (read from a file by
    `decode_snapshot`, or made by an offline tool), or a table's stored records (bytes,
    rows.py), which are their row texts already. `keys` names the fields whose columns
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
    block: list[tuple[Stored | Sequence[Any], int]], positions: list[int], pause: Callable[[], None] = _no_pause
) -> bytes:
    """A block's three lines from its (row, version) pairs: its keys line (the columns at
    `positions`), its rows line and its versions line. Stored records are parsed for their
    keys (a compaction's only parse) PIECE_ROWS at a time and its keys encoded a column at
    a time, with `pause()` after each piece: one parse of the whole block is a single C call
    of ~2 ms, which holds the GIL whatever the switch interval (write_snapshot_stream)."""
    rows = [r for r, _v in block]
    texts = [r if type(r) is bytes else pack(r) for r in rows]
    values: Sequence[Any] = rows
    if positions and type(rows[0]) is bytes:
        parsed: list[Any] = []
        for i in range(0, len(texts), PIECE_ROWS):
            parsed += json.loads(b"[" + b",".join(texts[i : i + PIECE_ROWS]) + b"]")
            pause()
        values = parsed
    fields = list(zip(*values)) if positions else []
    columns = []
    for p in positions:  # one column at a time: the block's keys as one call is ~1.3 ms
        columns.append(compact_json(_column(fields[p])).encode("utf-8", "surrogatepass"))
        pause()
    keys = b"[" + b",".join(columns) + b"]"
    versions = compact_json(_column([v for _r, v in block])).encode("ascii")
    return _line(keys) + _line(b"[" + ROW_END.join(texts) + b"]") + _line(versions)


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
    rows: Iterable[tuple[Stored | Sequence[Any], int]], positions: list[int], pause: Callable[[], None] = _no_pause
) -> Iterator[bytes]:
    """The blocks of a model's (row, version) pairs, BLOCK_ROWS at a time, whatever chunks
    they come in."""
    it = iter(rows)
    while block := list(islice(it, BLOCK_ROWS)):
        yield _block(block, positions, pause)


def _positions(fields: list[str], keys: list[str]) -> list[int]:
    return [fields.index(k) for k in keys]


def encode_snapshot(image: SnapshotImage) -> Iterator[bytes]:
    """The file's bytes, a block at a time (so 1,000,000 rows never sit in one string)."""
    yield _header(
        image.epoch, image.head_offset, ((m.name, m.fields, len(m.rows), m.max_id, m.keys) for m in image.models)
    )
    for m in image.models:
        versions = repeat(image.head_offset) if m.versions is None else m.versions
        yield from _blocks(zip(m.rows, versions), _positions(m.fields, m.keys))


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
        rows = (pair for chunk, versions in m.chunks for pair in zip(chunk, versions))
        for block in _blocks(rows, _positions(m.fields, m.keys), pause):
            write_all(fd, block)
            pause()
            written += 1
        blocks = -(-m.count // BLOCK_ROWS)
        assert written == blocks, f"{m.name}: {written} blocks streamed, {blocks} for {m.count} rows"


def snapshot_lines(path: str, data: Data) -> list[tuple[int, memoryview]]:
    """(position, body) of every line of a snapshot, each checked against its CRC; a
    backup checks a copied snapshot with this before trusting it. The bodies are views
    into `data`, not copies (a model line can be hundreds of MB)."""
    pos = 0
    view = memoryview(data)
    lines: list[tuple[int, memoryview]] = []
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            raise CorruptLog(path, pos, "snapshot line without its newline (truncated file)")
        if nl - pos < 9 or data[pos + 8 : pos + 9] != b" ":
            raise CorruptLog(path, pos, "snapshot line has no checksum")
        try:
            crc = int(data[pos : pos + 8], 16)
        except ValueError:
            raise CorruptLog(path, pos, "snapshot checksum is not hexadecimal") from None
        body = view[pos + 9 : nl]
        if zlib.crc32(body) != crc:
            raise CorruptLog(path, pos, "snapshot line checksum mismatch")
        lines.append((pos, body))
        pos = nl + 1
    return lines


def _loads(body: memoryview) -> Any:
    """`json.loads` of a line's bytes, decoded straight from the view (json.loads takes
    no memoryview; `bytes(body)` would copy the line first). The same decoding as
    json.loads(bytes) does for UTF-8."""
    return json.loads(str(body, "utf-8", "surrogatepass"))


@dataclass(slots=True)
class RowsLine:
    """A rows line, checked against its CRC, not yet parsed: the JSON array is
    `data[start:end]`; `keys` is its block's keys line (formats 2 and 3), or None (format
    1); `versions` its block's versions line (format 3), or None."""

    position: int  # byte offset of the line in the file
    data: Data
    start: int
    end: int
    keys: memoryview | None
    keys_position: int
    versions: memoryview | None = None
    versions_position: int = 0


@dataclass(slots=True)
class ModelPart:
    """One model's part of a snapshot: its header entry and its rows lines (one in
    format 1, one per block in formats 2 and 3). `keys` is None in format 1."""

    name: str
    fields: list[str]
    count: int
    max_id: int
    keys: list[str] | None
    position: int  # byte offset of its first line (the header's, if it has none)
    lines: list[RowsLine]
    block_rows: int


def read_snapshot(path: str, data: Data) -> tuple[str, int, list[ModelPart]]:
    """(epoch, head offset, model parts) of a snapshot's bytes: every line's CRC checked,
    the header parsed, the rows left for `model_blocks` or `model_windows`."""
    lines = snapshot_lines(path, data)
    if not lines:
        raise CorruptLog(path, 0, "empty snapshot")
    header = _loads(lines[0][1])
    version = header.get("format")
    if version not in READS:
        raise CorruptLog(path, 0, f"snapshot format {version!r}, expected one of {list(READS)}")
    metas = header["models"]
    blocked = version != 1  # formats 2 and 3: blocks with their keys lines
    block_rows = header.get("block_rows", 0) if blocked else 0
    if blocked and (type(block_rows) is not int or block_rows < 1):
        raise CorruptLog(path, 0, f"snapshot header: block_rows {block_rows!r} is not a positive integer")
    for meta in metas if blocked else ():
        keys = meta.get("keys")
        if type(keys) is not list or not set(keys) <= set(meta["fields"]) or len(set(keys)) != len(keys):
            raise CorruptLog(
                path,
                0,
                f"snapshot header: the keys of model {meta['name']!r} are not distinct names of its fields: {keys!r}",
            )
    # Lines per model: one in format 1; in format 2 two a block (keys, rows), in format 3
    # three (keys, rows, versions); none for no rows.
    per_block = 3 if version == 3 else 2
    needs = [1 if version == 1 else per_block * -(-meta["count"] // block_rows) for meta in metas]
    if 1 + sum(needs) != len(lines):
        raise CorruptLog(
            path,
            len(data),
            f"snapshot has {len(lines) - 1} lines after its header, its header's models need {sum(needs)}",
        )
    parts: list[ModelPart] = []
    at = 1
    for meta, n in zip(metas, needs):
        mine = lines[at : at + n]
        at += n
        if version == 1:
            rows_lines = [RowsLine(pos, data, pos + 9, pos + 9 + len(body), None, 0) for pos, body in mine]
        elif version == 2:
            rows_lines = [
                RowsLine(pos, data, pos + 9, pos + 9 + len(body), keys_body, keys_pos)
                for (keys_pos, keys_body), (pos, body) in zip(mine[0::2], mine[1::2])
            ]
        else:
            rows_lines = [
                RowsLine(pos, data, pos + 9, pos + 9 + len(body), keys_body, keys_pos, versions_body, versions_pos)
                for (keys_pos, keys_body), (pos, body), (versions_pos, versions_body) in zip(
                    mine[0::3], mine[1::3], mine[2::3]
                )
            ]
        parts.append(
            ModelPart(
                meta["name"],
                meta["fields"],
                meta["count"],
                meta["max_id"],
                meta["keys"] if blocked else None,
                mine[0][0] if mine else 0,
                rows_lines,
                block_rows,
            )
        )
    return header["epoch"], header["head_offset"], parts


Block = tuple[list[Stored], dict[str, "list | range"]]  # a block's row texts, and its columns by field


def model_blocks(path: str, part: ModelPart) -> Iterator[Block]:
    """The rows of a format-2 model as stored records and its key columns, a block at a
    time, without parsing a row but the sample (module docstring, "From the keys").
    CorruptLog for a block whose texts or columns do not fit."""
    assert part.keys is not None, "model_blocks reads formats 2 and 3"
    keys, width = part.keys, len(part.fields)
    positions = _positions(part.fields, keys)
    left = part.count
    for line in part.lines:
        n = min(left, part.block_rows)
        left -= n
        if not _bracketed(line):
            raise CorruptLog(path, line.position, f"model {part.name!r}: a rows line is not a JSON array")
        texts = line.data[line.start + 1 : line.end - 1].split(ROW_END)
        try:
            columns = _loads(line.keys) if line.keys is not None else None
        except ValueError as exc:
            raise CorruptLog(
                path, line.keys_position, f"model {part.name!r}: a keys line is not JSON ({exc})"
            ) from None
        if type(columns) is list:
            columns = [_run(c) if type(c) is dict else c for c in columns]
        if (
            len(texts) != n
            or type(columns) is not list
            or len(columns) != len(keys)
            or any(type(c) not in (list, range) or len(c) != n for c in columns)
        ):
            raise CorruptLog(
                path,
                line.keys_position,
                f"model {part.name!r}: a block's rows and keys are not {n} rows of its {len(keys)} keys each",
            )
        for i in (*range(0, n, SAMPLE_EVERY), n - 1):
            if not _sample_fits(texts[i], i, columns, positions, width):
                raise CorruptLog(
                    path,
                    line.position,
                    f"model {part.name!r}: row {i + 1} of a block is not "
                    f"one row of {width} fields matching its keys line",
                )
        yield texts, dict(zip(keys, columns))


def model_versions(path: str, part: ModelPart, head: int) -> array:
    """The versions of a model's rows, in row order (versions.py): its versions lines
    (format 3), each checked to hold one offset from 1 to `head` per row of its block; for
    a format 1 or 2 file, `head` for every row (module docstring)."""
    out = array("q")
    left = part.count
    for line in part.lines:
        n = min(left, part.block_rows) if part.block_rows else left
        left -= n
        if line.versions is None:
            out.frombytes(array("q", (head,)).tobytes() * n)
            continue
        try:
            column = _loads(line.versions)
            if type(column) is dict:
                column = _run(column)
            if type(column) not in (list, range) or len(column) != n:
                raise ValueError(f"not {n} versions")
            versions = array("q", column)
            if n and (min(versions) < 1 or max(versions) > head):
                raise ValueError(f"a version outside 1..{head}")
        except (ValueError, TypeError, OverflowError) as exc:
            raise CorruptLog(
                path,
                line.versions_position,
                f"model {part.name!r}: a versions line is not its block's versions ({exc})",
            ) from None
        out.extend(versions)
    return out


def _run(column: dict) -> range | None:
    """The range a {"first": a, "count": n} column stands for (`_column`); None, which
    the caller refuses, for any other object."""
    first, count = column.get("first"), column.get("count")
    if column.keys() != {"first", "count"} or type(first) is not int or type(count) is not int:
        return None  # (a count below 1 gives an empty range, which no block's length is)
    return range(first, first + count)


def _sample_fits(text: bytes, i: int, columns: list[list], positions: list[int], width: int) -> bool:
    """`text` is exactly one row of `width` values whose values at `positions` are row
    `i` of `columns`."""
    found = _one_row_each([text])
    row = found[0] if found else None
    return type(row) is list and len(row) == width and all(row[p] == column[i] for p, column in zip(positions, columns))


def _bracketed(line: RowsLine) -> bool:
    """The line's JSON starts with "[" and ends with "]", as a rows line does."""
    data, start, end = line.data, line.start, line.end
    return end - start >= 2 and data[start] == 0x5B and data[end - 1] == 0x5D


Window = tuple[list, "list[Stored] | None"]  # rows' values, and their texts when kept


def model_windows(path: str, part: ModelPart) -> Iterator[Window]:
    """The rows of a model, a window at a time (module docstring, "From the rows"): each
    window's rows as parsed, and their texts as stored records, or None where the texts
    are not one row each (the caller packs the values then). CorruptLog if a rows line is
    not a JSON array or the row count is not the header's."""
    count = 0
    for line in part.lines:
        for rows, texts in _windows(path, part.name, line):
            count += len(rows)
            yield rows, texts
    if count != part.count:
        raise CorruptLog(path, part.position, f"model {part.name!r}: {count} rows, header says {part.count}")


def _windows(path: str, name: str, line: RowsLine) -> Iterator[Window]:
    if not _bracketed(line):
        yield _whole(path, name, line), None
        return
    data = line.data
    a, stop = line.start + 1, line.end - 1
    given = 0
    while a < stop:
        # a row end is followed by a row: one right before the "]" is left in the window,
        # whose parse then refuses the line (`[row,TAB]` is not JSON)
        cut = data.find(ROW_END, min(a + WINDOW, stop), stop - 1)
        b = stop if cut < 0 else cut
        window = data[a:b]
        split = window.split(ROW_END)
        rows = _one_row_each(split)
        texts: list[Stored] | None = split
        if rows is None:
            texts = None
            try:
                rows = json.loads("[" + str(window, "utf-8", "surrogatepass") + "]")
            except ValueError:
                rows = None
            if type(rows) is not list or not rows:
                yield _whole(path, name, line)[given:], None
                return
        given += len(rows)
        yield rows, texts
        a = b + len(ROW_END)


def _one_row_each(texts: list[bytes]) -> list | None:
    """The value of each text, or None unless every text is exactly one JSON value. In C
    but for the list calls (rows.py, the scanner)."""
    try:
        strs = list(map(bytes.decode, texts, repeat("utf-8"), repeat("surrogatepass")))
        # The scanner raises StopIteration where no value starts, which ends the map
        # early: the lengths below then differ.
        found = list(map(SCAN, strs, repeat(0)))
    except ValueError:  # not UTF-8, or not JSON
        return None
    if list(map(len, strs)) != list(map(_END, found)):
        return None
    return list(map(_VALUE, found))


def _whole(path: str, name: str, line: RowsLine) -> list:
    try:
        rows = _loads(memoryview(line.data)[line.start : line.end])
    except ValueError as exc:
        raise CorruptLog(path, line.position, f"model {name!r}: the line is not JSON ({exc})") from None
    if type(rows) is not list:
        raise CorruptLog(path, line.position, f"model {name!r}: the line is not a JSON array of rows")
    return rows


def decode_snapshot(path: str, data: bytes) -> SnapshotImage:
    """The whole snapshot at once, every model's rows in one list (offline tools)."""
    epoch, head, parts = read_snapshot(path, data)
    models = [
        ModelImage(
            m.name,
            m.fields,
            [row for rows, _texts in model_windows(path, m) for row in rows],
            m.max_id,
            list(m.keys or ()),
            model_versions(path, m, head),
        )
        for m in parts
    ]
    return SnapshotImage(epoch, head, models)
