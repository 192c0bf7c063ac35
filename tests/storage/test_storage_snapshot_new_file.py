"""The file a compaction writes its snapshot into (`snapshot.new`, renamed to `snapshot` at
the commit point), offline (`compact_directory`) and online (`Store.compact_now`): it gets
the mode every other tenant file gets (0644 less the umask) and an older, longer
`snapshot.new` at that name is emptied first, not overwritten in place, so no tail of
it outlives the rename. Both come from `files.write_durably`; retain.py's
log.retained.new has the same two checks (test_storage_retain_units.py).

A tenant's open already removes a leftover `snapshot.new` (`finish_interrupted`), so the
leftover is put down by a file layer just before the compaction opens the name: the
only way to reach the open with an old file still there."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from dbsvc.storage import files
from dbsvc.storage.compact import compact_directory
from support.storage import BLOG, open_store, run, snapshot_users, user

LEFTOVER = b"j" * (1 << 20)  # far longer than the snapshot of the users written here
USERS = 30


class LeftoverAtOpen(files.FileOps):
    """Puts `LEFTOVER` at snapshot.new, with the real `os` calls, just before storage opens
    that name, as a compaction stopped before its commit point would have left it."""

    def __init__(self) -> None:
        self.planted = 0

    def open(self, path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[override]
        if path.endswith("snapshot.new"):
            with open(path, "wb") as f:
                f.write(LEFTOVER)
            self.planted += 1
        return os.open(path, flags, mode, dir_fd=dir_fd)


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    """Sets the process umask for one test and puts the old one back after it."""
    old = os.umask(0o022)
    try:
        yield os.umask
    finally:
        os.umask(old)


def write_users(tenant: str) -> None:
    s = open_store(tenant)
    try:
        for i in range(1, USERS + 1):
            run(s.insert("User", user(i)))
    finally:
        s.close()


def compact_offline(tenant: str) -> None:
    write_users(tenant)
    compact_directory(tenant, BLOG.DESCRIPTION, retain_bytes=0)


def compact_online(tenant: str) -> None:
    s = open_store(tenant, retain_bytes=0)
    try:

        async def go() -> None:
            for i in range(1, USERS + 1):
                await s.insert("User", user(i))
            await s.compact_now()

        run(go())
        assert s.compactions == 1
    finally:
        s.close()


COMPACTIONS = {"offline": compact_offline, "online": compact_online}


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077], ids=oct)
@pytest.mark.parametrize("kind", COMPACTIONS)
def test_the_snapshot_is_created_0644_less_the_umask_as_the_other_tenant_files(tenant, umask, kind, mask):
    umask(mask)
    COMPACTIONS[kind](tenant)
    mode = os.stat(os.path.join(tenant, "snapshot")).st_mode & 0o777
    assert mode == 0o644 & ~mask


@pytest.mark.parametrize("kind", COMPACTIONS)
def test_an_older_longer_snapshot_new_is_emptied_before_the_snapshot_is_written(tenant, kind):
    layer = LeftoverAtOpen()
    with files.use(layer):
        COMPACTIONS[kind](tenant)
    assert layer.planted == 1
    path = os.path.join(tenant, "snapshot")
    assert not os.path.exists(path + ".new")
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) < len(LEFTOVER) and b"jjjj" not in data
    head, users = snapshot_users(tenant)
    assert head == USERS
    assert sorted(users) == list(range(1, USERS + 1))
    assert all(users[i]["email"] == user(i)["email"] for i in users)
