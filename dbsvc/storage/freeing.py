"""Freeing a replaced file's blocks a piece at a time, when nobody else reads it.

After an online compaction's switch (online.py) the old snapshot, the old retained segment
and the old log have lost their names (renamed over) but are still open: the store holds
a descriptor on each (`online.hold_old_files`, and the old log's writer). The last close
of a 60+ MB file frees all its blocks in one go, and on ext4 a group commit's fsync
meanwhile waits for the journal behind that free: the slowest request across the release
was 2.6-9.0 times the median (bench/README.md, wt-ctail). `free` shrinks the file with
`ftruncate` FREE_BYTES at a time, sleeping FREE_PAUSE between two pieces, so that no one
free holds the journal long, and then closes it.

Rules:

1. Only a file without a name is shrunk (`st_nlink == 0`). A file that still has one (a
   compaction that failed before its commit point hands back descriptors of files that
   stay the store's) is only closed: truncating it would destroy the store's data.
2. Only a file nobody else has open is shrunk. A `/replicate` reader streaming the old log
   or retained segment (replay.py rule 3), a follower downloading the old snapshot
   (follow.py `epoch_snapshot`) and `dbsvc backup` in another process (datatools/backup.py)
   each read through their own descriptor and rely on the file staying whole: a shrink
   would cut what they read. The kernel counts those readers for us, across processes:
   a write lease (fcntl(2) `F_SETLEASE`, `F_WRLCK`) is granted only when the descriptor
   asking is the only open file description of the file. It is taken and dropped at once
   (held, a reader opening the file would make the kernel signal us); since the file has
   no name, no new reader can open it afterwards (short of /proc/PID/fd), so the answer
   stays true while the file shrinks. Refused (someone reads it), or not available (not
   Linux, leases disabled, a file system without them): the file is closed whole, and is
   freed when its last reader lets go, as before this module.
3. A small file (at most FREE_BYTES) is closed whole: one piece either way.
4. `stop()` of the running piece loop (the store closing): the rest is closed whole, so
   `close()` never waits FREE_PAUSE times the pieces.

Crashes: the files have no name, so a crash at any moment of the release (kill -9 between
two pieces included) frees them anyway and leaves nothing to recover: the store's files
are the new epoch's, made durable before the release began. The fault hook
`faults.check("release")` runs before each piece (`DBSVC_FAULT=release:2:KILL` dies
after the first), so a test can kill the process mid-release.

Imports only files.py (the seam: every shrink is `files.ops.ftruncate`).
"""

from __future__ import annotations

import enum
import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from dbsvc.storage import files
from dbsvc.storage.files import NO_FAULTS, FaultPlan

# A piece: 4 MiB, as the compaction's fsyncs (files.FLUSH_BYTES). Measured apart, a small
# log's fsync waited at most 23-32 ms while a 68 MB unlinked file was truncated 4 MiB at a
# time, against 41-55 ms when its close freed it whole (bench/README.md, wt-ctail).
FREE_BYTES = 4 << 20
FREE_PAUSE = 0.005  # seconds between two pieces: a group commit's fsync goes in between


class Freed(enum.Enum):
    """How a replaced file's blocks were freed."""

    PIECES = "pieces"  # nobody else had it open: shrunk FREE_BYTES at a time, then closed
    WHOLE = "whole"  # small, or stopped: the close freed (the rest of) it
    SHARED = "shared"  # another descriptor reads it: closed whole, freed by the last reader
    UNSURE = "unsure"  # no lease to ask with (rule 2): closed whole
    LINKED = "linked"  # it still has a name (rule 1): only closed


@dataclass(frozen=True, slots=True)
class Release:
    """One replaced file's release: its size when it began, the `ftruncate` calls that
    shrank it, and how it was freed."""

    size: int
    pieces: int
    freed: Freed


def alone(fd: int) -> bool | None:
    """Whether `fd` is the only open file description of its file in any process (rule 2):
    True or False as the kernel answers a write lease, None when it cannot be asked."""
    setlease = getattr(fcntl, "F_SETLEASE", None)
    if setlease is None:
        return None
    try:
        fcntl.fcntl(fd, setlease, fcntl.F_WRLCK)
    except BlockingIOError:  # EAGAIN: another open file description exists
        return False
    except OSError:  # EINVAL, EACCES: leases disabled, not supported or not ours
        return None
    fcntl.fcntl(fd, setlease, fcntl.F_UNLCK)
    return True


def free(fd: int, stopped: Callable[[], bool], faults: FaultPlan = NO_FAULTS) -> Release:
    """Free the blocks of the file behind `fd` as the module's rules say; does not close
    `fd` (the caller does, through the seam it was opened with)."""
    status = os.fstat(fd)
    size = status.st_size
    if status.st_nlink:
        return Release(size, 0, Freed.LINKED)
    if size <= FREE_BYTES or stopped():
        return Release(size, 0, Freed.WHOLE)
    answer = alone(fd)
    if not answer:
        return Release(size, 0, Freed.SHARED if answer is False else Freed.UNSURE)
    pieces = 0
    while size > 0:
        if pieces:
            time.sleep(FREE_PAUSE)
        faults.check("release")
        if stopped():
            return Release(status.st_size, pieces, Freed.WHOLE)
        size = max(size - FREE_BYTES, 0)
        files.ops.ftruncate(fd, size)
        pieces += 1
    return Release(status.st_size, pieces, Freed.PIECES)
