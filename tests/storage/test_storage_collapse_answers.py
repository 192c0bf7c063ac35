"""What a heap collapse's task answers and leaves (compactor.py `settle`, `_settle`): a
collapse told to stop before its thread step began (a compaction starting meanwhile,
invariant 5) answers 0 and collapses nothing; one whose pause fails answers -1 and logs a
line that names the store's directory; either way the compactor then holds no collapse
(`settling`, `settle_task` None), so a later `close()` waits for nothing.

Why: the collapse tests hold a collapse under way or fail it, and read what close() and
the next compaction do; no test awaited a collapse that never began, nor read the failure's
line whole, nor the compactor after a collapse had ended on its own. A not-begun answer of
None or 1 (`_settle` 19, 20), a line without the directory (22, 27) and a `settling` left
set after the end (32) passed them (docs/mutation.md, session 23).

A real store on real files in this process; the one worker of the loop's executor is held
busy so that the collapse's step stays queued while it is told to stop (no clock)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import logging
import mmap
import threading

from dbsvc.storage import files, heap
from dbsvc.storage.heap import HUGE_PAGE
from support.storage import open_store, run


def _ranges(m: mmap.mmap) -> list[tuple[int, int]]:
    """Two huge pages of a private anonymous mapping of this test's, aligned."""
    view = ctypes.c_char.from_buffer(m)
    start = -(-ctypes.addressof(view) // HUGE_PAGE) * HUGE_PAGE
    del view  # an exported buffer would keep the mapping from closing
    return [(start, 2 * HUGE_PAGE)]


def test_a_collapse_told_to_stop_before_it_began_answers_0_and_collapses_nothing(tenant, monkeypatch):
    collapses: list[list[tuple[int, int]]] = []
    advise = heap.advise_huge_pages

    def noted(ranges: list[tuple[int, int]], advice: int) -> int:
        if advice == heap.MADV_COLLAPSE:
            collapses.append(list(ranges))
        return advise(ranges, advice)

    monkeypatch.setattr(heap, "advise_huge_pages", noted)
    s = open_store(tenant)
    m = mmap.mmap(-1, 4 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    held = threading.Event()

    async def go() -> int:
        loop = asyncio.get_running_loop()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        loop.set_default_executor(pool)
        busy = loop.run_in_executor(None, held.wait, 30)  # the collapse's step queues behind it
        task = s.compactor.settle(_ranges(m))
        await asyncio.sleep(0)  # the task submits its step
        s.compactor.settling.cancelled = True  # what a compaction's start tells it
        held.set()
        await busy
        return await asyncio.wait_for(task, 30)

    try:
        assert run(go()) == 0
        assert collapses == []
        assert s.compactor.settling is None and s.compactor.settle_task is None
    finally:
        held.set()
        s.close()
        m.close()


def test_a_collapse_whose_pause_fails_answers_minus_1_and_names_the_store(tenant, caplog):
    s = open_store(tenant)
    s.compactor.faults = files.FaultPlan("collapse:1")  # EIO in the first pause
    m = mmap.mmap(-1, 4 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)

    async def go() -> int:
        return await asyncio.wait_for(s.compactor.settle(_ranges(m)), 30)

    try:
        with caplog.at_level(logging.WARNING, logger="dbsvc.storage.compactor"):
            assert run(go()) == -1
        assert s.compactor.settling is None and s.compactor.settle_task is None
    finally:
        s.close()
        m.close()
    lines = [r.getMessage() for r in caplog.records if "collapse after a compaction" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith(f"{tenant}: the heap's collapse after a compaction stopped: ")
    assert "collapse:1" in lines[0]
