"""The server's heap before serving (service.py `settle_heap`, storage/heap.py): its private writable anonymous
mappings are advised to be backed by 2 MiB transparent huge pages (docs/decisions.md, "Huge
pages for the heap", wt-rng), and again after each online compaction (compactor.py), unless
SERVICE_HUGE_PAGES=off (wt-gcf). A real server process, or a child process that compacts, is
asked through /proc; the two helpers on this process's own mappings and on maps files
written here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dbsvc.storage.heap import HUGE_PAGE, MADV_HUGEPAGE, advise_huge_pages, heap_ranges
from tests.support.server import start_server

ROOT = Path(__file__).resolve().parents[2]
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
needs_thp = pytest.mark.skipif(not THP.exists(), reason="no transparent huge pages on this kernel")


def advised_mappings(pid: int) -> int:
    """How many of a process's mappings carry madvise(MADV_HUGEPAGE) (`hg` in VmFlags)."""
    flags = [
        line.split()[1:] for line in Path(f"/proc/{pid}/smaps").read_text().splitlines() if line.startswith("VmFlags")
    ]
    return sum("hg" in names for names in flags)


@needs_thp
def test_a_served_process_advises_its_heap_for_huge_pages(tmp_path: Path) -> None:
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path / "data")
    try:
        assert server.get("/health").status == 200
        assert advised_mappings(server.proc.pid) > 0
    finally:
        assert server.stop() == 0


@needs_thp
def test_a_server_told_huge_pages_off_advises_nothing(tmp_path: Path) -> None:
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path / "data", env={"SERVICE_HUGE_PAGES": "off"})
    try:
        assert server.get("/health").status == 200
        assert advised_mappings(server.proc.pid) == 0
    finally:
        assert server.stop() == 0


COMPACTS = r"""
import asyncio, sys
from pathlib import Path
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/tests"]
from dbsvc.storage.tenants import create_tenant
from support.storage import open_store, user

store = open_store(create_tenant(sys.argv[1], "t"), compact_bytes=16 * 1024)
if sys.argv[2] == "off":  # as service.py sets it for SERVICE_HUGE_PAGES=off; on is the default
    store.compactor.huge_pages = False

async def churn():
    for i in range(1, 21):
        await store.insert("User", user(i))
    n = 0
    while store.stats()["compactions"] == 0 or store.compaction is not None:
        n += 1
        await store.replace("User", 1 + n % 20, user(1 + n % 20, name=f"n{n}"))
        await asyncio.sleep(0)

asyncio.run(churn())
store.close()
flags = [line.split()[1:] for line in Path("/proc/self/smaps").read_text().splitlines() if line.startswith("VmFlags")]
print(sum("hg" in names for names in flags))
"""


@needs_thp
@pytest.mark.parametrize("switch", ["on", "off"])
def test_an_online_compaction_advises_the_heap_only_when_huge_pages_are_on(tmp_path: Path, switch: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", COMPACTS, str(tmp_path / "data"), switch, str(ROOT)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    advised = int(out.split()[-1])
    assert advised > 0 if switch == "on" else advised == 0, out


def test_heap_ranges_keeps_private_writable_anonymous_mappings_cut_to_whole_huge_pages(tmp_path: Path) -> None:
    two = HUGE_PAGE
    maps = tmp_path / "maps"
    maps.write_text(
        f"{two + 4096:x}-{4 * two + 8192:x} rw-p 00000000 00:00 0 \n"  # anonymous: [2 * two, 4 * two)
        f"{8 * two:x}-{10 * two:x} rw-p 00000000 00:00 0 [heap]\n"
        f"{12 * two:x}-{14 * two:x} r--p 00000000 00:00 0 \n"  # not writable
        f"{16 * two:x}-{18 * two:x} rw-s 00000000 00:05 7 /dev/zero (deleted)\n"  # shared
        f"{20 * two:x}-{22 * two:x} rw-p 00001000 08:01 42 /usr/lib/libc.so.6\n"  # a file's data
        f"{24 * two:x}-{26 * two:x} rw-p 00000000 00:00 0 [stack]\n"
        f"{28 * two + 4096:x}-{29 * two + 4096:x} rw-p 00000000 00:00 0 \n"  # no whole huge page inside
    )
    assert heap_ranges(str(maps)) == [(2 * two, 2 * two), (8 * two, 2 * two)]


def test_heap_ranges_is_empty_without_a_maps_file(tmp_path: Path) -> None:
    assert heap_ranges(str(tmp_path / "missing")) == []


def test_advise_huge_pages_counts_only_what_the_kernel_accepted() -> None:
    assert advise_huge_pages([], MADV_HUGEPAGE) == 0
    # 2 MiB from address 0 is below every mapping of a user process: refused (ENOMEM), counted as nothing
    assert advise_huge_pages([(HUGE_PAGE, HUGE_PAGE)], MADV_HUGEPAGE) == 0


@needs_thp
def test_advise_huge_pages_accepts_this_process_heap() -> None:
    ranges = heap_ranges()
    assert ranges
    assert advise_huge_pages(ranges, MADV_HUGEPAGE) == sum(length for _start, length in ranges)


SETTLES = r"""
import gc, sys
sys.path.insert(0, sys.argv[1])
from dbsvc.service import settle_heap

settle_heap(False, **({"follows": True} if sys.argv[2] == "follower" else {}))
print(*gc.get_threshold())
"""


@pytest.mark.parametrize(("role", "young"), [("server", 2_000), ("follower", 20_000)])
def test_a_follower_collects_its_young_generation_ten_times_less_often(role: str, young: int) -> None:
    """settle_heap's thresholds, in a fresh interpreter: a follower's apply allocates a group
    of 512 frames at a time, and its young collections every 20,000 allocations cost it less
    CPU a frame (bench/README.md, wt-rep14); a server that follows nothing keeps 2,000."""
    done = subprocess.run(
        [sys.executable, "-c", SETTLES, str(ROOT), role], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == [str(young), "10", "100"]
