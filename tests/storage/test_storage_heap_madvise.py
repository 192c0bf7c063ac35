"""heap.py's madvise(2), looked up once at import (`find_madvise`), and `advise_huge_pages`
where the C library has none.

Why: the lookup runs once, when heap.py is imported, so no other test ever saw what it
builds: a function whose argument types were lost converts a 64-bit mapping address as a C
int (ctypes refuses it), and one whose result type was lost answers None, never 0 (every
call then counted as refused). The collapse calls it once a huge page (`collapse_in_pieces`),
so the lookup is asked again here and its function called on a mapping of this test's,
advised for real. And `advise_huge_pages` where no madvise was found (a C library without
one) must answer 0 without calling anything (mutation testing, docs/mutation.md, session 25).
"""

from __future__ import annotations

import mmap
import sys

import pytest

from dbsvc.storage import heap
from dbsvc.storage.heap import HUGE_PAGE, MADV_HUGEPAGE, advise_huge_pages
from support.heapkit import huge_mapping

MADV_NORMAL = 0  # madvise(2): no special treatment, accepted for any mapped, aligned range


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise(2) of a Linux C library")
def test_the_madvise_found_takes_a_64_bit_address_and_answers_the_kernels_int():
    madvise = heap.find_madvise()
    assert madvise is not None
    with huge_mapping(3 * HUGE_PAGE) as start:
        assert start > 2**32  # a mapping's address on a 64-bit Linux: no C int holds it
        assert madvise(start, mmap.PAGESIZE, MADV_NORMAL) == 0
        # A start that is not page-aligned is refused (EINVAL): -1, an int, not None.
        assert madvise(start + 1, mmap.PAGESIZE, MADV_NORMAL) == -1


def test_advise_huge_pages_without_a_madvise_answers_0_and_calls_nothing(monkeypatch):
    monkeypatch.setattr(heap, "MADVISE", None)  # what `find_madvise` answers on a C library without it
    with huge_mapping(3 * HUGE_PAGE) as start:
        assert advise_huge_pages([(start, HUGE_PAGE)], MADV_HUGEPAGE) == 0
    assert advise_huge_pages([], MADV_HUGEPAGE) == 0
