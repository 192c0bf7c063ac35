"""The tenant's writer lock: one exclusive `fcntl.flock` on `<tenant>/LOCK`.

Layout::

    <tenant>/LOCK      text: the holder's pid and a newline (empty before the first writer)

Rules:

1. A writer opens `LOCK` (creating it if absent) and takes `flock(LOCK_EX | LOCK_NB)`. It
   keeps that descriptor open for the life of the store; closing it releases the lock, and
   so does the process dying (SIGKILL included), so a stale lock cannot survive its holder.
2. `flock`, not `lockf`/`fcntl(F_SETLK)`: a POSIX record lock silently disappears when the
   same process closes *any* descriptor of the file (for example a read-only tool in the same
   process), while a flock belongs to the open file description alone.
3. A second opener gets `TenantLocked(path, pid)` naming the holder's pid (read from the file)
   and touches nothing: the file already exists, so `O_CREAT` does not modify it, and the pid
   is written only by the process that won the lock.
4. Probing (`tenant list`, `tenant drop`) uses a non-blocking *shared* flock attempt, released
   at once, so probing never blocks a starting writer for longer than the probe.
5. The descriptor is `O_CLOEXEC`: a child started with exec never inherits the lock (a fork
   without exec would; dbsvc never forks).

Imports only the stdlib, `dbsvc.errors` and the file seam (`files.ops`, files.py).
"""

from __future__ import annotations

import errno
import fcntl
import os

from dbsvc.errors import TenantLocked
from dbsvc.storage import files

LOCK_NAME = "LOCK"


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class WriterLock:
    """An exclusive flock held on `<directory>/LOCK` until `release()`."""

    __slots__ = ("_fd", "directory", "path")

    def __init__(self, directory: str, path: str, fd: int) -> None:
        self.directory = directory
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: str) -> WriterLock:
        """Take the lock or raise `TenantLocked` naming the holder's pid (rule 3)."""
        path = os.path.join(directory, LOCK_NAME)
        fd = files.ops.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                files.ops.close(fd)
                raise
            pid = _read_pid(fd)
            files.ops.close(fd)
            raise TenantLocked(directory, pid) from None
        files.ops.ftruncate(fd, 0)
        files.ops.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        return cls(directory, path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (closing the descriptor releases the flock). The pid stays in the
        file; it is meaningless without the lock and the next writer overwrites it."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            files.ops.close(fd)


def probe_lock(directory: str) -> tuple[bool, int | None]:
    """(locked, holder pid) for a tenant directory, without ever blocking (rule 4)."""
    path = os.path.join(directory, LOCK_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False, None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True, _read_pid(fd)
            raise
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False, None
    finally:
        os.close(fd)
