"""The log file: a header, then append-only frames, each with its offset, CRC32 and length.

Layout (all integers big-endian)::

    header, 40 bytes
      0   8  magic        b"DBSVCLOG"
      8   4  version      1
     12  16  epoch        16 random bytes (shown as 32 hex digits); new at every compaction
     28   8  base offset  global offset of the row before this file's first frame
     36   4  crc32        of bytes 0..35
    frames, from byte 40 on, back to back
      0   8  offset       global row offset: base + 1, base + 2, ... (gap-free)
      8   4  crc32        of the payload
     12   4  length       of the payload, at most MAX_PAYLOAD
     16   n  payload      compact JSON of the change event (see events.py)

A frame is byte for byte the `PersistedEvent` of `/replicate` (docs/guide/realtime.md), so the
replication stream sends file ranges unchanged.

This drawing is the one description of the layout: every module outside storage (realtime,
the replica consumer, the data tools) reads frames through the functions here
(`frame_header`, `frame_offset`, `frame_payload`, `frame_payload_at`, `frame_end`,
`frame_error`, `frame_after_damage`) and never slices a frame by hand.

Recovery rules (`scan`), in this order; the first bad frame at byte P decides:

1. A frame is good when its whole header and payload lie inside the file, its offset is
   exactly the one expected, its length is at most MAX_PAYLOAD and its CRC matches.
   MAX_PAYLOAD, not a store's smaller `max_payload`: a reader takes every frame any writer
   may have written (a log from a store opened with a larger limit must still open, its
   records readable and deletable: events.py "Sizes"); a writer checks the limit it was
   opened with, never above this one, so whatever it acknowledges reopens.
2. If no good frame with a larger offset starts anywhere after P (byte by byte
   resynchronisation), the damage is a torn tail: every byte from P on is reported (byte
   offset, reason) and, by a writer, truncated away and fsynced. A torn tail is what a
   crash during an unacknowledged append leaves; bit rot in the very last frame looks the
   same and is treated the same (it cannot be told apart).
3. If a good frame follows the damage, the damage is *before* the tail: refuse with
   `CorruptLog(path, P, reason)`. Nothing is truncated and nothing is served. Except when
   the byte just before that good frame is zero: that is the debris of appends no fsync
   covered, which a power loss may persist out of order (a later frame on disk, an earlier
   one still zeros, or torn with its end zeros). A payload is JSON and never ends in a zero
   byte, so no whole frame ends there; an fsync covered nothing from P on, so nothing from
   P on was acknowledged, and it is cut like a torn tail (rule 2).
4. A header that is short, has the wrong magic or version, or fails its CRC is `CorruptLog`
   at byte 0: a log header is written to a `.tmp` name, fsynced and renamed, so a crash
   cannot leave a half header under the real name.
5. An unfinished batch is a torn tail too. The payloads of a batch's rows (`POST /batch`,
   two or more rows) end with `"batch":{"first":F,"last":L}` (events.py "Batches"); the
   batch's frames are written with one write call and covered by one fsync before any of
   them is acknowledged. When the good frames end after row F but before row L, replay
   (logreplay.py `_cut_batch`) undoes rows F.. and the cut starts at row F's first byte, so
   a reopened log holds all of a batch or none of it. The mark is inside the payload, so the
   CRC covers it, and the frame layout and version are unchanged: an older log (no marks)
   reads as before, and an older reader reads a newer log (it only keeps a torn batch).

A frame whose checksum fails is never decoded, so it is never served.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

MAGIC = b"DBSVCLOG"
VERSION = 1
HEADER = struct.Struct(">8sI16sQ")
HEADER_SIZE = HEADER.size + 4
FRAME = struct.Struct(">QII")
FRAME_OFFSET = struct.Struct(">Q")  # FRAME's first field, alone (searching for an offset's bytes)
FRAME_HEADER_SIZE = FRAME.size
MAX_PAYLOAD = 64 * 1024 * 1024
MAX_FRAME = FRAME_HEADER_SIZE + MAX_PAYLOAD  # the largest good frame, header included


@dataclass(frozen=True, slots=True)
class LogHeader:
    epoch: str
    base_offset: int


@dataclass(frozen=True, slots=True)
class Damage:
    """A torn or corrupt tail found by `scan`: where the good part ends and why."""

    position: int  # byte offset in the file of the first bad byte
    size: int  # file size: bytes [position, size) are cut
    reason: str


def encode_header(epoch: str, base_offset: int) -> bytes:
    body = HEADER.pack(MAGIC, VERSION, bytes.fromhex(epoch), base_offset)
    return body + struct.pack(">I", zlib.crc32(body))


def decode_header(path: str, data: bytes | memoryview | mmap.mmap) -> LogHeader:
    from dbsvc.errors import CorruptLog

    if len(data) < HEADER_SIZE:
        raise CorruptLog(path, 0, f"log header is {len(data)} bytes, expected {HEADER_SIZE}")
    body = bytes(data[: HEADER.size])
    (crc,) = struct.unpack_from(">I", data, HEADER.size)
    magic, version, epoch, base = HEADER.unpack(body)
    if magic != MAGIC:
        raise CorruptLog(path, 0, f"not a dbsvc log (magic {magic!r})")
    if zlib.crc32(body) != crc:
        raise CorruptLog(path, 0, "log header checksum mismatch")
    if version != VERSION:
        raise CorruptLog(path, 0, f"log format version {version}, expected {VERSION}")
    return LogHeader(epoch.hex(), base)


def encode_frame(offset: int, payload: bytes) -> bytes:
    return FRAME.pack(offset, zlib.crc32(payload), len(payload)) + payload


class FrameHeader(NamedTuple):
    """A frame's header fields, as stored (not yet checked: see `frame_error`)."""

    offset: int
    crc: int
    length: int


def frame_header(data: bytes | memoryview | mmap.mmap, pos: int = 0) -> FrameHeader | None:
    """The header fields of the frame at byte `pos` of an image, or None when fewer than
    FRAME_HEADER_SIZE bytes are left there."""
    if pos + FRAME_HEADER_SIZE > len(data):
        return None
    return FrameHeader(*FRAME.unpack_from(data, pos))


def frame_end(data: bytes | memoryview | mmap.mmap, pos: int) -> int:
    """The byte position after the frame at `pos`, as its header's length says (the frame is
    known to be whole: `frame_error` passed it)."""
    _offset, _crc, length = FRAME.unpack_from(data, pos)
    return pos + FRAME_HEADER_SIZE + int(length)


def frame_payload_at(data: bytes | memoryview | mmap.mmap, pos: int) -> bytes:
    """A copy of the payload of the whole frame at byte `pos` of an image (a copy, so no
    view into an mmap outlives the call)."""
    return bytes(data[pos + FRAME_HEADER_SIZE : frame_end(data, pos)])


def frame_offset(frame: bytes | memoryview) -> int:
    """The global row offset a frame carries (its first header field)."""
    return int(FRAME_OFFSET.unpack_from(frame)[0])


def frame_payload(frame: bytes | memoryview) -> memoryview:
    """A frame's payload (the change event's JSON), without copying it."""
    return memoryview(frame)[FRAME_HEADER_SIZE:]


def frame_error(data: bytes | memoryview | mmap.mmap, pos: int, expected: int, size: int | None = None) -> str | None:
    """Why the frame at `pos` is not good (rule 1), or None when it is; the image ends at
    byte `size` (default: its length)."""
    if size is None:
        size = len(data)
    if pos + FRAME_HEADER_SIZE > size:
        return f"truncated frame header ({size - pos} of {FRAME_HEADER_SIZE} bytes)"
    offset, crc, length = FRAME.unpack_from(data, pos)
    if offset != expected:
        return f"frame offset {offset}, expected {expected}"
    if length > MAX_PAYLOAD:
        return f"frame length {length} exceeds {MAX_PAYLOAD}"
    end = pos + FRAME_HEADER_SIZE + length
    if end > size:
        return f"truncated payload ({size - pos - FRAME_HEADER_SIZE} of {length} bytes)"
    if zlib.crc32(data[pos + FRAME_HEADER_SIZE : end]) != crc:
        return "payload checksum mismatch"
    return None


def good_frame_after(data: bytes | memoryview | mmap.mmap, start: int, expected: int) -> int | None:
    """Byte position of any good frame with offset >= expected after `start` (rule 2)."""
    size = len(data)
    if not bytes(data[start:]).strip(b"\0"):
        return None  # zero-filled to the end: the common crash shape
    limit = size - FRAME_HEADER_SIZE
    # A frame needs at least FRAME_HEADER_SIZE bytes, so offsets above this are impossible.
    highest = expected + (size - start) // FRAME_HEADER_SIZE
    for pos in range(start + 1, limit + 1):
        offset, crc, length = FRAME.unpack_from(data, pos)
        if offset < expected or offset > highest or length > MAX_PAYLOAD:
            continue
        end = pos + FRAME_HEADER_SIZE + length
        if end <= size and zlib.crc32(data[pos + FRAME_HEADER_SIZE : end]) == crc:
            return pos
    return None


def frame_after_damage(data: bytes | memoryview | mmap.mmap, pos: int, expected: int) -> int | None:
    """Rules 2 and 3 for damage at byte `pos`: the byte position of the good frame after it
    that makes it damage before the tail (refuse), or None when it is a torn tail to cut (no
    good frame follows, or one follows a zero byte: appends no fsync covered)."""
    later = good_frame_after(data, pos, expected)
    if later is not None and data[later - 1] == 0:
        return None
    return later


class FrameWalk:
    """The frames in bytes [start, stop) of a log image or log file, oldest first: the one
    loop every reader of frames runs (`LogScan`, replay.py, retain.py, online.py).

    `source` is the image (bytes or mmap) or a file descriptor, read with pread in chunks
    of `chunk` bytes (a frame longer than a chunk is read whole on its own), so a slow
    consumer holds one chunk at most. Iterating yields (offset, frame), the frame being the
    whole frame's bytes, or only its payload with `payloads=True`.

    With `first`, the offset the first frame must have, every frame is checked by rule 1
    and the walk stops at the first one that is not good, calling `bad_frame` (which notes
    the reason in `error`). Without it the frames were checked before (the acknowledged
    part of a log) and the walk stops quietly where no whole frame is left.

    `end` is the byte position after the frames yielded so far: while the caller handles a
    frame, where that frame starts; at a bad frame, where it starts. `next_offset` likewise
    (checked walks only).
    """

    __slots__ = ("source", "end", "stop", "next_offset", "payloads", "chunk", "error")

    def __init__(
        self,
        source: int | bytes | mmap.mmap,
        start: int,
        stop: int,
        first: int | None = None,
        *,
        payloads: bool = False,
        chunk: int = 1 << 20,
    ) -> None:
        self.source = source
        self.end = start
        self.stop = stop
        self.next_offset = first
        self.payloads = payloads
        self.chunk = chunk
        self.error: str | None = None

    def bad_frame(self, reason: str) -> None:
        """The frame at `end` is not good (a checked walk stops here)."""
        self.error = reason

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        source, stop, chunk, expected = self.source, self.stop, self.chunk, self.next_offset
        fd = source if isinstance(source, int) else None
        buf: bytes | mmap.mmap = b"" if isinstance(source, int) else source
        pos = self.end
        base = pos if fd is not None else 0  # byte position of buf[0]
        limit = min(len(buf), stop - base)  # buf[:limit] lies inside [start, stop)
        payloads = self.payloads
        unpack, crc32 = FRAME.unpack_from, zlib.crc32
        while pos < stop:
            rel = pos - base
            if rel + FRAME_HEADER_SIZE <= limit:
                offset, crc, length = unpack(buf, rel)
                end = rel + FRAME_HEADER_SIZE + length
                if end <= limit:
                    if expected is None:
                        yield offset, buf[rel + FRAME_HEADER_SIZE : end] if payloads else buf[rel:end]
                    else:
                        if offset != expected or length > MAX_PAYLOAD:
                            break
                        payload = buf[rel + FRAME_HEADER_SIZE : end]
                        if crc32(payload) != crc:
                            break
                        yield offset, payload if payloads else buf[rel:end]
                        expected = self.next_offset = expected + 1
                    pos = self.end = base + end
                    continue
                if fd is None or length > MAX_PAYLOAD or base + limit >= stop:
                    break
                # A frame longer than what is left of the chunk: read it whole.
                want = FRAME_HEADER_SIZE + length
            elif fd is None or base + limit >= stop:
                break
            else:
                want = FRAME_HEADER_SIZE
            buf = os.pread(fd, min(max(chunk, want), stop - pos), pos)
            base, limit = pos, len(buf)
            if limit < want:
                break
        if expected is not None and pos < stop:
            self.bad_frame(frame_error(buf, pos - base, expected, limit) or "unreadable frame")


def read_frames(fd: int, start: int, stop: int, chunk: int = 1 << 20) -> Iterator[tuple[int, bytes]]:
    """(offset, whole frame) for the frames in [start, stop) of an already scanned file
    (what `/replicate` sends), read in chunks so a slow consumer holds one chunk at most."""
    return iter(FrameWalk(fd, start, stop, chunk=chunk))


class LogScan(FrameWalk):
    """The good frames of a log image (a walk of all of it, `first` its header's base + 1);
    afterwards `end`, `next_offset`, `damage`.

    `records()` yields (offset, payload) and raises `CorruptLog` for damage before the tail
    (rule 3) only once it reaches the damage, so a caller must not act on what it has seen
    until the iteration finished.
    """

    next_offset: int

    def __init__(self, path: str, data: bytes | memoryview | mmap.mmap) -> None:
        image = data if isinstance(data, (bytes, mmap.mmap)) else bytes(data)
        self.path = path
        self.header = decode_header(path, image)
        self.damage: Damage | None = None
        super().__init__(image, HEADER_SIZE, len(image), self.header.base_offset + 1, payloads=True)

    def records(self) -> Iterator[tuple[int, bytes]]:
        return iter(self)

    def bad_frame(self, reason: str) -> None:
        """Rules 2 and 3: a torn tail is noted in `damage`; damage before it is refused."""
        from dbsvc.errors import CorruptLog

        data, pos = self.source, self.end
        assert not isinstance(data, int)
        later = frame_after_damage(data, pos, self.next_offset)
        if later is not None:
            raise CorruptLog(
                self.path, pos, f"{reason}; a good frame follows at byte {later}, so this is not a torn tail"
            )
        self.error = reason
        self.damage = Damage(pos, len(data), reason)


# The prefix every payload starts with (events.py writes these keys first, in this order).
_PREFIX = re.compile(rb'"model":"([^"\\]*)","offset":\d+,"watermark":(\d+),')


def renumber_frames(
    frames: Iterable[tuple[int, bytes]],
    deltas: dict[str, int],
    position: int,
    every: int,
    checkpoints: list[tuple[int, int]],
) -> Iterator[bytes]:
    """The whole frames `frames` (offset, frame), each payload's `watermark` moved by
    `deltas[model]` (online compaction carries rows into a new epoch, whose watermarks
    restart; compact.py). They are to be written from byte `position` of the new log on;
    (offset, byte position) of every frame whose offset is a multiple of `every` is appended
    to `checkpoints`."""
    for offset, frame in frames:
        payload = frame[FRAME_HEADER_SIZE:]
        m = _PREFIX.search(payload)
        assert m is not None, f"frame {offset} is not an event frame"
        delta = deltas.get(m.group(1).decode("utf-8"), 0)
        if offset % every == 0:
            checkpoints.append((offset, position))
        if delta:
            frame = encode_frame(
                offset, b"%s%d%s" % (payload[: m.start(2)], int(m.group(2)) + delta, payload[m.end(2) :])
            )
        yield frame
        position += len(frame)
