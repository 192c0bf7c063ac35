"""Simulated power loss (tests/support/powerloss_fs.py): a store writes, compacts and restarts on top of a
file layer that remembers what each fsync made durable; at a random operation the power
goes; the disk's state is written to a fresh directory and opened with the real file layer.

Every seed checks:

- the store opens (no `CorruptLog`): damage is only ever a cut tail;
- it holds exactly the state after some offset h: every acknowledged write (h >= the
  highest acknowledged offset), and of the unacknowledged ones at most a prefix (h <= the
  last offset written), never part of a write (nothing half-visible) and never part of a
  batch (`POST /batch`'s store side: one in seven writes is a batch of 2 to 6 ops, and h is
  never inside one);
- its log, read again after the open, has clean CRCs from its header to its end;
- a write after the restart gets offset h + 1 and is there after another open.

The stores run with a small frame limit (`max_payload=LIMIT`), and some records are near
the record limit, a few over it (issue 30 item 2): those are refused with
`PayloadTooLarge` and never written, and no frame on the disk is over the limit.

250 seeds run by default, 125 here and 125 in test_storage_powerloss_more.py (so that the
suite's two workers share them), 10,000 with `-m slow` (the default seeds and 9,750 other
power-loss points; the default run had 500 until session 13, about 15 s of CPU more). A failing seed replays alone:
`DBSVC_POWERLOSS_SEED=1234 python -m pytest tests/storage/test_storage_powerloss*.py -k seed`.
The run of a seed is tests/support/powerloss_run.py's.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil

import pytest

from dbsvc.errors import CorruptLog
from dbsvc.storage import files
from dbsvc.storage.compact import discard_new
from dbsvc.storage.logfile import FRAME, FRAME_HEADER_SIZE, HEADER_SIZE
from support.powerloss_fs import PowerLoss, PowerLossFiles
from support.powerloss_run import ALL, DEFAULT_SEEDS, SLOW_SEEDS, check_log, run_seeds
from support.storage import compact_in_child, open_store, user


def test_power_loss_seeds(scratch):
    """The first half of the default seeds (test_storage_powerloss_more.py runs the other)."""
    run_seeds(0, DEFAULT_SEEDS // 2, scratch)


@pytest.mark.slow
def test_power_loss_seeds_slow(scratch):
    run_seeds(0, SLOW_SEEDS, scratch)


# -- the simulator itself, and the log rule it made necessary --------------------------------


def _images(tmp_path, sim: PowerLossFiles, seeds: int = 64) -> list[dict[str, bytes]]:
    out = []
    for seed in range(seeds):
        out.append(sim.materialise(str(tmp_path / f"image{seed}"), random.Random(seed)))
    return out


def test_simulator_keeps_what_fsync_covered_and_loses_some_of_the_rest(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    sim = PowerLossFiles(str(root), crash_at=None)
    fd = sim.open(str(root / "f"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sim.write(fd, b"a" * 700)
    sim.fsync(fd)
    sim.fsync_dir(str(root))
    sim.write(fd, b"b" * 1200)  # never fsynced
    sim.write(fd, b"c" * 300)
    sim.close(fd)
    sim.power_off()
    with pytest.raises(PowerLoss):
        sim.fsync_dir(str(root))  # nothing runs once the power is off
    seen = {image["f"] for image in _images(tmp_path, sim)}
    assert all(f.startswith(b"a" * 700) for f in seen)
    assert b"a" * 700 in seen  # nothing after the fsync
    assert b"a" * 700 + b"b" * 1200 + b"c" * 300 in seen  # all of it
    assert b"a" * 700 + bytes(1200) + b"c" * 300 in seen  # a subset: a hole of zeros
    torn = [f for f in seen if 700 < len(f) < 1900 and set(f[700:]) == {ord("b")}]
    assert torn and all(len(f) % 512 == 0 for f in torn)  # torn at a sector boundary


def test_simulator_forgets_unsynced_directory_changes_in_order(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    sim = PowerLossFiles(str(root), crash_at=None)
    for name in ("x.new", "y.new"):
        fd = sim.open(str(root / name), os.O_WRONLY | os.O_CREAT, 0o644)
        sim.write(fd, name.encode())
        sim.fsync(fd)
        sim.close(fd)
    sim.rename(str(root / "x.new"), str(root / "x"))
    sim.power_off()
    seen = {tuple(sorted(image)) for image in _images(tmp_path, sim)}
    # a prefix of (create x.new, create y.new, rename x.new -> x): never y.new without x.new
    assert seen == {(), ("x.new",), ("x.new", "y.new"), ("x", "y.new")}


def test_simulator_loses_power_at_the_chosen_operation(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    sim = PowerLossFiles(str(root), crash_at=3)
    fd = sim.open(str(root / "f"), os.O_WRONLY | os.O_CREAT, 0o644)  # operation 1
    sim.write(fd, b"one")  # operation 2
    with pytest.raises(PowerLoss):
        sim.fsync(fd)  # operation 3: not done
    sim.close_all()
    assert all(image.get("f", b"") in (b"", b"one") for image in _images(tmp_path, sim))


def _log_of_users(tenant: str, count: int) -> tuple[str, bytes, list[int]]:
    s = open_store(tenant)
    for i in range(1, count + 1):
        asyncio.run(s.insert("User", user(i)))
    s.close()
    path = os.path.join(tenant, "log")
    with open(path, "rb") as f:
        data = f.read()
    ends, pos = [], HEADER_SIZE
    while pos < len(data):
        _offset, _crc, length = FRAME.unpack_from(data, pos)
        pos += FRAME_HEADER_SIZE + length
        ends.append(pos)
    return path, data, ends


def test_an_unsynced_append_lost_before_a_later_one_is_cut_like_a_torn_tail(tenant):
    # Frames 1-3 acknowledged; frame 4 never reached the disk (zeros), frame 5 did.
    path, data, ends = _log_of_users(tenant, 5)
    with open(path, "wb") as f:
        f.write(data[: ends[2]] + bytes(ends[3] - ends[2]) + data[ends[3] :])
    s = open_store(tenant)
    try:
        assert s.head_offset == 3 and s.recovered_tail.position == ends[2]
        assert sorted(r["id"] for r in s.list_records("User", ALL)[0]) == [1, 2, 3]
        assert asyncio.run(s.insert("User", user(9)))["id"] == 9 and s.head_offset == 4
    finally:
        s.close()
    check_log(path)


def test_a_torn_append_before_a_later_whole_one_is_cut_like_a_torn_tail(tenant):
    path, data, ends = _log_of_users(tenant, 5)
    keep = ends[2] + 20  # frame 4's header and a few payload bytes
    with open(path, "wb") as f:
        f.write(data[:keep] + bytes(ends[3] - keep) + data[ends[3] :])
    s = open_store(tenant)
    try:
        assert s.head_offset == 3 and s.recovered_tail.position == ends[2]
    finally:
        s.close()


def test_damage_ending_in_a_payload_byte_before_a_good_frame_still_refuses(tenant):
    # The same place damaged by a disk, not a crash: frame 4's bytes changed, its end intact.
    path, data, ends = _log_of_users(tenant, 5)
    broken = bytearray(data)
    broken[ends[2] + 20] ^= 0xFF
    with open(path, "wb") as f:
        f.write(bytes(broken))
    with pytest.raises(CorruptLog) as info:
        open_store(tenant)
    assert info.value.offset == ends[2]
    with open(path, "rb") as f:
        assert f.read() == bytes(broken)  # nothing was truncated


def test_power_lost_at_each_step_of_discarding_a_compaction_keeps_the_old_state(tenant, tmp_path):
    """Removing an unfinished compaction's `.new` files (compact.discard_new: an open after a
    crash before the commit point, an install that failed) loses power at each of its
    operations in turn: whatever the disk keeps, the next open serves every record as
    before. snapshot.new must go last: a log.new or log.retained.new that outlived it would
    be taken as past the commit point, and that log.new does not continue the old files.
    Each store is closed and dropped (`del`) before the next open: an open freezes what is
    alive (recovery.py `gc.freeze`), and the 56 disks' stores outlived the test frozen."""
    s = open_store(tenant)
    try:
        for i in range(1, 21):
            asyncio.run(s.insert("User", user(i)))
    finally:
        s.close()
    del s
    s = open_store(tenant, readonly=True)
    try:
        want = dict(s.tables["User"].records)
    finally:
        s.close()
    del s
    killed = compact_in_child(tenant, "compact:3:KILL")  # snapshot.new, log.retained.new and log.new whole
    assert killed.returncode == -9, killed.stderr
    assert {"snapshot.new", "log.retained.new", "log.new"} <= set(os.listdir(tenant))
    crash_at = 1
    while True:
        work = str(tmp_path / f"work{crash_at}")
        shutil.copytree(tenant, work)
        sim = PowerLossFiles(work, crash_at)
        with files.use(sim):
            try:
                discard_new(work)
            except PowerLoss:
                pass
        finished = not sim.crashed
        sim.power_off()
        sim.close_all()
        for seed in range(8):
            disk = str(tmp_path / f"disk{crash_at}-{seed}")
            sim.materialise(disk, random.Random(seed))
            s = open_store(disk)
            try:
                assert dict(s.tables["User"].records) == want, (crash_at, seed)
            finally:
                s.close()
            del s
        if finished:
            break
        crash_at += 1
    assert crash_at == 7  # three unlinks, each followed by a directory fsync
