"""Every place that stops a compaction or a heap collapse wakes its pauses (online.py
`Progress.cancel`), not only marks it cancelled: the next compaction starting over a
collapse, `close()` during a collapse, `close()` during a compaction, and a compaction that
fails (compactor.py `_start`, `stop`, `_compact_steps`).

Why: a `WallPacer` pause waits on the progress's `woken`. A progress only marked
`cancelled` sleeps its pause out (a collapse's is heap.py's COLLAPSE_GAP at least, up to
MAX_WALL_PAUSE), and `close()` and a failed compaction's clean-up wait for the thread step
on the loop meanwhile (session 26 moved these four places from `cancelled = True` to
`cancel()`; docs/mutation.md, session 27, wt-mpo19: each reverted by hand passed every
older test). Read from the progress itself, not from a clock: `woken` is set or it is not.

Real stores on real files in this process; the collapses advise a private anonymous mapping
of this test's (a kernel without the advice refuses it, and the pauses are the same). The
stores' own collapse after a compaction is off (`huge_pages`): these tests start theirs."""

from __future__ import annotations

import asyncio
import time

from dbsvc.storage import files
from dbsvc.storage.heap import HUGE_PAGE
from support.heapkit import NotedAdvice, huge_mapping, noted_advice
from support.storage import open_store, run, user

DEADLINE = 30.0  # seconds the first piece of a collapse may take to begin on a loaded host


async def _collapsing(store, start: int, noted: NotedAdvice):  # noqa: ANN001, ANN202 (a task and its progress)
    """A collapse of 16 pieces started by the store's compactor, once its first piece has
    begun (its thread is in a piece or in the pause after it): (its task, its progress)."""
    task = store.compactor.settle([(start, 16 * HUGE_PAGE)])
    progress = store.compactor.settling
    deadline = time.monotonic() + DEADLINE
    while not noted.calls and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    assert noted.calls, f"no piece began in {DEADLINE} s"
    return task, progress


def _store(tenant: str):  # noqa: ANN202
    store = open_store(tenant)
    store.compactor.huge_pages = False
    return store


def test_a_compaction_starting_over_a_collapse_wakes_its_pause(tenant, monkeypatch):
    noted = noted_advice(monkeypatch)
    s = _store(tenant)
    try:
        with huge_mapping(17 * HUGE_PAGE) as start:

            async def go() -> None:
                await s.insert("User", user(1))
                collapse, progress = await _collapsing(s, start, noted)
                compaction = s.compactor.compact_now()
                assert progress.cancelled and progress.woken.is_set()
                await asyncio.wait_for(compaction, DEADLINE)
                assert await asyncio.wait_for(collapse, DEADLINE) < 16

            run(go())
    finally:
        s.close()


def test_close_during_a_collapse_wakes_its_pause(tenant, monkeypatch):
    noted = noted_advice(monkeypatch)
    s = _store(tenant)
    try:
        with huge_mapping(17 * HUGE_PAGE) as start:

            async def go() -> None:
                _task, progress = await _collapsing(s, start, noted)
                s.close()
                # read before the loop runs again: the task's own cancel (its CancelledError
                # branch) would wake it then, whatever `close()` did
                assert progress.cancelled and progress.woken.is_set() and progress.idle.is_set()

            run(go())
    finally:
        s.close()


def test_close_during_a_compaction_wakes_its_pauses(tenant):
    s = _store(tenant)
    held = []

    async def go() -> None:
        await s.insert("User", user(1))
        s.compactor.compact_now()
        held.append(s.compactor.progress)
        s.close()  # before its commit point: the task has not run a step yet

    try:
        run(go())
    finally:
        s.close()
    assert held[0].cancelled and held[0].woken.is_set()
    s = open_store(tenant)
    try:
        assert s.get("User", 1)[0] == user(1)
    finally:
        s.close()


def test_a_compaction_that_fails_wakes_its_pauses(tenant):
    s = _store(tenant)
    s.compactor.faults = files.FaultPlan("compact:1")  # EIO in the snapshot step, before the commit point
    held = []

    async def go() -> None:
        await s.insert("User", user(1))
        task = s.compactor.compact_now()
        held.append(s.compactor.progress)
        await asyncio.wait_for(task, DEADLINE)
        assert s.compactions == 0
        await s.insert("User", user(2))  # the store serves on

    try:
        run(go())
    finally:
        s.close()
    assert held[0].cancelled and held[0].woken.is_set()
