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

from dbsvc.errors import Unavailable
from dbsvc.storage import Store, files, loghealth
from dbsvc.storage.commit import CommitQueue
from dbsvc.storage.files import FaultPlan, FileOps
from dbsvc.storage.logwriter import LogWriter
from support.storage import open_store, run, user

TINY = 32 * 1024
WAIT = 60.0  # generous: a loaded two-core machine


class FsyncGate(FaultPlan):
    """A fault plan whose next commit-thread fsync blocks until released, then fails with
    `error` (or goes ahead when `error` is None): it holds an fsync in flight while the
    test queues more work behind it."""

    def __init__(self, error: int | None) -> None:
        super().__init__(None)
        self.rules = {"fsync": (1, 1, "GATE")}  # non-empty: LogWriter consults the plan
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


class HoldCompaction(FaultPlan):
    """A fault plan for the store's compaction steps: its first step after the snapshot
    (`faults.check("compact")`) waits for `until`, so a compaction cannot run ahead of the
    write a test is holding (a snapshot of 20 records is written in well under a
    millisecond, before the write it should wait for has begun)."""

    def __init__(self, until: threading.Event) -> None:
        super().__init__(None)
        self.until = until

    def check(self, op: str) -> None:
        if op == "compact":
            assert self.until.wait(WAIT), "the held fsync never began"


async def _until(predicate, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


def _users(tenant: str) -> list[int]:
    s = open_store(tenant)
    try:
        return sorted(s.tables["User"].records)
    finally:
        s.close()


async def _start_compaction(s) -> None:
    """20 users, then updates until the store starts an online compaction (the log passes
    `compact_bytes`); the compaction task then runs on the caller's loop."""
    for i in range(1, 21):
        await s.insert("User", user(i))
    n = 0
    while s.compaction is None:
        n += 1
        await s.replace("User", 1 + n % 20, user(1 + n % 20, name=f"n{n}"))


def test_metrics_after_a_failed_fsync_count_the_lost_writes_and_the_real_log_size(tenant, monkeypatch, stores):
    monkeypatch.setenv("DBSVC_FAULT", "fsync:2:EIO")
    s = stores(tenant)
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
    tenant, monkeypatch, caplog, append_only, stores
):
    monkeypatch.setenv("DBSVC_FAULT", "fsync:2:EIO")
    s = stores(tenant)
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
    expected = (
        f"could not truncate {path} to {acked_size} bytes after an I/O error: "
        f"[Errno {errno.EPERM}] {os.strerror(errno.EPERM)}"
    )
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


def test_an_fsync_failing_while_a_compaction_waits_to_switch_fails_both_and_keeps_the_old_log(tenant, caplog, stores):
    s = stores(tenant, compact_bytes=TINY)
    gate = FsyncGate(errno.EIO)
    s.commit_queue.writer.faults = gate
    s.compactor.faults = HoldCompaction(gate.in_flight)  # taken by the compaction when it starts
    epoch = s.epoch
    acked: dict[int, dict] = {}

    async def go():
        await _start_compaction(s)
        acked.update({i: s.get("User", i)[0] for i in range(1, 21)})
        gate.armed = True
        write = asyncio.ensure_future(s.insert("User", user(100)))
        await _until(gate.in_flight.is_set, "the fsync to be in flight")
        await _until(lambda: s.commit_queue.switch_requested or s.compaction is None, "the log switch")
        assert s.commit_queue.switch_requested, "the compaction ended before it asked to switch"
        gate.release.set()
        with pytest.raises(Unavailable, match="write not stored"):
            await write
        await _until(lambda: s.compaction is None, "the compaction to give up")

    with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        run(go())
    assert s.epoch == epoch and s.compactions == 0
    assert any("online compaction failed: write not stored" in r.getMessage() for r in caplog.records)
    assert s.stats()["read_only"] is True
    s.close()
    # Nothing of the abandoned compaction is left, and the old log holds what was acknowledged.
    assert sorted(os.listdir(tenant)) == ["LOCK", "history", "log", "schema.json"]
    reopened = stores(tenant)
    try:
        assert reopened.epoch == epoch
        assert {i: reopened.get("User", i)[0] for i in range(1, 21)} == acked
        assert reopened.get("User", 100)[0] is None
    finally:
        reopened.close()


def test_a_write_queued_across_a_log_switch_is_published_as_the_new_log_holds_it(tenant, stores):
    s = stores(tenant, compact_bytes=TINY, replication=True)
    published: dict[int, tuple[int, bytes]] = {}
    s.subscribe(lambda event, frame: published.__setitem__(event.offset, (event.watermark, frame)))
    gate = FsyncGate(None)
    s.commit_queue.writer.faults = gate
    epoch = s.epoch

    async def go():
        await _start_compaction(s)
        gate.armed = True
        first = asyncio.ensure_future(s.insert("User", user(100)))
        await _until(gate.in_flight.is_set, "the fsync to be in flight")
        second = asyncio.ensure_future(s.insert("User", user(101)))  # queued behind it
        await asyncio.sleep(0)
        await _until(lambda: s.commit_queue.switch_requested or s.compaction is None, "the log switch")
        assert s.commit_queue.switch_requested, "the compaction ended before it asked to switch"
        gate.release.set()
        await first
        await second
        await _until(lambda: s.compaction is None, "the compaction to finish")
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
    # The queued write is acknowledged at the new log's end: a later failure cuts back to
    # it, not to where that write ended in the old log.
    reopened = _fail_a_write_and_reopen(s, tenant, 102)
    try:
        assert reopened.get("User", 101)[0] == record
    finally:
        reopened.close()


def test_a_failure_right_after_a_compaction_cuts_the_new_log_back_to_its_own_end(tenant, stores):
    # After a log switch with no write queued, the acknowledged end must be the new log's:
    # the cut-back after a failure (and the room probe) truncate to it, and the old log's
    # end would pad the new log with zeros that later appends land behind.
    s = stores(tenant, compact_bytes=TINY)
    epoch = s.epoch

    async def go():
        await _start_compaction(s)
        await _until(lambda: s.compaction is None, "the compaction to finish")

    run(go())
    assert s.epoch != epoch
    reopened = _fail_a_write_and_reopen(s, tenant, 100)
    try:
        assert reopened.get("User", 20)[0] is not None
    finally:
        reopened.close()


def _fail_a_write_and_reopen(s: Store, tenant: str, id_: int) -> Store:
    """Insert user `id_` with its fsync failing: refused, the log cut back to exactly its
    size before (no zero padding, no torn tail on reopen) and the user absent; `s` is
    closed and the tenant reopened for the caller's checks."""
    path = os.path.join(tenant, "log")
    size = os.path.getsize(path)
    s.commit_queue.writer.faults = FaultPlan("fsync:1:EIO")
    with pytest.raises(Unavailable):
        run(s.insert("User", user(id_)))
    assert os.path.getsize(path) == size == s.stats()["log_bytes"]
    s.close()
    reopened = open_store(tenant)
    assert reopened.stats()["torn_tail_bytes"] == 0 and reopened.get("User", id_)[0] is None
    return reopened


def _queue_on(path: str, faults: FaultPlan) -> tuple[CommitQueue, int]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    return CommitQueue(
        LogWriter(path, fd, 0, faults), sync=True, publish=lambda event, frame: None, rollback=lambda undo: None
    ), fd


def test_a_log_switch_that_fails_before_its_commit_point_fails_alone(tmp_path):
    # A switch that raises without `fail_stop` (compact.py: before its commit point) fails
    # the compaction that asked for it; the log stays usable, and a write queued with the
    # switch, in the same turn of the loop, is still made durable and acknowledged.
    path = str(tmp_path / "log")
    queue, fd = _queue_on(path, FaultPlan(None))

    def switch() -> None:
        raise OSError(errno.EXDEV, "injected: the new log could not be renamed into place")

    async def go():
        first = queue.submit(b"frame one;", "event 1", lambda: "undo 1")
        switched = queue.run_between_fsyncs(switch)
        with pytest.raises(OSError, match="could not be renamed"):
            await asyncio.wait_for(switched, WAIT)
        await asyncio.wait_for(first, WAIT)
        await asyncio.wait_for(queue.submit(b"frame two;", "event 2", lambda: "undo 2"), WAIT)

    try:
        run(go())
        assert queue.health().writable and queue.stats.commits == 2
    finally:
        queue.shutdown()
        os.close(fd)
    with open(path, "rb") as f:
        assert f.read() == b"frame one;frame two;"


class NoSpace(FileOps):
    """A full disk: every write fails with ENOSPC."""

    def write(self, fd: int, data: bytes | memoryview) -> int:  # type: ignore[override]
        raise OSError(errno.ENOSPC, "injected: no space left")


def test_a_full_disk_while_a_switch_waits_fails_the_switch_and_writes_resume_with_room(tmp_path, monkeypatch):
    monkeypatch.setattr(loghealth, "RETRY_INTERVAL", 0.0)
    path = str(tmp_path / "log")
    gate = FsyncGate(None)
    queue, fd = _queue_on(path, gate)
    switches: list[str] = []

    async def go():
        gate.armed = True
        first = queue.submit(b"frame one;", "event 1", lambda: "undo 1")
        await _until(gate.in_flight.is_set, "the fsync to be in flight")
        switched = queue.run_between_fsyncs(lambda: switches.append("first"))
        with files.use(NoSpace()):
            # Held, and written by the committer before the switch: that write finds no room.
            refused = queue.submit(b"frame two;", "event 2", lambda: "undo 2")
            gate.release.set()
            await asyncio.wait_for(first, WAIT)
            for future in (refused, switched):
                with pytest.raises(Unavailable, match="write not stored: writes are refused: no space"):
                    await asyncio.wait_for(future, WAIT)
        queue.check_writable()  # the probe finds room: OK again
        await asyncio.wait_for(queue.submit(b"frame three;", "event 3", lambda: "undo 3"), WAIT)
        await asyncio.wait_for(queue.run_between_fsyncs(lambda: switches.append("second")), WAIT)

    try:
        run(go())
        assert queue.health().writable
    finally:
        queue.shutdown()
        os.close(fd)
    assert switches == ["second"]
    with open(path, "rb") as f:
        assert f.read() == b"frame one;frame three;"


def test_an_fsync_does_not_wait_for_the_loops_default_executor(tenant):
    # The commit thread is the queue's own: blocking work in the default executor (a JWKS
    # fetch, any to_thread call) cannot hold back an acknowledgement.
    from concurrent.futures import ThreadPoolExecutor

    s = open_store(tenant)
    blocker = threading.Event()

    async def go():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(1))
        busy = loop.run_in_executor(None, blocker.wait, 2 * WAIT)
        try:
            return await asyncio.wait_for(s.insert("User", user(1)), WAIT)
        finally:
            blocker.set()
            await busy

    try:
        assert run(go()) == user(1)
        assert s.stats()["fsyncs"] == 1
    finally:
        s.close()
    assert _users(tenant) == [1]


def test_close_waits_for_an_fsync_in_flight_before_closing_the_log(tenant, stores):
    # close() closes the log's descriptor: an fsync still running in the commit thread would
    # then sync nothing (EBADF), or another file that reused the number. So close() waits
    # for it. The held fsync is let go by a timer; close() must not return before that.
    s = stores(tenant)
    gate = FsyncGate(None)
    s.commit_queue.writer.faults = gate
    released_when_closed: list[bool] = []

    async def go():
        gate.armed = True
        write = asyncio.ensure_future(s.insert("User", user(1)))
        await _until(gate.in_flight.is_set, "the fsync to be in flight")
        timer = threading.Timer(0.3, gate.release.set)
        timer.start()
        s.close()  # on the loop, as the service's shutdown does
        released_when_closed.append(gate.release.is_set())
        timer.join()
        return await write

    record = run(go())
    assert released_when_closed == [True], "close() returned while an fsync was still in flight"
    assert _users(tenant) == [record["id"]]  # acknowledged by close()'s own final fsync


def test_a_store_opened_read_only_refuses_every_write_and_one_stopped_by_a_failed_fsync_too(tenant, stores):
    """WritePath.writable: no commit queue (read-only) -> `Unavailable` saying so; a queue
    that failed -> its own health detail; an OK queue -> the write goes through."""
    store = stores(tenant, sync="off")
    run(store.insert("User", user(1)))
    run(store.aclose())
    readonly = stores(tenant, readonly=True)
    for write in (
        lambda: readonly.insert_then("User", user(2), lambda error: None),
        lambda: readonly.apply_insert("User", user(2)),
        lambda: readonly.delete_then("User", 1, lambda error: None),
        readonly.check_writable,
    ):
        with pytest.raises(Unavailable, match="^the store was opened read-only$"):
            write()
    assert readonly.get("User", 2)[0] is None
    store = stores(tenant, sync="off")
    try:
        store.writes.commit.fail_stop(OSError(errno.EIO, "disk gone"))
        with pytest.raises(Unavailable, match="read-only after an I/O error on the log"):
            store.insert_then("User", user(2), lambda error: None)
        assert store.get("User", 2)[0] is None
    finally:
        store.writes.commit.shutdown()
