"""The heap's huge-page collapse after an online compaction (compactor.py invariant 5, heap.py
`collapse_in_pieces`): a piece at a time with a pause after each, in a task of its own that
no compaction waits for. The next compaction starts and ends while a collapse is held, and
abandons it; `close()` ends one.

Real stores on real files in this process; a collapse is held in its first pause by the
fault seam (`DBSVC_FAULT`-style `collapse:1:HOLD=<path>`), so that "still collapsing" is
a fact of the test, not of the clock. The kill -9 in a collapse's pause is in
test_storage_compaction_pace.py, beside the other pauses' kills."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dbsvc.storage import files, heap
from dbsvc.storage.heap import HUGE_PAGE, collapse_in_pieces
from support.heapkit import huge_mapping, noted_advice
from support.storage import check_indexes, open_store, run, user

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
needs_thp = pytest.mark.skipif(
    not THP.exists() or "[never]" in THP.read_text(), reason="no transparent huge pages to advise on this kernel"
)
TINY = 32 * 1024  # the size rule's threshold: a compaction every few hundred writes
DEADLINE = 60.0  # seconds any wait below may take on a loaded host


def test_a_range_is_collapsed_a_piece_at_a_time_with_a_pause_after_each(monkeypatch):
    """Five pieces' worth is collapsed in five calls, each followed by the pause with its
    wall time; a pause that answers True (a compaction starting, the store closing) stops
    it after that piece."""
    monkeypatch.setattr(heap, "COLLAPSE_BYTES", 2 * HUGE_PAGE)
    with huge_mapping(12 * HUGE_PAGE) as start:
        ranges = [(start, 10 * HUGE_PAGE)]
        took: list[float] = []
        assert collapse_in_pieces(ranges, lambda seconds: took.append(seconds) is not None) == 5
        assert len(took) == 5 and all(t >= 0 for t in took)
        assert collapse_in_pieces(ranges, lambda _seconds: True) == 1


async def _replace_until(store, done, n: list[int]) -> None:
    """Replace users 1-20 in turn until `done()`, at most DEADLINE seconds."""
    deadline = time.monotonic() + DEADLINE
    while not done():
        assert time.monotonic() < deadline, f"not done after {DEADLINE} s: {store.stats()['compactions']} compactions"
        n[0] += 1
        i = 1 + n[0] % 20
        await store.replace("User", i, user(i, name=f"n{n[0]}"))
        await asyncio.sleep(0)


def _kept_collapses(store, last: bool = False) -> list[tuple[asyncio.Task[int], Any]]:
    """Every collapse the store's compactor starts, as (its task, its progress), in order: a
    collapse may end, and the next begin, before the test's next write looks. `last`: the
    first collapse also ends the size rule's compactions (so no other collapse follows)."""
    started: list[tuple[asyncio.Task[int], Any]] = []
    settle = store.compactor.settle

    def kept(ranges: list[tuple[int, int]]) -> asyncio.Task[int]:
        if last:
            store.compactor.compact_bytes = 1 << 40
        task = settle(ranges)
        started.append((task, store.compactor.settling))
        return task

    store.compactor.settle = kept
    return started


@needs_thp
def test_the_next_compaction_runs_while_the_last_ones_collapse_is_held_and_abandons_it(tenant, tmp_path):
    """The first compaction's collapse is held in its first pause; writes go on, and the
    size rule starts and finishes two more compactions meanwhile. The held collapse was
    told to stop at their start: released, it ends after its one piece. Before the change
    the collapse was one call inside the compaction's task (no pause to hold: the marker
    never appears); paced inside it, the size rule could not start the next compaction
    (docs/decisions.md, "The heap's collapse after a compaction back to one call")."""
    gate = str(tmp_path / "gate")
    s = open_store(tenant, compact_bytes=TINY)
    s.compactor.faults = files.FaultPlan(f"collapse:1:HOLD={gate}")
    n = [0]
    started = _kept_collapses(s)

    async def go() -> None:
        try:
            for i in range(1, 21):
                await s.insert("User", user(i))
            await _replace_until(s, lambda: os.path.exists(gate + ".held"), n)
            first, held = started[0]  # the held one (the next compaction may have begun already)
            at = s.compactions
            await _replace_until(s, lambda: s.compactions >= at + 2 and s.compaction is None, n)
            assert held.cancelled and not first.done()  # abandoned, and still in its pause
        finally:
            Path(gate).touch()  # never leave the executor's thread held (asyncio.run joins it)
        assert await asyncio.wait_for(first, DEADLINE) == 1

    try:
        run(go())
        assert s.compactions >= 3
        want = {i: s.get("User", i)[0] for i in range(1, 21)}
    finally:
        s.close()
    s = open_store(tenant)
    try:
        check_indexes(s)
        assert {i: s.get("User", i)[0] for i in range(1, 21)} == want
    finally:
        s.close()


@needs_thp
def test_close_ends_a_collapse_after_its_piece(tenant, tmp_path, monkeypatch, stores):
    """A store closed while its collapse is held in a pause: `close()` tells it to stop and
    waits for its thread, which collapses nothing more once the pause returns."""
    noted = noted_advice(monkeypatch)

    def collapses() -> list[int]:  # the ranges of each MADV_COLLAPSE call
        return [len(ranges) for ranges, advice in noted.calls if advice == heap.MADV_COLLAPSE]

    gate = str(tmp_path / "gate")
    s = stores(tenant, compact_bytes=TINY)
    s.compactor.faults = files.FaultPlan(f"collapse:1:HOLD={gate}")
    started = _kept_collapses(s, last=True)

    async def go() -> None:
        release = threading.Timer(0.2, Path(gate).touch)  # close() blocks the loop: from a thread
        try:
            for i in range(1, 21):
                await s.insert("User", user(i))
            await _replace_until(s, lambda: os.path.exists(gate + ".held"), [0])
            held = started[0][1]
            assert len(started) == 1 and collapses() == [1]  # its first piece, then the held pause
            release.start()
            began = time.monotonic()
            s.close()
            assert time.monotonic() - began < DEADLINE
            assert held.cancelled and held.idle.is_set() and s.compactor.settling is None
        finally:
            release.cancel()
            Path(gate).touch()

    try:
        run(go())
    finally:
        s.close()
    assert collapses() == [1]


@needs_thp
def test_a_collapse_that_fails_is_logged_and_the_store_serves_on(tenant, caplog):
    """DBSVC_FAULT=collapse:1 (EIO in the first pause): the collapse's task answers -1 and
    logs why; writes after it are acknowledged and kept, and the next compaction runs."""
    s = open_store(tenant, compact_bytes=TINY)
    s.compactor.faults = files.FaultPlan("collapse:1")
    n = [0]
    started = _kept_collapses(s)

    async def go() -> None:
        for i in range(1, 21):
            await s.insert("User", user(i))
        await _replace_until(s, lambda: bool(started), n)
        assert await asyncio.wait_for(started[0][0], DEADLINE) == -1
        at = s.compactions
        await _replace_until(s, lambda: s.compactions > at and s.compaction is None, n)

    try:
        run(go())
        want = {i: s.get("User", i)[0] for i in range(1, 21)}
    finally:
        s.close()
    assert any(
        "collapse after a compaction stopped" in r.getMessage() and "collapse:1" in r.getMessage()
        for r in caplog.records
    )
    s = open_store(tenant)
    try:
        assert {i: s.get("User", i)[0] for i in range(1, 21)} == want
    finally:
        s.close()
