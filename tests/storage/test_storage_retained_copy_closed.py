"""online.py `write_retained`, the thread step that copies the frames a compaction retains
into log.retained.new: `close()` (`Progress.cancelled`) stops it before its next chunk.

Why a test of its own: the copy's pauses (`WallPacer`) come only after a piece's fsync
(`files.flush_past`, every FLUSH_BYTES), and they read the flag without raising, so a copy
that was not handed `progress.check` for between its chunks went on to its end, and a
segment shorter than FLUSH_BYTES was copied whole after the store had closed (docs/mutation.md,
session 22: `write_retained` 4, left open). Real files in a throwaway directory; the logs are
written with logfile.py's own encoders, since the format is not what is asked here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dbsvc.storage import online, retain
from dbsvc.storage.files import FaultPlan
from dbsvc.storage.logfile import encode_frame, encode_header

EPOCH = "fedcba9876543210fedcba9876543210"
OLDER = "0123456789abcdef0123456789abcdef"


def _log(path: Path, epoch: str, base: int, count: int) -> bytes:
    """A log of base `base` holding frames base + 1 .. base + count; its frames' bytes."""
    frames = b"".join(encode_frame(base + n, b'{"n":%d,"pad":"%s"}' % (n, b"x" * 90)) for n in range(1, count + 1))
    path.write_bytes(encode_header(epoch, base) + frames)
    return frames


def _plan(tmp_path: Path) -> tuple[retain.Plan, bytes, bytes]:
    """Two sources: a retained segment of an earlier epoch (frames 6..10) and the log
    (frames 11..13); the plan keeps both whole. The bytes of each source's frames."""
    older = _log(tmp_path / "log.retained", OLDER, 5, 5)
    newer = _log(tmp_path / "log", EPOCH, 10, 3)
    segment = retain.load(str(tmp_path / "log.retained"), 10)
    assert segment is not None
    p = retain.plan(10**6, EPOCH, segment, str(tmp_path / "log"), os.path.getsize(tmp_path / "log"), 10, 13)
    assert p is not None and len(p.sources) == 2
    return p, older, newer


class _ClosedAtCheck(online.Progress):
    """A compaction's progress that `close()` cancels just as its `n`th check is asked."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.asked = 0
        self.n = n

    def check(self) -> None:
        self.asked += 1
        if self.asked == self.n:
            self.cancelled = True
        super().check()


def test_a_retained_copy_not_closed_copies_every_source_whole(tmp_path):
    """The step as a compaction runs it: both sources, under the new epoch, one check a
    chunk (each source is one chunk here)."""
    p, older, newer = _plan(tmp_path)
    progress = _ClosedAtCheck(0)
    pending = online.write_retained(str(tmp_path), p, progress, FaultPlan(None))
    assert pending is not None and (pending.base, pending.end) == (5, 13)
    data = (tmp_path / "log.retained.new").read_bytes()
    assert data == encode_header(EPOCH, 5) + older + newer
    assert progress.asked == 2


def test_a_retained_copy_whose_store_closed_before_it_began_copies_nothing(tmp_path):
    p, _older, _newer = _plan(tmp_path)
    progress = online.Progress()
    progress.cancelled = True
    with pytest.raises(online.Cancelled):
        online.write_retained(str(tmp_path), p, progress, FaultPlan(None))
    assert not (tmp_path / "log.retained.new").exists()  # files.write_durably: a failed file goes


def test_a_retained_copy_closed_between_its_chunks_stops_before_the_next(tmp_path):
    """Closed as the second chunk (the log's) is about to be read: the step raises
    `Cancelled` there, at its second check, and the partial log.retained.new is removed
    (files.write_durably; since session 23 not left for the compaction to discard)."""
    p, _older, _newer = _plan(tmp_path)
    progress = _ClosedAtCheck(2)
    with pytest.raises(online.Cancelled):
        online.write_retained(str(tmp_path), p, progress, FaultPlan(None))
    assert progress.asked == 2
    assert not (tmp_path / "log.retained.new").exists()
