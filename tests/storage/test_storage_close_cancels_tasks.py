"""`close()` ends a store's background tasks as cancelled, never as done (compactor.py
`stop`, `_wait_then_cancel`): whoever awaits an online compaction's task (`compact_now()`
hands it out) or a heap collapse's task (`Compactor.settle`) is told the work was cut
short, instead of a compaction that seems to have finished or a collapse that answers a
count of pieces for a run the store stopped.

Why a file of its own: the tests of the held collapse and of the queued step read what
close() leaves on disk and in the progress flags; none awaited the task itself, so a
`stop()` that waited for the thread step and then left the task to run on (its next step
refused by `in_thread`, its error path cleaning up) passed them all (`_wait_then_cancel`
4 and 5, docs/mutation.md, session 23).

Real stores on real files in this process; the task is held in its first pause by the
fault seam (`OP:1:HOLD=<path>`), so "the thread step is under way at close()" is a fact of
the test, not of the clock. close() blocks the loop while it waits for that step, so the
gate is opened from a thread."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dbsvc.storage import files, snapshot
from support.storage import check_indexes, open_store, run, user

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
DEADLINE = 60.0  # seconds any wait below may take on a loaded host


async def _until_held(gate: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not os.path.exists(gate + ".held"):
        assert time.monotonic() < deadline, f"no pause held after {DEADLINE} s"
        await asyncio.sleep(0.01)


def _reopens_with_forty_users(tenant: str) -> None:
    s = open_store(tenant)
    try:
        check_indexes(s)
        assert [s.get("User", i)[0]["name"] for i in (1, 40)] == ["x" * 300 + " 1", "x" * 300 + " 40"]
    finally:
        s.close()


def test_close_cancels_a_compaction_held_in_a_pause_before_its_commit_point(tenant, tmp_path, monkeypatch, stores):
    """The compaction's task, awaited after close(), raises CancelledError; nothing of it is
    left on disk and the store reopens with every write."""
    monkeypatch.setattr(files, "FLUSH_BYTES", 4096)  # snapshot.new is many pieces: it pauses
    monkeypatch.setattr(snapshot, "BLOCK_ROWS", 4)
    gate = str(tmp_path / "gate")
    s = stores(tenant)
    s.compactor.faults = files.FaultPlan(f"flush:1:HOLD={gate}")

    async def go() -> None:
        release = threading.Timer(0.2, Path(gate).touch)
        try:
            for i in range(1, 41):
                await s.insert("User", user(i, name=f"{'x' * 300} {i}"))
            task = s.compact_now()
            assert task.get_name() == "dbsvc-compaction"  # how a dump of the loop's tasks names it
            await _until_held(gate)
            release.start()
            s.close()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert task.cancelled()
        finally:
            release.cancel()
            Path(gate).touch()

    try:
        run(go())
        assert s.compactions == 0
    finally:
        s.close()
    assert sorted(os.listdir(tenant)) == ["LOCK", "history", "log", "schema.json"]
    _reopens_with_forty_users(tenant)


@pytest.mark.skipif(
    not THP.exists() or "[never]" in THP.read_text(), reason="no transparent huge pages to advise on this kernel"
)
def test_close_cancels_a_heap_collapse_held_in_its_pause(tenant, tmp_path, stores):
    """The collapse's task, awaited after close(), raises CancelledError rather than
    answering the one piece it collapsed; the compaction before it stands."""
    gate = str(tmp_path / "gate")
    s = stores(tenant)
    s.compactor.faults = files.FaultPlan(f"collapse:1:HOLD={gate}")
    started: list[asyncio.Task[Any]] = []
    settle = s.compactor.settle

    def kept(ranges: list[tuple[int, int]]) -> asyncio.Task[int]:
        started.append(settle(ranges))
        return started[-1]

    s.compactor.settle = kept  # type: ignore[method-assign]

    async def go() -> None:
        release = threading.Timer(0.2, Path(gate).touch)
        try:
            for i in range(1, 41):
                await s.insert("User", user(i, name=f"{'x' * 300} {i}"))
            await s.compact_now()
            await _until_held(gate)
            assert len(started) == 1
            assert started[0].get_name() == "dbsvc-collapse"  # how a dump of the loop's tasks names it
            release.start()
            s.close()
            with pytest.raises(asyncio.CancelledError):
                await started[0]
            assert started[0].cancelled()
        finally:
            release.cancel()
            Path(gate).touch()

    try:
        run(go())
        assert s.compactions == 1
    finally:
        s.close()
    _reopens_with_forty_users(tenant)
