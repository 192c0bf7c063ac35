"""The commit queue's fsync thread (storage/fsyncthread.py): one long-lived thread runs each
fsync and tells the loop once it returned; its outcome (None or the error) reaches the loop,
never inside `start`; `close` waits for an fsync in flight; `fsyncthread.use` is the seam a
run of one thread of control (the power-loss seeds) replaces the thread through."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import threading

import pytest

from dbsvc.errors import Unavailable
from dbsvc.storage import fsyncthread
from dbsvc.storage.fsyncthread import FsyncThread
from support.storage import open_store, run, user

WAIT = 60.0  # generous: a loaded two-core machine


def _new_fsync_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """The fsync threads alive now that were not in `before` (a test's own, not another's)."""
    return [t for t in threading.enumerate() if t.name == fsyncthread.THREAD_NAME and t not in before]


async def _one_fsync(syncer: FsyncThread) -> tuple[BaseException | None, str, bool]:
    """Start one fsync; its outcome, the thread `done` ran on, and whether `start` returned
    before `done` ran."""
    loop = asyncio.get_running_loop()
    told: asyncio.Future[tuple[BaseException | None, str]] = loop.create_future()
    syncer.start(loop, lambda error: told.set_result((error, threading.current_thread().name)))
    returned_first = not told.done()
    error, where = await asyncio.wait_for(told, WAIT)
    return error, where, returned_first


def test_each_fsync_runs_in_the_one_fsync_thread_and_is_told_on_the_loop():
    before = set(threading.enumerate())
    ran_on: list[str] = []
    syncer = FsyncThread(lambda: ran_on.append(threading.current_thread().name))
    try:

        async def go():
            return [await _one_fsync(syncer) for _ in range(3)]

        outcomes = run(go())
    finally:
        syncer.close()
    loop_thread = threading.current_thread().name
    assert outcomes == [(None, loop_thread, True)] * 3
    assert ran_on == [fsyncthread.THREAD_NAME] * 3  # one thread, kept between fsyncs
    assert not _new_fsync_threads(before)


def test_an_fsync_that_raises_hands_its_error_to_the_loop_and_the_thread_serves_on():
    failures = [OSError(errno.EIO, "disk gone"), None]

    def fsync() -> None:
        error = failures.pop(0)
        if error is not None:
            raise error

    syncer = FsyncThread(fsync)
    try:

        async def go():
            return await _one_fsync(syncer), await _one_fsync(syncer)

        (first, _, _), (second, _, _) = run(go())
    finally:
        syncer.close()
    assert isinstance(first, OSError) and first.errno == errno.EIO
    assert second is None


def test_close_waits_for_the_fsync_in_flight_and_is_idempotent():
    before = set(threading.enumerate())
    in_flight, release = threading.Event(), threading.Event()
    finished: list[bool] = []

    def fsync() -> None:
        in_flight.set()
        assert release.wait(WAIT)
        finished.append(True)

    syncer = FsyncThread(fsync)
    loop = asyncio.new_event_loop()
    try:
        syncer.start(loop, lambda error: None)
        assert in_flight.wait(WAIT)
        timer = threading.Timer(0.2, release.set)
        timer.start()
        syncer.close()
        assert finished == [True], "close() returned while an fsync was in flight"
        timer.join()
        syncer.close()
        assert not _new_fsync_threads(before)
    finally:
        loop.close()


def test_an_fsync_whose_loop_closed_meanwhile_is_dropped_quietly():
    before = set(threading.enumerate())
    in_flight, release = threading.Event(), threading.Event()
    syncer = FsyncThread(lambda: (in_flight.set(), release.wait(WAIT)))
    loop = asyncio.new_event_loop()
    told: list[BaseException | None] = []
    syncer.start(loop, told.append)
    assert in_flight.wait(WAIT)
    loop.close()
    release.set()
    syncer.close()
    assert told == [] and not _new_fsync_threads(before)


def test_a_store_inside_use_makes_its_fsync_runner_with_the_given_factory(tenant):
    before = set(threading.enumerate())
    made: list[FsyncThread] = []

    def factory(fsync):
        syncer = FsyncThread(fsync)
        made.append(syncer)
        return syncer

    with fsyncthread.use(factory):
        store = open_store(tenant)
        try:
            assert run(store.insert("User", user(1))) == user(1)
            assert store.stats()["fsyncs"] == 1
        finally:
            store.close()
    assert len(made) == 1
    assert not _new_fsync_threads(before)


@pytest.mark.parametrize("fails", [False, True])
def test_a_store_under_a_runner_on_the_loop_starts_no_thread(tenant, fails):
    # The power-loss seeds' case: one thread of control. A failed fsync fails the write as
    # one from the thread does.
    class OnTheLoop:
        def __init__(self, fsync):
            self.fsync = fsync

        def start(self, loop, done):
            def go():
                if fails:
                    done(OSError(errno.EIO, "disk gone"))
                else:
                    self.fsync()
                    done(None)

            loop.call_soon(go)

        def close(self):
            pass

    before = set(threading.enumerate())
    with fsyncthread.use(OnTheLoop):
        store = open_store(tenant)
        try:
            if fails:
                with pytest.raises(Unavailable, match="write not stored"):
                    run(store.insert("User", user(1)))
                assert store.get("User", 1)[0] is None
            else:
                assert run(store.insert("User", user(1))) == user(1)
            assert [t for t in threading.enumerate() if t not in before] == []
        finally:
            store.close()


def test_a_process_that_never_closes_its_store_still_exits(tenant):
    # The fsync thread waits for work for the store's whole life; a program that drops its
    # store without `close()` (a script, a test) must still exit: the thread is a daemon.
    script = (
        "import asyncio, sys\n"
        "from support.storage import open_store, user\n"
        "store = open_store(sys.argv[1])\n"
        "asyncio.run(store.insert('User', user(1)))\n"
        "print('written')\n"
    )
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", script, tenant], env=env, capture_output=True, timeout=WAIT)
    assert (done.returncode, done.stdout) == (0, b"written\n"), done.stderr.decode()
