"""The commit queue's batch path and its clock for room probes (storage/commit.py), where
mutation testing found nothing pinned down (docs/mutation.md):

- `append_batch` (`Store.insert_batch`, the offline import path) ran only in tests outside
  the mutation selection: one fsync for the batch, the acknowledged end moved past it (a
  later failure must not cut the batch off), and its failures: out of space before the
  fsync is REFUSING, an fsync error (even ENOSPC) or another write error is FAILED, the
  log is cut back either way, the refusal names the cause, and an exception that is not an
  I/O error leaves a healthy queue (or a failed one, when the cut-back failed too).
- The REFUSING state probes for room at most once per RETRY_INTERVAL, counted from the
  refusal and from each failed probe, on loghealth.py's clock (replaced here by a fake one;
  test_storage_degraded.py sets the interval to 0 and so cannot see it)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
import types

import pytest

from dbsvc.errors import Unavailable
from dbsvc.runtime import Query
from dbsvc.storage import files, loghealth
from dbsvc.storage.commit import CommitQueue
from dbsvc.storage.files import FileOps
from dbsvc.storage.logwriter import LogWriter, WriteState
from support.storage import open_store, run, user


class Clock:
    """loghealth.py's `time` (the room probes' clock), on a fake monotonic clock."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(loghealth, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


def _log(tenant: str) -> str:
    return os.path.join(tenant, "log")


def _stored_users(tenant: str) -> list[int]:
    s = open_store(tenant)
    try:
        assert s.recovered_tail is None, f"a tail was left behind: {s.recovered_tail}"
        return [r["id"] for r in s.list_records("User", Query(limit=1000))[0]]
    finally:
        s.close()


def _batch(*ids: int) -> list[tuple[str, dict]]:
    return [("User", user(i)) for i in ids]


# -- the batch path ------------------------------------------------------------------------


def test_a_batch_is_one_fsync_and_a_later_failure_does_not_cut_it_off(tenant, monkeypatch, stores):
    # fsync 1: user 1; fsync 2: the batch; fsync 3: user 5 fails.
    monkeypatch.setenv("DBSVC_FAULT", "fsync:3:EIO")
    s = stores(tenant)
    run(s.insert("User", user(1)))
    before = s.stats()
    stored = s.insert_batch(_batch(2, 3, 4))
    assert [r["id"] for r in stored] == [2, 3, 4]
    after = s.stats()
    assert after["fsyncs"] == before["fsyncs"] + 1
    assert after["commits"] == before["commits"] + 3
    assert after["log_bytes"] == os.path.getsize(_log(tenant))
    batch_end = os.path.getsize(_log(tenant))
    with pytest.raises(Unavailable, match="read-only"):
        run(s.insert("User", user(5)))
    # The cut-back goes to the end of the batch, which was acknowledged.
    assert os.path.getsize(_log(tenant)) == batch_end
    assert s.stats()["failed_writes"] == 1
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    assert _stored_users(tenant) == [1, 2, 3, 4]


def test_an_empty_batch_writes_nothing(tenant, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    size, before = os.path.getsize(_log(tenant)), s.stats()
    assert s.insert_batch([]) == []
    assert s.stats() == before and os.path.getsize(_log(tenant)) == size


def test_a_batch_out_of_space_is_refused_cut_back_and_taken_once_there_is_room(tenant, monkeypatch, clock, stores):
    # write 1: user 1; write 2: the batch, no space; write 3: the probe, room again.
    monkeypatch.setenv("DBSVC_FAULT", "write:2-2:ENOSPC")
    s = stores(tenant)
    run(s.insert("User", user(1)))
    size = os.path.getsize(_log(tenant))
    with pytest.raises(Unavailable) as refused:
        s.insert_batch(_batch(2, 3, 4))
    assert str(refused.value) == (
        "batch not stored: writes are refused: no space for the log ([Errno 28] No space left on device "
        "(injected by DBSVC_FAULT write:2)); the server checks for room every 1 s and takes writes "
        "again once there is some, with no restart"
    )
    assert s.health().state is WriteState.REFUSING
    assert s.stats()["failed_writes"] == 3
    assert os.path.getsize(_log(tenant)) == size
    assert [r["id"] for r in s.list_records("User", Query())[0]] == [1]
    assert s.health(retry=True).state is WriteState.REFUSING  # no probe before the interval
    clock.now += loghealth.RETRY_INTERVAL
    assert s.health(retry=True).state is WriteState.OK  # probe: write 3, room
    assert [r["id"] for r in s.insert_batch(_batch(2, 3))] == [2, 3]
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    assert _stored_users(tenant) == [1, 2, 3]


@pytest.mark.parametrize("spec", ["fsync:2:EIO", "fsync:2:ENOSPC", "write:2:EIO"])
def test_a_batch_whose_fsync_or_write_fails_is_fail_stop_and_cut_back(tenant, monkeypatch, clock, caplog, spec, stores):
    monkeypatch.setenv("DBSVC_FAULT", spec)
    s = stores(tenant)
    run(s.insert("User", user(1)))
    size = os.path.getsize(_log(tenant))
    with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        with pytest.raises(Unavailable) as refused:
            s.insert_batch(_batch(2, 3))
    op, _n, name = spec.split(":")
    cause = f"[Errno {getattr(errno, name)}] {os.strerror(getattr(errno, name))} (injected by DBSVC_FAULT {op}:2)"
    assert str(refused.value) == (
        f"batch not stored: the store is read-only after an I/O error on the log ({cause}): nothing "
        "written since can be trusted; fix the disk, then restart the server"
    )
    assert f"batch write to {_log(tenant)} failed: {cause}" in [r.getMessage() for r in caplog.records]
    assert os.path.getsize(_log(tenant)) == size
    assert s.stats()["failed_writes"] == 2
    clock.now += 10 * loghealth.RETRY_INTERVAL
    assert s.health(retry=True).state is WriteState.FAILED  # never probed, never back
    with pytest.raises(Unavailable, match="read-only"):
        s.insert_batch(_batch(4))
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    assert _stored_users(tenant) == [1]


def _queue(tmp_path) -> tuple[CommitQueue, str, int]:
    path = str(tmp_path / "log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, b"acknowledged")
    queue = CommitQueue(
        LogWriter(path, fd, len(b"acknowledged")),
        sync=True,
        publish=lambda event, frame: None,
        rollback=lambda undo: None,
    )
    return queue, path, fd


def _chunks_then(error: BaseException):
    yield b"first chunk"
    raise error


def test_a_batch_broken_by_another_exception_is_cut_back_and_the_queue_stays_writable(tmp_path):
    queue, path, fd = _queue(tmp_path)
    try:
        with pytest.raises(ValueError, match="a bad row"):
            queue.append_batch(_chunks_then(ValueError("a bad row")), 2)
        assert os.path.getsize(path) == len(b"acknowledged")
        assert queue.health().state is WriteState.OK and queue.stats.failures == 0
        queue.append_batch([b"one", b"two"], 2)
        assert queue.stats.commits == 2 and queue.stats.fsyncs == 1
    finally:
        queue.shutdown()
        os.close(fd)
    with open(path, "rb") as f:
        assert f.read() == b"acknowledgedonetwo"


class TruncateFails(FileOps):
    """The operating system refusing to cut a file."""

    def ftruncate(self, fd: int, size: int) -> None:  # type: ignore[override]
        raise OSError(errno.EIO, "injected: ftruncate failed")


def test_a_batch_broken_by_another_exception_that_cannot_be_cut_back_is_fail_stop(tmp_path):
    queue, path, fd = _queue(tmp_path)
    try:
        with files.use(TruncateFails()):
            with pytest.raises(ValueError, match="a bad row"):
                queue.append_batch(_chunks_then(ValueError("a bad row")), 2)
        health = queue.health()
        assert health.state is WriteState.FAILED
        assert "the log could not be cut back after ValueError('a bad row')" in health.detail
        with pytest.raises(Unavailable, match="restart the server"):
            queue.append_batch([b"more"], 1)
    finally:
        queue.shutdown()
        os.close(fd)


# -- the clock of the room probes ----------------------------------------------------------


def test_room_is_probed_once_per_interval_from_the_refusal_and_from_each_failed_probe(
    tenant, monkeypatch, clock, caplog, stores
):
    # write 1: user 1; write 2: user 2, no space; write 3: a probe, no space; write 4: room.
    monkeypatch.setenv("DBSVC_FAULT", "write:2-3:ENOSPC")
    s = stores(tenant)
    run(s.insert("User", user(1)))
    with pytest.raises(Unavailable, match="no space"):
        run(s.insert("User", user(2)))
    faults = s.commit_queue.writer.faults
    refused_at = clock.now
    clock.now = refused_at + loghealth.RETRY_INTERVAL / 2
    assert s.health(retry=True).state is WriteState.REFUSING  # too soon: not probed
    assert faults.counts["write"] == 2
    clock.now = refused_at + loghealth.RETRY_INTERVAL  # due: probe 3, no room
    with pytest.raises(Unavailable, match="no space"):
        run(s.insert("User", user(2)))
    assert faults.counts["write"] == 3
    clock.now = refused_at + 1.5 * loghealth.RETRY_INTERVAL  # the interval starts again
    assert s.health(retry=True).state is WriteState.REFUSING
    assert faults.counts["write"] == 3
    clock.now = refused_at + 2 * loghealth.RETRY_INTERVAL
    with caplog.at_level(logging.WARNING, logger="dbsvc.storage"):
        assert run(s.insert("User", user(2))) == user(2)  # probe 4: room; then write 5
    assert faults.counts["write"] == 5
    assert (
        f"{_log(tenant)} has room again (the write refused since failed with: [Errno 28] No space left "
        "on device (injected by DBSVC_FAULT write:2)); taking writes again"
    ) in [r.getMessage() for r in caplog.records]
    assert s.health(retry=True).state is WriteState.OK
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    assert _stored_users(tenant) == [1, 2]


class NoSpace(FileOps):
    """A full disk: every write fails with ENOSPC; `calls` counts the attempts."""

    def __init__(self, code: int = errno.ENOSPC) -> None:
        self.code = code
        self.calls = 0

    def write(self, fd: int, data: bytes | memoryview) -> int:  # type: ignore[override]
        self.calls += 1
        raise OSError(self.code, f"injected: {os.strerror(self.code)}")


def test_failed_writes_add_up_over_every_episode_of_a_full_disk(tenant, clock, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    with files.use(NoSpace()):
        with pytest.raises(Unavailable, match="no space"):
            run(s.insert("User", user(2)))
    assert s.stats()["failed_writes"] == 1
    clock.now += loghealth.RETRY_INTERVAL
    assert s.health(retry=True).state is WriteState.OK
    with files.use(NoSpace()):
        with pytest.raises(Unavailable, match="no space"):
            s.insert_batch(_batch(3, 4))
    assert s.stats()["failed_writes"] == 3
    clock.now += loghealth.RETRY_INTERVAL
    assert s.health(retry=True).state is WriteState.OK
    with files.use(NoSpace()):
        with pytest.raises(Unavailable, match="no space"):
            run(s.insert("User", user(5)))
    assert s.stats()["failed_writes"] == 4
    clock.now += loghealth.RETRY_INTERVAL
    assert run(s.insert("User", user(5))) == user(5)  # its own probe found room
    assert s.stats()["failed_writes"] == 4
    s.close()
    assert _stored_users(tenant) == [1, 5]


def test_a_probe_that_meets_an_io_error_refuses_every_write_without_touching_the_log(tenant, clock, caplog, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    with files.use(NoSpace()):
        with pytest.raises(Unavailable, match="no space"):
            run(s.insert("User", user(2)))
    clock.now += loghealth.RETRY_INTERVAL
    broken = NoSpace(errno.EIO)
    with files.use(broken), caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        for _ in range(2):
            with pytest.raises(Unavailable) as refused:
                run(s.insert("User", user(3)))
            assert str(refused.value) == (
                "the store is read-only after an I/O error on the log ([Errno 5] injected: Input/output "
                "error): nothing written since can be trusted; fix the disk, then restart the server"
            )
        clock.now += 10 * loghealth.RETRY_INTERVAL
        assert s.health(retry=True).state is WriteState.FAILED
    assert broken.calls == 1  # the probe, nothing after it
    assert (
        f"probing {_log(tenant)} for room failed: [Errno 5] injected: Input/output error; the store is now read-only"
    ) in [r.getMessage() for r in caplog.records]
    assert s.stats()["failed_writes"] == 1
    s.close()
    assert _stored_users(tenant) == [1]


# -- close() with a write still queued (flush) ---------------------------------------------


def _close_with_a_write_queued(s, record: dict):
    """Start an insert, let it reach its wait for the fsync, then close the store before the
    committer ran: the insert's answer is whatever `close()` made of it."""

    async def go():
        write = asyncio.ensure_future(s.insert("User", record))
        await asyncio.sleep(0)  # the write is appended and queued
        assert s.commit_queue.pending == 1
        s.close()
        return await asyncio.gather(write, return_exceptions=True)

    return run(go())[0]


def test_close_makes_a_queued_write_durable_and_acknowledges_it(tenant, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    assert _close_with_a_write_queued(s, user(2)) == user(2)
    assert _stored_users(tenant) == [1, 2]


def test_close_whose_final_fsync_fails_refuses_the_queued_write_and_cuts_it_off(tenant, monkeypatch, caplog, stores):
    monkeypatch.setenv("DBSVC_FAULT", "fsync:2:EIO")
    s = stores(tenant)
    run(s.insert("User", user(1)))
    size = os.path.getsize(_log(tenant))
    with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        answer = _close_with_a_write_queued(s, user(2))
    assert isinstance(answer, Unavailable)
    assert str(answer).startswith("write not stored: the store is read-only after an I/O error on the log")
    assert (
        f"final fsync of {_log(tenant)} failed: [Errno 5] Input/output error (injected by DBSVC_FAULT fsync:2)"
    ) in [r.getMessage() for r in caplog.records]
    assert os.path.getsize(_log(tenant)) == size
    monkeypatch.delenv("DBSVC_FAULT")
    assert _stored_users(tenant) == [1]


def _dispose(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what a hand-driven loop still holds, let it finish, and close the loop."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


def test_a_store_used_from_a_second_event_loop_while_the_first_is_still_open_commits_there(tenant, stores):
    # The committer task runs on the loop of the first write. A caller that drives its own
    # loop (`run_until_complete`, nothing cancels the task) and then writes from another
    # (`asyncio.run`) must get a committer on the new loop, not wait on the idle one.
    s = stores(tenant)
    first = asyncio.new_event_loop()
    threads = set(threading.enumerate())
    try:
        assert first.run_until_complete(s.insert("User", user(1))) == user(1)
        assert [t.get_name() for t in asyncio.all_tasks(first)] == ["dbsvc-committer"]  # still pending there
        # Named for whoever looks at a live process (py-spy dump, threading.enumerate()).
        assert [t.name for t in threading.enumerate() if t not in threads] == ["dbsvc-fsync"]
        assert run(asyncio.wait_for(s.insert("User", user(2)), 10.0)) == user(2)
        s.close()
    finally:
        _dispose(first)
    assert _stored_users(tenant) == [1, 2]


def test_every_acknowledged_write_is_published_with_the_frame_the_log_holds(tenant, stores):
    # Subscribers (the /replicate stream) send the published frame as it is, so it must be
    # the log's bytes for that write, whichever kind of write it was.
    s = stores(tenant, replication=True)
    published: list[tuple[int, bytes]] = []
    s.subscribe(lambda event, frame: published.append((event.offset, frame)))
    run(s.insert("User", user(1)))
    run(s.insert("User", user(2)))
    run(s.replace("User", 1, user(1, name="renamed")))
    run(s.delete("User", 2))
    assert [offset for offset, _frame in published] == [1, 2, 3, 4]
    assert [frame for _offset, frame in published] == list(s.frames_after(0))


def test_without_fsync_a_lone_write_is_answered_in_the_same_turn_of_the_loop(tenant, stores):
    # SERVICE_SYNC=off: nothing to wait for, so a write alone in the queue is acknowledged
    # inside `submit` instead of two loop iterations later by the committer task.
    s = stores(tenant, sync="off")

    async def go():
        writes = []
        for i in (1, 2, 3):
            write = asyncio.ensure_future(s.insert("User", user(i)))
            await asyncio.sleep(0)  # one turn: the write runs and returns
            writes.append(write.done())
        return writes

    assert run(go()) == [True, True, True]
    assert s.stats()["fsyncs"] == 0
    s.close()
    assert _stored_users(tenant) == [1, 2, 3]


def test_close_cancels_a_committer_left_waiting_on_a_loop_that_is_not_running(tenant, stores):
    # A caller driving its own loop never lets asyncio.run cancel the committer; close() must,
    # or the loop is left holding a task that waits forever.
    s = stores(tenant)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(s.insert("User", user(1)))
        s.close()
        assert [t.cancelling() for t in asyncio.all_tasks(loop)] == [1]
    finally:
        _dispose(loop)
    assert _stored_users(tenant) == [1]


# -- group commit and what a failed write leaves -------------------------------------------


def test_writes_arriving_together_share_one_fsync_and_each_write_alone_gets_its_own(tenant, stores):
    s = stores(tenant)
    for i in (1, 2, 3):
        run(s.insert("User", user(i)))
    assert (s.stats()["fsyncs"], s.stats()["commits"]) == (3, 3)

    async def together():
        return await asyncio.gather(*(s.insert("User", user(i)) for i in range(4, 9)))

    assert [r["id"] for r in run(together())] == [4, 5, 6, 7, 8]
    assert (s.stats()["fsyncs"], s.stats()["commits"]) == (4, 8)
    s.close()
    assert _stored_users(tenant) == list(range(1, 9))


@pytest.mark.parametrize(
    "code, then", [(errno.ENOSPC, "writes are refused until there is room"), (errno.EIO, "the store is now read-only")]
)
def test_a_failed_write_is_logged_with_what_follows_and_the_writes_behind_it_are_refused(
    tenant, caplog, code, then, stores
):
    s = stores(tenant)
    run(s.insert("User", user(1)))

    async def together():
        return await asyncio.gather(*(s.insert("User", user(i)) for i in (2, 3, 4)), return_exceptions=True)

    disk = NoSpace(code)
    with files.use(disk), caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        answers = run(together())
    # The three arrived in one turn: one write call for the batch, and it failed them all.
    assert disk.calls == 1
    assert all(isinstance(a, Unavailable) for a in answers), answers
    cause = f"[Errno {code}] injected: {os.strerror(code)}"
    assert f"write to {_log(tenant)} failed: {cause}; {then}" in [r.getMessage() for r in caplog.records]
    assert s.stats()["failed_writes"] == 3
    assert s.get("User", 2)[0] is None  # applied when held, rolled back with the batch
    s.close()
    assert _stored_users(tenant) == [1]


class TornWriteAndNoCut(FileOps):
    """A write that gets half its bytes out, then an I/O error; and a cut-back that fails."""

    def __init__(self) -> None:
        self.calls = 0

    def write(self, fd: int, data: bytes | memoryview) -> int:  # type: ignore[override]
        self.calls += 1
        if self.calls == 1:
            return os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.EIO, "injected: write failed")

    def ftruncate(self, fd: int, size: int) -> None:  # type: ignore[override]
        raise OSError(errno.EIO, "injected: ftruncate failed")


def test_a_torn_write_that_cannot_be_cut_back_is_counted_in_the_log_size(tenant, caplog, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    acked = os.path.getsize(_log(tenant))
    with files.use(TornWriteAndNoCut()), caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        with pytest.raises(Unavailable, match="read-only"):
            run(s.insert("User", user(2)))
    size = os.path.getsize(_log(tenant))
    assert size > acked  # half a frame stayed behind
    assert s.stats()["log_bytes"] == size  # /metrics tells the file's real size
    s.close()
    reopened = stores(tenant)  # the half frame is a torn tail: cut
    try:
        assert reopened.stats()["torn_tail_bytes"] == size - acked
        assert [r["id"] for r in reopened.list_records("User", Query())[0]] == [1]
    finally:
        reopened.close()


def test_a_failed_fsync_is_logged_with_its_file_and_cause(tenant, monkeypatch, caplog, stores):
    monkeypatch.setenv("DBSVC_FAULT", "fsync:2:EIO")
    s = stores(tenant)
    run(s.insert("User", user(1)))
    with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        with pytest.raises(Unavailable, match="read-only"):
            run(s.insert("User", user(2)))
    assert (
        f"fsync of {_log(tenant)} failed: [Errno 5] Input/output error (injected by DBSVC_FAULT fsync:2); "
        "the store is now read-only"
    ) in [r.getMessage() for r in caplog.records]
