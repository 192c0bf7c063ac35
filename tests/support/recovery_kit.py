"""A tenant with a known history and the tools to damage its files, for the tests of
dbsvc/storage/recovery.py (tests/storage/test_storage_recovery_*.py): the paths of its files,
frames read and appended with the project's own encoders, a snapshot rewritten with good
checksums, and the two checks every refusal ends with (refused alike by a writer and a
read-only open, no byte changed; once repaired, every record back). The `history` and
`compacted` tenants themselves are fixtures (tests/storage/conftest.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from dbsvc.errors import CorruptLog
from dbsvc.storage import Store, recovery
from dbsvc.storage.events import ChangeEvent
from dbsvc.storage.logfile import LogScan, encode_frame
from dbsvc.storage.snapshot import ModelImage, SnapshotImage, encode_snapshot
from dbsvc.storage.snapshotreader import decode_snapshot
from support.storage import BLOG, ROOT, open_store, post, user
from support.tree import dir_image

LOGGER = "dbsvc.storage"
HEAD = 9  # rows of the `history` tenant
NEXT_USER_WATERMARK = 9  # User rows 1..8 are in its log (6 inserts, 1 update, 1 delete)
BLOG_TEXT = (ROOT / "schemas" / "blog.dbs").read_text()


# -- the tenant and its files ---------------------------------------------------------------


def expected_users() -> dict[int, dict]:
    """The User records the `history` tenant holds: 1..5 (6 was deleted), 3 renamed."""
    users = {i: user(i) for i in range(1, 6)}
    users[3] = user(3, name="renamed")
    return users


def load(tenant: str, *, readonly: bool = False, ring_capacity: int = 16, module=BLOG, **kw) -> recovery.Loaded:
    return recovery.load(
        tenant, module.MODELS, module.DESCRIPTION, readonly=readonly, ring_capacity=ring_capacity, **kw
    )


def log_of(tenant: str) -> str:
    return os.path.join(tenant, "log")


def snapshot_of(tenant: str) -> str:
    return os.path.join(tenant, "snapshot")


def segment_of(tenant: str) -> str:
    return os.path.join(tenant, "log.retained")


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def frames_of(path: str) -> list[tuple[int, int, bytes]]:
    """(offset, byte position, payload) of every frame of a sound log file."""
    scan = LogScan(path, read(path))
    frames = [(offset, scan.end, bytes(payload)) for offset, payload in scan.records()]
    assert scan.damage is None
    return frames


def append_event(path: str, event: ChangeEvent) -> int:
    """Append `event` as one well-formed frame (good offset, CRC and length); returns the
    byte position it starts at."""
    position = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(encode_frame(event.offset, event.payload()))
    return position


def rewrite_snapshot(tenant: str, change: Callable[[SnapshotImage], None]) -> bytes:
    """Decode the snapshot, let `change` edit it, write it back with good checksums and
    counts; returns the original bytes. Written without keys, so that an open parses and
    checks every row (snapshotreader.py, "From the rows"); test_storage_snapshot_keys.py
    damages the keys."""
    path = snapshot_of(tenant)
    original = read(path)
    image = decode_snapshot(path, original)
    for m in image.models:
        m.keys = []
    change(image)
    write(path, b"".join(encode_snapshot(image)))
    return original


def model_image(image: SnapshotImage, name: str) -> ModelImage:
    return next(m for m in image.models if m.name == name)


def records(loaded: recovery.Loaded, model: str) -> dict:
    table = loaded.tables[model].records
    return {i: table[i] for i in table}


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def listing(tenant: str) -> list[str]:
    return sorted(os.listdir(tenant))


def assert_refused(tenant: str, path: str, position: int, reason: str, module=BLOG) -> None:
    """Both a writer and a read-only open refuse with exactly this CorruptLog, and neither
    changes a byte or a name in the directory."""
    before, names = dir_image(tenant), listing(tenant)
    for readonly in (False, True):
        with pytest.raises(CorruptLog) as info:
            Store.open(tenant, module.MODELS, module.DESCRIPTION, readonly=readonly)
        exc = info.value
        assert (exc.path, exc.offset, exc.reason) == (path, position, reason)
        assert str(exc) == f"{path}: corrupt at byte {position}: {reason}"
        assert dir_image(tenant) == before and listing(tenant) == names


def assert_intact(tenant: str, head: int = HEAD) -> None:
    """A writer open of the repaired tenant reads every record of the history."""
    s = open_store(tenant)
    try:
        assert s.head_offset == head
        assert dict(s.tables["User"].records.items()) == expected_users()
        assert dict(s.tables["BlogPost"].records.items()) == {1: post(1)}
    finally:
        s.close()
