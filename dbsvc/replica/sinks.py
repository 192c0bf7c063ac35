"""Where `dbsvc replicate` keeps the good frames: FILE (`--out`) or standard output.

consumer.py receives and checks the frames (its rule 1); this module keeps them, by its
rules 2 and 3:

- `ReplicaFile`: FILE, a log without its header, locked with flock (a second consumer is
  refused), scanned on open with the log's own frame checks (`scan_frames`: a torn tail is
  cut, fsynced and reported; damage a good frame follows is `CorruptLog`, unless zeros just
  before it show unsynced appends, logfile rule 3; a file that ends inside a batch is cut
  back to the batch's first frame, logfile rule 5; every good frame's payload parsed as
  strict JSON, one that is not, under a good CRC, is `CorruptLog` and nothing is cut), then
  appended to in writes of up to
  `WRITE_BUFFER` bytes and fsynced when consumer.py says (`sync`). Every operation that
  creates, changes or makes FILE durable goes through `files.ops`, so the power-loss
  simulator judges FILE as it judges the log.
  Beside FILE, `FILE.history` holds the history of the server FILE's frames came from
  (storage/history.py's one checksummed line, written whole: tmp, fsync, rename, fsync the
  directory), so consumer.py rule 7 can tell a server that rewrote its history from one
  that continued it. It is written only before a frame of that history is appended, so it
  never names a history FILE's frames are not a prefix of. FILE's lock covers it too.
- `StdoutSink`: each event's JSON on standard output, one line each; a reader that went away
  (`| head`) marks the sink closed, and the run ends quietly.

Imports the frame functions of storage/logfile.py, the file seam storage/files.py and
dbsvc/strictjson.py; nothing of the server, no socket.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import select
import time
from typing import Any, BinaryIO, Protocol

from dbsvc.errors import ConfigError, CorruptLog
from dbsvc.storage import files
from dbsvc.storage.files import fsync_dir, write_all, write_atomic
from dbsvc.storage.history import HISTORY_SUFFIX, History, encode_history, read_history_file
from dbsvc.storage.logfile import (
    frame_after_damage,
    frame_end,
    frame_error,
    frame_header,
    frame_payload,
    frame_payload_at,
)
from dbsvc.strictjson import strict_loads

WRITE_BUFFER = 1024 * 1024  # bytes held before one write (FILE is fsynced on its own schedule)


class Says(Protocol):
    """Where the open's message about a cut tail goes (consumer.py's `Reporter`)."""

    def say(self, message: str) -> None: ...


class ReplicaFile:
    """FILE, locked, scanned, cut back to its last good frame, then appended to."""

    def __init__(
        self,
        path: str,
        fd: int,
        last_offset: int | None,
        last_frame: bytes | None = None,
        history: History | None = None,
    ) -> None:
        self.path = path
        self.last_offset = last_offset
        self.last_frame = last_frame  # the frame of `last_offset` (consumer.py rule 7)
        self.history = history  # FILE.history's record, None when there is none (consumer.py rule 7)
        self._fd = fd
        self._buffer: list[bytes] = []
        self._buffered = 0
        self.unsynced = 0
        self.synced_at = time.monotonic()
        self.closed = False

    @classmethod
    def open(cls, path: str, report: Says) -> ReplicaFile:
        created = not os.path.exists(path)
        try:
            fd = files.ops.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot open {path!r}: {exc.strerror}") from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConfigError(f"{path!r} is in use by another `dbsvc replicate`") from None
            if created:
                fsync_dir(os.path.dirname(os.path.abspath(path)))
            last, frame = cls._recover(path, fd, report)
            history = read_file_history(path)
        except BaseException:
            files.ops.close(fd)
            raise
        return cls(path, fd, last, frame, history)

    def adopt_history(self, history: History) -> None:
        """FILE's frames are a prefix of `history` (consumer.py rule 7 proved it): record it,
        durably, before any frame of it is appended."""
        if history != self.history:
            write_atomic(self.path + HISTORY_SUFFIX, encode_history(history))
            self.history = history

    @staticmethod
    def _recover(path: str, fd: int, report: Says) -> tuple[int | None, bytes | None]:
        """consumer.py rule 3: the last good offset and its frame; a torn tail cut; damage before the
        tail refused."""
        size = os.fstat(fd).st_size
        if size == 0:
            return None, None
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            end, last, reason = scan_frames(path, data)
            frame = last_frame(data, end) if last is not None else None
        if reason is not None:
            report.say(
                f"{path}: cutting a torn tail of {size - end} bytes at byte {end} ({reason}); "
                + ("the file held no whole frame" if last is None else f"resuming after offset {last}")
            )
            files.ops.ftruncate(fd, end)
            files.ops.fsync(fd)
        return last, frame

    def write(self, frame: bytes, event: dict[str, Any]) -> None:
        self._buffer.append(frame)
        self._buffered += len(frame)
        self.unsynced += len(frame)
        self.last_offset = event["offset"]
        self.last_frame = frame
        if self._buffered >= WRITE_BUFFER:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            write_all(self._fd, b"".join(self._buffer))
            self._buffer.clear()
            self._buffered = 0

    def sync(self) -> None:
        self._flush()
        if self.unsynced:
            files.ops.fsync(self._fd)
            self.unsynced = 0
        self.synced_at = time.monotonic()

    def close(self) -> None:
        if self._fd >= 0:
            try:
                self.sync()
            finally:
                files.ops.close(self._fd)  # releases the flock
                self._fd = -1


def read_file_history(path: str) -> History | None:
    """The record of FILE.history, None when there is none (a new FILE, or one written before
    histories); `CorruptLog` naming it when it does not verify."""
    return read_history_file(path + HISTORY_SUFFIX)


def scan_frames(path: str, data: Any) -> tuple[int, int | None, str | None]:
    """(end of the last good frame, its offset or None, why the rest is a torn tail or None)
    of a headerless log image; `CorruptLog` when a good frame follows damage (logfile rule 3)."""
    size = len(data)
    pos, last, expected, search = 0, None, None, 0
    reason = None
    first = frame_header(data, 0)
    if first is not None:
        # The file starts wherever its first run began. The offset field is outside the CRC,
        # so the first frame's is confirmed by its CRC-protected payload (consumer.py rule 3).
        search = first.offset
        reason = frame_error(data, 0, search)
        if reason is None:
            inner = _payload_offset(frame_payload_at(data, 0))
            if inner == search:
                expected = search
            else:
                reason = f"frame offset {search} disagrees with its payload's offset {inner!r}"
                search = inner if isinstance(inner, int) and inner >= 0 else search
    batch: tuple[int, int, int] | None = None  # an unfinished batch: (first offset, last, byte position)
    while pos < size:
        if expected is None:  # the first frame is bad, or the file tiny
            reason = reason or frame_error(data, 0, search)  # too short for a header
        else:
            reason = frame_error(data, pos, expected)
            if reason is None:
                mark = _batch_mark(_strict_event(path, data, pos, expected))
                if mark is not None and batch is None and expected < mark[1]:
                    batch = (expected, mark[1], pos)
                elif mark is None or mark[1] == expected:
                    batch = None
                pos = frame_end(data, pos)
                last, expected = expected, expected + 1
                continue
        later = frame_after_damage(data, pos, search if expected is None else expected)
        if later is not None:
            raise CorruptLog(path, pos, f"{reason}; a good frame follows at byte {later}, so this is not a torn tail")
        return _cut_batch(batch, pos, last, reason)
    return _cut_batch(batch, pos, last, None)


def _cut_batch(
    batch: tuple[int, int, int] | None, pos: int, last: int | None, reason: str | None
) -> tuple[int, int | None, str | None]:
    """`scan_frames`' answer when the good frames end inside a batch (events.py "Batches"):
    cut back to the batch's first frame, as the log's recovery does (logfile.py rule 5), so
    FILE never ends inside a batch and the next run fetches the batch again, whole."""
    if batch is None:
        return pos, last, reason
    first, final, start = batch
    why = f"an unfinished batch: rows {first} to {final}, the file ends after row {last}"
    return start, (first - 1 if start > 0 else None), why + (f" ({reason} there)" if reason else "")


def _strict_event(path: str, data: Any, pos: int, offset: int) -> Any:
    """The payload of the good frame (its CRC checked) of `offset` at byte `pos`, parsed as
    strict JSON (dbsvc/strictjson.py): a CRC vouches only for the bytes, and a `NaN` or
    `1e400` put there under a good CRC is damage, never a torn tail, so FILE is refused as
    it is (`CorruptLog` naming the byte and the offset), nothing cut."""
    try:
        return strict_loads(frame_payload_at(data, pos))
    except ValueError as exc:  # UnicodeDecodeError and a non-finite number included
        raise CorruptLog(
            path,
            pos,
            f"the frame at offset {offset} is not JSON ({exc}), expected strict JSON as a server writes; "
            "its CRC is good, so this is damage, not a torn tail: nothing was cut",
        ) from None


def _batch_mark(event: Any) -> tuple[int, int] | None:
    """The (first, last) offsets of a parsed payload's `batch` mark, or None."""
    try:
        mark = event.get("batch")
        return None if mark is None else (int(mark["first"]), int(mark["last"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def last_frame(data: Any, end: int) -> bytes:
    """A copy of the last of the whole frames in bytes [0, end) of a scanned image."""
    pos = start = 0
    while pos < end:
        start, pos = pos, frame_end(data, pos)
    return bytes(data[start:pos])


def _payload_offset(payload: bytes) -> Any:
    try:
        event = json.loads(payload)
    except ValueError:
        return None
    return event.get("offset") if isinstance(event, dict) else None


class StdoutSink:
    """consumer.py rule 2 without --out: one JSON line per event on standard output."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self.path = "standard output"
        self.last_offset: int | None = None
        self.unsynced = 0
        self.synced_at = time.monotonic()
        self.closed = False  # the reader went away (`| head`)

    def write(self, frame: bytes, event: dict[str, Any]) -> None:
        self.last_offset = event["offset"]
        self.unsynced += len(frame)
        try:
            self._out.write(bytes(frame_payload(frame)) + b"\n")
        except BrokenPipeError:
            self._broken()

    def sync(self) -> None:
        try:
            self._out.flush()
        except BrokenPipeError:
            self._broken()
        self.unsynced = 0
        self.synced_at = time.monotonic()
        if not self.closed:
            # A pipe whose reader left (`| head -n 5`) reports POLLERR on its write end:
            # notice it now rather than at the next event, which may be hours away.
            poller = select.poll()
            poller.register(self._out.fileno(), 0)
            if any(mask & (select.POLLERR | select.POLLHUP) for _fd, mask in poller.poll(0)):
                self._broken()

    def _broken(self) -> None:
        self.closed = True
        # Later flushes (interpreter exit included) must not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._out.fileno())
        os.close(devnull)

    def close(self) -> None:
        self.sync()
