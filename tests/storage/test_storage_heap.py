"""`heap.release_free_memory`: after a load has freed large blocks between ones that stay,
the free pages go back to the kernel (resident memory falls), where the C library is glibc."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from dbsvc.storage import heap

# Where the C library is glibc, as the interpreter itself tells it (not as heap.py's lookup
# of `malloc_trim` does: that lookup is what is tested).
GLIBC = platform.libc_ver()[0] == "glibc"

CHILD = r"""
import ctypes
import platform
from dbsvc.storage import heap

def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4

# 64 MiB of 256 KiB blocks from the heap (glibc's mmap threshold set past their size, as
# the first freed window of a load raises it), every other one kept: the freed half stays
# in the heap as holes.
if platform.libc_ver()[0] == "glibc":
    ctypes.CDLL(None).mallopt(-3, 1 << 20)          # M_MMAP_THRESHOLD
blocks = [bytearray(256 << 10) for _ in range(256)]
kept = blocks[1::2]
del blocks
before = rss_kib()
released = heap.release_free_memory()
after = rss_kib()
print(released, before - after, len(kept))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resident memory read from /proc")
def test_free_pages_between_kept_blocks_go_back_to_the_kernel():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout.split()
    if not GLIBC:
        assert out[0] == "False"
        return
    released, dropped_kib = out[0] == "True", int(out[1])
    assert released and dropped_kib > 16 * 1024, out  # most of the 32 MiB of holes


def test_release_is_harmless_to_call_again():
    assert heap.release_free_memory() in (True, False)
    assert heap.release_free_memory() is GLIBC
