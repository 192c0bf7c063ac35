"""The C heap's pages: free ones given back to the system after a bulk load, long-lived ones on huge pages.

Opening a tenant parses its snapshot a window at a time (snapshotreader.py): each window's text,
its decoded string and the lists of its rows are large blocks that the C library's
`malloc` hands out from its heap and takes back when the window is done. Freed, they stay
in the heap as holes between the blocks that live on (the growing lists of stored records
and ids), counted in the process's resident memory (bench/README.md, "Records as bytes", has how
much). glibc's `malloc_trim(0)` returns the whole free pages inside those holes to the
kernel (`madvise`), quickly enough to do after every window.

Best effort: only where the C library is glibc (`ctypes` finds `malloc_trim`); elsewhere
(musl, macOS) nothing happens and the memory is reused by later allocations as before.

Huge pages for the long-lived heap: after the open (service.py `settle_heap`) and after an
online compaction's switch (compactor.py), the process's private writable anonymous
mappings are advised to be backed by 2 MiB transparent huge pages. At 1,000,000 records the
heap holds about 1.1 GB of ids, keys and records on 4 KiB pages, and a list's plan reads
them scattered (a walk of one field's order testing another field's key column, the
page's records), so nearly every read also misses the TLB; on a host whose transparent
huge pages are `madvise` only, nothing else asks for them (docs/decisions.md, "Huge pages
for the heap", wt-rng). A compaction builds the epoch's objects anew in mappings the first
advice never saw, so it asks again. Advice only, never correctness: MADV_HUGEPAGE marks the
mappings (later faults there take huge pages, khugepaged merges the rest in time), then
MADV_COLLAPSE (Linux 6.1) merges the pages already there, before the server answers (a
few seconds at 1M; run beside serving, it slowed the first minute's requests). After a
compaction it does run beside serving: marked at once in the compaction's task, collapsed
afterwards off its path, a piece at a time with a pause after each (`collapse_in_pieces`;
compactor.py `Compactor.settle`), so that neither the loop's requests nor the next
compaction wait for it. A kernel
without either refuses it and nothing changes. SERVICE_HUGE_PAGES=off (config.py) turns
both calls off: the callers ask (service.py `settle_heap`, `Compactor.huge_pages`).
Mappings made between two compactions stay unmarked until the next one (docs/decisions.md,
"The collector's freezes; the huge-page switch", wt-gcf, has how much and why that stands).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Callable


def _find_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


_TRIM = _find_trim()


def release_free_memory() -> bool:
    """Return the heap's free pages to the kernel; False where that cannot be done."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


# Linux madvise(2) advice: back a range with 2 MiB transparent huge pages from now on
# (MADV_HUGEPAGE), and do it now for the pages already there (MADV_COLLAPSE, Linux 6.1).
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25
HUGE_PAGE = 1 << 21


def find_madvise() -> Callable[[int, int, int], int] | None:
    """madvise(2) from the process's own C library, looked up once: the collapse calls it
    once a huge page (`collapse_in_pieces`), ~1,000 times after a compaction at 1M. Public
    so that a test asks again what the import found: its argument and result types are
    what make a 64-bit address and the kernel's answer pass."""
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError, TypeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    return madvise  # type: ignore[no-any-return]


# madvise(2) as found at import, None where the C library has none (`advise_huge_pages`
# then does nothing): public so that a test can be that C library.
MADVISE = find_madvise()


def heap_ranges(maps: str = "/proc/self/maps") -> list[tuple[int, int]]:
    """The whole 2 MiB pages of this process's private writable anonymous mappings (the
    heap: Python's arenas, malloc's, the indexes' arrays), as (start, length); none where
    there is no /proc (not Linux)."""
    try:
        with open(maps) as lines:
            found = []
            for line in lines:
                fields = line.split()
                if not fields[1].startswith("rw") or fields[1][3] != "p" or (len(fields) > 5 and fields[5] != "[heap]"):
                    continue
                low, high = (int(part, 16) for part in fields[0].split("-"))
                low = -(-low // HUGE_PAGE) * HUGE_PAGE
                high = high // HUGE_PAGE * HUGE_PAGE
                if high > low:
                    found.append((low, high - low))
            return found
    except OSError:
        return []


def advise_huge_pages(ranges: list[tuple[int, int]], advice: int) -> int:
    """madvise(2) each range with `advice`; the bytes it accepted. Advice only: a kernel
    without transparent huge pages or without the advice refuses it (EINVAL) and nothing
    changes, and a range unmapped meanwhile is refused (ENOMEM); either is skipped."""
    if not ranges or MADVISE is None:
        return 0
    accepted = 0
    for start, length in ranges:
        if MADVISE(start, length, advice) == 0:
            accepted += length
    return accepted


def mark_heap() -> list[tuple[int, int]]:
    """Mark this process's heap for huge pages (MADV_HUGEPAGE: later faults there take
    them); the ranges to collapse, none where the kernel refused or there is no /proc.
    Cheap (flags on the mappings, no page copied): an online compaction does it in its own
    task (compactor.py), and leaves the collapse to `collapse_in_pieces` after it."""
    ranges = heap_ranges()
    return ranges if advise_huge_pages(ranges, MADV_HUGEPAGE) else []


def advise_heap() -> int:
    """Mark this process's heap for huge pages and merge the pages already there in one
    call; the bytes marked (0 where the kernel refused or there is no /proc). At start-up,
    before serving only: a collapse running while requests are answered slowed them (a
    matrix's first shape; after a compaction `collapse_in_pieces`)."""
    ranges = mark_heap()
    if ranges:
        advise_huge_pages(ranges, MADV_COLLAPSE)
    return sum(length for _start, length in ranges)


# A piece of a collapse beside serving (`collapse_in_pieces`): one huge page. Each call's
# kernel time (the page's allocation, which may compact memory first, and its copy under
# the mapping's lock) is taken on a core the loop shares (the benches pin the process to
# one), and the loop, its page faults and the group fsync's thread wait behind it: in the service bench's PATCH run
# the longest piece of 8 huge pages ran 46-75 ms of that CPU, of one 2-12 ms
# (bench/README.md, "The heap's collapse a huge page a call", session 25).
COLLAPSE_BYTES = HUGE_PAGE

# The least pause between two pieces (compactor.py `settle`, a `WallPacer` floor). A piece
# takes ~4-7 ms of its thread's CPU on the loop's core (~512 pages isolated, copied and
# freed; bench/README.md, session 26, wt-tail7), and while one is in flight the loop
# answers at 0.42-0.85 of its rate between pieces. Paced by twice its wall alone, pieces
# came every ~25-40 ms, so a request of the run's tail (50-100 ms) lived across two or
# three of them and paid each; 0.1 s apart, a request of under 0.1 s meets one at most. The
# collapse takes ~0.1 s a piece longer (~10 s after the service bench's compaction, ~100 s
# at 1M); nothing waits for it, and the next compaction abandons it.
COLLAPSE_GAP = 0.1


def collapse_in_pieces(ranges: list[tuple[int, int]], pause: Callable[[float], bool]) -> int:
    """MADV_COLLAPSE `ranges` COLLAPSE_BYTES at a time, calling `pause(seconds the piece
    took)` after each; a pause that answers True (the store closing, or a compaction
    starting: compactor.py) stops it there. Returns the pieces collapsed.

    Why pieces: served at 1M, one MADV_COLLAPSE after a compaction ran 1.1-2.4 s, and the
    requests started meanwhile came at a quarter to a half of the run's rate with their
    median 2.7-5.4 times the run's; in pieces with a pause 0.91-1.68x over a longer window
    (bench/README.md, wt-pace; loaded runs). Our reading: the kernel copies each 2 MiB page
    under the mapping's lock, on the core the loop shares, and the loop's own page faults
    wait behind it; a pause after each piece hands both back. Stopping early loses nothing
    but huge pages: what is left is merged by khugepaged in time, or by the next
    compaction's collapse. A piece is one huge page (COLLAPSE_BYTES): the longest call is
    then one page's allocation and copy, not eight back to back."""
    pieces = 0
    for start, length in ranges:
        for at in range(start, start + length, COLLAPSE_BYTES):
            began = time.perf_counter()
            advise_huge_pages([(at, min(COLLAPSE_BYTES, start + length - at))], MADV_COLLAPSE)
            pieces += 1
            if pause(time.perf_counter() - began):
                return pieces
    return pieces
