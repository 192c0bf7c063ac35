"""A mapping of a test's own for heap.py's madvise calls, and those calls noted.

The collapse tests advise real memory (a kernel without the advice refuses it, and the calls
asked are the same), so each needs a private anonymous mapping, an address inside it on a
huge-page boundary, and the list of calls `collapse_in_pieces` made through
`advise_huge_pages` (wrapped, still run), with when each began where the spacing of a
collapse's pieces is the point (test_storage_collapse_gap.py).
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

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


@dataclass
class NotedAdvice:
    """The calls made through heap.advise_huge_pages since `noted_advice`, in order, and,
    when it was given a clock, the clock's reading as each began (the pieces' spacing)."""

    calls: Advice = field(default_factory=list)
    began: list[float] = field(default_factory=list)  # one a call, empty without a clock

    def starts(self, advice: int) -> list[float]:
        """When each call with `advice` began (MADV_COLLAPSE: each piece of a collapse)."""
        return [at for (_ranges, asked), at in zip(self.calls, self.began) if asked == advice]


def noted_advice(monkeypatch: pytest.MonkeyPatch, clock: Callable[[], float] | None = None) -> NotedAdvice:
    """Every call made through heap.advise_huge_pages from now on, each still run; with
    `clock`, each call's start read on it too (the calls are appended as they begin, so a
    test on the loop may poll them while a collapse runs in its thread)."""
    noted = NotedAdvice()
    advise = heap.advise_huge_pages

    def wrapped(ranges: list[tuple[int, int]], advice: int) -> int:
        if clock is not None:
            noted.began.append(clock())
        noted.calls.append((list(ranges), advice))
        return advise(ranges, advice)

    monkeypatch.setattr(heap, "advise_huge_pages", wrapped)
    return noted
