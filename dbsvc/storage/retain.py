"""Retention: the newest log rows a compaction removed, kept so a replica a little behind resumes.

Files of a tenant (beside those of compact.py)::

    <tenant>/log.retained        the retained segment; absent when nothing is retained
    <tenant>/log.retained.new    transient: written by a compaction before its commit point

A retained segment has exactly the log's format (logfile.py: a 40-byte header, then whole
frames back to back), so `LogScan` and `FrameWalk` read it. Its header holds

- epoch: the epoch of the log whose compaction wrote it (the log its newest frames came
  from; older frames carried over from an earlier segment came from earlier epochs);
- base offset: the offset before its first frame, the oldest `after` it can serve.

Its frames are gap-free and its last frame's offset is exactly the current log's base B,
so `Store.frames_after` streams the segment and then the log with no gap and no overlap.
Frames are copied byte for byte: a frame's `watermark` belongs to the epoch of the log it
was read from (online compaction renumbers only the frames it carries into the new log).
Offsets are global and never reused, so a frame of offset N is row N wherever it is read.

The rule (`plan`, `write_pending`): a compaction that replaces a log of base B1 by one of
base H (the new snapshot's head) keeps the newest whole frames of the old segment (if it
is usable) followed by the old log's frames up to H, at most `retain_bytes` bytes in all,
header included. When nothing fits (a budget of 0, or a newest frame bigger than the
budget) no segment is written and an old one is removed. An existing segment is never
trimmed outside a compaction; a writer opened with `retain_bytes=0` removes it.

Steps inside a compaction (compact.py `install` and online.py, same fault-hook numbers)::

    2  write log.retained.new from the old segment and the old log, fsync it
       (before the commit point: a crash discards it with the other `.new` files)
    7  rename log.retained.new -> log.retained, or unlink log.retained when nothing is
       retained (after the commit point and its directory fsync; step 9 fsyncs the
       directory again)

`compact.finish_interrupted` renames a leftover `log.retained.new` past the commit point,
or deletes it before. A crash between the commit point and step 7 of a compaction that
retained nothing leaves the old segment, which ends at B1 and no longer meets the log
(base H): it is ignored (below) and the next compaction removes it.

Use (`load`): a segment counts only if its header is sound, its first frame is base + 1
with a good CRC, and its last frame is exactly the log's base with a good CRC (found from
the end, so opening never reads the whole file). The frames between are checked as they
are read (offset continuity, CRC). A segment that fails any of this is logged and ignored,
never fatal: the store opens, and offsets only the segment held answer 410 `offset_gone`.
Damage found while streaming drops the segment for the rest of the store's life (that
reader gets `OffsetGone`, after only good frames); the next compaction replaces the file.

Reads are lazy: `read` seeks to the first wanted frame by bisection over byte positions
(`find_frame` resynchronises on a CRC-valid frame header; a JSON payload holds no NUL byte,
so a frame header cannot hide inside one) and then reads in 1 MiB chunks.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dbsvc.errors import CorruptLog
from dbsvc.storage import files
from dbsvc.storage.files import fsync_dir, write_all, write_durably
from dbsvc.storage.logfile import (
    FRAME,
    FRAME_HEADER_SIZE,
    FRAME_OFFSET,
    HEADER_SIZE,
    MAX_PAYLOAD,
    FrameWalk,
    decode_header,
    encode_header,
)

log = logging.getLogger("dbsvc.storage")

RETAINED_NAME = "log.retained"
NEW_SUFFIX = ".new"  # compact.NEW_SUFFIX (compact.py imports this module)
WINDOW = 1 << 16  # bytes per read when searching for a frame
CHUNK = 1 << 20  # bytes per read when streaming or copying
SEEK_BYTES = 1 << 16  # bisection stops within this many bytes of the target


@dataclass(frozen=True, slots=True)
class Segment:
    """A usable retained segment: frames base + 1 .. end, `end` being the log's base."""

    path: str
    epoch: str
    base: int  # offset before its first frame
    end: int  # offset of its last frame
    size: int  # bytes, header included
    last_pos: int  # byte position of its last frame


class SegmentDamaged(Exception):
    """A retained segment failed a check while it was read."""

    def __init__(self, path: str, position: int, reason: str) -> None:
        super().__init__(f"{path}: damaged at byte {position}: {reason}")
        self.path, self.position, self.reason = path, position, reason


@dataclass(frozen=True, slots=True)
class Source:
    """Frames `first`..`last` of a file, in bytes [start, stop)."""

    path: str
    start: int
    stop: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class Plan:
    """What a compaction may retain: `sources` oldest first, gap-free, the last ending at
    the new log's base."""

    budget: int
    epoch: str
    sources: tuple[Source, ...]


def plan(
    budget: int, epoch: str, segment: Segment | None, log_path: str, log_stop: int, log_base: int, head: int
) -> Plan | None:
    """The plan of a compaction that replaces the log (`epoch`, base `log_base`, good frames
    up to byte `log_stop`, the last one `head`); None when it retains nothing."""
    if budget <= 0:
        return None
    sources = []
    if segment is not None and segment.end == log_base:
        sources.append(Source(segment.path, HEADER_SIZE, segment.size, segment.base + 1, segment.end))
    if head > log_base:
        sources.append(Source(log_path, HEADER_SIZE, log_stop, log_base + 1, head))
    return Plan(budget, epoch, tuple(sources))


# -- finding frames ----------------------------------------------------------------------


def _frame_end(fd: int, pos: int, stop: int, lo: int, hi: int, header: bytes | None = None) -> tuple[int, int] | None:
    """(offset, end) of a good frame at byte `pos` with lo <= offset <= hi ending by `stop`."""
    if header is None:
        header = os.pread(fd, FRAME_HEADER_SIZE, pos)
        if len(header) < FRAME_HEADER_SIZE:
            return None
    offset, crc, length = FRAME.unpack_from(header)
    end = pos + FRAME_HEADER_SIZE + length
    if not lo <= offset <= hi or length > MAX_PAYLOAD or end > stop:
        return None
    payload = os.pread(fd, length, pos + FRAME_HEADER_SIZE)
    if len(payload) != length or zlib.crc32(payload) != crc:
        return None
    return offset, end


def _common_prefix(lo: int, hi: int) -> bytes:
    a, b = FRAME_OFFSET.pack(lo), FRAME_OFFSET.pack(hi)
    n = 0
    while n < FRAME_OFFSET.size and a[n] == b[n]:
        n += 1
    return a[:n]


def find_frame(fd: int, pos: int, stop: int, lo: int, hi: int) -> tuple[int, int] | None:
    """(byte position, offset) of the first good frame starting at or after `pos` whose
    offset is in [lo, hi] and which ends by `stop`; None if there is none."""
    if lo > hi:
        return None
    prefix = _common_prefix(lo, hi)
    while pos + FRAME_HEADER_SIZE <= stop:
        buf = os.pread(fd, min(WINDOW, stop - pos), pos)
        limit = len(buf) - FRAME_HEADER_SIZE  # a candidate's header lies inside buf
        if limit < 0:
            return None
        i = buf.find(prefix, 0, limit + len(prefix))
        while 0 <= i <= limit:
            found = _frame_end(fd, pos + i, stop, lo, hi, buf[i : i + FRAME_HEADER_SIZE])
            if found is not None:
                return pos + i, found[0]
            i = buf.find(prefix, i + 1, limit + len(prefix))
        pos += limit + 1
    return None


def _last_frame(fd: int, size: int, offset: int) -> int | None:
    """Byte position of a good frame of `offset` ending exactly at `size`, searched from
    the end (a frame is at most FRAME_HEADER_SIZE + MAX_PAYLOAD bytes)."""
    pattern = FRAME_OFFSET.pack(offset)
    floor = max(HEADER_SIZE, size - FRAME_HEADER_SIZE - MAX_PAYLOAD)
    hi = size
    while hi > floor:
        lo = max(floor, hi - WINDOW)
        buf = os.pread(fd, min(hi + len(pattern) - 1, size) - lo, lo)
        end = len(buf)
        while (j := buf.rfind(pattern, 0, end)) >= 0:
            end = j + len(pattern) - 1
            found = _frame_end(fd, lo + j, size, offset, offset)
            if found is not None and found[1] == size:
                return lo + j
        hi = lo
    return None


# -- opening -----------------------------------------------------------------------------


def load(path: str | None, log_base: int) -> Segment | None:
    """The segment at `path` if it is usable beside a log of base `log_base` (see the
    module docstring); otherwise None, with a warning saying why."""
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        header = decode_header(path, os.pread(fd, HEADER_SIZE, 0))
        base = header.base_offset
        if base >= log_base:
            raise CorruptLog(path, 0, f"it starts after offset {base}, not before the log's base {log_base}")
        if _frame_end(fd, HEADER_SIZE, size, base + 1, base + 1) is None:
            raise CorruptLog(path, HEADER_SIZE, f"its first frame is not a good frame of offset {base + 1}")
        last = _last_frame(fd, size, log_base)
        if last is None:
            raise CorruptLog(path, size, f"it does not end with a good frame of offset {log_base}, the log's base")
    except (CorruptLog, OSError) as exc:
        log.warning(
            "%s: ignoring the retained log segment (%s); offsets before %d answer 410 offset_gone",
            os.path.dirname(path),
            exc,
            log_base,
        )
        return None
    finally:
        os.close(fd)
    return Segment(path, header.epoch, base, log_base, size, last)


def remove(directory: str) -> bool:
    """Delete the retained segment durably (a writer opened with `retain_bytes=0`)."""
    try:
        files.ops.unlink(os.path.join(directory, RETAINED_NAME))
    except FileNotFoundError:
        return False
    fsync_dir(directory)
    return True


# -- reading -----------------------------------------------------------------------------


def _seek(fd: int, segment: Segment, target: int) -> tuple[int, int]:
    """(byte position, offset) of a frame at or before offset `target`, near it."""
    lo_pos, lo_off = HEADER_SIZE, segment.base + 1
    hi_pos, hi_off = segment.last_pos, segment.end
    if target <= lo_off:
        return lo_pos, lo_off
    if target >= hi_off:
        return hi_pos, hi_off
    while hi_pos - lo_pos > SEEK_BYTES and hi_off - lo_off > 1:
        found = find_frame(fd, (lo_pos + hi_pos) // 2, hi_pos, lo_off + 1, hi_off - 1)
        if found is None:
            break
        if found[1] <= target:
            lo_pos, lo_off = found
        else:
            hi_pos, hi_off = found
    return lo_pos, lo_off


def read(segment: Segment, after: int) -> Iterator[tuple[int, bytes]]:
    """(offset, frame) of the segment's frames after `after`, each checked; raises
    `SegmentDamaged` at the first bad byte (having yielded only good frames before it)."""
    path = segment.path
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            header = decode_header(path, os.pread(fd, HEADER_SIZE, 0))
        except CorruptLog as exc:
            raise SegmentDamaged(path, 0, exc.reason) from None
        if (header.epoch, header.base_offset) != (segment.epoch, segment.base):
            raise SegmentDamaged(path, 0, "the file was replaced")
        pos, expected = _seek(fd, segment, after + 1)
        walk = FrameWalk(fd, pos, segment.size, expected, chunk=CHUNK)
        for offset, frame in walk:
            if offset > after:
                yield offset, frame
        if walk.error is not None:
            raise SegmentDamaged(path, walk.end, walk.error)
        assert walk.next_offset is not None  # a checked walk counts offsets
        last = walk.next_offset - 1
        if last != segment.end:
            raise SegmentDamaged(path, walk.end, f"ends at offset {last}, expected {segment.end}")
    finally:
        os.close(fd)


# -- writing (inside a compaction) -------------------------------------------------------


def _choose(p: Plan) -> list[tuple[str, int, int, int]]:
    """(path, start, stop, first offset) of the byte ranges to keep, oldest first."""
    room = p.budget - HEADER_SIZE
    parts: list[tuple[str, int, int, int]] = []
    for src in reversed(p.sources):
        size = src.stop - src.start
        if size <= 0:
            continue
        if size <= room:
            parts.append((src.path, src.start, src.stop, src.first))
            room -= size
            continue
        fd = os.open(src.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            found = find_frame(fd, src.stop - max(room, 0), src.stop, src.first, src.last)
        finally:
            os.close(fd)
        if found is not None:
            parts.append((src.path, found[0], src.stop, found[1]))
        break  # anything older would leave a gap
    parts.reverse()
    return parts


def write_pending(
    directory: str,
    p: Plan | None,
    check: Callable[[], None] | None = None,
    after_flush: Callable[[float], object] | None = None,
) -> Segment | None:
    """Step 2: `log.retained.new` from the plan, fsynced; None when nothing is retained.
    `check` runs between chunks (online compaction stops there when the store closes);
    `after_flush` is handed each piece's fsync time (online compaction paces the copy by
    it: `files.flush_past`). The file is written through `files.write_durably`, so a
    copy that fails (a full disk, a source shorter than planned, `check` raising) leaves
    no partial `log.retained.new` behind."""
    parts = _choose(p) if p is not None else []
    if not parts or p is None:
        return None
    path = os.path.join(directory, RETAINED_NAME + NEW_SUFFIX)
    base = parts[0][3] - 1
    end = p.sources[-1].last
    last: int | None = None  # the copy's last frame's byte position, once it is whole

    def fill(fd: int) -> None:
        nonlocal last
        write_all(fd, encode_header(p.epoch, base))
        size = flushed = HEADER_SIZE
        for src_path, start, stop, _first in parts:
            src = os.open(src_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                pos = start
                while pos < stop:
                    if check is not None:
                        check()
                    data = os.pread(src, min(CHUNK, stop - pos), pos)
                    if not data:
                        raise OSError(f"{src_path} ended at byte {pos}, expected {stop}")
                    write_all(fd, data)
                    pos += len(data)
                    size += len(data)
                    flushed = files.flush_past(fd, size, flushed, after_flush)  # the final fsync waits for a piece only
            finally:
                os.close(src)
        last = _last_frame(fd, size, end)  # read back through the page cache, before the fsync

    size = write_durably(path, fill)
    if last is None:
        # Only a source changed under the copy could do this: keep nothing rather than
        # a segment that would be ignored at the next open.
        log.warning("%s: the retained copy does not end with offset %d; retaining nothing", directory, end)
        discard_pending(directory)
        return None
    return Segment(path, p.epoch, base, end, size, last)


def commit_pending(directory: str, pending: Segment | None) -> Segment | None:
    """Step 7: put the new segment in place, or remove the old one; the caller fsyncs the
    directory (step 9). Returns the segment the store now serves."""
    final = os.path.join(directory, RETAINED_NAME)
    if pending is not None:
        files.ops.rename(pending.path, final)
        return dataclasses.replace(pending, path=final)
    try:
        files.ops.unlink(final)
    except FileNotFoundError:
        pass
    return None


def discard_pending(directory: str) -> None:
    """Remove `log.retained.new` (a compaction abandoned before its commit point)."""
    try:
        files.ops.unlink(os.path.join(directory, RETAINED_NAME + NEW_SUFFIX))
    except FileNotFoundError:
        pass
