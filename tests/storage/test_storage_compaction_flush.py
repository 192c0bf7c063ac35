"""An online compaction's large files are fsynced on the way, a piece at a time
(`files.flush_past`): snapshot.new, log.retained.new and the frames log.new copies in a
thread step. One fsync of a whole 68 MB file held every group commit's fsync behind it for
~130 ms on ext4 (bench/README.md, wt-ctail); in pieces, the file's last fsync finds at most a
piece left to write."""

from __future__ import annotations

import asyncio
import os

from dbsvc.storage import files, online, retain, snapshot
from support.storage import HoldAfterSnapshot, open_store, run, user

FLUSH = 2048  # files.FLUSH_BYTES in these tests: every file here is several times that
NAMES = ("snapshot.new", "log.retained.new", "log.new")


class FsyncSizes(files.FileOps):
    """Notes, for each fsync of a compaction's `.new` file, the file's size then."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.sizes: dict[str, list[int]] = {name: [] for name in NAMES}

    def open(self, path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[override]
        fd = os.open(path, flags, mode, dir_fd=dir_fd)
        name = os.path.basename(path)
        if name in self.sizes:
            self.names[fd] = name
        return fd

    def close(self, fd):  # type: ignore[override]
        self.names.pop(fd, None)
        os.close(fd)

    def fsync(self, fd):  # type: ignore[override]
        if fd in self.names:
            self.sizes[self.names[fd]].append(os.fstat(fd).st_size)
        os.fsync(fd)


def test_a_compactions_large_files_are_fsynced_a_piece_at_a_time(tenant, monkeypatch):
    """FLUSH_BYTES set to 2 KiB (the copies' chunks to 1 KiB, the snapshot's blocks to 4
    rows): snapshot.new, log.retained.new and log.new (the frames written past the cut,
    copied in the thread step) are each fsynced more than once, no fsync more than a piece
    after the one before it, at most one fsync each FLUSH_BYTES (the file's own last one
    aside), and the new epoch reads back whole; the same for a second compaction's snapshot
    and retained copy (the old retained segment and the old log, two sources). Before the
    change each was fsynced once, at its end."""
    monkeypatch.setattr(files, "FLUSH_BYTES", FLUSH)
    monkeypatch.setattr(online, "COPY_CHUNK", 1024)
    monkeypatch.setattr(snapshot, "BLOCK_ROWS", 4)  # the snapshot's pieces: its blocks
    monkeypatch.setattr(retain, "CHUNK", 1024)  # the retained copy's
    hold, layer = HoldAfterSnapshot(), FsyncSizes()
    s = open_store(tenant, retain_bytes=1 << 20)
    s.compactor.faults = hold
    body = "x" * 300

    firsts: dict[str, list[int]] = {}

    async def go():
        for i in range(1, 41):
            await s.insert("User", user(i, name=f"{body} {i}"))
        task = s.compact_now()
        assert await asyncio.to_thread(hold.reached.wait, 60), "the compaction never wrote its snapshot"
        for n in range(40):
            await s.replace("User", 1 + n % 40, user(1 + n % 40, name=f"{body} past the cut {n}"))
        hold.release.set()
        await task
        firsts.update({name: list(sizes) for name, sizes in layer.sizes.items()})
        for sizes in layer.sizes.values():
            sizes.clear()
        for n in range(40):  # a second compaction: its retained copy reads two files
            await s.replace("User", 1 + n % 40, user(1 + n % 40, name=f"{body} again {n}"))
        await s.compact_now()

    with files.use(layer):
        try:
            run(go())
            assert s.compactions == 2
        finally:
            s.close()
    seconds = {name: layer.sizes[name] for name in ("snapshot.new", "log.retained.new")}
    for name, sizes in [*firsts.items(), *seconds.items()]:
        assert len(sizes) >= 2, f"{name} fsynced {sizes}"
        gaps = [b - a for a, b in zip([0, *sizes], sizes)]
        assert max(gaps) < FLUSH + 8192, f"{name}: fsyncs at sizes {sizes}"
        assert len(sizes) <= sizes[-1] // FLUSH + 1, f"{name}: fsyncs at sizes {sizes} (one each FLUSH_BYTES at most)"
    s = open_store(tenant, retain_bytes=1 << 20)
    try:
        assert sorted(s.tables["User"].records) == list(range(1, 41))
        assert s.get("User", 40)[0]["name"] == f"{body} again 39"
    finally:
        s.close()


class CountedProgress(online.Progress):
    """A compaction's progress that counts its checks: the pacer checks it at every pause."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0

    def check(self) -> None:
        self.checks += 1
        super().check()


def test_the_snapshot_step_pauses_at_every_piece_of_its_blocks(tenant, monkeypatch):
    """online.write_snapshot hands its pacer (and the flush) to the block writer: a pause
    after every PIECE_ROWS records parsed, every key column encoded and every block written,
    besides the one before each chunk of rows, not only the chunks' (the pieces are what keep
    the thread's hold on the GIL short: bench/README.md, wt-ptail)."""
    monkeypatch.setattr(snapshot, "BLOCK_ROWS", 8)
    monkeypatch.setattr(snapshot, "PIECE_ROWS", 4)
    s = open_store(tenant, sync="off")

    async def fill():
        for i in range(1, 41):
            await s.insert("User", user(i))

    run(fill())
    tables = dict(s.tables)
    cut = online.take_cut(tables, s.applied_offset, 0)
    progress = CountedProgress()
    try:
        online.write_snapshot(tenant, cut, progress, files.FaultPlan(None))
    finally:
        online.end_cut(tables)
        online.discard(tenant)
        s.close()
    blocks = 40 // 8
    keys = len(tables["User"].key_fields)
    assert keys >= 2
    assert progress.checks >= blocks * (8 // 4 + keys + 1), (progress.checks, keys)
