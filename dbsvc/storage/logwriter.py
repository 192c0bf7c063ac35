"""The log file's write side for the commit queue (commit.py): frames held, then handed to
the kernel with one write call; fsync; the cut back to the acknowledged end after a failed
write; the probe for room while writes are refused (commit.py rule 4). And what the queue
says of itself: `WriteState`, `WriteHealth`.

Invariants: `acked <= durable <= written`, each a byte position of the log; `written` is
the file's end plus the held frames; only the log's one writer (the tenant's lock) calls
these, on the loop thread, or in the fsync thread for `fsync` alone.
"""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass

from dbsvc.errors import StorageError
from dbsvc.storage import files
from dbsvc.storage.files import NO_FAULTS, FaultPlan, write_all

log = logging.getLogger("dbsvc.storage")

PROBE_BYTES = 64 * 1024  # what the probe for room appends and cuts off again (commit.py rule 4)


class WriteState(enum.Enum):
    """Whether the log takes writes (rule 4)."""

    OK = "ok"
    REFUSING = "refusing_writes"  # out of space; retried, resumes without a restart
    FAILED = "read_only"  # fail-stop: read-only until a restart
    READ_ONLY = "opened_read_only"  # a store opened read-only (tools); never writes


@dataclass(frozen=True, slots=True)
class WriteHealth:
    """What `Store.health()` reports: the state and, unless OK, why and what to do."""

    state: WriteState
    detail: str = ""

    @property
    def writable(self) -> bool:
        return self.state is WriteState.OK


class LogWriter:
    """Appends frames to an open log descriptor and fsyncs it. A frame is held first
    (`hold`: its byte position is fixed then) and handed to the kernel with the other
    held frames by one `write_held`."""

    def __init__(self, path: str, fd: int, size: int, faults: FaultPlan = NO_FAULTS) -> None:
        self.path = path
        self.fd = fd
        self.written = size  # end of the last frame accepted: in the file, or held
        self.durable = size  # bytes covered by the last successful fsync (or open)
        self.acked = size  # end of the last acknowledged frame
        self.faults = faults
        self._held: list[bytes] = []

    @property
    def held_frames(self) -> int:
        """Chunks held for the next `write_held` (not yet handed to the kernel): a frame
        each, or a batch's frames as one (`CommitQueue.submit_group`)."""
        return len(self._held)

    def hold(self, frame: bytes) -> int:
        """Accept `frame` for the next `write_held`; the end of the log after it."""
        self._held.append(frame)
        self.written += len(frame)
        return self.written

    def write_held(self) -> None:
        """Write the held frames with one write call. On an error they are dropped, and
        `written` is the file's end again."""
        held = self._held
        if not held:
            return
        data = held[0] if len(held) == 1 else b"".join(held)
        held.clear()
        try:
            if self.faults:
                self.faults.check("write")
            # O_APPEND and one writer (the lock): the frames land at the positions `hold` gave.
            write_all(self.fd, data)
        except BaseException:
            # A short write followed by an error still moved the file end; `truncate` cleans it.
            self.written = os.lseek(self.fd, 0, os.SEEK_END)
            raise

    def append(self, frame: bytes) -> int:
        """`hold` and `write_held` in one: write `frame` now."""
        end = self.hold(frame)
        self.write_held()
        return end

    def fsync(self) -> None:
        if self.faults:
            self.faults.check("fsync")
        files.ops.fsync(self.fd)

    def sync_opened(self) -> None:
        """fsync the log as the open found it, before a write is acknowledged on top of it
        (`Store.open` with sync full). What another process appended without an fsync (a
        seed or an import with sync off, a server run with SERVICE_SYNC=off) may still sit
        dirty in the page cache. The first group commit's fsync would write all of it, and
        every write waiting on that commit would wait with it (40-55 ms for a 100,000-post
        seed at 64 connections). The kernel's writeback of those pages, 30 s after they were
        written, made the group fsyncs of that time wait behind it (ext4 data=ordered: one
        journal; bench/README.md, wt-posttail). Here the open pays for it, before the
        server listens. On a clean file the call costs one cache flush of the disk (~2 ms
        here). Not counted in the queue's fsyncs (`stats`), and not a fault plan's fsync:
        nothing is acknowledged by it."""
        try:
            files.ops.fsync(self.fd)
        except OSError as exc:
            raise StorageError(
                f"could not fsync the log {self.path!r} at open ({exc.strerror or exc}): nothing was "
                "written, and no write is taken on a log the disk does not make durable"
            ) from exc

    def truncate_to_acked(self) -> bool:
        """Cut the log back to its acknowledged end, held frames dropped, durably; False
        (logged) if that failed."""
        self._held.clear()
        try:
            files.ops.ftruncate(self.fd, self.acked)
            files.ops.fsync(self.fd)
            self.written = self.durable = self.acked
        except OSError as exc:
            log.error("could not truncate %s to %d bytes after an I/O error: %s", self.path, self.acked, exc)
            return False
        return True

    def probe_room(self) -> None:
        """Raise OSError unless PROBE_BYTES more fit in the log (rule 4): append zeros at
        the acknowledged end (the file's end while writes are refused), then cut them off."""
        if self.faults:
            self.faults.check("write")
        try:
            write_all(self.fd, bytes(PROBE_BYTES))
        finally:
            files.ops.ftruncate(self.fd, self.acked)
