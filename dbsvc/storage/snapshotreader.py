"""Reading a snapshot file back: its lines checked, its header, each model's rows.

The format is snapshot.py's (its docstring draws the lines, the blocks and the crash
rules; this module reads formats 1 to 4). `read_snapshot` checks every line's CRC and
parses the header; a model's rows are then read one of two ways, and its versions by
`model_versions`. `snapshot_lines` alone checks a copied file (a backup).

Two ways to read a model (snapshotload.py picks):

- From the keys (`model_blocks`, formats 2-4, when the file's "keys" hold every column the
  table indexes and its fields are the model's own): each rows line is split into texts
  that are kept as they are, and the index keys come from the keys line, so no row is
  parsed. Parsing every row to check it and take its keys was a third of an open; reading
  the keys instead saves it (bench/README.md, "Open from the keys"). What is checked instead: every line's CRC; each block's text count and
  column lengths against "block_rows"; the ids strictly ascending (snapshotload.py); and a
  sample of rows, every SAMPLE_EVERY-th of each block and its last, each scanned whole and
  held to be exactly one row of the model's width (format 4: one object of its fields, in
  order) whose indexed values equal its keys line's. A line whose CRC holds was written by a dbsvc writer (a torn or damaged one
  never passes): the sample is there to catch a writer's bug, not a forger. A row the
  sample skips is trusted as far as its CRC vouches for it: were it not the row its keys
  say, a read would show the row and the indexes would follow the keys.
- From the rows (`model_windows`, format 1, and formats 2-4 whenever the keys do not fit: a
  schema that indexes another field, a model being migrated): the rows are parsed, a
  window at a time, and handed out as lists of values (a format-4 object as its values,
  once it holds exactly the header's fields in order); each text is kept only if it scans
  as exactly one JSON value;
  otherwise (a line written by hand with whitespace, or by an older writer that put ",TAB"
  only after every 2,048th row) the window is parsed as JSON and its rows are encoded
  again, so the rows read are always those of `json.loads(line)`.

Windows: the rows reader takes a line WINDOW bytes at a time (cut at a ",TAB"), so a
1,000,000-row line never becomes a million parsed lists at once: parsed whole, it left the
freed lists as holes between the objects that stay, 130 bytes of RSS per record for good
(bench/README.md, "Open time and memory"). A window that does not parse hands over to the
whole line's parse, which names the error. Format 2's blocks are windows of their own.

Strict JSON: every line this module parses (the header, a keys or versions line, a
window of rows, a sampled row) is read by dbsvc/strictjson.py's decoder, so `NaN`,
`Infinity` or a number past the doubles (`1e400`, which json.loads reads as inf, and which
no writer writes: `compact_json` refuses it) in a file edited by hand or in a snapshot a
replica downloads is `CorruptLog` naming the line, before any row is taken, rather than an
infinity stored and served. The one Python call a float costs is paid only where rows are
parsed (the rows reader, the keys reader's sample): the keys reader's other rows are
trusted as far as their CRC vouches, as for any other value.

Split from snapshot.py (session 17): the writer and the format stay there, the reader is
here. Imports snapshot.py (the format's constants and images), rows.py and errors.
"""

from __future__ import annotations

import json
import mmap
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any

from dbsvc.errors import CorruptLog
from dbsvc.storage.rows import Stored
from dbsvc.storage.snapshot import ROW_END, ModelImage, SnapshotImage, key_positions
from dbsvc.strictjson import STRICT_DECODER, STRICT_SCAN, strict_loads

_VALUE, _END = itemgetter(0), itemgetter(1)

Data = bytes | mmap.mmap  # a snapshot's bytes: read, or mapped by a writer's open (recovery.py)

READS = (1, 2, 3, 4)  # the formats the reader takes

WINDOW = 1 << 19  # bytes of a format-1 model line the rows reader parses at a time
# The scanner of a row's text: the strict one (module docstring, "Strict JSON"), looked up
# here at each call (tests count the rows an open scans through this name).
SCAN = STRICT_SCAN
SAMPLE_EVERY = 64  # the keys reader scans this block's every SAMPLE_EVERY-th row (and its last)


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
    json.loads(bytes) does for UTF-8, and strict (module docstring, "Strict JSON")."""
    return STRICT_DECODER.decode(str(body, "utf-8", "surrogatepass"))


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
    format 1, one per block in formats 2-4). `keys` is None in format 1. `objects`: its
    rows are records' objects (format 4), else arrays of values (rows.py `row_object`)."""

    name: str
    fields: list[str]
    count: int
    max_id: int
    keys: list[str] | None
    position: int  # byte offset of its first line (the header's, if it has none)
    lines: list[RowsLine]
    block_rows: int
    objects: bool = False


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
    blocked = version != 1  # formats 2-4: blocks with their keys lines
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
    # Lines per model: one in format 1; in format 2 two a block (keys, rows), in formats 3
    # and 4 three (keys, rows, versions); none for no rows.
    per_block = 3 if version >= 3 else 2
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
                version == 4,
            )
        )
    return header["epoch"], header["head_offset"], parts


Block = tuple[list[Stored], dict[str, "list | range"]]  # a block's row texts, and its columns by field


def model_blocks(path: str, part: ModelPart) -> Iterator[Block]:
    """The rows of a format 2-4 model as their texts (format 4: stored records; else
    arrays, rows.py `row_object`) and its key columns, a block at a time, without parsing a
    row but the sample (module docstring, "From the keys"). CorruptLog for a block whose
    texts or columns do not fit."""
    assert part.keys is not None, "model_blocks reads formats 2-4"
    fields = part.fields if part.objects else None
    keys, width = part.keys, len(part.fields)
    positions = key_positions(part.fields, keys)
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
            if not _sample_fits(texts[i], i, columns, positions, width, fields):
                raise CorruptLog(
                    path,
                    line.position,
                    f"model {part.name!r}: row {i + 1} of a block is not "
                    f"one row of {width} fields matching its keys line{_not_json(texts[i])}",
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


def _sample_fits(
    text: bytes, i: int, columns: list[list], positions: list[int], width: int, fields: list[str] | None
) -> bool:
    """`text` is exactly one row of `width` values (with `fields`: one object of those
    fields, in order) whose values at `positions` are row `i` of `columns`."""
    found = _one_row_each([text])
    row = found[0] if found else None
    if fields is not None:
        row = list(row.values()) if type(row) is dict and list(row) == fields else None
    return type(row) is list and len(row) == width and all(row[p] == column[i] for p, column in zip(positions, columns))


def _not_json(text: bytes) -> str:
    """A message's tail naming the number the strict decoder refuses in a sampled row that
    does not fit (`NaN`, `1e400`: JSON to json.loads, not to dbsvc), or "" for any other
    row that does not fit (the message says enough)."""
    try:
        strict_loads(text)
    except ValueError as exc:
        try:
            json.loads(text)
        except ValueError:
            return ""  # not JSON to anyone
        return f" ({exc})"
    return ""


def _bracketed(line: RowsLine) -> bool:
    """The line's JSON starts with "[" and ends with "]", as a rows line does."""
    data, start, end = line.data, line.start, line.end
    return end - start >= 2 and data[start] == 0x5B and data[end - 1] == 0x5D


Window = tuple[list, "list[Stored] | None"]  # rows' values, and their texts when kept


def model_windows(path: str, part: ModelPart) -> Iterator[Window]:
    """The rows of a model, a window at a time (module docstring, "From the rows"): each
    window's rows as lists of values, and their texts (format 4: stored records; else
    arrays), or None where the texts are not one row each (the caller packs the values
    then). CorruptLog if a rows line is not a JSON array, a format-4 row not an object of
    the header's fields in order, or the row count is not the header's."""
    count = 0
    for line in part.lines:
        for rows, texts in _windows(path, part.name, line):
            count += len(rows)
            if part.objects:
                rows = _values(path, part, rows)
            yield rows, texts
    if count != part.count:
        raise CorruptLog(path, part.position, f"model {part.name!r}: {count} rows, header says {part.count}")


def _values(path: str, part: ModelPart, rows: list) -> list:
    """The values of a window of format-4 rows, each an object of exactly the header's
    fields in order (a row made otherwise is refused: its values would land in the wrong
    columns)."""
    fields = part.fields
    if set(map(type, rows)) - {dict} or any(list(row) != fields for row in rows):
        raise CorruptLog(
            path, part.position, f"snapshot rows of {part.name} are not objects of its {len(fields)} fields in order"
        )
    return list(map(list, map(dict.values, rows)))


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
                rows = STRICT_DECODER.decode("[" + str(window, "utf-8", "surrogatepass") + "]")
            except ValueError:
                rows = None
            if type(rows) is not list or not rows:
                yield _whole(path, name, line)[given:], None
                return
        given += len(rows)
        yield rows, texts
        a = b + len(ROW_END)


def _one_row_each(texts: list[bytes]) -> list | None:
    """The value of each text, or None unless every text is exactly one JSON value (strict:
    no NaN, no number past the doubles). In C but for the list calls and a call a float."""
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
