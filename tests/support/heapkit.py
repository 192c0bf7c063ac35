"""A mapping of a test's own for heap.py's madvise calls, and those calls noted.

The collapse tests advise real memory (a kernel without the advice refuses it, and the calls
asked are the same), so each needs a private anonymous mapping, an address inside it on a
huge-page boundary, and the list of calls `collapse_in_pieces` made through
`advise_huge_pages` (wrapped, still run).
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dbsvc.storage import heap
from dbsvc.storage.heap import HUGE_PAGE

Advice = list[tuple[list[tuple[int, int]], int]]  # (ranges, advice) of each call


@contextmanager
def huge_mapping(size: int) -> Iterator[int]:
    """A private anonymous mapping of `size` bytes, closed on exit; the first huge-page
    boundary in it (leave one huge page of `size` spare for the rounding)."""
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = ctypes.c_char.from_buffer(m)
    address = ctypes.addressof(view)
    del view  # an exported buffer would keep the mapping from closing
    try:
        yield -(-address // HUGE_PAGE) * HUGE_PAGE
    finally:
        m.close()


def noted_advice(monkeypatch: pytest.MonkeyPatch) -> Advice:
    """Every call made through heap.advise_huge_pages from now on, in order; each still runs."""
    asked: Advice = []
    advise = heap.advise_huge_pages

    def noted(ranges: list[tuple[int, int]], advice: int) -> int:
        asked.append((list(ranges), advice))
        return advise(ranges, advice)

    monkeypatch.setattr(heap, "advise_huge_pages", noted)
    return asked
