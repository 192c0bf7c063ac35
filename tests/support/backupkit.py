"""A tenant written, compacted and read back, for the in-process tests of
dbsvc/datatools/backup.py (tests/datatools/test_backup_units.py, test_restore_units.py): rows
written through the store, an offline compaction, the state and history a read-only open
sees, a directory's files, a backup's manifest rewritten with the checksums of the files as
they now are, the refusal `verify_backup` gives, and a checksummed line or a log frame
rewritten by hand under a good checksum (`rewrite_line`, `rewrite_frame`: a tenant's or a
backup's). The tenant itself (three users) is tests/datatools/conftest.py's fixture.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import struct
import zlib
from pathlib import Path

import pytest

from dbsvc.datatools.backup import verify_backup
from dbsvc.errors import BadBackup, CorruptLog
from dbsvc.runtime import Query
from dbsvc.storage.compact import compact_directory
from dbsvc.storage.lock import WriterLock
from dbsvc.storage.migrate import read_description
from support.storage import BLOG, open_store, post, user


def write(directory: str, *users: int, big: int = 0) -> None:
    store = open_store(directory)

    async def go() -> None:
        for i in users:
            await store.insert("User", user(i, profile={"pad": "z" * big} if big else None))
        if 1 in users:
            await store.insert("BlogPost", post(1, author=1))

    asyncio.run(go())
    store.close()


def compact(directory: str) -> None:
    lock = WriterLock.acquire(directory)
    try:
        compact_directory(directory, read_description(directory), retain_bytes=0)
    finally:
        lock.release()


def state(directory: str) -> tuple:
    store = open_store(directory, readonly=True)
    try:
        records = {m.name: store.list_records(m.name, Query(limit=1000))[0] for m in BLOG.MODELS}
        return store.epoch, store.head_offset, store.watermarks(), records
    finally:
        store.close()


def history(directory: str):
    store = open_store(directory, readonly=True)
    try:
        return store.history
    finally:
        store.close()


def files_of(directory) -> dict[str, bytes]:
    return {name: Path(directory, name).read_bytes() for name in sorted(os.listdir(directory))}


def rewrite_manifest(bk: Path, **changes) -> None:
    manifest = json.loads((bk / "manifest.json").read_text())
    manifest["files"] = {
        name: {"bytes": len((bk / name).read_bytes()), "sha256": hashlib.sha256((bk / name).read_bytes()).hexdigest()}
        for name in manifest["files"]
        if (bk / name).exists()
    }
    manifest.update(changes)
    (bk / "manifest.json").write_text(json.dumps(manifest))


def refusal(bk: Path) -> str:
    with pytest.raises((BadBackup, CorruptLog)) as caught:
        verify_backup(str(bk))
    return str(caught.value)


def rewrite_line(path: Path, needle: bytes, old: bytes, new: bytes) -> int:
    """In the checksummed line ("crc32hex body\\n") of `path` holding `needle`, `old` made
    `new`, the line's CRC made good; the line's byte position."""
    data = path.read_bytes()
    at = data.rindex(b"\n", 0, data.index(needle)) + 1 if data.index(needle) > data.index(b"\n") else 0
    end = data.index(b"\n", at)
    body = data[at + 9 : end].replace(old, new, 1)
    path.write_bytes(data[:at] + b"%08x " % zlib.crc32(body) + body + data[end:])
    return at


def rewrite_frame(path: Path, old: bytes, new: bytes) -> tuple[int, int]:
    """In the first log frame holding `old`, `old` made `new`, the frame's length and CRC
    made good: (the frame's byte position, its offset)."""
    data = path.read_bytes()
    start = data.rindex(b'{"kind"', 0, data.index(old))
    at = start - 16  # u64 offset | u32 crc32 | u32 length | payload
    offset, _crc, length = struct.unpack(">QII", data[at:start])
    payload = data[start : start + length].replace(old, new, 1)
    frame = struct.pack(">QII", offset, zlib.crc32(payload), len(payload)) + payload
    path.write_bytes(data[:at] + frame + data[start + length :])
    return at, offset
