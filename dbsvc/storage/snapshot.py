"""The snapshot file: every live record at one offset, one checksummed line per model.

Layout (UTF-8 text; every line is `CRC SP JSON LF`, CRC = 8 hex digits of crc32(JSON))::

    1a2b3c4d {"format":1,"epoch":"<32 hex>","head_offset":1234,
              "models":[{"name":"User","fields":["id","email",...],"count":2,"max_id":7}, ...]}
    5e6f7081 [[1,"a@b.c","Ann",null,"reader","2026-01-01T00:00:00Z",null],[7,...]]
    ...      one line per entry of "models", in that order: its records as rows (lists in
             the "fields" order), ascending by id

The epoch named here is the epoch of the log that continues it (the log header carries the
same id and `head_offset` as its base). Loading costs one `json.loads` per model; a row
becomes its record's stored form with one `tuple()` (table.py). Rows are in id order
because each snapshot record is one row of the new epoch (table.py): `as_of=n` below the snapshot's count sees the first n records by id.

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
from typing import Any

from dbsvc.errors import CorruptLog
from dbsvc.runtime import compact_json
from dbsvc.storage import files
from dbsvc.storage.files import write_all

FORMAT = 1


@dataclass(slots=True)
class ModelImage:
    """One model's part of a snapshot: rows are lists when read from a file, a table's
    stored records (tuples, which encode as the same JSON arrays) when written."""

    name: str
    fields: list[str]
    rows: Sequence[Sequence[Any]]
    max_id: int


@dataclass(slots=True)
class SnapshotImage:
    epoch: str
    head_offset: int
    models: list[ModelImage]


def _line(obj: Any) -> bytes:
    text = compact_json(obj).encode("utf-8")
    return b"%08x " % zlib.crc32(text) + text + b"\n"


def encode_snapshot(image: SnapshotImage) -> Iterator[bytes]:
    """The file's bytes, one line at a time (so 1,000,000 rows never sit in one string twice)."""
    header = {
        "format": FORMAT, "epoch": image.epoch, "head_offset": image.head_offset,
        "models": [{"name": m.name, "fields": m.fields, "count": len(m.rows), "max_id": m.max_id}
                   for m in image.models],
    }
    yield _line(header)
    for m in image.models:
        yield _line(m.rows)


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
    write_all(fd, _line(header))
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
            text = compact_json(chunk).encode("utf-8")[1:-1]
            if written:
                text = b"," + text
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


def decode_snapshot(path: str, data: bytes) -> SnapshotImage:
    lines = snapshot_lines(path, data)
    pos = len(data)
    if not lines:
        raise CorruptLog(path, 0, "empty snapshot")
    header = _loads(lines[0][1])
    if header.get("format") != FORMAT:
        raise CorruptLog(path, 0, f"snapshot format {header.get('format')!r}, expected {FORMAT}")
    metas = header["models"]
    if len(lines) != 1 + len(metas):
        raise CorruptLog(path, pos, f"snapshot has {len(lines) - 1} model lines, header lists {len(metas)}")
    models = []
    for meta, (line_pos, body) in zip(metas, lines[1:]):
        rows = _loads(body)
        if len(rows) != meta["count"]:
            raise CorruptLog(path, line_pos, f"model {meta['name']!r}: {len(rows)} rows, header says {meta['count']}")
        models.append(ModelImage(meta["name"], meta["fields"], rows, meta["max_id"]))
    return SnapshotImage(header["epoch"], header["head_offset"], models)
