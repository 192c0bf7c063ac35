"""Fixtures for the storage tests: a fresh tenant directory per test, and the `history` tenant
(nine rows) of the recovery tests, also compacted on open (tests/storage/test_storage_recovery_*.py;
the tools that damage its files are tests/support/recovery_kit.py)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from dbsvc.storage.logfile import HEADER_SIZE
from dbsvc.storage.tenants import create_tenant
from support.recovery_kit import load, log_of
from support.storage import BLOG, open_store, post, run, user


@pytest.fixture
def tenant(tmp_path) -> str:
    return create_tenant(str(tmp_path / "data"), "t")


@pytest.fixture
def blog():
    return BLOG


@pytest.fixture
def scratch(tmp_path):
    """A directory in memory when there is one: the check phase's real fsyncs (open, the
    write after the restart) cost nothing there, and durability is the simulator's job."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(prefix="dbsvc-powerloss-", dir="/dev/shm")
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield str(tmp_path)


@pytest.fixture
def history(tenant) -> str:
    """Offsets 1-6 insert users 1-6, 7 renames user 3, 8 deletes user 6 (the highest id),
    9 inserts post 1. Closed here, written or not, and not kept: the test's own open or
    load collects it (a store kept, as `stores` keeps its list, would be frozen with it)."""
    s = open_store(tenant)

    async def go():
        for i in range(1, 7):
            await s.insert("User", user(i))
        await s.replace("User", 3, user(3, name="renamed"))
        await s.delete("User", 6)
        await s.insert("BlogPost", post(1))

    try:
        run(go())
    finally:
        s.close()
    return tenant


@pytest.fixture
def compacted(history) -> str:
    """`history` compacted on open: a snapshot at offset 9 and a log holding only its header."""
    load(history, compact_bytes=1)
    assert os.path.getsize(log_of(history)) == HEADER_SIZE
    return history
