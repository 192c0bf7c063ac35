"""Online compaction's fault steps (online.py's docstring, the same numbers as offline
compaction's `compact.install`), in process: which files stand at each of the nine
`faults.check("compact")` calls, and what a fault after step 1 or after step 9 leaves.

The child-process tests (test_storage_online.py, killed after each step) show that a crash
anywhere recovers; these show, where mutation testing can see it, that each hook sits after
the step its number names (docs/mutation.md, session 7: `write_snapshot`'s hook after step 1
was reached only by a child process).

A closed store is dropped (`del`) before the next open, which freezes what is alive
(recovery.py `gc.freeze`). A store that ran an online compaction was frozen by it
(compactor.py `freeze_live`) and stays in the worker: only `gc.unfreeze` lets it go."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import stat

import pytest

from dbsvc.errors import CorruptLog, Unavailable
from dbsvc.storage import files, loghealth, online
from dbsvc.storage.files import FaultPlan
from dbsvc.storage.logfile import FRAME_HEADER_SIZE
from support.storage import HoldAfterSnapshot, open_store, run, user

RETAIN = 1 << 20  # every frame before the cut is retained: step 2 writes log.retained.new


class StepListing(FaultPlan):
    """A fault plan that fails nothing: at each compaction step it notes the tenant's files."""

    def __init__(self, directory: str) -> None:
        super().__init__(None)
        self.directory = directory
        self.listings: list[list[str]] = []

    def check(self, op: str) -> None:
        if op == "compact":
            self.listings.append(sorted(os.listdir(self.directory)))


def _fill_and_compact(s) -> None:
    async def go():
        for i in range(1, 21):
            await s.insert("User", user(i))
        await s.compact_now()

    run(go())


def test_each_fault_step_of_an_online_compaction_comes_after_the_file_step_it_names(tenant):
    s = open_store(tenant, retain_bytes=RETAIN)
    steps = StepListing(tenant)
    s.compactor.faults = steps  # the plan the compaction's steps consult (DBSVC_FAULT's, else none)
    try:
        _fill_and_compact(s)
        assert s.compactions == 1
    finally:
        s.close()
    # The files standing at each hook: after step 1 snapshot.new (written, fsynced), after 2
    # log.retained.new, after 3 log.new, 4 the directory fsynced, 5 the commit point
    # (snapshot.new renamed), 6 fsynced, 7 log.retained, 8 log, 9 fsynced.
    both = ["log.new", "log.retained.new"]
    assert steps.listings == [
        ["LOCK", "history", "log", "schema.json", "snapshot.new"],
        ["LOCK", "history", "log", "log.retained.new", "schema.json", "snapshot.new"],
        ["LOCK", "history", "log", *both, "schema.json", "snapshot.new"],
        ["LOCK", "history", "log", *both, "schema.json", "snapshot.new"],
        ["LOCK", "history", "log", *both, "schema.json", "snapshot"],
        ["LOCK", "history", "log", *both, "schema.json", "snapshot"],
        ["LOCK", "history", "log", "log.new", "log.retained", "schema.json", "snapshot"],
        ["LOCK", "history", "log", "log.retained", "schema.json", "snapshot"],
        ["LOCK", "history", "log", "log.retained", "schema.json", "snapshot"],
    ]


def test_a_fault_after_step_1_leaves_no_retained_segment_and_the_store_serving(tenant, monkeypatch, caplog):
    """DBSVC_FAULT=compact:1:EIO fails the compaction right after snapshot.new: before the
    commit point, so the `.new` files go, the old pair stands and writes go on."""
    monkeypatch.setenv("DBSVC_FAULT", "compact:1:EIO")
    s = open_store(tenant, retain_bytes=RETAIN)
    seen = StepListing(tenant)  # the env's plan still decides; this one only lists the files
    plan = s.compactor.faults

    class Both(FaultPlan):
        def check(self, op: str) -> None:
            seen.check(op)
            plan.check(op)

    s.compactor.faults = Both(None)
    try:
        with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
            _fill_and_compact(s)
        assert s.compactions == 0
        assert [r.getMessage() for r in caplog.records] == [
            f"{tenant}: online compaction failed: [Errno 5] Input/output error (injected by DBSVC_FAULT compact:1)"
        ]
        assert seen.listings == [["LOCK", "history", "log", "schema.json", "snapshot.new"]]
        assert sorted(os.listdir(tenant)) == ["LOCK", "history", "log", "schema.json"]
        assert run(s.insert("User", user(None, email="after@x")))["id"] == 21
    finally:
        s.close()
    del s
    s = open_store(tenant)
    try:
        assert sorted(s.tables["User"].records) == list(range(1, 22))
    finally:
        s.close()


def _compacts_then_refuses_writes(tenant, caplog, faults: FaultPlan | None, cause: str) -> None:
    """A store filled and compacted (under `faults` when given, else DBSVC_FAULT's) whose
    compaction fails past its commit point: the error line names `cause`, and writes are
    refused until a restart."""
    s = open_store(tenant, retain_bytes=RETAIN)
    if faults is not None:
        s.compactor.faults = faults
    try:
        with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
            _fill_and_compact(s)
        assert [r.getMessage() for r in caplog.records][0] == (
            f"{tenant}: compaction failed after its commit point: {cause}; "
            "the store is now read-only (the next open finishes the switch)"
        )
        with pytest.raises(Unavailable):
            run(s.insert("User", user(None, email="refused@x")))
        assert s.stats()["read_only"] is True
    finally:
        s.close()


def _reopens_in_the_new_epoch(tenant) -> None:
    """The next open finds the compaction's new pair in place, every record and every
    retained frame of the twenty writes."""
    s = open_store(tenant, retain_bytes=RETAIN)
    try:
        assert sorted(os.listdir(tenant)) == ["LOCK", "history", "log", "log.retained", "schema.json", "snapshot"]
        assert sorted(s.tables["User"].records) == list(range(1, 21))
        assert s.oldest_offset == 0 and [int.from_bytes(f[:8], "big") for f in s.frames_after(0)] == list(range(1, 21))
    finally:
        s.close()


def test_a_fault_after_step_9_leaves_the_store_read_only_and_the_next_open_has_the_new_epoch(
    tenant, monkeypatch, caplog
):
    """The ninth hook is the last: a compaction makes exactly nine steps, and an error after
    the commit point stops writes until a restart, which finds the new pair in place."""
    monkeypatch.setenv("DBSVC_FAULT", "compact:9:EIO")
    _compacts_then_refuses_writes(
        tenant, caplog, None, "[Errno 5] Input/output error (injected by DBSVC_FAULT compact:9)"
    )
    monkeypatch.delenv("DBSVC_FAULT")
    _reopens_in_the_new_epoch(tenant)


class FailsAfterStep9(FaultPlan):
    """Raises an error that is no OSError at the ninth compaction step, past the commit point
    (a bug's exception, say, rather than the disk's)."""

    def __init__(self) -> None:
        super().__init__(None)
        self.steps = 0

    def check(self, op: str) -> None:
        if op == "compact":
            self.steps += 1
            if self.steps == 9:
                raise RuntimeError("not the disk")


def test_any_error_past_the_commit_point_leaves_the_store_read_only_and_loses_no_write(tenant, caplog):
    """Past the commit point the new pair is the store's: a write taken on the old log's
    descriptor after it would be lost at the next open, so whatever the error, writes stop."""
    _compacts_then_refuses_writes(tenant, caplog, FailsAfterStep9(), "not the disk")
    s = open_store(tenant, retain_bytes=RETAIN)
    try:
        assert sorted(s.tables["User"].records) == list(range(1, 21))
        run(s.insert("User", user(None, email="after@x")))
        assert sorted(s.tables["User"].records) == list(range(1, 22))
    finally:
        s.close()
    del s
    s = open_store(tenant, retain_bytes=RETAIN)
    try:
        assert sorted(s.tables["User"].records) == list(range(1, 22))
    finally:
        s.close()


def test_a_fault_in_the_switch_in_memory_leaves_the_store_read_only_and_closes_none_but_its_own(
    tenant, monkeypatch, caplog
):
    """`epoch:1`: the switch's last part (compactor `_enter_epoch`) fails past the commit
    point, after the new log's descriptor became the writer's. The store turns read-only,
    the failure closes no descriptor it does not own (the handed-over log's slot is not one:
    mutant 71 of `_compact_steps` closed fd 1 there), and the next open has the new epoch."""
    monkeypatch.setenv("DBSVC_FAULT", "epoch:1:EIO")
    _compacts_then_refuses_writes(
        tenant, caplog, None, "[Errno 5] Input/output error (injected by DBSVC_FAULT epoch:1)"
    )
    os.fstat(1)  # still open
    monkeypatch.delenv("DBSVC_FAULT")
    _reopens_in_the_new_epoch(tenant)


class NewLogWrites(files.FileOps):
    """Notes the size of every write into log.new."""

    def __init__(self) -> None:
        self.fds: set[int] = set()
        self.sizes: list[int] = []

    def open(self, path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[override]
        fd = os.open(path, flags, mode, dir_fd=dir_fd)
        if path.endswith("log.new"):
            self.fds.add(fd)
        return fd

    def write(self, fd, data):  # type: ignore[override]
        n = os.write(fd, data)
        if fd in self.fds:
            self.sizes.append(n)
        return n


def _frame_ends(data: bytes, start: int) -> list[int]:
    """The byte position after each frame of a log image from `start` (16-byte heads: offset
    u64, crc u32, length u32)."""
    ends, at = [], start
    while at < len(data):
        at += 16 + int.from_bytes(data[at + 12 : at + 16], "big")
        ends.append(at)
    return ends


def test_frames_past_the_cut_are_copied_into_the_new_log_a_chunk_at_a_time(tenant, monkeypatch):
    """online.COPY_CHUNK (4 MiB) set to 800 bytes: the frames written while the snapshot
    thread ran reach log.new in writes of whole frames, each at least 800 bytes but the
    last, and the store goes on writing and reading after them (`_copy_frames`' write of a
    full chunk, which no test reached with the real 4 MiB)."""
    monkeypatch.setattr(online, "COPY_CHUNK", 800)
    hold, layer = HoldAfterSnapshot(), NewLogWrites()
    s = open_store(tenant, retain_bytes=RETAIN)
    s.compactor.faults = hold

    async def go():
        for i in range(1, 21):
            await s.insert("User", user(i))
        task = s.compact_now()
        assert await asyncio.to_thread(hold.reached.wait, 60), "the compaction never wrote its snapshot"
        for n in range(28):
            await s.replace("User", 1 + n % 20, user(1 + n % 20, name=f"past the cut {n}"))
        await s.delete("User", 20)
        hold.release.set()
        await task
        await s.insert("User", user(None, email="after@x"))

    try:
        with files.use(layer):
            run(go())
        assert s.compactions == 1
        live = dict(s.tables["User"].records)
        # the rows after the cut (offset 20), then the insert after the switch, served in order
        assert [int.from_bytes(f[:8], "big") for f in s.frames_after(20)] == list(range(21, 51))
        assert s.stats()["log_bytes"] == os.path.getsize(os.path.join(tenant, "log"))
    finally:
        s.close()
    del s
    data = open(os.path.join(tenant, "log"), "rb").read()
    header, copied = layer.sizes[0], layer.sizes[1:]  # the new log's header is its first write
    ends = _frame_ends(data, header)
    assert len(ends) == 30 and ends[-1] == len(data) and sum(copied) == len(data) - header
    sizes = [b - a for a, b in zip([header, *ends], ends)]
    assert all(300 < size < 400 for size in sizes[:28]) and sizes[28] < 300  # 28 replaces, a delete
    # Whole frames per write: the 28 replaces past the cut three at a time (the third takes
    # a write past 800 bytes), the last replace and the delete together at the copy's end,
    # then the insert after the switch, written by the store into the same file.
    per_write, at = [], header
    for size in copied:
        first = ends.index(at) + 1 if at != header else 0
        at += size
        per_write.append(ends.index(at) + 1 - first)
    assert per_write == [3] * 9 + [2, 1]
    s = open_store(tenant)
    try:
        assert dict(s.tables["User"].records) == live and 20 not in live
        assert live[21]["email"] == "after@x"
    finally:
        s.close()


def test_a_log_cut_short_past_the_cut_fails_the_compaction_naming_both_byte_positions(tenant, caplog):
    """The copy into log.new finds the old log shorter than the frames it was told to copy
    (its last frame cut short under the running store): the compaction fails, says where
    the whole frames end and where they should have, and the store serves on from memory.
    (The copy checks every frame as recovery does: a checked FrameWalk.)"""
    hold = HoldAfterSnapshot()
    s = open_store(tenant, retain_bytes=RETAIN)
    s.compactor.faults = hold
    path = os.path.join(tenant, "log")

    async def go():
        for i in range(1, 21):
            await s.insert("User", user(i))
        task = s.compact_now()
        assert await asyncio.to_thread(hold.reached.wait, 60), "the compaction never wrote its snapshot"
        for i in range(1, 4):
            await s.replace("User", i, user(i, name=f"past the cut {i}"))
        data = open(path, "rb").read()
        os.truncate(path, len(data) - 2)  # the last frame loses its last two bytes
        hold.release.set()
        with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
            await task
        return data

    try:
        data = run(go())
        assert s.compactions == 0
        assert s.get("User", 3)[0]["name"] == "past the cut 3"
    finally:
        s.close()
    ends = _frame_ends(data, 40)  # a log's header is 40 bytes (logfile.py)
    assert len(ends) == 23 and ends[-1] == len(data)
    payload = len(data) - ends[-2] - FRAME_HEADER_SIZE
    assert [r.getMessage() for r in caplog.records] == [
        f"{tenant}: online compaction failed: {path}: corrupt at byte {ends[-2]}: the frame of offset 23: "
        f"truncated payload ({payload - 2} of {payload} bytes), where frames up to byte {len(data)} were acknowledged"
    ]


class RefuseUnlink(files.FileOps):
    """Unlinking log.retained.new fails with EIO (a disk going bad)."""

    def unlink(self, path, *, dir_fd=None):  # type: ignore[override]
        if path.endswith("log.retained.new"):
            raise OSError(errno.EIO, "Input/output error")
        return os.unlink(path, dir_fd=dir_fd)


def test_a_new_file_that_cannot_be_removed_is_said_and_left_with_the_snapshot_for_the_next_open(
    tenant, monkeypatch, caplog
):
    """A compaction failing after step 2 removes its `.new` files, snapshot.new last; when
    one cannot be removed it stops there (a log.new or log.retained.new without
    snapshot.new would read as past the commit point), says so, and the next open
    discards them."""
    monkeypatch.setenv("DBSVC_FAULT", "compact:2:EIO")
    s = open_store(tenant, retain_bytes=RETAIN)
    try:
        with files.use(RefuseUnlink()), caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
            _fill_and_compact(s)
        assert s.compactions == 0
        assert [r.getMessage() for r in caplog.records] == [
            f"{tenant}: could not discard an unfinished compaction (the next open will): [Errno 5] Input/output error",
            f"{tenant}: online compaction failed: [Errno 5] Input/output error (injected by DBSVC_FAULT compact:2)",
        ]
        left = ["LOCK", "history", "log", "log.retained.new", "schema.json", "snapshot.new"]
        assert sorted(os.listdir(tenant)) == left
    finally:
        s.close()
    del s
    monkeypatch.delenv("DBSVC_FAULT")
    s = open_store(tenant)
    try:
        assert sorted(os.listdir(tenant)) == ["LOCK", "history", "log", "schema.json"]
        assert sorted(s.tables["User"].records) == list(range(1, 21))
    finally:
        s.close()


class OpenAtLastStep(FaultPlan):
    """At the ninth step (the renames done, the directory fsynced) notes which of the
    process's descriptors name a file of `directory` that no longer has a name (Linux)."""

    def __init__(self, directory: str) -> None:
        super().__init__(None)
        self.directory = directory
        self.calls = 0
        self.deleted: list[str] = []

    def check(self, op: str) -> None:
        if op != "compact":
            return
        self.calls += 1
        if self.calls % 9:
            return
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(self.directory + "/") and target.endswith(" (deleted)"):
                self.deleted.append(target[len(self.directory) + 1 : -len(" (deleted)")])


def test_the_switch_keeps_the_replaced_files_open_until_a_thread_closes_them(tenant):
    """hold_old_files: the snapshot and retained segment the renames replace are held open
    across the switch, so the renames only drop names and their blocks are freed by
    release_files off the loop (as is the old log, through its writer's descriptor)."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")
    s = open_store(tenant, retain_bytes=RETAIN)
    seen = OpenAtLastStep(tenant)
    s.compactor.faults = seen

    async def go():
        for i in range(1, 21):
            await s.insert("User", user(i))
        await s.compact_now()  # the first leaves a snapshot and a retained segment
        assert seen.deleted == ["log"]
        seen.deleted.clear()
        await s.replace("User", 1, user(1, name="again"))
        await s.compact_now()

    try:
        run(go())
        assert s.compactions == 2
    finally:
        s.close()
    assert sorted(seen.deleted) == ["log", "log.retained", "snapshot"]


def test_the_files_of_a_new_epoch_are_created_readable_by_all_and_writable_by_the_owner(tenant):
    """log, snapshot and log.retained after an online compaction: mode 0644 under a umask of
    0022, as the tenant's first log (an operator's backup job reads them as another user)."""
    old = os.umask(0o022)
    try:
        s = open_store(tenant, retain_bytes=RETAIN)
        try:
            _fill_and_compact(s)
            assert s.compactions == 1
        finally:
            s.close()
    finally:
        os.umask(old)
    names = ("log", "snapshot", "log.retained")
    modes = {name: oct(stat.S_IMODE(os.stat(os.path.join(tenant, name)).st_mode)) for name in names}
    assert modes == {"log": "0o644", "snapshot": "0o644", "log.retained": "0o644"}


def test_the_new_log_appends_at_its_end_after_a_probe_for_room(tenant, monkeypatch):
    """The store writes the new epoch's log through the descriptor start_log opened: a write
    refused for room, then the probe (zeros appended and cut off again) and the next write
    land at the file's end, with no hole (log.new is opened O_APPEND, as the first log)."""
    monkeypatch.setattr(loghealth, "RETRY_INTERVAL", 0.0)
    s = open_store(tenant)
    try:
        _fill_and_compact(s)
        assert s.compactions == 1
        s.commit_queue.writer.faults = FaultPlan("write:1:ENOSPC")
        with pytest.raises(Unavailable):
            run(s.insert("User", user(None, email="refused@x")))
        assert s.health(retry=True).state.value == "ok"  # the probe found room
        assert run(s.insert("User", user(None, email="taken@x")))["id"] == 21
        assert s.stats()["log_bytes"] == os.path.getsize(os.path.join(tenant, "log"))
    finally:
        s.close()
    del s
    s = open_store(tenant)
    try:
        assert s.stats()["torn_tail_bytes"] == 0
        assert sorted(s.tables["User"].records) == list(range(1, 22))
    finally:
        s.close()


def test_a_frame_damaged_after_the_cut_fails_the_copy_instead_of_being_checksummed_again(tenant):
    """Step 3 copies the frames written after the cut into log.new, renumbering the
    watermark of a model with deletes before the cut (a fresh CRC). A byte flipped on disk
    in such a frame since it was written must stop the compaction: a fresh CRC over the
    damaged payload would make the damage a good frame of the new log."""
    s = open_store(tenant)
    log_path = os.path.join(tenant, "log")
    try:

        async def before_cut():
            for i in range(1, 7):
                await s.insert("User", user(i))
            await s.delete("User", 1)
            await s.delete("User", 2)  # offsets 1-8: User's watermark 8, 4 live: delta -4

        run(before_cut())
        tables = dict(s.tables)
        cut = online.take_cut(tables, s.head_offset, os.path.getsize(log_path))
        online.end_cut(tables)
        assert cut.head == 8 and cut.deltas() == {"User": -4, "BlogPost": 0, "Comment": 0}

        async def after_cut():
            for i in range(7, 10):
                await s.insert("User", user(i, name=f"after {i}"))  # offsets 9-11

        run(after_cut())
        with open(log_path, "rb") as f:
            data = bytearray(f.read())
        at = data.index(b'"name":"after 8"') + len(b'"name":"af')
        data[at] ^= 0x01  # "after 8" -> "agter 8", the CRC left as written
        with open(log_path, "r+b") as f:
            f.write(data)
        with pytest.raises(CorruptLog) as info:
            online.start_log(tenant, log_path, cut, len(data), 1000, online.Progress())
        assert info.value.path == log_path and "offset 10" in str(info.value), info.value
    finally:
        s.close()
