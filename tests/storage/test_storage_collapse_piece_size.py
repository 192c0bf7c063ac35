"""heap.py `collapse_in_pieces` with its own piece size: one madvise(MADV_COLLAPSE) call a
huge page, each followed by its pause.

Why: a piece is what the kernel does in one call on the core the served loop is pinned to
(each huge page's allocation, which may compact memory first, and its copy under the
mapping's lock). Served with a compaction in the service bench's PATCH run, the longest
piece of 8 huge pages took 46-75 ms of the thread's CPU, and the group fsyncs and loop
ticks beside it waited behind it; the longest piece of one took 2-12 ms (bench/README.md,
"The heap's collapse a huge page a call", session 25). The calls
are read by wrapping `advise_huge_pages`, which still runs: a private anonymous mapping of
this test's, advised for real (a kernel without the advice refuses it; the calls are the
same)."""

from __future__ import annotations

from dbsvc.storage import heap
from dbsvc.storage.heap import HUGE_PAGE, collapse_in_pieces
from support.heapkit import huge_mapping, noted_advice


def test_each_collapse_call_asks_for_one_huge_page_and_is_followed_by_a_pause(monkeypatch):
    asked = noted_advice(monkeypatch).calls
    with huge_mapping(6 * HUGE_PAGE) as start:
        pauses: list[float] = []
        pieces = collapse_in_pieces([(start, 4 * HUGE_PAGE)], lambda s: pauses.append(s) is not None)
    assert pieces == 4
    assert asked == [([(start + i * HUGE_PAGE, HUGE_PAGE)], heap.MADV_COLLAPSE) for i in range(4)]
    assert len(pauses) == 4


def test_a_pause_that_answers_true_stops_the_collapse_after_one_huge_page(monkeypatch):
    asked = noted_advice(monkeypatch).calls
    with huge_mapping(4 * HUGE_PAGE) as start:
        pieces = collapse_in_pieces([(start, 2 * HUGE_PAGE)], lambda _s: True)
    assert pieces == 1
    assert asked == [([(start, HUGE_PAGE)], heap.MADV_COLLAPSE)]
