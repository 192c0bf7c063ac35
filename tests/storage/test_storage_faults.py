"""I/O failures: injected EIO/ENOSPC on the Nth write or fsync, a real full tmpfs, and a
compaction killed after each of its steps."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import subprocess
import sys
import uuid

import pytest

from dbsvc.errors import Unavailable
from dbsvc.storage.tenants import create_tenant
from support.cli import LAUNCHER, clean_env
from support.storage import compact_in_child, open_store, run, user
from support.tree import dir_image


def _records(tenant):
    s = open_store(tenant)
    try:
        return {m: dict(t.records) for m, t in s.tables.items()}, s.head_offset
    finally:
        s.close()


def _results(coros):
    async def go():
        return await asyncio.gather(*coros, return_exceptions=True)

    return run(go())


@pytest.mark.parametrize("spec", ["fsync:2:EIO", "fsync:2:ENOSPC", "fsync:1:EIO"])
def test_failed_fsync_acknowledges_nothing_it_covered(tenant, monkeypatch, spec, stores):
    monkeypatch.setenv("DBSVC_FAULT", spec)
    s = stores(tenant)
    first = _results([s.insert("User", user(i)) for i in range(1, 6)])
    second = _results([s.insert("User", user(i)) for i in range(6, 11)])
    acked = [r for r in first + second if isinstance(r, dict)]
    failed = [r for r in first + second if isinstance(r, Unavailable)]
    assert len(acked) + len(failed) == 10 and failed
    assert s.stats()["read_only"]
    with pytest.raises(Unavailable, match="read-only"):
        run(s.insert("User", user(20)))
    assert set(s.tables["User"].records) == {r["id"] for r in acked}  # rolled back in memory
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    records, head = _records(tenant)
    assert records["User"] == {r["id"]: r for r in acked}
    assert head == len(acked)


@pytest.mark.parametrize("spec", ["write:1:EIO", "write:1:ENOSPC"])
def test_failed_write_fails_every_unacknowledged_write(tenant, monkeypatch, spec, stores):
    # Ten writes in one turn of the loop are one batch: one write call, failed.
    monkeypatch.setenv("DBSVC_FAULT", spec)
    s = stores(tenant)
    results = _results([s.insert("User", user(i)) for i in range(1, 11)])
    assert all(isinstance(r, Unavailable) for r in results)
    assert s.tables["User"].records == {} and s.watermarks()["User"] == 0
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    records, head = _records(tenant)
    assert records["User"] == {} and head == 0


def test_failure_after_acknowledged_writes_keeps_them(tenant, monkeypatch, stores):
    monkeypatch.setenv("DBSVC_FAULT", "fsync:4:EIO")
    s = stores(tenant)
    for i in range(1, 4):
        run(s.insert("User", user(i)))
    with pytest.raises(Unavailable):
        run(s.insert("User", user(4)))
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    records, head = _records(tenant)
    assert sorted(records["User"]) == [1, 2, 3] and head == 3


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "full"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_real_enospc_on_a_full_tmpfs(small_tmpfs, stores):
    tenant = create_tenant(small_tmpfs, "t")
    s = stores(tenant)
    acked = []
    error = None
    for i in range(1, 10_000):
        try:
            acked.append(run(s.insert("User", user(i, profile={"pad": "x" * 3000}))))
        except Unavailable as exc:
            error = exc
            break
    assert error is not None and "No space left" in str(error)
    assert s.stats()["read_only"]
    s.close()
    s = stores(tenant, readonly=True)
    assert sorted(s.tables["User"].records) == [r["id"] for r in acked]


@pytest.mark.parametrize("step", range(1, 10))
def test_compaction_killed_after_each_step_loses_nothing(tenant, step, stores):
    s = stores(tenant, replication=True)

    async def go():
        for i in range(1, 31):
            await s.insert("User", user(i))
        for i in range(1, 31, 3):
            await s.delete("User", i)
        await s.replace("User", 2, user(2, name="kept"))

    run(go())
    want = dict(s.tables["User"].records)
    head = s.head_offset
    frames = list(s.frames_after(0))
    s.close()
    res = compact_in_child(tenant, f"compact:{step}:KILL")
    assert res.returncode == -9, res.stderr
    # The old files or the new ones; either way every row is still served (the compaction
    # retained the whole old log, retain.py), byte for byte.
    for readonly in (True, False):
        s = stores(tenant, readonly=readonly, retain_bytes=1 << 20)
        assert s.tables["User"].records == want and s.head_offset == head
        assert s.oldest_offset == 0 and list(s.frames_after(0)) == frames
        if not readonly:
            assert sorted(os.listdir(tenant)) in (
                ["LOCK", "history", "log", "schema.json"],
                ["LOCK", "history", "log", "log.retained", "schema.json", "snapshot"],
            )
            assert run(s.insert("User", user(None, email=f"{uuid.uuid4()}@x")))["id"] == 31
            assert s.head_offset == head + 1
        s.close()


def test_second_compaction_after_an_interrupted_one_completes(tenant, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    s.close()
    killed = compact_in_child(tenant, "compact:3:KILL")
    assert killed.returncode == -9, killed.stderr
    before = dir_image(tenant)
    assert "snapshot.new" in before and "log.retained.new" in before and "log.new" in before
    done = compact_in_child(tenant)
    assert done.returncode == 0, done.stderr
    s = stores(tenant)
    assert list(s.tables["User"].records) == [1] and s.watermarks()["User"] == 1


def _files_too_large_past(limit: int):
    """A child's preexec: files may not grow past `limit` bytes (RLIMIT_FSIZE), and a write
    past it fails with EFBIG instead of the default SIGXFSZ kill: a disk out of room for the
    compaction's snapshot, while the log (already larger) is still read whole."""

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limited


def _compact_refused_at_size(tenant: str, limit: int, before: dict, stored: tuple) -> None:
    """`dbsvc compact` run with files past `limit` bytes refused (RLIMIT_FSIZE, a real "file
    too large"): it exits 1 naming the error, and the tenant's files (`before`, LOCK aside)
    and records with their head (`stored`) are as they were."""
    res = subprocess.run(
        [sys.executable, str(LAUNCHER), "compact"],
        env=clean_env({"SERVICE_DATA": os.path.dirname(tenant), "SERVICE_TENANT": "t", "PYTHONDONTWRITEBYTECODE": "1"}),
        preexec_fn=_files_too_large_past(limit),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert "File too large" in res.stderr, res.stderr
    assert {name: data for name, data in dir_image(tenant).items() if name != "LOCK"} == before
    assert _records(tenant) == stored


def test_an_offline_compaction_whose_snapshot_cannot_be_written_leaves_no_partial_file(tenant, stores):
    """`dbsvc compact` failing partway through snapshot.new (EFBIG at 8 KiB of a ~40 KiB
    snapshot) exits 1 naming the error, removes the partial snapshot.new at once (not at the
    next open), and leaves the tenant's files as they were: every record still served."""
    s = stores(tenant)
    _results([s.insert("User", user(i, profile={"pad": "x" * 300})) for i in range(1, 101)])
    s.close()
    records, head = _records(tenant)
    assert len(records["User"]) == 100
    before = {name: data for name, data in dir_image(tenant).items() if name != "LOCK"}
    _compact_refused_at_size(tenant, 8192, before, (records, head))


def _users_written_three_times(tenant):
    """100 users of a 300-character profile, each replaced twice: a log (~246 KB) several
    times the snapshot a compaction writes (~45 KB), all of it retained (the default budget)."""
    s = open_store(tenant)
    _results([s.insert("User", user(i, profile={"pad": "x" * 300})) for i in range(1, 101)])
    for n in range(2):
        _results([s.replace("User", i, user(i, name=f"u{i}-{n}", profile={"pad": "y" * 300})) for i in range(1, 101)])
    s.close()
    records, head = _records(tenant)
    assert len(records["User"]) == 100 and head == 300
    return records, head


@pytest.mark.parametrize("step", [1, 2, 3, 4])
def test_an_offline_compaction_failing_before_its_commit_point_leaves_no_new_file(tenant, step, stores):
    """An error after step 1, 2, 3 or 4 (snapshot.new complete; log.retained.new and log.new
    complete from step 2, 3 on) ends `install` with every `.new` file removed at once: the
    tenant's files byte for byte as before, every record served, the next open and write
    fine."""
    records, head = _users_written_three_times(tenant)
    before = {name: data for name, data in dir_image(tenant).items() if name != "LOCK"}
    res = compact_in_child(tenant, f"compact:{step}:EIO")
    assert res.returncode == 1, res.stderr
    assert f"(injected by DBSVC_FAULT compact:{step})" in res.stderr.decode()
    assert {name: data for name, data in dir_image(tenant).items() if name != "LOCK"} == before
    assert _records(tenant) == (records, head)
    s = stores(tenant)
    assert run(s.insert("User", user(None, email=f"{uuid.uuid4()}@x")))["id"] == 101


def test_an_offline_compaction_failing_past_its_commit_point_is_finished_by_the_next_open(tenant, stores):
    """An error after step 5 (snapshot renamed) leaves the new pair standing: log.new and
    log.retained.new stay for the next open, which puts them in place."""
    records, head = _users_written_three_times(tenant)
    res = compact_in_child(tenant, "compact:5:EIO")
    assert res.returncode == 1, res.stderr
    left = dir_image(tenant)
    assert "snapshot.new" not in left and "log.new" in left and "log.retained.new" in left
    s = stores(tenant, retain_bytes=1 << 20)
    assert s.tables["User"].records == records["User"] and s.head_offset == head and s.oldest_offset == 0
    s.close()
    assert sorted(os.listdir(tenant)) == ["LOCK", "history", "log", "log.retained", "schema.json", "snapshot"]


def test_an_offline_compaction_whose_retained_copy_cannot_be_written_leaves_no_new_file(tenant):
    """`dbsvc compact` under a file size limit the snapshot fits in and the retained copy of
    the old log does not (EFBIG, a real full target, in step 2): exits 1 naming the error,
    and removes the partial log.retained.new and the complete snapshot.new at once, the
    tenant as it was."""
    records, head = _users_written_three_times(tenant)
    before = {name: data for name, data in dir_image(tenant).items() if name != "LOCK"}
    limit = len(before["log"]) // 2
    _compact_refused_at_size(tenant, limit, before, (records, head))
    done = compact_in_child(tenant)
    assert done.returncode == 0, done.stderr
    # The limit fell where meant: the snapshot fits under it, the retained copy does not.
    assert (
        os.path.getsize(os.path.join(tenant, "snapshot"))
        < limit
        < os.path.getsize(os.path.join(tenant, "log.retained"))
    )
    assert _records(tenant) == (records, head)
