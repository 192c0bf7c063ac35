"""Degraded writes (commit.py rule 4): a write that found no space is refused until there is
room again, then writes resume without a restart; an fsync error, any other write error, a
failed cut-back or a failed probe is fail-stop. Each case checks what `health()` says and
that the data on disk is exactly the acknowledged writes afterwards.

"Space comes back" is a fault range (`write:N-M:ENOSPC`, files.py): calls N to M fail, the
next succeeds. The probe for room counts as a write call. RETRY_INTERVAL is set to 0 here so
every check may probe (the server's is one second).
"""

from __future__ import annotations

import asyncio
import errno
import os

import pytest

from dbsvc.errors import Unavailable
from dbsvc.runtime import Query
from dbsvc.storage import files, loghealth
from dbsvc.storage.files import FaultPlan, FileOps
from dbsvc.storage.logwriter import WriteState
from support.storage import open_store, run, user


@pytest.fixture(autouse=True)
def probe_at_once(monkeypatch):
    monkeypatch.setattr(loghealth, "RETRY_INTERVAL", 0.0)


def _users(tenant: str) -> tuple[dict, int]:
    s = open_store(tenant)
    try:
        assert s.recovered_tail is None, f"a tail was left behind: {s.recovered_tail}"
        return {r["id"]: r for r in s.list_records("User", Query(limit=1000))[0]}, s.head_offset
    finally:
        s.close()


def test_fault_range_fails_only_the_calls_in_it():
    plan = FaultPlan("write:2-3:ENOSPC")
    plan.check("write")
    for _ in range(2):
        with pytest.raises(OSError) as info:
            plan.check("write")
        assert info.value.errno == errno.ENOSPC
    plan.check("write")
    assert plan.counts["write"] == 4


def test_no_space_refuses_writes_then_resumes_when_room_returns(tenant, monkeypatch, stores):
    # write 3 fails; the probes are writes 4 and 5 (no room yet) and 6 (room again).
    monkeypatch.setenv("DBSVC_FAULT", "write:3-5:ENOSPC")
    s = stores(tenant)
    run(s.insert("User", user(1)))
    run(s.insert("User", user(2)))
    with pytest.raises(Unavailable, match="no space"):
        run(s.insert("User", user(3)))
    health = s.health()
    assert health.state is WriteState.REFUSING and not health.writable
    assert "takes writes again once there is some" in health.detail
    assert s.stats()["read_only"] and s.stats()["write_state"] == "refusing_writes"
    assert s.get("User", 1)[0] == user(1) and s.get("User", 3)[0] is None  # reads go on
    with pytest.raises(Unavailable, match="no space"):  # probe: write 4, still no room
        run(s.insert("User", user(3)))
    assert s.health(retry=True).state is WriteState.REFUSING  # probe: write 5
    assert s.health(retry=True).state is WriteState.OK  # probe: write 6
    size = os.path.getsize(os.path.join(tenant, "log"))
    assert s.stats()["log_bytes"] == size  # the probe's zeros are gone
    stored = run(s.insert("User", user(3)))
    assert stored == user(3) and s.head_offset == 3
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    users, head = _users(tenant)
    assert users == {i: user(i) for i in (1, 2, 3)} and head == 3


def test_no_space_fails_every_queued_write_and_keeps_the_acknowledged(tenant, monkeypatch, tmp_path, stores):
    # fsync 2 is held while writes 4-6 queue behind it; their batch is write call 3, which
    # finds no room once fsync 2 let 2 and 3 through.
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:2:HOLD={gate},write:3-3:ENOSPC")
    s = stores(tenant)
    run(s.insert("User", user(1)))

    async def burst():
        first = [asyncio.ensure_future(s.insert("User", user(i))) for i in (2, 3)]
        while not os.path.exists(f"{gate}.held"):
            await asyncio.sleep(0.001)
        second = [asyncio.ensure_future(s.insert("User", user(i))) for i in (4, 5, 6)]
        await asyncio.sleep(0)
        assert [r["id"] for r in s.list_records("User", Query())[0]] == [1, 2, 3, 4, 5, 6]  # applied, not durable
        gate.touch()
        return await asyncio.gather(*first, *second, return_exceptions=True)

    results = run(burst())
    assert results[:2] == [user(2), user(3)]
    assert all(isinstance(r, Unavailable) and "no space" in str(r) for r in results[2:]), results
    assert [r["id"] for r in s.list_records("User", Query())[0]] == [1, 2, 3]  # 4-6 rolled back
    assert s.stats()["failed_writes"] == 3
    assert s.health(retry=True).state is WriteState.OK  # probe: write 4
    run(s.insert("User", user(7)))
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    users, head = _users(tenant)
    assert users == {i: user(i) for i in (1, 2, 3, 7)} and head == 4


@pytest.mark.parametrize(
    "spec, words",
    [("fsync:2:EIO", "fix the disk"), ("fsync:2:ENOSPC", "fix the disk"), ("write:2:EIO", "fix the disk")],
)
def test_fsync_errors_and_other_write_errors_are_fail_stop(tenant, monkeypatch, spec, words, stores):
    monkeypatch.setenv("DBSVC_FAULT", spec)
    s = stores(tenant)
    run(s.insert("User", user(1)))
    with pytest.raises(Unavailable, match=words):
        run(s.insert("User", user(2)))
    for _ in range(3):  # never probed, never back
        health = s.health(retry=True)
        assert health.state is WriteState.FAILED and "restart the server" in health.detail
    with pytest.raises(Unavailable, match="read-only"):
        run(s.insert("User", user(2)))
    assert s.stats()["write_state"] == "read_only"
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    users, head = _users(tenant)
    assert users == {1: user(1)} and head == 1
    s = stores(tenant)  # a restart is the recovery
    assert s.health().state is WriteState.OK
    run(s.insert("User", user(2)))
    s.close()
    assert set(_users(tenant)[0]) == {1, 2}


class WritesFail(FileOps):
    """A disk that now fails every write outright (EIO, not a lack of space)."""

    def write(self, fd: int, data: bytes | memoryview) -> int:  # type: ignore[override]
        raise OSError(errno.EIO, "injected: write failed")


def test_a_probe_that_meets_another_error_is_fail_stop(tenant, monkeypatch, stores):
    monkeypatch.setenv("DBSVC_FAULT", "write:2-2:ENOSPC")
    s = stores(tenant)
    run(s.insert("User", user(1)))
    with pytest.raises(Unavailable):
        run(s.insert("User", user(2)))
    assert s.health().state is WriteState.REFUSING
    with files.use(WritesFail()):
        assert s.health(retry=True).state is WriteState.FAILED
    assert s.health(retry=True).state is WriteState.FAILED
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    users, head = _users(tenant)
    assert users == {1: user(1)} and head == 1


class TruncateFails(FileOps):
    """The operating system refusing to cut a file (an I/O error on the cut-back)."""

    def ftruncate(self, fd: int, size: int) -> None:  # type: ignore[override]
        raise OSError(errno.EIO, "injected: ftruncate failed")


def test_no_space_with_a_failed_cut_back_is_fail_stop(tenant, monkeypatch, stores):
    monkeypatch.setenv("DBSVC_FAULT", "write:2-2:ENOSPC")
    s = stores(tenant)
    run(s.insert("User", user(1)))
    with files.use(TruncateFails()):
        with pytest.raises(Unavailable):
            run(s.insert("User", user(2)))
    health = s.health(retry=True)
    assert health.state is WriteState.FAILED and "restart" in health.detail
    s.close()
    monkeypatch.delenv("DBSVC_FAULT")
    users, head = _users(tenant)
    assert users == {1: user(1)} and head == 1


def test_a_store_opened_read_only_says_so(tenant):
    open_store(tenant).close()
    s = open_store(tenant, readonly=True)
    try:
        assert s.health().state is WriteState.READ_ONLY and not s.health().writable
    finally:
        s.close()
