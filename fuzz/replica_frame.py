"""Replication frames -> the follower's and consumer's frame check, and the log's scanners.

Modes (first byte):
  raw      the rest is one `/replicate` message for `check_frame`, expected at the offset
           its own header names (so the checks after the offset are reached) or at 1;
  framed   the rest is a payload, framed with its true CRC at offset 1: reaches the
           JSON and event checks of `check_frame` and the store's `decode_event`;
  scan     the rest is a headerless replica file for `scan_frames` (`dbsvc replicate`'s
           resume), then, behind a valid log header, a log image for `LogScan`;
  apply    the rest is up to three payloads split at NUL bytes, framed at the next offsets
           and applied, as a read replica's follower does (`check_frame`, then
           `Store.apply_replicated`), to a fresh blog store in a temporary directory.

Invariants: a bad frame is a `FrameError`, damage a `CorruptLog` or a torn tail; an
accepted frame's event is an object of a known kind at the expected offset; a scan never
reports an end past the data, and every record it yields is a frame whose CRC holds; a
frame the store cannot apply is a `StreamError` and leaves it unchanged, and after frames
it applied the store still answers reads of every model.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import zlib

from dbsvc.errors import CorruptLog, StreamError
from dbsvc.replica.consumer import KINDS, FrameError, check_frame
from dbsvc.replica.sinks import scan_frames
from dbsvc.runtime import Query
from dbsvc.storage import Store
from dbsvc.storage.events import decode_event
from dbsvc.storage.logfile import FRAME, FRAME_HEADER_SIZE, HEADER_SIZE, LogScan, encode_frame, encode_header
from fuzz.common import generated, pick

LOG_HEADER = encode_header("00" * 16, 0)
BLOG = generated("blog")
GENERATED = (BLOG,)
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None
LOOP = asyncio.new_event_loop()


def _check(message: bytes, expected: int) -> None:
    try:
        offset, event = check_frame(message, expected)
    except FrameError as exc:
        assert exc.reason, exc
        return
    assert offset == expected and isinstance(event, dict), event
    assert event["kind"] in KINDS and event["offset"] == expected, event
    length = FRAME.unpack_from(message)[2]
    try:
        decode_event(message[FRAME_HEADER_SIZE : FRAME_HEADER_SIZE + length])
    except (ValueError, KeyError, TypeError):  # what Store.apply_replicated refuses
        pass


def _raw(rest: bytes) -> None:
    expected = FRAME.unpack_from(rest)[0] if len(rest) >= FRAME_HEADER_SIZE and rest[0] < 0x80 else 1
    _check(rest, max(expected, 1))


def _framed(rest: bytes) -> None:
    _check(encode_frame(1, rest), 1)


def _scan(rest: bytes) -> None:
    try:
        end, last, _torn = scan_frames("fuzz.replica", rest)
    except CorruptLog:
        pass
    else:
        assert 0 <= end <= len(rest) and (last is None) == (end == 0), (end, last)
    image = LOG_HEADER + rest
    scan = LogScan("fuzz.log", image)
    position, expected = HEADER_SIZE, 1
    try:
        for offset, payload in scan.records():
            assert offset == expected, (offset, expected)
            assert FRAME.unpack_from(image, position) == (offset, zlib.crc32(payload), len(payload))
            position += FRAME_HEADER_SIZE + len(payload)
            expected += 1
    except CorruptLog:
        return
    assert scan.end == position and scan.next_offset == expected, (scan.end, position)
    assert (scan.damage is None) == (scan.end == len(image)), scan.damage


def _apply(rest: bytes) -> None:
    directory = tempfile.mkdtemp(prefix="dbsvc-fuzz-", dir=SCRATCH)
    try:
        store = Store.open(directory, BLOG.MODELS, BLOG.DESCRIPTION, sync="off", replication=True)
        try:
            LOOP.run_until_complete(_follow(store, rest.split(b"\0")[:3]))
        finally:
            store.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def _follow(store: Store, payloads: list[bytes]) -> None:
    for payload in payloads:
        offset = store.head_offset + 1
        frame = encode_frame(offset, payload)
        try:
            check_frame(frame, offset)
        except FrameError:
            return
        before = (store.head_offset, store.watermarks(), store.live_counts())
        try:
            durable = store.apply_replicated(frame)
        except StreamError:
            assert (store.head_offset, store.watermarks(), store.live_counts()) == before
            return
        await durable
        assert store.head_offset == offset
        for model in BLOG.MODELS:
            records, total, _watermark = store.list_records(
                model.name, Query(sort=tuple((f, False) for f in model.sort_fields))
            )
            for record in records:
                assert store.get(model.name, record[model.id_field])[0] == record


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    pick(data, (_raw, _framed, _scan, _apply))(data[1:])
