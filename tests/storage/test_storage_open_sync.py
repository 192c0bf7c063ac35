"""A writable open with sync full fsyncs the log it found before it takes a write
(logwriter.py `LogWriter.sync_opened`): what a process wrote with fsync off is made durable
by the open, not by the first group commit, whose writers would wait for all of it.

Checked here, through the file layer's seam (`files.use`) on real files: the open's fsync
of the log, before any write; none with sync off or read-only; an fsync refused at open is a
clear error that loses nothing and leaves the tenant to open again; and the queue's fsync
count (`stats`, the bench's writes per fsync) leaves the open's out."""

from __future__ import annotations

import errno
import os

import pytest

from dbsvc.errors import StorageError
from dbsvc.storage import files
from dbsvc.storage.files import FileOps
from support.storage import open_store, run, user


class FsyncLog(FileOps):
    """The real file layer, noting the path of each descriptor fsynced (`/proc/self/fd`);
    `refuse` makes an fsync of a file named `log` raise EIO instead."""

    def __init__(self, refuse: bool = False) -> None:
        self.synced: list[str] = []
        self.refuse = refuse

    def fsync(self, fd: int) -> None:  # type: ignore[override]
        path = os.readlink(f"/proc/self/fd/{fd}")
        self.synced.append(path)
        if self.refuse and os.path.basename(path) == "log":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync(fd)


def _seed_unsynced(tenant: str, count: int = 5) -> None:
    """Users 1..count written by a store with fsync off, then closed."""
    s = open_store(tenant, sync="off")
    try:
        for i in range(1, count + 1):
            run(s.insert("User", user(i)))
    finally:
        s.close()


def _log_fsyncs(ops: FsyncLog, tenant: str) -> int:
    return ops.synced.count(os.path.realpath(os.path.join(tenant, "log")))


def test_a_writable_open_with_sync_full_fsyncs_the_log_before_any_write(tenant, stores):
    _seed_unsynced(tenant)
    ops = FsyncLog()
    with files.use(ops):
        s = stores(tenant)
        assert _log_fsyncs(ops, tenant) == 1
        assert s.stats()["fsyncs"] == 0  # the queue's count is the acknowledged writes' alone
        run(s.insert("User", user(6)))
        assert _log_fsyncs(ops, tenant) == 2
        assert s.stats()["fsyncs"] == 1
    assert sorted(s.tables["User"].records) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("how", [{"sync": "off"}, {"readonly": True}])
def test_an_open_with_sync_off_or_read_only_fsyncs_nothing(tenant, stores, how):
    _seed_unsynced(tenant)
    ops = FsyncLog()
    with files.use(ops):
        s = stores(tenant, **how)
        assert _log_fsyncs(ops, tenant) == 0
    assert sorted(s.tables["User"].records) == [1, 2, 3, 4, 5]


def test_an_fsync_refused_at_open_is_a_clear_error_and_loses_nothing(tenant, stores):
    _seed_unsynced(tenant)
    size = os.path.getsize(os.path.join(tenant, "log"))
    with files.use(FsyncLog(refuse=True)), pytest.raises(StorageError) as raised:
        open_store(tenant)
    message = str(raised.value)
    assert "could not fsync the log" in message and repr(os.path.join(tenant, "log")) in message
    assert "Input/output error" in message and "nothing was written" in message
    assert os.path.getsize(os.path.join(tenant, "log")) == size
    s = stores(tenant)  # the lock was let go: the next open works, every record there
    assert sorted(s.tables["User"].records) == [1, 2, 3, 4, 5]
    run(s.insert("User", user(6)))
    assert sorted(s.tables["User"].records) == [1, 2, 3, 4, 5, 6]
