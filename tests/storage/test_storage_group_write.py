"""One write call per group commit (commit.py): frames are held when a write is submitted
and the committer writes a batch's frames with one call before its fsync.

Checked here: how many write calls reach the file layer, that the frames land in order and
whole, that an online compaction has the held frames written before it reads the log from
its threads (and waits for its switch while a group's fsync is in flight, as its
`at_switch` says), that a failed batch write fails the whole batch and nothing else, and that a
committer stopped by something other than an I/O error leaves the store read-only instead
of wedged."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading

import pytest

from dbsvc.errors import Unavailable
from dbsvc.storage import files
from dbsvc.storage.commit import CommitQueue
from dbsvc.storage.events import decode_event
from dbsvc.storage.files import FaultPlan, FileOps
from dbsvc.storage.logfile import FRAME_HEADER_SIZE
from dbsvc.storage.logwriter import LogWriter, WriteState
from support.storage import run, user

WAIT = 10.0


class CountingOps(FileOps):
    """The real file layer, counting write calls per descriptor; `fail_next` makes the next
    write call raise that errno instead."""

    def __init__(self) -> None:
        self.writes: dict[int, int] = {}
        self.fail_next: int | None = None

    def write(self, fd: int, data: bytes | memoryview) -> int:  # type: ignore[override]
        self.writes[fd] = self.writes.get(fd, 0) + 1
        if self.fail_next is not None:
            code, self.fail_next = self.fail_next, None
            raise OSError(code, f"injected: {os.strerror(code)}")
        return super().write(fd, data)


def _log_writes(ops: CountingOps, store) -> int:
    return ops.writes.get(store.commit_queue.writer.fd, 0)


def _frames(store) -> list[tuple[int, str, int]]:
    """(offset, model, id) of every frame the store serves from offset 0 (`/replicate`)."""
    events = (decode_event(frame[FRAME_HEADER_SIZE:]) for frame in store.frames_after(0))
    return [(event.offset, event.model, event.id) for event in events]


@pytest.mark.parametrize("sync, calls", [("full", 1), ("off", 6)])
def test_the_writes_of_one_turn_are_one_write_call_under_full_sync(tenant, sync, calls, stores):
    s = stores(tenant, sync=sync, replication=True)
    ops = CountingOps()

    async def together():
        return await asyncio.gather(*(s.insert("User", user(i)) for i in range(1, 7)))

    with files.use(ops):
        assert [r["id"] for r in run(together())] == [1, 2, 3, 4, 5, 6]
        assert _log_writes(ops, s) == calls
        assert s.stats()["log_bytes"] == os.path.getsize(os.path.join(tenant, "log"))
        assert _frames(s) == [(i, "User", i) for i in range(1, 7)]
    s.close()
    s = stores(tenant)
    try:
        assert sorted(s.tables["User"].records) == [1, 2, 3, 4, 5, 6] and s.head_offset == 6
        assert s.recovered_tail is None
    finally:
        s.close()


def test_writes_held_behind_an_fsync_in_flight_are_the_next_batch(tenant, tmp_path, monkeypatch, stores):
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:2:HOLD={gate}")
    s = stores(tenant, replication=True)
    ops = CountingOps()

    async def go():
        await s.insert("User", user(1))  # write 1, fsync 1
        first = asyncio.ensure_future(s.insert("User", user(2)))  # write 2, fsync 2 held
        while not os.path.exists(f"{gate}.held"):
            await asyncio.sleep(0.001)
        size = os.path.getsize(os.path.join(tenant, "log"))
        behind = [asyncio.ensure_future(s.insert("User", user(i))) for i in (3, 4, 5)]
        await asyncio.sleep(0.01)
        # Applied and readable, but not in the file yet: held for the next batch.
        assert sorted(s.tables["User"].records) == [1, 2, 3, 4, 5]
        assert os.path.getsize(os.path.join(tenant, "log")) == size
        gate.touch()
        return await asyncio.gather(first, *behind)

    with files.use(ops):
        assert [r["id"] for r in run(go())] == [2, 3, 4, 5]
        assert _log_writes(ops, s) == 3
        assert (s.stats()["fsyncs"], s.stats()["commits"]) == (3, 5)
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    s = stores(tenant, replication=True)
    try:
        assert _frames(s) == [(i, "User", i) for i in range(1, 6)]
    finally:
        s.close()


async def _two_held_behind_a_held_fsync(s, gate) -> tuple[asyncio.Future, list[asyncio.Future]]:
    """Write user 1; then user 2, whose fsync (the store's second) the gate holds; then
    users 3 and 4, held frames behind it. The futures of 2 and of 3 and 4."""
    await s.insert("User", user(1))
    first = asyncio.ensure_future(s.insert("User", user(2)))
    while not os.path.exists(f"{gate}.held"):
        await asyncio.sleep(0.001)
    behind = [asyncio.ensure_future(s.insert("User", user(i))) for i in (3, 4)]
    await asyncio.sleep(0)
    return first, behind


def test_an_online_compaction_has_the_held_frames_written_before_its_cut(tenant, tmp_path, monkeypatch, stores):
    # The fsync of write 2 is held, so writes 3 and 4 are still held frames when the
    # compaction takes its cut, and 5 and 6 when it starts the new log. Its threads read
    # the old log up to the cut (the retained segment) and past it (the new log): those
    # bytes must be in the file by then.
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:2:HOLD={gate}")
    s = stores(tenant, replication=True, retain_bytes=1 << 20)
    epoch = s.epoch

    async def go():
        first, behind = await _two_held_behind_a_held_fsync(s, gate)
        assert s.commit_queue.writer.held_frames  # still held when the compaction starts
        compaction = s.compact_now()
        await asyncio.sleep(0)
        assert s.compactor.cut is not None  # cut taken; the snapshot thread runs
        # Held after the cut, before the new log is started from the old one's frames.
        after_cut = [asyncio.ensure_future(s.insert("User", user(i))) for i in (5, 6)]
        await asyncio.sleep(0.05)
        gate.touch()
        done = await asyncio.gather(first, *behind, *after_cut)
        await asyncio.wait_for(compaction, WAIT)
        return done

    assert [r["id"] for r in run(go())] == [2, 3, 4, 5, 6]
    assert s.epoch != epoch, "the compaction did not complete"
    assert _frames(s) == [(i, "User", i) for i in range(1, 7)]  # retained segment + new log
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    s = stores(tenant, replication=True, retain_bytes=1 << 20)
    try:
        assert sorted(s.tables["User"].records) == [1, 2, 3, 4, 5, 6] and s.head_offset == 6
        assert _frames(s) == [(i, "User", i) for i in range(1, 7)]
    finally:
        s.close()


def test_a_compaction_says_it_waits_for_its_switch_while_a_groups_fsync_is_held(tenant, tmp_path, monkeypatch, stores):
    # The switch runs between two fsyncs (compactor.py invariant 2): with a group's fsync
    # held, a compaction does every step before it and waits, and `at_switch` says so until
    # the fsync is let go and the switch has run; before and after, it says no.
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:2:HOLD={gate}")
    s = stores(tenant, replication=True)
    epoch = s.epoch

    async def go() -> list[bool]:
        seen = [s.compactor.at_switch]
        first, behind = await _two_held_behind_a_held_fsync(s, gate)
        compaction = s.compact_now()
        deadline = asyncio.get_running_loop().time() + WAIT
        while not s.compactor.at_switch and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
        seen += [s.compactor.at_switch, s.epoch == epoch]  # waiting, not switched
        gate.touch()
        await asyncio.gather(first, *behind)
        await asyncio.wait_for(compaction, WAIT)
        return [*seen, s.compactor.at_switch]

    try:
        assert run(go()) == [False, True, True, False]
        assert s.epoch != epoch, "the compaction did not complete"
    finally:
        s.close()


def test_a_compaction_whose_held_frames_find_no_room_fails_them_and_itself(
    tenant, tmp_path, monkeypatch, caplog, stores
):
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:2:HOLD={gate}")
    monkeypatch.setattr("dbsvc.storage.loghealth.RETRY_INTERVAL", 0.0)
    s = stores(tenant, replication=True)
    ops = CountingOps()
    epoch = s.epoch

    async def go():
        first, behind = await _two_held_behind_a_held_fsync(s, gate)
        ops.fail_next = errno.ENOSPC
        compaction = s.compact_now()
        await asyncio.wait_for(compaction, WAIT)  # failed at its first step, logged
        gate.touch()
        return await asyncio.gather(first, *behind, return_exceptions=True)

    with files.use(ops), caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        results = run(go())
    assert results[0] == user(2)  # covered by the held fsync: acknowledged
    assert all(isinstance(r, Unavailable) and "no space" in str(r) for r in results[1:]), results
    assert s.epoch == epoch
    assert any(
        "online compaction failed: write not stored: writes are refused: no space" in r.getMessage()
        for r in caplog.records
    )
    assert sorted(s.tables["User"].records) == [1, 2]
    assert s.health(retry=True).state is WriteState.OK  # room again: writes resume
    assert run(s.insert("User", user(5))) == user(5)
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    s = stores(tenant, replication=True)
    try:
        assert sorted(s.tables["User"].records) == [1, 2, 5]
        assert _frames(s) == [(1, "User", 1), (2, "User", 2), (3, "User", 5)]
        assert s.recovered_tail is None
    finally:
        s.close()


class HeldFsync(FaultPlan):
    """The first fsync waits until `release` is set."""

    def __init__(self) -> None:
        super().__init__(None)
        self.rules = {"fsync": (1, 1, "HOLD")}  # non-empty: LogWriter consults the plan
        self.in_flight = threading.Event()
        self.release = threading.Event()

    def check(self, op: str) -> None:
        if op == "fsync" and not self.in_flight.is_set():
            self.in_flight.set()
            assert self.release.wait(WAIT), "the test never released the held fsync"


def test_a_committer_stopped_by_a_bug_makes_the_queue_read_only_instead_of_wedged(tmp_path, caplog):
    # Not an I/O error: here a subscriber's callback that raises out of `publish`. The
    # write it was publishing is acknowledged (futures resolve first); the write queued
    # behind it is rolled back and refused instead of waiting forever, and so is the next.
    path = str(tmp_path / "log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    gate = HeldFsync()
    rolled_back: list[str] = []

    def publish(event, frame):
        raise RuntimeError("a broken subscriber")

    queue = CommitQueue(LogWriter(path, fd, 0, gate), sync=True, publish=publish, rollback=rolled_back.append)

    async def go():
        first = queue.submit(b"frame one;", "event 1", lambda: "undo 1")
        while not gate.in_flight.is_set():
            await asyncio.sleep(0.001)
        second = queue.submit(b"frame two;", "event 2", lambda: "undo 2")
        gate.release.set()
        await asyncio.wait_for(first, WAIT)
        with pytest.raises(Unavailable, match="the commit task stopped: RuntimeError"):
            await asyncio.wait_for(second, WAIT)
        with pytest.raises(Unavailable, match="the commit task stopped: RuntimeError"):
            queue.check_writable()

    try:
        with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
            run(go())
        assert queue.health().state is WriteState.FAILED
        assert rolled_back == ["undo 2"]
        assert any(
            f"the commit task of {path} stopped: RuntimeError('a broken subscriber')" in r.getMessage()
            for r in caplog.records
        )
    finally:
        queue.shutdown()
        os.close(fd)
    with open(path, "rb") as f:
        assert f.read() == b"frame one;"  # the refused write's frame was never written
