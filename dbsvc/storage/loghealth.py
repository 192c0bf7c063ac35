"""Whether the log takes writes, for the commit queue (commit.py, whose base `LogHealth` is):
the failure rules 1 and 4 of commit.py's docstring as state, and the probe for room while writes
are refused.

States (`WriteState`, logwriter.py)::

    OK --a write found no space, the cut-back succeeded--> REFUSING --a probe found room--> OK
    OK or REFUSING --a failed fsync, any other write error, a failed cut-back--> FAILED

FAILED lasts until a restart. `failed` holds the error while the state is not OK; a probe
runs at most once per RETRY_INTERVAL, from a write (`check_writable`) or `/ready`.
Imports nothing of the queue: the queue is built on it.
"""

from __future__ import annotations

import errno
import logging
import time
from bisect import bisect_left
from dataclasses import dataclass, field

from dbsvc.errors import Unavailable
from dbsvc.storage.logwriter import LogWriter, WriteHealth, WriteState

log = logging.getLogger("dbsvc.storage")

ROOM_ERRORS = frozenset((errno.ENOSPC, errno.EDQUOT))  # a write error that room can cure
RETRY_INTERVAL = 1.0  # seconds between two probes for room
BATCH_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # writes per commit (CommitStats)


@dataclass(slots=True)
class CommitStats:
    """Counters of a commit queue; fixed size however long the store runs. `batches[i]`
    counts the commits that acknowledged at most BATCH_BOUNDS[i] writes (the last: more),
    the group-commit histogram of /metrics."""

    fsyncs: int = 0
    commits: int = 0  # acknowledged writes (fsyncs / commits is the group-commit ratio)
    failures: int = 0
    batches: list[int] = field(default_factory=lambda: [0] * (len(BATCH_BOUNDS) + 1))

    def count_batch(self, size: int) -> None:
        self.commits += size
        self.batches[bisect_left(BATCH_BOUNDS, size)] += 1


class LogHealth:
    """The log's writer, whether it takes writes, and the queue's counters."""

    def __init__(self, writer: LogWriter, *, sync: bool) -> None:
        self.writer = writer
        self.sync = sync
        self.failed: OSError | None = None
        self.stats = CommitStats()
        self._room_error = False  # `failed` is a write that found no space (rule 4)
        self._retry_at: float | None = None  # REFUSING: when the next probe for room may run

    def check_writable(self) -> None:
        """Raise `Unavailable` unless the log takes writes; while REFUSING, probe for room
        first when a probe is due (rule 4)."""
        if self.failed is not None and not self._room_again():
            raise Unavailable(self.health().detail)

    def health(self) -> WriteHealth:
        if self.failed is None:
            return WriteHealth(WriteState.OK)
        if self._room_error:  # also before the cut-back (rule 3) is done
            return WriteHealth(
                WriteState.REFUSING,
                f"writes are refused: no space for the log ({self.failed}); the server "
                f"checks for room every {RETRY_INTERVAL:g} s and takes writes again "
                "once there is some, with no restart",
            )
        return WriteHealth(
            WriteState.FAILED,
            f"the store is read-only after an I/O error on the log ({self.failed}): "
            "nothing written since can be trusted; fix the disk, then restart the server",
        )

    def fail_stop(self, exc: OSError) -> None:
        """Stop taking writes until a restart (rule 4, FAILED)."""
        self.failed, self._room_error, self._retry_at = exc, False, None

    def _room_again(self) -> bool:
        """REFUSING, a probe due and successful: back to OK (True)."""
        if self._retry_at is None or time.monotonic() < self._retry_at:
            return False
        self._retry_at = time.monotonic() + RETRY_INTERVAL
        try:
            self.writer.probe_room()
        except OSError as exc:
            if exc.errno in ROOM_ERRORS:
                return False
            log.error("probing %s for room failed: %s; the store is now read-only", self.writer.path, exc)
            self.fail_stop(exc)
            return False
        log.warning(
            "%s has room again (the write refused since failed with: %s); taking writes again",
            self.writer.path,
            self.failed,
        )
        self.failed, self._room_error, self._retry_at = None, False, None
        return True

    def _refuse_until_room(self) -> None:
        """REFUSING after the cut-back succeeded: the first probe for room is due in
        RETRY_INTERVAL (rule 4)."""
        self._retry_at = time.monotonic() + RETRY_INTERVAL

    def _write_failed(self, exc: OSError) -> None:
        """A write raised: stop taking writes (rules 1 and 4); the committer, or the
        caller on its behalf, fails what is queued (rule 3)."""
        self._room_error = exc.errno in ROOM_ERRORS
        log.error(
            "write to %s failed: %s; %s",
            self.writer.path,
            exc,
            "writes are refused until there is room" if self._room_error else "the store is now read-only",
        )
        self.failed = exc

    def _write_held(self) -> bool:
        """The held frames written; False (the failure recorded) if that raised."""
        try:
            self.writer.write_held()
        except OSError as exc:
            self._write_failed(exc)
            return False
        return True
