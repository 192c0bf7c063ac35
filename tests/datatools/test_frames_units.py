"""dbsvc/datatools/frames.py in-process (issue 33): `import --frames` called directly on a
FILE cut from a real tenant's log (a `replicate --out` file is that log's frames without
its 40-byte header, docs/replication.md), with exact reports and refusals.
"""

from __future__ import annotations

import asyncio
import json
import os
import zlib
from pathlib import Path

import pytest

from dbsvc.datatools import frames as frames_module
from dbsvc.datatools.frames import FramesReport, import_frames, scan_file
from dbsvc.errors import ConfigError, CorruptLog, ImportRejected, TenantError
from dbsvc.storage import files
from dbsvc.storage.tenants import create_tenant
from support.storage import BLOG, open_store, user, write_eight_rows
from support.tree import dir_image

LOG_HEADER = 40


def history_of(directory: str):
    store = open_store(directory, readonly=True)
    try:
        return store.history, store.head_offset
    finally:
        store.close()


@pytest.fixture
def source(tmp_path) -> Path:
    """A tenant written with 8 rows: users 1-5, post 1, user 2 replaced, user 5 deleted."""
    directory = create_tenant(str(tmp_path / "src"), "s")
    write_eight_rows(directory)
    return Path(directory)


@pytest.fixture
def frames(source, tmp_path) -> Path:
    out = tmp_path / "events.log"
    out.write_bytes((source / "log").read_bytes()[LOG_HEADER:])
    return out


@pytest.fixture
def tenant(data) -> str:
    return create_tenant(str(data), "t")


def starts(path: Path) -> list[int]:
    data, found, pos = path.read_bytes(), [], 0
    while pos + 16 <= len(data):
        found.append(pos)
        pos += 16 + int.from_bytes(data[pos + 12 : pos + 16], "big")
    return found


def frame(offset: int, event: dict) -> bytes:
    body = json.dumps(event, separators=(",", ":")).encode()
    return offset.to_bytes(8, "big") + zlib.crc32(body).to_bytes(4, "big") + len(body).to_bytes(4, "big") + body


def unchanged(tenant: str):
    return {k: v for k, v in dir_image(tenant).items() if k != "LOCK"}


def test_a_file_rebuilds_the_tenant_with_its_offsets_and_forks_its_history(tenant, source, frames):
    (Path(f"{frames}.history")).write_bytes((source / "history").read_bytes())
    original, _head = history_of(str(source))
    report = import_frames(tenant, BLOG, str(frames), "t")
    rebuilt, head = history_of(tenant)
    assert (report.frames, report.head, head, report.torn) == (8, 8, 8, None)
    assert report.counts == {"User": 4, "BlogPost": 1, "Comment": 0}
    assert [(f.id, f.at) for f in rebuilt.forks] == [(original.id, 8)]
    assert report.history == f"history {rebuilt.id[:8]}, forked at offset 8 from events.log.history's {original.id[:8]}"
    assert sorted(os.listdir(tenant)) == sorted(os.listdir(source))  # no staging directory left
    store = open_store(tenant, readonly=True)
    try:
        assert store.get("User", 2)[0]["name"] == "second"
        assert store.get("User", 5)[0] is None
        assert store.watermarks() == {"User": 7, "BlogPost": 1, "Comment": 0}
    finally:
        store.close()


def test_without_a_history_file_the_tenant_starts_a_new_history(tenant, frames):
    report = import_frames(tenant, BLOG, str(frames), "t")
    rebuilt, _head = history_of(tenant)
    assert rebuilt.forks == ()
    assert report.history == f"a new history {rebuilt.id[:8]} (no events.log.history)"


def test_a_torn_tail_is_left_out_and_reported(tenant, frames):
    last = starts(frames)[-1]
    with open(frames, "r+b") as f:
        f.truncate(last + 10)
    report = import_frames(tenant, BLOG, str(frames), "t")
    assert (report.frames, report.head) == (7, 7)
    assert report.torn == f"left out a torn tail of 10 bytes at byte {last} (truncated frame header (10 of 16 bytes))"
    assert history_of(tenant)[1] == 7


def test_a_file_of_only_a_torn_frame_is_refused(tenant, frames):
    with open(frames, "r+b") as f:
        f.truncate(20)
    before = unchanged(tenant)
    with pytest.raises(ImportRejected) as caught:
        import_frames(tenant, BLOG, str(frames), "t")
    assert caught.value.problems == [f"{frames}: holds no whole frame (truncated payload (4 of 197 bytes))"]
    assert unchanged(tenant) == before


def test_a_file_started_after_offset_1_is_refused(tenant, frames):
    blob = frames.read_bytes()
    frames.write_bytes(blob[starts(frames)[3] :])
    with pytest.raises(ImportRejected) as caught:
        import_frames(tenant, BLOG, str(frames), "t")
    assert caught.value.problems == [
        f"{frames}: starts at offset 4, expected 1: it holds the changes after offset 3, not the rows written "
        "before them, so it cannot rebuild a tenant (restore a backup taken at that offset instead, "
        "docs/data-tools.md)"
    ]


def test_damage_a_good_frame_follows_is_corrupt_naming_byte_and_offset(tenant, frames):
    blob = bytearray(frames.read_bytes())
    third = starts(frames)[2]
    blob[third + 20] ^= 0x01
    frames.write_bytes(bytes(blob))
    with pytest.raises(CorruptLog) as caught:
        scan_file(str(frames), bytes(blob))
    assert str(caught.value) == (
        f"{frames}: corrupt at byte {third}: the frame of offset 3: payload checksum mismatch; a good frame "
        f"follows at byte {starts(frames)[3]}, so this is not a torn tail"
    )


def test_scan_file_finds_the_last_good_frame():
    one = frame(1, {"n": 1})
    two = frame(2, {"n": 2})
    assert scan_file("f", one + two) == (len(one + two), 2, None)
    assert scan_file("f", one + two[:-1]) == (len(one), 1, "truncated payload (6 of 7 bytes)")
    assert scan_file("f", one + frame(3, {"n": 3})) == (len(one), 1, "frame offset 3, expected 2")
    assert scan_file("f", b"") == (0, 0, None)
    # a first frame that does not itself verify is not judged by its offset: a torn tail
    assert scan_file("f", frame(4, {})[:-1]) == (0, 0, "frame offset 4, expected 1")


def test_a_tenant_holding_rows_is_refused(data, frames):
    directory = create_tenant(str(data), "t")
    store = open_store(directory)
    asyncio.run(store.insert("User", user(1)))
    store.close()
    before = unchanged(directory)
    with pytest.raises(TenantError) as caught:
        import_frames(directory, BLOG, str(frames), "t")
    assert str(caught.value) == (
        "tenant 't' holds rows up to offset 1: --frames rebuilds an empty tenant only (its offsets would name "
        "other rows); create a new tenant and import into it"
    )
    assert unchanged(directory) == before


def test_an_empty_or_missing_file_is_refused(tenant, tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(ImportRejected) as caught:
        import_frames(tenant, BLOG, str(empty), "t")
    assert caught.value.problems == [f"{empty}: holds no frame (an empty file)"]
    with pytest.raises(ConfigError) as missing:
        import_frames(tenant, BLOG, str(tmp_path / "nope.log"), "t")
    assert str(missing.value) == f"cannot read {str(tmp_path / 'nope.log')!r}: No such file or directory"
    assert os.listdir(tenant) == ["LOCK"] or os.listdir(tenant) == []


def test_a_frame_the_replica_checks_refuse_writes_nothing(tenant, frames):
    blob = frames.read_bytes()
    bad = frame(7, {"kind": "delete", "model": "User", "offset": 7, "watermark": 7, "id": 99, "record": user(99)})
    frames.write_bytes(blob[: starts(frames)[6]] + bad)
    before = unchanged(tenant)
    with pytest.raises(ImportRejected) as caught:
        import_frames(tenant, BLOG, str(frames), "t")
    (problem,) = caught.value.problems
    assert problem.startswith(f"{frames}: offset 7: ")
    assert unchanged(tenant) == before
    assert ".frames-import" not in os.listdir(tenant)


def test_watermarks_that_restart_midway_are_renumbered(tenant, frames):
    blob = frames.read_bytes()
    at = starts(frames)
    tail = b""
    for start, end in zip(at[6:], [*at[7:], len(blob)]):
        event = json.loads(blob[start + 16 : end])
        event["watermark"] -= 5
        tail += frame(int.from_bytes(blob[start : start + 8], "big"), event)
    frames.write_bytes(blob[: at[6]] + tail)
    report = import_frames(tenant, BLOG, str(frames), "t")
    assert report.head == 8
    store = open_store(tenant, readonly=True)
    try:
        assert store.watermarks()["User"] == 7
        assert store.get("User", 2, as_of=5)[0]["name"] == "user 2"
        assert store.get("User", 2, as_of=6)[0]["name"] == "second"
    finally:
        store.close()


def test_a_staging_directory_left_by_a_crash_is_replaced(tenant, frames):
    stale = Path(tenant, ".frames-import")
    stale.mkdir()
    (stale / "log").write_bytes(b"left by a crashed run")
    report = import_frames(tenant, BLOG, str(frames), "t")
    assert report.head == 8
    assert ".frames-import" not in os.listdir(tenant)


def test_the_log_is_moved_into_the_tenant_last(tenant, frames, monkeypatch):
    moved: list[str] = []
    rename = files.ops.rename

    def record(src: str, dst: str) -> None:
        if os.path.basename(os.path.dirname(src)) == ".frames-import" and os.path.dirname(dst) == tenant:
            moved.append(os.path.basename(dst))
        rename(src, dst)

    monkeypatch.setattr(files.ops, "rename", record)
    import_frames(tenant, BLOG, str(frames), "t")
    assert moved[-1] == "log"
    assert sorted(moved) == ["history", "log", "schema.json"]  # the staged store's LOCK stays behind


def test_frames_applied_before_each_wait_are_bounded(tenant, frames, monkeypatch):
    monkeypatch.setattr(frames_module, "AWAIT_BYTES", 1)
    report = import_frames(tenant, BLOG, str(frames), "t")
    assert (report.frames, report.head) == (8, 8)


def test_summary_says_frames_head_history_and_records():
    report = FramesReport(8, 8, {"User": 4, "BlogPost": 1}, None, "a new history 0123abcd (no f.history)", 2.0)
    assert report.summary() == (
        "imported 8 frames in 2.00 s (4 frames/s): head offset 8, a new history 0123abcd (no f.history); "
        "records: User 4, BlogPost 1"
    )
    assert FramesReport().summary() == "imported 0 frames in 0.00 s (-): head offset 0, ; records: none"
