"""`dbsvc import --frames FILE`: rebuild an empty tenant from a `dbsvc replicate --out` file.

FILE is a server log without its header (dbsvc/replica/sinks.py writes it; the frame layout
is storage/logfile.py's, read here only through its frame functions). Each frame is applied
as a read replica applies the primary's stream (`Store.apply_replicated`, storage/follow.py):
the frame's bytes go to the new log with the primary's offset, so the rebuilt tenant's head
is FILE's last offset and its offsets name the rows the primary's did (an `after=` client or
a `replicate --out` consumer resumes against it).

Steps (nothing reaches the tenant before step 5, so a refused import leaves it as it was)::

    1  take the tenant's writer lock (TenantLocked, exit 2, while a server holds it); the
       tenant must be empty: head offset 0 (a used one is refused: its offsets already name
       other rows)
    2  read FILE.history if there is one (a checksummed record, storage/history.py); one
       that does not verify refuses the import
    3  scan FILE (mmap, read-only): frames back to back from offset 1 (a file started with
       `--after N` holds only changes, not the rows before them, and is refused); a torn
       tail (what a crash of `replicate` leaves) is left out and reported; damage a good
       frame follows is `CorruptLog` naming the byte and the offset
    4  apply every frame to a new store in STAGING, a directory inside the tenant, with
       every check a replica makes (model in the schema, the record's fields and values,
       insert of an absent id, update and delete of a present one); watermarks count per
       epoch, so a frame refused with `EpochChanged` (its watermark restarted: the primary
       compacted while FILE was written) is renumbered as a compaction renumbers
       (`renumber_frames`) and applied again (a refused frame was not applied at all)
    5  close the staged store (one last fsync), give it its history, move its files into the
       tenant (the log last: it is the commit point) and fsync the directory

History: the rebuilt tenant continues FILE's history, forked at FILE's last offset (as a
restore forks a backup's, storage/history.py rule 3): a consumer at or below that offset
continues; anything the primary wrote after it belongs to another history. Without
FILE.history the tenant starts a new history.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from dbsvc.errors import ConfigError, CorruptLog, EpochChanged, ImportRejected, StreamError, TenantError
from dbsvc.storage import Store, files
from dbsvc.storage.events import decode_event
from dbsvc.storage.files import fsync_dir
from dbsvc.storage.history import HISTORY_SUFFIX, History, new_history_id, read_history_file
from dbsvc.storage.lock import LOCK_NAME, WriterLock
from dbsvc.storage.logfile import (
    frame_after_damage,
    frame_end,
    frame_error,
    frame_header,
    frame_payload,
    renumber_frames,
)

STAGING = ".frames-import"  # inside the tenant directory, removed after each run
AWAIT_BYTES = 8 * 1024 * 1024  # frames applied before waiting for them to be durable
COMMIT_LAST = "log"  # the file moved last: the tenant holds the rows once it is in place


@dataclass
class FramesReport:
    frames: int = 0
    head: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # live records by model, at the head
    torn: str | None = None  # what was left out at the end of FILE, if anything
    history: str = ""
    seconds: float = 0.0

    def summary(self) -> str:
        counts = ", ".join(f"{name} {n}" for name, n in self.counts.items()) or "none"
        rate = f"{self.frames / self.seconds:,.0f} frames/s" if self.seconds > 0 else "-"
        return (
            f"imported {self.frames} frames in {self.seconds:.2f} s ({rate}): head offset {self.head}, "
            f"{self.history}; records: {counts}"
        )


def _refused(path: str, message: str) -> ImportRejected:
    return ImportRejected([f"{path}: {message}"], 1)


def scan_file(path: str, data: Any) -> tuple[int, int, str | None]:
    """(end of the last good frame, its offset (0: none), why the rest is a torn tail or
    None) of FILE's image. Frames start at offset 1; damage a good frame follows is
    `CorruptLog` naming the byte and the offset expected there (logfile rules 1-3)."""
    first = frame_header(data, 0)
    if first is not None and first.offset != 1 and frame_error(data, 0, first.offset) is None:
        raise _refused(
            path,
            f"starts at offset {first.offset}, expected 1: it holds the changes after offset "
            f"{first.offset - 1}, not the rows written before them, so it cannot rebuild a tenant "
            "(restore a backup taken at that offset instead, docs/data-tools.md)",
        )
    pos, expected, size = 0, 1, len(data)
    while pos < size:
        reason = frame_error(data, pos, expected)
        if reason is None:
            pos = frame_end(data, pos)
            expected += 1
            continue
        later = frame_after_damage(data, pos, expected)
        if later is not None:
            raise CorruptLog(
                path,
                pos,
                f"the frame of offset {expected}: {reason}; a good frame follows at byte {later}, "
                "so this is not a torn tail",
            )
        return pos, expected - 1, reason
    return pos, expected - 1, None


def _renumbered(store: Store, offset: int, frame: bytes) -> bytes:
    """`frame` with its watermark the next of its model here (step 4): what
    `apply_replicated` refused with `EpochChanged`, so the frame is an event of a known model."""
    event = decode_event(frame_payload(frame))
    delta = store.table(event.model).watermark + 1 - event.watermark
    return next(renumber_frames([(offset, frame)], {event.model: delta}, 0, offset + 1, []))


async def _apply(store: Store, data: Any, end: int, report: FramesReport) -> None:
    pos, pending, held = 0, None, 0
    try:
        while pos < end:
            stop = frame_end(data, pos)
            frame = bytes(data[pos:stop])
            offset = report.frames + 1
            try:
                pending = store.apply_replicated(frame)
            except EpochChanged:  # checked before anything is applied: renumber, then apply
                frame = _renumbered(store, offset, frame)
                pending = store.apply_replicated(frame)
            report.frames, pos = offset, stop
            held += len(frame)
            if held >= AWAIT_BYTES:
                await pending
                held = 0
        if pending is not None:
            await pending
        report.counts = dict(store.live_counts())
    finally:
        await store.aclose()


def _staged(directory: str) -> str:
    staging = os.path.join(directory, STAGING)
    shutil.rmtree(staging, ignore_errors=True)  # left by a crashed run (we hold the lock)
    os.mkdir(staging, 0o755)
    return staging


def _install(staging: str, directory: str) -> None:
    """Step 5: the staged files into the tenant, the log last, then the directory fsynced."""
    names = sorted((n for n in os.listdir(staging) if n != LOCK_NAME), key=lambda n: n == COMMIT_LAST)
    for name in names:
        files.ops.rename(os.path.join(staging, name), os.path.join(directory, name))
    fsync_dir(directory)
    shutil.rmtree(staging, ignore_errors=True)


def import_frames(directory: str, module: Any, path: str, tenant: str, *, sync: str = "full") -> FramesReport:
    """Steps 1-5 of the module docstring. `ImportRejected` (one `FILE: message`) for a file
    that cannot rebuild a tenant, `CorruptLog` for damage, `TenantError` for a used tenant."""
    report = FramesReport()
    started = time.monotonic()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"cannot read {path!r}: {exc.strerror}") from exc
    lock = WriterLock.acquire(directory)
    try:
        with os.fdopen(fd, "rb") as source:
            size = os.fstat(source.fileno()).st_size
            if size == 0:
                raise _refused(path, "holds no frame (an empty file)")
            with mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ) as data:
                existing = Store.open(directory, module.MODELS, module.DESCRIPTION, readonly=True, ring_capacity=0)
                try:
                    head = existing.head_offset
                finally:
                    existing.close()
                if head > 0:
                    raise TenantError(
                        f"tenant {tenant!r} holds rows up to offset {head}: --frames rebuilds an empty tenant "
                        "only (its offsets would name other rows); create a new tenant and import into it"
                    )
                history = read_history_file(path + HISTORY_SUFFIX)  # CorruptLog when it does not verify
                end, last, torn = scan_file(path, data)
                if last == 0:
                    raise _refused(path, f"holds no whole frame ({torn})")
                if torn is not None:
                    report.torn = f"left out a torn tail of {size - end} bytes at byte {end} ({torn})"
                if history is not None:
                    rebuilt = history.fork(last)
                    report.history = (
                        f"history {rebuilt.id[:8]}, forked at offset {last} from "
                        f"{os.path.basename(path)}{HISTORY_SUFFIX}'s {history.id[:8]}"
                    )
                else:
                    rebuilt = History(new_history_id())
                    report.history = f"a new history {rebuilt.id[:8]} (no {os.path.basename(path)}{HISTORY_SUFFIX})"
                staging = _staged(directory)
                try:
                    # A huge compaction threshold, as a follower's: the staged log is moved
                    # in whole, never compacted halfway.
                    store = Store.open(
                        staging, module.MODELS, module.DESCRIPTION, sync=sync, ring_capacity=0, compact_bytes=1 << 62
                    )
                    store.adopt_history(rebuilt)  # before any frame: a crash leaves no tenant half-told
                    try:
                        asyncio.run(_apply(store, data, end, report))
                    except StreamError as exc:
                        raise _refused(path, f"offset {exc.offset}: {exc.reason}") from None
                    _install(staging, directory)
                except BaseException:
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
    finally:
        lock.release()
    report.head = last
    report.seconds = time.monotonic() - started
    return report
