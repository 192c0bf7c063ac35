"""The snapshot file: every live record at one offset, one checksummed line per model.

Layout (UTF-8 text; every line is `CRC SP JSON LF`, CRC = 8 hex digits of crc32(JSON))::

    1a2b3c4d {"format":1,"epoch":"<32 hex>","head_offset":1234,
              "models":[{"name":"User","fields":["id","email",...],"count":2,"max_id":7}, ...]}
    5e6f7081 [[1,"a@b.c","Ann",null,"reader","2026-01-01T00:00:00Z",null],<TAB>[7,...]]
    ...      one line per entry of "models", in that order: its records as rows (lists in
             the "fields" order), ascending by id, each but the last followed by ",<TAB>"

The epoch named here is the epoch of the log that continues it (the log header carries the
same id and `head_offset` as its base). Rows are in id order because each snapshot record
is one row of the new epoch (table.py): `as_of=n` below the snapshot's count sees the first
n records by id.

Rows as stored records: a row's text is exactly a stored record (rows.py), so the writer
joins the tables' stored records with ",TAB" and the reader splits at ",TAB" and keeps
each piece of text as a stored record, neither encoding a row nor keeping the values it
parses beyond the index columns. A JSON string never holds a raw TAB (it must be escaped),
and compact JSON holds no whitespace at all, so in a line this writer wrote ",TAB" is
only ever a row's end. The reader still takes nothing on trust: each text is scanned on
its own and kept only if it is exactly one JSON value; otherwise (a line written by hand
with whitespace, or by an older writer that put ",TAB" only after every 2,048th row) the
window of rows is parsed as JSON and its rows are encoded again, so the rows read are
always those of `json.loads(line)`.

Windows: the reader takes a line WINDOW bytes at a time (cut at a ",TAB"), so a
1,000,000-row line never becomes a million parsed lists at once: parsed whole, it left the
freed lists as holes between the objects that stay, 130 bytes of RSS per record for good
(bench/README.md, "Open time and memory"). A window that does not parse hands over to the
whole line's parse, which names the error.

Crash rules: a snapshot is only ever written under a `.new` name, fsynced, and renamed
into place by compaction (compact.py), so a torn snapshot never carries the real name. A
checksum failure is damage, never a torn tail: loading refuses with `CorruptLog(path,
byte offset of the line, reason)`.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any

from dbsvc.errors import CorruptLog
from dbsvc.runtime import compact_json
from dbsvc.storage import files
from dbsvc.storage.files import write_all
from dbsvc.storage.rows import SCAN, Stored, pack

_VALUE, _END = itemgetter(0), itemgetter(1)

FORMAT = 1
CHUNK_ROWS = 2048          # rows encoded at a time by `encode_snapshot`
ROW_END = b",\t"           # what ends every row of a model line but its last
WINDOW = 1 << 19           # bytes of a model line the reader splits and scans at a time


@dataclass(slots=True)
class ModelImage:
    """One model's part of a snapshot: rows are lists of values (read from a file by
    `decode_snapshot`, or made by an offline tool), or a table's stored records (bytes,
    rows.py), which are their row texts already."""

    name: str
    fields: list[str]
    rows: Sequence[Sequence[Any]]
    max_id: int


@dataclass(slots=True)
class SnapshotImage:
    epoch: str
    head_offset: int
    models: list[ModelImage]


def _line(text: bytes) -> bytes:
    return b"%08x " % zlib.crc32(text) + text + b"\n"


def _rows_text(rows: Sequence[Stored | Sequence[Any]]) -> bytes:
    """Rows as the inside of a JSON array (no brackets), each but the last ended by ROW_END."""
    return ROW_END.join([r if type(r) is bytes else pack(r) for r in rows])


def encode_snapshot(image: SnapshotImage) -> Iterator[bytes]:
    """The file's bytes, one line at a time (so 1,000,000 rows never sit in one string twice)."""
    header = {
        "format": FORMAT, "epoch": image.epoch, "head_offset": image.head_offset,
        "models": [{"name": m.name, "fields": m.fields, "count": len(m.rows), "max_id": m.max_id}
                   for m in image.models],
    }
    yield _line(compact_json(header).encode("utf-8"))
    for m in image.models:
        rows = m.rows
        chunks = (_rows_text(rows[i : i + CHUNK_ROWS]) for i in range(0, len(rows), CHUNK_ROWS))
        yield _line(b"[" + ROW_END.join(chunks) + b"]")


@dataclass(slots=True)
class ModelStream:
    """One model's part of a snapshot written piecewise: rows arrive in chunks (lists of
    rows, ascending by id), `count` of them in all."""

    name: str
    fields: list[str]
    count: int
    max_id: int
    chunks: Iterable[Sequence[Sequence[Any]]]


def write_snapshot_stream(fd: int, epoch: str, head_offset: int, models: list[ModelStream]) -> None:
    """Write a snapshot to `fd` (at position 0, empty file) in the same format as
    `encode_snapshot`, one chunk of rows at a time, so no model line is ever one string and
    a thread writing it gives the GIL back between chunks. A line's CRC comes first, so
    each model line starts with a placeholder that is overwritten once the line is out."""
    header = {
        "format": FORMAT, "epoch": epoch, "head_offset": head_offset,
        "models": [{"name": m.name, "fields": m.fields, "count": m.count, "max_id": m.max_id}
                   for m in models],
    }
    write_all(fd, _line(compact_json(header).encode("utf-8")))
    pos = os.lseek(fd, 0, os.SEEK_CUR)
    for m in models:
        start = pos
        write_all(fd, b"00000000 [")
        crc = zlib.crc32(b"[")
        pos += 10
        written = 0
        for chunk in m.chunks:
            if not chunk:
                continue
            text = _rows_text(chunk)
            if written:
                text = ROW_END + text
            written += len(chunk)
            crc = zlib.crc32(text, crc)
            write_all(fd, text)
            pos += len(text)
        assert written == m.count, f"{m.name}: {written} rows streamed, {m.count} announced"
        crc = zlib.crc32(b"]", crc)
        write_all(fd, b"]\n")
        pos += 2
        files.ops.pwrite(fd, b"%08x" % crc, start)


def snapshot_lines(path: str, data: bytes) -> list[tuple[int, memoryview]]:
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
class ModelLine:
    """One model's line of a snapshot, checked against its CRC, not yet parsed: the JSON
    array is `data[start:end]`."""

    name: str
    fields: list[str]
    count: int
    max_id: int
    position: int              # byte offset of the line in the file
    data: bytes
    start: int
    end: int


def read_snapshot(path: str, data: bytes) -> tuple[str, int, list[ModelLine]]:
    """(epoch, head offset, model lines) of a snapshot's bytes: every line's CRC checked,
    the header parsed, the model lines left for `model_windows`."""
    lines = snapshot_lines(path, data)
    if not lines:
        raise CorruptLog(path, 0, "empty snapshot")
    header = _loads(lines[0][1])
    if header.get("format") != FORMAT:
        raise CorruptLog(path, 0, f"snapshot format {header.get('format')!r}, expected {FORMAT}")
    metas = header["models"]
    if len(lines) != 1 + len(metas):
        raise CorruptLog(path, len(data), f"snapshot has {len(lines) - 1} model lines, header lists {len(metas)}")
    models = [ModelLine(meta["name"], meta["fields"], meta["count"], meta["max_id"],
                        pos, data, pos + 9, pos + 9 + len(body))      # the JSON after "CRC SP"
              for meta, (pos, body) in zip(metas, lines[1:])]
    return header["epoch"], header["head_offset"], models


Window = tuple[list, "list[Stored] | None"]      # rows' values, and their texts when kept


def model_windows(path: str, line: ModelLine) -> Iterator[Window]:
    """The rows of a model line, a window at a time (module docstring): each window's
    rows as parsed, and their texts as stored records, or None where the texts are not
    one row each (the caller packs the values then). CorruptLog if the line is not a
    JSON array or its row count is not the header's."""
    count = 0
    for rows, texts in _windows(path, line):
        count += len(rows)
        yield rows, texts
    if count != line.count:
        raise CorruptLog(path, line.position, f"model {line.name!r}: {count} rows, header says {line.count}")


def _windows(path: str, line: ModelLine) -> Iterator[Window]:
    data, start, end = line.data, line.start, line.end
    if end - start < 2 or data[start] != 0x5B or data[end - 1] != 0x5D:      # "[" ... "]"
        yield _whole(path, line), None
        return
    a, stop = start + 1, end - 1
    given = 0
    while a < stop:
        cut = data.find(ROW_END, min(a + WINDOW, stop), stop)
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
                yield _whole(path, line)[given:], None
                return
        given += len(rows)
        yield rows, texts
        a = b + len(ROW_END)


def _one_row_each(texts: list[bytes]) -> list | None:
    """The value of each text, or None unless every text is exactly one JSON value. In C
    but for the list calls: about 0.9 us a row (rows.py, the scanner)."""
    strs = list(map(bytes.decode, texts, repeat("utf-8"), repeat("surrogatepass")))
    try:
        # The scanner raises StopIteration where no value starts, which ends the map
        # early: the lengths below then differ.
        found = list(map(SCAN, strs, repeat(0)))
    except ValueError:
        return None
    if list(map(len, strs)) != list(map(_END, found)):
        return None
    return list(map(_VALUE, found))


def _whole(path: str, line: ModelLine) -> list:
    try:
        rows = _loads(memoryview(line.data)[line.start : line.end])
    except ValueError as exc:
        raise CorruptLog(path, line.position, f"model {line.name!r}: the line is not JSON ({exc})") from None
    if type(rows) is not list:
        raise CorruptLog(path, line.position, f"model {line.name!r}: the line is not a JSON array of rows")
    return rows


def decode_snapshot(path: str, data: bytes) -> SnapshotImage:
    """The whole snapshot at once, every model's rows in one list (offline tools)."""
    epoch, head, lines = read_snapshot(path, data)
    models = [ModelImage(m.name, m.fields, [row for rows, _texts in model_windows(path, m) for row in rows],
                         m.max_id) for m in lines]
    return SnapshotImage(epoch, head, models)
