"""The commit queue's failure rules (storage/commit.py) where a failure meets something else:
the numbers /metrics shows after it, a cut-back that fails too, and an online compaction's
log switch queued while the failing fsync was in flight. Found by mutation testing
(docs/mutation.md): each test here is behaviour the durability tests did not pin down."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import subprocess
import threading

import pytest
from support.storage import open_store, run, user

from dbsvc.errors import Unavailable
from dbsvc.storage.commit import CommitQueue, LogWriter
from dbsvc.storage.files import FaultPlan

TINY = 32 * 1024
WAIT = 60.0            # generous: a loaded two-core machine


class FsyncGate(FaultPlan):
    """A fault plan whose next commit-thread fsync blocks until released, then fails with
    `error` (or goes ahead when `error` is None): it holds an fsync in flight while the
    test queues more work behind it."""

    def __init__(self, error: int | None) -> None:
        super().__init__(None)
        self.rules = {"fsync": (1, 1, "GATE")}      # non-empty: LogWriter consults the plan
        self.error = error
        self.armed = False
        self.in_flight = threading.Event()
        self.release = threading.Event()

    def check(self, op: str) -> None:
        if op != "fsync" or not self.armed:
            return
        self.armed = False
        self.in_flight.set()
        assert self.release.wait(WAIT), "the test never released the held fsync"
        if self.error is not None:
            raise OSError(self.error, os.strerror(self.error))


async def _until(predicate, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


def _users(tenant: str) -> list[int]:
    s = open_store(tenant)
    try:
        return sorted(s._tables["User"].records)
    finally:
        s.close()


async def _start_compaction(s) -> None:
    """20 users, then updates until the store starts an online compaction (the log passes
    `compact_bytes`); the compaction task then runs on the caller's loop."""
    for i in range(1, 21):
        await s.insert("User", user(i))
    n = 0
    while s._compaction is None:
        n += 1
        await s.replace("User", 1 + n % 20, user(1 + n % 20, name=f"n{n}"))


def test_metrics_after_a_failed_fsync_count_the_lost_writes_and_the_real_log_size(tenant, monkeypatch):
    monkeypatch.setenv("DBSVC_FAULT", "fsync:2:EIO")
    s = open_store(tenant)
    run(s.insert("User", user(1)))
    acked_size = os.path.getsize(os.path.join(tenant, "log"))

    async def burst():
        return await asyncio.gather(*(s.insert("User", user(i)) for i in range(2, 7)), return_exceptions=True)
    results = run(burst())
    assert all(isinstance(r, Unavailable) for r in results)
    stats = s.stats()
    assert stats["failed_writes"] == 5
    assert stats["read_only"] is True
    # The failed frames were cut off again: /metrics' log size is the file's.
    assert stats["log_bytes"] == acked_size == os.path.getsize(os.path.join(tenant, "log"))
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    assert _users(tenant) == [1]


@pytest.fixture
def append_only(tenant):
    """Make the log append-only (chattr +a): writes go on, the cut-back after a failure
    fails with EPERM, as a cut-back can on a sick disk."""
    path = os.path.join(tenant, "log")
    flagged: list[str] = []

    def flag() -> None:
        res = subprocess.run(["chattr", "+a", path], capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"cannot make the log append-only here: {res.stderr.strip()}")
        flagged.append(path)

    yield flag
    for p in flagged:
        subprocess.run(["chattr", "-a", p], capture_output=True)


def test_a_failed_cut_back_is_logged_and_the_unacknowledged_whole_frames_survive_a_restart(
        tenant, monkeypatch, caplog, append_only):
    monkeypatch.setenv("DBSVC_FAULT", "fsync:2:EIO")
    s = open_store(tenant)
    run(s.insert("User", user(1)))
    path = os.path.join(tenant, "log")
    acked_size = os.path.getsize(path)
    append_only()

    async def burst():
        return await asyncio.gather(*(s.insert("User", user(i)) for i in range(2, 5)), return_exceptions=True)
    with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        results = run(burst())
    assert all(isinstance(r, Unavailable) for r in results)
    assert s.stats()["read_only"] is True
    # The operator is told which file kept which extra bytes, and why.
    expected = (f"could not truncate {path} to {acked_size} bytes after an I/O error: "
                f"[Errno {errno.EPERM}] {os.strerror(errno.EPERM)}")
    assert expected in [r.getMessage() for r in caplog.records]
    assert os.path.getsize(path) > acked_size
    s.close()
    subprocess.run(["chattr", "-a", path], check=True)
    monkeypatch.delenv("DBSVC_FAULT")
    # commit.py: a tail left by a failed cut-back holds only valid, unconfirmed writes,
    # and whole frames are kept.
    assert _users(tenant) == [1, 2, 3, 4]


def test_a_log_switch_asked_for_after_a_failure_is_refused_with_the_cause(tmp_path):
    path = str(tmp_path / "log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    writer = LogWriter(path, fd, 0, FaultPlan("fsync:1:EIO"))
    queue = CommitQueue(writer, sync=True, publish=lambda event, frame: None, rollback=lambda undo: None)
    switched: list[bool] = []

    async def go():
        with pytest.raises(Unavailable):
            await queue.submit(b"frame one", "event", lambda: "undo")
        with pytest.raises(Unavailable) as refused:
            await queue.run_between_fsyncs(lambda: switched.append(True))
        return str(refused.value)
    try:
        message = run(go())
    finally:
        queue.shutdown()
        os.close(fd)
    assert switched == []
    assert "read-only" in message
    assert "Input/output error (injected by DBSVC_FAULT fsync:1)" in message
    assert os.path.getsize(path) == 0


def test_an_fsync_failing_while_a_compaction_waits_to_switch_fails_both_and_keeps_the_old_log(tenant, caplog):
    s = open_store(tenant, compact_bytes=TINY)
    gate = FsyncGate(errno.EIO)
    s._commit.writer.faults = gate
    epoch = s.epoch
    acked: dict[int, dict] = {}

    async def go():
        await _start_compaction(s)
        acked.update({i: s.get("User", i)[0] for i in range(1, 21)})
        gate.armed = True
        write = asyncio.ensure_future(s.insert("User", user(100)))
        await _until(gate.in_flight.is_set, "the fsync to be in flight")
        await _until(lambda: s._commit._switch is not None or s._compaction is None, "the log switch")
        assert s._commit._switch is not None, "the compaction ended before it asked to switch"
        gate.release.set()
        with pytest.raises(Unavailable, match="write not stored"):
            await write
        await _until(lambda: s._compaction is None, "the compaction to give up")

    with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        run(go())
    assert s.epoch == epoch and s.compactions == 0
    assert any("online compaction failed: write not stored" in r.getMessage() for r in caplog.records)
    assert s.stats()["read_only"] is True
    s.close()
    # Nothing of the abandoned compaction is left, and the old log holds what was acknowledged.
    assert sorted(os.listdir(tenant)) == ["LOCK", "log", "schema.json"]
    reopened = open_store(tenant)
    try:
        assert reopened.epoch == epoch
        assert {i: reopened.get("User", i)[0] for i in range(1, 21)} == acked
        assert reopened.get("User", 100)[0] is None
    finally:
        reopened.close()


def test_a_write_queued_across_a_log_switch_is_published_as_the_new_log_holds_it(tenant):
    s = open_store(tenant, compact_bytes=TINY, replication=True)
    published: dict[int, tuple[int, bytes]] = {}
    s.subscribe(lambda event, frame: published.__setitem__(event.offset, (event.watermark, frame)))
    gate = FsyncGate(None)
    s._commit.writer.faults = gate
    epoch = s.epoch

    async def go():
        await _start_compaction(s)
        gate.armed = True
        first = asyncio.ensure_future(s.insert("User", user(100)))
        await _until(gate.in_flight.is_set, "the fsync to be in flight")
        second = asyncio.ensure_future(s.insert("User", user(101)))     # queued behind it
        await asyncio.sleep(0)
        await _until(lambda: s._commit._switch is not None or s._compaction is None, "the log switch")
        assert s._commit._switch is not None, "the compaction ended before it asked to switch"
        gate.release.set()
        await first
        await second
        await _until(lambda: s._compaction is None, "the compaction to finish")
        return second.result()

    record = run(go())
    assert s.epoch != epoch
    offset = s.head_offset
    assert s.get("User", 101)[0] == record
    frames = list(s.frames_after(offset - 1))
    assert len(frames) == 1
    watermark, frame = published[offset]
    # The new epoch renumbered the queued write: subscribers (the /replicate stream) get
    # the frame the new log holds, with the watermark the store now reports.
    assert frame == frames[0]
    assert watermark == s.watermarks()["User"]
    s.close()


def test_a_failure_right_after_a_compaction_cuts_the_new_log_back_to_its_own_end(tenant):
    # After a log switch with no write queued, the acknowledged end must be the new log's:
    # the cut-back after a failure (and the room probe) truncate to it, and the old log's
    # end would pad the new log with zeros that later appends land behind.
    s = open_store(tenant, compact_bytes=TINY)
    epoch = s.epoch

    async def go():
        await _start_compaction(s)
        await _until(lambda: s._compaction is None, "the compaction to finish")
    run(go())
    assert s.epoch != epoch
    path = os.path.join(tenant, "log")
    size = os.path.getsize(path)
    s._commit.writer.faults = FaultPlan("fsync:1:EIO")
    with pytest.raises(Unavailable):
        run(s.insert("User", user(100)))
    assert os.path.getsize(path) == size == s.stats()["log_bytes"]
    s.close()
    reopened = open_store(tenant)
    try:
        assert reopened.stats()["torn_tail_bytes"] == 0
        assert reopened.get("User", 100)[0] is None and reopened.get("User", 20)[0] is not None
    finally:
        reopened.close()
