"""Online compaction's edges that mutation testing found untested (session 17, wt-mpo7:
online.py `catch_up`, compactor.py `_compact_steps`): in process, on a real tenant directory,
so `bench/mutation_pytest.py` sees every call."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import tempfile
import threading

import pytest

from dbsvc.errors import Unavailable
from dbsvc.storage import files, online
from dbsvc.storage.files import FaultPlan
from support.storage import HoldAfterSnapshot, open_store, run, user


async def writes_while_held(s, hold, never: str, name: str) -> None:
    """20 users, a compaction held at `hold` (its `reached` / `release` events), five
    replaces made while it is held (named `name` 0-4), then the compaction let go and awaited."""
    for i in range(1, 21):
        await s.insert("User", user(i))
    task = s.compact_now()
    assert await asyncio.to_thread(hold.reached.wait, 60), never
    for n in range(5):
        await s.replace("User", 1 + n, user(1 + n, name=f"{name} {n}"))
    hold.release.set()
    await task


def test_more_frames_past_the_cut_than_a_pacers_step_are_copied_and_kept(tenant):
    """The thread step that copies the frames written past the cut pauses every
    `online.PACE_FRAMES` frames (its `Pacer` checks for a closed store there): with more
    frames than that behind the cut, the pause runs inside the copy and the compaction ends
    with every one of them."""
    hold = HoldAfterSnapshot()
    s = open_store(tenant)
    s.compactor.faults = hold
    past = online.PACE_FRAMES + 6

    async def go():
        for i in range(1, 21):
            await s.insert("User", user(i))
        task = s.compact_now()
        assert await asyncio.to_thread(hold.reached.wait, 60), "the compaction never wrote its snapshot"
        for n in range(past):
            await s.replace("User", 1 + n % 20, user(1 + n % 20, name=f"past the cut {n}"))
        hold.release.set()
        await task

    try:
        run(go())
        assert s.compactions == 1
        live = dict(s.tables["User"].records)
        assert [int.from_bytes(f[:8], "big") for f in s.frames_after(20)] == list(range(21, 21 + past))
    finally:
        s.close()
    s = open_store(tenant)
    try:
        assert dict(s.tables["User"].records) == live
        assert live[1 + (past - 1) % 20]["name"] == f"past the cut {past - 1}"
    finally:
        s.close()


class FailsAtTheSwitch(FaultPlan):
    """Raises `error` at the ninth compaction step, past the commit point."""

    def __init__(self, error: Exception) -> None:
        super().__init__(None)
        self.error = error
        self.steps = 0

    def check(self, op: str) -> None:
        if op == "compact":
            self.steps += 1
            if self.steps == 9:
                raise self.error


@pytest.mark.parametrize(
    "error, said",
    [
        (RuntimeError("not the disk"), "[Errno 5] compaction's switch: RuntimeError('not the disk')"),
        (OSError(errno.ENOSPC, "No space left on device"), "[Errno 28] No space left on device"),
    ],
)
def test_an_error_past_the_commit_point_is_the_cause_every_refused_write_names(error, said):
    """Past the commit point the store stops taking writes whatever failed; an OSError is
    the cause as it is, anything else (a bug's exception) is wrapped as an EIO that says it
    was the compaction's switch and what was raised."""
    tenant = tempfile.mkdtemp(prefix="mpo7-switch-")
    s = open_store(tenant)
    s.compactor.faults = FailsAtTheSwitch(error)
    try:

        async def go():
            for i in range(1, 21):
                await s.insert("User", user(i))
            await s.compact_now()
            await s.insert("User", user(None, email="refused@x"))

        with pytest.raises(Unavailable) as refused:
            run(go())
        assert str(refused.value) == (
            f"the store is read-only after an I/O error on the log ({said}): "
            "nothing written since can be trusted; fix the disk, then restart the server"
        )
    finally:
        s.close()
        shutil.rmtree(tenant)


def test_after_an_online_compaction_the_size_rule_weighs_the_log_against_the_new_snapshot():
    """`compact_bytes` passed, the log is compacted again only when it outweighs twice the
    snapshot (or holds twice the live rows): a few writes after a compaction start none."""
    tenant = tempfile.mkdtemp(prefix="mpo7-rule-")
    s = open_store(tenant, compact_bytes=400)
    try:

        async def go():
            for i in range(1, 41):
                await s.insert("User", user(i, profile={"bio": "x" * 100}))
            # The inserts pass compact_bytes, so the size rule may have started a compaction
            # at an early cut; compact_now would hand back that one. Let it end first, so the
            # snapshot weighed below holds all forty records.
            while s.compaction is not None:
                await s.compaction
            await s.compact_now()
            while s.compaction is not None:
                await s.compaction
            before = s.compactions
            snapshot = os.path.getsize(os.path.join(tenant, "snapshot"))
            for n in range(3):
                await s.replace("User", 1 + n, user(1 + n, name=f"after {n}"))
            log_bytes = s.stats()["log_bytes"]
            assert 400 < log_bytes < 2 * snapshot, (log_bytes, snapshot)
            await asyncio.sleep(0.05)
            assert s.compaction is None and s.compactions == before

        run(go())
    finally:
        s.close()
        shutil.rmtree(tenant)


class HoldNewLogFsync(files.FileOps):
    """Holds the first fsync of log.new (the end of `start_log`'s copy, in its thread) until
    the test sets `release`; `reached` says it is there."""

    def __init__(self) -> None:
        self.fds: set[int] = set()
        self.reached = threading.Event()
        self.release = threading.Event()

    def open(self, path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[override]
        fd = os.open(path, flags, mode, dir_fd=dir_fd)
        if str(path).endswith("log.new"):
            self.fds.add(fd)
        return fd

    def fsync(self, fd):  # type: ignore[override]
        if fd in self.fds and not self.reached.is_set():
            self.reached.set()
            assert self.release.wait(60), "the test never released the fsync"
        os.fsync(fd)


def test_writes_made_while_start_log_ends_are_copied_by_a_catch_up_step_and_kept(tenant, monkeypatch, caplog):
    """Frames written after `start_log` copied its share are the catch-up's (SWITCH_BYTES 0:
    none left to the switch): one step runs, in its thread, on the old log, and the switch
    after it is timed (the compactor's `pauses`)."""
    monkeypatch.setattr(online, "SWITCH_BYTES", 0)
    layer = HoldNewLogFsync()
    s = open_store(tenant)

    def go():
        return writes_while_held(s, layer, "start_log never fsynced log.new", "caught up")

    try:
        with files.use(layer), caplog.at_level(logging.INFO, logger="dbsvc.storage"):
            run(go())
        assert s.compactions == 1
        line = next(r.getMessage() for r in caplog.records if "compacted online" in r.getMessage())
        took, switch = s.compactor.pauses[-1]
        assert 0 < switch < 60
        assert line == (
            f"{tenant}: compacted online at offset 20: 20 live records, new epoch {s.epoch} "
            f"(pauses {took * 1e3:.1f} ms + {switch * 1e3:.1f} ms; "
            "0 bytes of log left to the switch after 1 catch-ups)"
        )
        live = dict(s.tables["User"].records)
    finally:
        s.close()
    s = open_store(tenant)
    try:
        assert dict(s.tables["User"].records) == live and live[5]["name"] == "caught up 4"
    finally:
        s.close()


def test_a_compaction_asked_of_a_read_only_store_fails_at_its_start_and_says_why(tenant, caplog):
    s = open_store(tenant)
    s.compactor.faults = FailsAtTheSwitch(OSError(errno.EIO, "the disk"))

    async def go():
        for i in range(1, 21):
            await s.insert("User", user(i))
        await s.compact_now()  # fails past its commit point: the store is read-only
        caplog.clear()
        await s.compact_now()

    try:
        with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
            run(go())
        assert s.compactions == 0
        [line] = [r.getMessage() for r in caplog.records]
        assert line.startswith(f"{tenant}: online compaction failed: the store is read-only after an I/O error")
    finally:
        s.close()


class HoldThenFailAtStep5(HoldAfterSnapshot):
    """Holds the compaction after its snapshot (step 1) like `HoldAfterSnapshot`, then
    raises at step 5: the first step past the commit point (the snapshot's rename), with
    log.new not yet renamed over the log."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def check(self, op: str) -> None:
        super().check(op)
        if op == "compact":
            self.steps += 1
            if self.steps == 5:
                raise RuntimeError("past the commit point")


def test_a_failure_just_past_the_commit_point_keeps_log_new_for_the_next_open(tenant):
    """Past the commit point the `.new` files are the store's (`discard` is for before it):
    the next open finishes the switch from them, with the writes made past the cut."""
    faults = HoldThenFailAtStep5()
    s = open_store(tenant)
    s.compactor.faults = faults

    def go():
        return writes_while_held(s, faults, "the compaction never wrote its snapshot", "past the cut")

    try:
        run(go())
        assert s.compactions == 0 and s.stats()["read_only"] is True
        assert os.path.exists(os.path.join(tenant, "log.new"))
    finally:
        s.close()
    s = open_store(tenant)
    try:
        assert sorted(s.tables["User"].records) == list(range(1, 21))
        assert [s.tables["User"].records[1 + n]["name"] for n in range(5)] == [f"past the cut {n}" for n in range(5)]
    finally:
        s.close()
