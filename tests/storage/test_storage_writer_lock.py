"""dbsvc/storage/lock.py on real files, rule by rule of its docstring: the LOCK file's text,
a second opener refused with the holder's pid and nothing touched, release, the probe, and
the descriptor closed on exec. A flock belongs to the open file description, so a second
`acquire` in this very process is refused as another process's would be (rule 2).
Fixture-free (temporary directories made in each test), so `bench/mutation_inprocess.py`
runs it (session 16, wt-mpo6)."""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
import sys
import tempfile

import pytest

from dbsvc.errors import TenantLocked
from dbsvc.storage import files
from dbsvc.storage.lock import LOCK_NAME, WriterLock, probe_lock


def tenant() -> tempfile.TemporaryDirectory[str]:
    """A tenant directory for one test, removed when its `with` ends."""
    return tempfile.TemporaryDirectory(prefix="dbsvc-lock-")


def lock_text(directory: str) -> bytes:
    with open(os.path.join(directory, LOCK_NAME), "rb") as f:
        return f.read()


def descriptors_of(path: str) -> list[int]:
    """This process's descriptors open on `path`."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == path:
                found.append(int(name))
        except OSError:
            continue
    return found


def test_the_writer_writes_its_pid_over_what_was_there():
    with tenant() as directory:
        with open(os.path.join(directory, LOCK_NAME), "w") as f:
            f.write("123456789012\n")
        lock = WriterLock.acquire(directory)
        assert lock_text(directory) == f"{os.getpid()}\n".encode()
        assert (lock.directory, lock.path, lock.held) == (directory, os.path.join(directory, LOCK_NAME), True)
        lock.release()


def test_a_second_opener_is_refused_with_the_holders_pid_and_touches_nothing():
    with tenant() as directory:
        first = WriterLock.acquire(directory)
        before = os.stat(os.path.join(directory, LOCK_NAME))
        with pytest.raises(TenantLocked) as refused:
            WriterLock.acquire(directory)
        assert (refused.value.path, refused.value.pid) == (directory, os.getpid())
        assert refused.value.__cause__ is None and refused.value.__suppress_context__
        after = os.stat(os.path.join(directory, LOCK_NAME))
        assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
        assert len(descriptors_of(os.path.join(directory, LOCK_NAME))) == 1  # the refused one closed
        first.release()


@pytest.mark.parametrize("text", [b"pid?\n", b"\xff\xfe12\n"], ids=["not-a-pid", "not-text"])
def test_a_holder_whose_pid_cannot_be_read_is_named_as_none(text: bytes):
    with tenant() as directory:
        path = os.path.join(directory, LOCK_NAME)
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        os.write(fd, text)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(TenantLocked) as refused:
            WriterLock.acquire(directory)
        assert refused.value.pid is None
        assert probe_lock(directory) == (True, None)
        os.close(fd)


def test_release_frees_the_lock_once_and_the_next_writer_takes_it():
    with tenant() as directory:
        lock = WriterLock.acquire(directory)
        lock.release()
        assert lock.held is False
        assert descriptors_of(lock.path) == []
        lock.release()  # a second release is nothing
        again = WriterLock.acquire(directory)
        assert again.held
        again.release()


def test_the_probe_says_free_held_and_by_whom_and_never_keeps_a_lock():
    with tenant() as directory:
        assert probe_lock(directory) == (False, None)  # no LOCK file yet
        lock = WriterLock.acquire(directory)
        assert probe_lock(directory) == (True, os.getpid())
        lock.release()
        assert probe_lock(directory) == (False, None)
        assert descriptors_of(lock.path) == []
        after = WriterLock.acquire(directory)  # the probe's shared lock was dropped
        after.release()


def test_the_lock_is_not_inherited_by_a_child_started_with_exec():
    with tenant() as directory:
        lock = WriterLock.acquire(directory)
        [fd] = descriptors_of(lock.path)
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        child = subprocess.run(
            [sys.executable, "-c", f"import os; os.fstat({fd})"], close_fds=False, capture_output=True, timeout=30
        )
        assert child.returncode != 0 and b"Bad file descriptor" in child.stderr
        lock.release()


def test_a_missing_tenant_directory_is_an_os_error_not_a_lock_clash():
    with tenant() as directory:
        pass
    with pytest.raises(FileNotFoundError):
        WriterLock.acquire(directory)


def test_the_lock_file_is_made_readable_by_all_and_writable_by_its_owner():
    mask = os.umask(0)
    try:
        with tenant() as directory:
            lock = WriterLock.acquire(directory)
            assert os.stat(lock.path).st_mode & 0o777 == 0o644
            lock.release()
    finally:
        os.umask(mask)


class PathOnly(files.FileOps):
    """Opens LOCK as an O_PATH descriptor, on which flock fails with EBADF: a lock failure
    other than "held", which acquire must raise as it came, its descriptor closed."""

    def __init__(self) -> None:
        self.closed: list[int] = []

    def open(self, path, flags, mode=0o777):  # type: ignore[override]
        return os.open(path, os.O_PATH | os.O_CLOEXEC)

    def close(self, fd):  # type: ignore[override]
        self.closed.append(fd)
        os.close(fd)


def test_a_lock_failure_other_than_held_is_raised_as_it_came_and_closes_the_descriptor():
    layer = PathOnly()
    with tenant() as directory:
        open(os.path.join(directory, LOCK_NAME), "w").close()
        with files.use(layer), pytest.raises(OSError) as failed:
            WriterLock.acquire(directory)
        assert failed.value.errno == errno.EBADF and not isinstance(failed.value, TenantLocked)
        assert len(layer.closed) == 1 and descriptors_of(os.path.join(directory, LOCK_NAME)) == []
