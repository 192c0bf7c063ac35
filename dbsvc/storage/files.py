"""Small file-system helpers every storage module shares, plus the fault-injection hook.

Durable replacement of a file (`write_atomic`), used for `schema.json` and during
compaction::

    open(<name>.tmp, O_CREAT|O_TRUNC) ; write ; fsync(file) ; close
    rename(<name>.tmp, <name>)        ; fsync(directory)

A crash before the rename leaves the old file and a stray `.tmp` (removed on the next
open); after the rename but before the directory fsync, either name may survive a power
loss, and both hold complete, fsynced contents. Nothing relies on the new name before the
directory fsync returns.

Fault injection (tests only): `DBSVC_FAULT` holds comma-separated rules `OP:N[:ERRNO]`, for
example `DBSVC_FAULT=fsync:3:EIO,write:10:ENOSPC`. The Nth call of OP (counted per
`FaultPlan`, that is per open store) raises `OSError(ERRNO)` instead of doing the work.
`compact:K:KILL` sends SIGKILL to the process itself after compaction step K. With the
variable unset (production) every check is one falsy attribute test.
"""

from __future__ import annotations

import errno
import os
import signal

TMP_SUFFIX = ".tmp"


def fsync_dir(path: str) -> None:
    """fsync a directory so that creates, renames and unlinks inside it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write until every byte is written (a short write is not an error by itself)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def write_atomic(path: str, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace `path` with `data` durably: tmp, fsync, rename, fsync the directory."""
    tmp = path + TMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    if sync_dir:
        fsync_dir(os.path.dirname(path) or ".")


class FaultPlan:
    """Parsed `DBSVC_FAULT` rules with per-operation call counters."""

    __slots__ = ("counts", "rules")

    def __init__(self, spec: str | None) -> None:
        self.rules: dict[str, tuple[int, str]] = {}
        self.counts: dict[str, int] = {}
        for part in (spec or "").split(","):
            part = part.strip()
            if not part:
                continue
            op, _, rest = part.partition(":")
            nth, _, what = rest.partition(":")
            self.rules[op] = (int(nth), what.upper() or "EIO")

    @classmethod
    def from_env(cls) -> FaultPlan:
        return cls(os.environ.get("DBSVC_FAULT"))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def check(self, op: str) -> None:
        """Count one call of `op`; raise or die if a rule says this call fails."""
        if op not in self.rules:
            return
        count = self.counts.get(op, 0) + 1
        self.counts[op] = count
        nth, what = self.rules[op]
        if count != nth:
            return
        if what == "KILL":
            os.kill(os.getpid(), signal.SIGKILL)
        code = getattr(errno, what)
        raise OSError(code, f"{os.strerror(code)} (injected by DBSVC_FAULT {op}:{nth})")


NO_FAULTS = FaultPlan(None)
