"""Give the C heap's free pages back to the operating system after a bulk load.

Opening a tenant parses its snapshot a window at a time (snapshot.py): each window's text,
its decoded string and the lists of its rows are large blocks that the C library's
`malloc` hands out from its heap and takes back when the window is done. Freed, they stay
in the heap as holes between the blocks that live on (the growing lists of stored records
and ids), counted in the process's resident memory (bench/README.md, "Records as bytes", has how
much). glibc's `malloc_trim(0)` returns the whole free pages inside those holes to the
kernel (`madvise`), quickly enough to do after every window.

Best effort: only where the C library is glibc (`ctypes` finds `malloc_trim`); elsewhere
(musl, macOS) nothing happens and the memory is reused by later allocations as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
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
