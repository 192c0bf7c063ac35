"""The pieces of a heap collapse after a compaction spaced at least heap.py's COLLAPSE_GAP
apart (compactor.py `settle`, online.py `WallPacer`'s floor), whatever each piece took.

Why: a piece takes ~4-6 ms of its thread's CPU on the core the served loop is pinned to,
and the loop answers at about half its rate while one is in flight. Paced by twice its wall
time alone, pieces came every ~25-40 ms, so the requests of the PATCH run's tail lived
across two or three of them (bench/README.md, "The heap's collapse spaced", session 26).
A piece of a mapping with nothing in it returns at once, so under the wall-time pace alone
its pause is ~0 and the pieces run back to back: that is what the floor is for.

A real store's compactor collapsing a private anonymous mapping of this test's (advised
for real; a kernel without the advice refuses it and the calls are the same). Each call's
start is read by wrapping `advise_huge_pages`, which still runs. A sleep never returns
early, so the spacing is a lower bound, not a timed guess."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from dbsvc.storage import heap, online
from dbsvc.storage.heap import COLLAPSE_GAP, HUGE_PAGE
from support.heapkit import huge_mapping, noted_advice
from support.storage import open_store, run


def test_a_collapse_after_a_compaction_spaces_its_pieces_by_the_gap_at_least(tenant, monkeypatch):
    noted = noted_advice(monkeypatch, clock=time.monotonic)
    s = open_store(tenant)
    try:
        with huge_mapping(5 * HUGE_PAGE) as start:

            async def go() -> int:
                return await asyncio.wait_for(s.compactor.settle([(start, 4 * HUGE_PAGE)]), 30)

            assert run(go()) == 4
    finally:
        s.close()
    began = noted.starts(heap.MADV_COLLAPSE)
    assert len(began) == 4
    gaps = [b - a for a, b in zip(began, began[1:])]
    assert min(gaps) >= COLLAPSE_GAP, f"pieces {gaps} s apart, expected {COLLAPSE_GAP} s at least"


@pytest.mark.parametrize("took", [0.0, 1e-9])
def test_a_pause_sleeps_its_floor_after_a_call_that_took_no_time(took):
    """The floor holds whatever the call took, a call timed at exactly 0 s too (a clock's
    tick coarser than a piece of a mapping with nothing in it): until session 27 a pause
    handed 0.0 skipped its floor, against what WallPacer's docstring says."""
    pause = online.WallPacer(online.Progress(), name="collapse", floor=0.05)
    began = time.monotonic()
    assert pause(took) is False
    assert time.monotonic() - began >= 0.05


def test_a_cancel_wakes_a_pause_under_way():
    """`Progress.cancel()` (a `close()`, a compaction starting over a collapse) ends a pause
    begun before it: `close()` waits for the piece in flight, not for the collapse's 0.1 s
    gap at least (test workers close stores during collapses hundreds of times a run).
    A pause only marked `cancelled` still sleeps it out (the tests that set the flag by
    hand rely on that bound)."""
    progress = online.Progress()
    pause = online.WallPacer(progress, name="collapse", floor=online.MAX_WALL_PAUSE)
    answered: list[bool] = []
    waiting = threading.Thread(target=lambda: answered.append(pause(1e-9)))
    began = time.monotonic()
    waiting.start()
    progress.cancel()
    waiting.join()
    assert answered == [True] and progress.woken.is_set()
    assert time.monotonic() - began < online.MAX_WALL_PAUSE, "the pause slept its whole floor"


def test_a_collapse_whose_task_is_cancelled_stops_its_thread(tenant, monkeypatch):
    """`asyncio.run`'s end cancels every task and then waits for the executor's threads: a
    cancelled collapse task cancels its progress, so the thread stops at its next pause
    instead of collapsing the rest a gap at a time while the loop's end waits (the tests'
    stores, compacting inside `asyncio.run`, waited seconds each). Counted, not timed: of
    16 pieces, the thread began at most the two around the cancel."""
    noted = noted_advice(monkeypatch, clock=time.monotonic)
    s = open_store(tenant)
    try:
        with huge_mapping(17 * HUGE_PAGE) as start:

            async def go() -> None:
                task = s.compactor.settle([(start, 16 * HUGE_PAGE)])
                deadline = time.monotonic() + 30  # the first piece began: the cancel lands mid-collapse
                while not noted.calls and time.monotonic() < deadline:
                    await asyncio.sleep(0.001)
                task.cancel()

            run(go())
            began = noted.starts(heap.MADV_COLLAPSE)
            assert 1 <= len(began) <= 2, f"{len(began)} of 16 pieces collapsed after the cancel"
    finally:
        s.close()
