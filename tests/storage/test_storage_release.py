"""The files an online compaction replaced are freed a piece at a time when nobody else
has them open, and whole when somebody does (storage/freeing.py): a reader in this
process (`frames_after`, as `/replicate` streams it) or in another (`dbsvc backup`) reads
them to their end intact. A kill -9 in the middle of the release loses nothing.

Real stores on real files; `freeing.FREE_BYTES` is made small so that a log of a few
hundred KiB is many pieces. What happened is read from `Store.compaction_releases`."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import subprocess
import sys

import pytest

from dbsvc.storage import freeing
from dbsvc.storage.freeing import Freed, Release
from support.storage import assert_acknowledged_kept, check_indexes, killed_writers_records, open_store, run, user

PIECE = 64 << 10
PROFILE = "x" * (16 << 10)  # a 16 KiB record: 64 of them are 1 MiB of log


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(freeing, "FREE_BYTES", PIECE)
    monkeypatch.setattr(freeing, "FREE_PAUSE", 0.0)


async def _fill(store, count: int) -> None:
    for i in range(1, count + 1):
        await store.insert("User", user(i, profile=PROFILE))


def _pieces(size: int) -> int:
    return -(-size // PIECE)


def test_a_replaced_log_nobody_reads_is_freed_in_pieces(tenant, small_pieces):
    s = open_store(tenant)

    async def go() -> int:
        await _fill(s, 40)
        size = os.path.getsize(os.path.join(tenant, "log"))
        await s.compact_now()
        return size

    try:
        size = run(go())
        # The first compaction replaces only the log: no snapshot or retained segment yet.
        assert list(s.compaction_releases) == [Release(size, _pieces(size), Freed.PIECES)]
        assert _pieces(size) > 5
    finally:
        s.close()


def test_a_replaced_log_a_reader_streams_is_left_whole_and_read_to_its_end(tenant, small_pieces):
    """The reader has read the log's first 1 MiB chunk when the compaction switches; it
    reads the rest through its own descriptor afterwards (replay.py rule 3). A shrink then
    would cut its frames: the release sees the second descriptor and only closes its own."""
    s = open_store(tenant)
    written = [user(i, profile=PROFILE) for i in range(1, 161)]  # 2.6 MiB of log

    async def go() -> tuple[int, list[bytes]]:
        await _fill(s, 160)
        size = os.path.getsize(os.path.join(tenant, "log"))
        frames = s.frames_after(0)
        first = next(frames)
        await s.compact_now()
        assert s.compactions == 1
        return size, [first, *frames]

    try:
        size, frames = run(go())
        assert list(s.compaction_releases) == [Release(size, 0, Freed.SHARED)]
    finally:
        s.close()
    assert [int.from_bytes(f[:8], "big") for f in frames] == list(range(1, 161))
    assert [json.loads(f[16:])["record"] for f in frames] == written


HOLDER = """
import hashlib, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
print("open", flush=True)
sys.stdin.readline()
data = b""
while chunk := os.pread(fd, 1 << 16, len(data)):
    data += chunk
print(len(data), hashlib.sha256(data).hexdigest(), flush=True)
"""


def test_a_replaced_log_another_process_holds_is_left_whole_for_it(tenant, small_pieces):
    """As `dbsvc backup` holds the log it copies (datatools/backup.py): the kernel's count
    of open files is across processes, and the release asks it."""
    s = open_store(tenant)
    log_path = os.path.join(tenant, "log")
    holder = None
    try:
        run(_fill(s, 40))
        with open(log_path, "rb") as f:
            before = f.read()
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, log_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "open\n"

        async def compact() -> None:
            await s.compact_now()

        run(compact())
        assert list(s.compaction_releases) == [Release(len(before), 0, Freed.SHARED)]
        holder.stdin.write("read\n")
        holder.stdin.flush()
        assert holder.stdout.readline().split() == [str(len(before)), hashlib.sha256(before).hexdigest()]
    finally:
        if holder is not None:
            holder.kill()
            holder.wait(10)
        s.close()


def test_a_second_compaction_frees_the_old_snapshot_and_retained_segment_too(tenant, small_pieces):
    s = open_store(tenant, retain_bytes=1 << 30)

    async def go() -> list[int]:
        await _fill(s, 40)
        await s.compact_now()
        s.compaction_releases.clear()
        for i in range(1, 41):
            await s.replace("User", i, user(i, name="again", profile=PROFILE))
        sizes = [os.path.getsize(os.path.join(tenant, name)) for name in ("log", "log.retained", "snapshot")]
        await s.compact_now()
        return sizes

    try:
        sizes = run(go())
        assert sorted(s.compaction_releases, key=lambda r: r.size) == sorted(
            (Release(size, _pieces(size), Freed.PIECES) for size in sizes), key=lambda r: r.size
        )
    finally:
        s.close()


def test_a_kill_in_the_middle_of_the_release_loses_nothing(tenant, stores):
    """DBSVC_FAULT=release:2:KILL: SIGKILL after the old log's first piece, writers running.
    The old files have no names by then, so the next open finds the new epoch whole."""
    s = stores(tenant)
    run(_fill(s, 20))
    epoch = s.epoch
    s.close()
    store = {"compact_bytes": 256 << 10}
    last = killed_writers_records(
        tenant, "release:2:KILL", store, {"profile": "p" * 2000}, {"freeing.FREE_BYTES": 4096}
    )
    s = stores(tenant)
    try:
        check_indexes(s)
        assert s.compactions == 0 and s.epoch != epoch  # the killed process's compaction had switched
        assert not [name for name in os.listdir(tenant) if name.endswith(".new")]
        records = s.tables["User"].records
        assert_acknowledged_kept(records, last)
        frames = list(s.frames_after(s.oldest_offset))
        assert [int.from_bytes(f[:8], "big") for f in frames] == list(range(s.oldest_offset + 1, s.head_offset + 1))
    finally:
        s.close()


def test_a_store_closed_during_a_release_frees_the_rest_whole(tenant, monkeypatch):
    """close() past the commit point does not wait out the pauses: the release's next
    piece sees the store closing and the close frees the rest."""
    monkeypatch.setattr(freeing, "FREE_BYTES", PIECE)
    monkeypatch.setattr(freeing, "FREE_PAUSE", 0.2)
    s = open_store(tenant)

    async def go() -> int:
        await _fill(s, 40)
        size = os.path.getsize(os.path.join(tenant, "log"))
        task = s.compact_now()
        while not s.compactions:
            await asyncio.sleep(0.01)
        s.compactor.stop()  # what close() does first
        await asyncio.wait_for(task, 10)
        return size

    try:
        size = run(go())
        [release] = s.compaction_releases
        assert release.freed is Freed.WHOLE and release.size == size and release.pieces < _pieces(size)
    finally:
        s.close()


def test_a_file_that_still_has_a_name_is_never_shrunk(tmp_path, small_pieces):
    """Rule 1: descriptors a compaction failing before its commit point hands back are of
    files that are still the store's; `free` only lets their close happen."""
    path = tmp_path / "snapshot"
    path.write_bytes(b"s" * (3 * PIECE))
    fd = os.open(path, os.O_RDWR)
    try:
        assert freeing.free(fd, lambda: False) == Release(3 * PIECE, 0, Freed.LINKED)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"s" * (3 * PIECE)


def test_an_unnamed_file_nobody_else_holds_is_shrunk_to_nothing_a_piece_at_a_time(tmp_path, small_pieces):
    path = tmp_path / "old"
    path.write_bytes(b"o" * (3 * PIECE + 1))
    fd = os.open(path, os.O_RDWR)
    try:
        os.unlink(path)
        assert freeing.free(fd, lambda: False) == Release(3 * PIECE + 1, 4, Freed.PIECES)
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)


def test_asking_whether_a_file_is_alone_leaves_no_lease_behind(tmp_path):
    """Rule 2: the lease is dropped at once; held, a reader opening the file through
    /proc/PID/fd would make the kernel signal the store (SIGIO, whose default kills)."""
    if not hasattr(fcntl, "F_GETLEASE"):
        pytest.skip("no leases here")
    path = tmp_path / "old"
    path.write_bytes(b"o")
    fd = os.open(path, os.O_RDWR)
    try:
        os.unlink(path)
        assert freeing.alone(fd) is True
        assert fcntl.fcntl(fd, fcntl.F_GETLEASE) == fcntl.F_UNLCK
    finally:
        os.close(fd)
