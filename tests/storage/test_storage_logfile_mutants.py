"""The log file's recovery rules at their edges (logfile.py), found by mutation testing.

Each test pins what an operator or a reader sees: which bytes a torn tail cut, the reason a
refusal names, which frames `/replicate` reads and what online compaction writes. The log
images are built with the module's own encoders and read back by `LogScan`, as `Store.open`
does; the last tests open real stores on them.
"""

from __future__ import annotations

import json
import os
import struct
import zlib

import pytest

from dbsvc.errors import CorruptLog
from dbsvc.storage.logfile import (
    FRAME_HEADER_SIZE,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_PAYLOAD,
    FrameWalk,
    LogScan,
    decode_header,
    encode_frame,
    encode_header,
    frame_error,
    read_frames,
    renumber_frames,
)
from support.storage import run, user

EPOCH = "0123456789abcdef0123456789abcdef"


def payload(offset: int, model: str = "User", watermark: int | None = None) -> bytes:
    """An event payload with the prefix events.py writes."""
    mark = offset if watermark is None else watermark
    return b'{"kind":"insert","model":"%s","offset":%d,"watermark":%d,"id":%d,"record":{"id":%d}}' % (
        model.encode(),
        offset,
        mark,
        offset,
        offset,
    )


def image(n: int, base: int = 0) -> tuple[bytes, list[int]]:
    """A log of n good frames after `base`, and the byte position of each frame."""
    out = bytearray(encode_header(EPOCH, base))
    starts = []
    for offset in range(base + 1, base + n + 1):
        starts.append(len(out))
        out += encode_frame(offset, payload(offset))
    return bytes(out), starts


def scan(data: bytes) -> tuple[list[int], LogScan]:
    s = LogScan("log", data)
    return [offset for offset, _ in s.records()], s


# -- header (rule 4) -----------------------------------------------------------------------


def test_header_round_trips_epoch_and_base():
    head = decode_header("log", encode_header(EPOCH, 41))
    assert (head.epoch, head.base_offset) == (EPOCH, 41)
    data, _ = image(2, base=41)
    offsets, s = scan(data)
    assert offsets == [42, 43] and s.next_offset == 44 and s.end == len(data) and s.damage is None


def test_an_empty_log_is_just_its_header():
    offsets, s = scan(encode_header(EPOCH, 7))
    assert offsets == [] and s.end == HEADER_SIZE and s.next_offset == 8 and s.damage is None


def test_short_header_names_its_length():
    with pytest.raises(CorruptLog) as info:
        decode_header("log", encode_header(EPOCH, 0)[: HEADER_SIZE - 1])
    assert info.value.offset == 0
    assert info.value.reason == f"log header is {HEADER_SIZE - 1} bytes, expected {HEADER_SIZE}"
    # The refusal names the file, as opening a store reports it.
    with pytest.raises(CorruptLog) as info:
        LogScan("/data/t/log", encode_header(EPOCH, 0)[: HEADER_SIZE - 1])
    assert str(info.value) == (
        f"/data/t/log: corrupt at byte 0: log header is {HEADER_SIZE - 1} bytes, expected {HEADER_SIZE}"
    )


def test_wrong_magic_is_named():
    body = HEADER.pack(b"SQLITE3\0", 1, bytes(16), 0)
    with pytest.raises(CorruptLog) as info:
        decode_header("/data/t/log", body + struct.pack(">I", zlib.crc32(body)))
    assert info.value.reason == "not a dbsvc log (magic b'SQLITE3\\x00')"
    assert info.value.path == "/data/t/log" and info.value.offset == 0


def test_a_header_failing_its_checksum_is_refused_at_byte_0_naming_the_file():
    header = bytearray(encode_header(EPOCH, 7))
    header[30] ^= 0x01  # the base offset, under the header's CRC
    with pytest.raises(CorruptLog) as info:
        LogScan("/data/t/log", bytes(header))
    assert str(info.value) == "/data/t/log: corrupt at byte 0: log header checksum mismatch"


def test_other_format_version_is_refused_even_with_a_good_checksum():
    body = HEADER.pack(MAGIC, 2, bytes(16), 0)
    with pytest.raises(CorruptLog) as info:
        decode_header("log", body + struct.pack(">I", zlib.crc32(body)))
    assert info.value.reason == "log format version 2, expected 1"


def test_other_format_version_is_refused_at_byte_0_naming_the_file():
    body = HEADER.pack(MAGIC, 2, bytes(16), 0)
    with pytest.raises(CorruptLog) as info:
        LogScan("/data/t/log", body + struct.pack(">I", zlib.crc32(body)))
    assert (info.value.path, info.value.offset) == ("/data/t/log", 0)
    assert str(info.value) == "/data/t/log: corrupt at byte 0: log format version 2, expected 1"


# -- why a frame is bad (rule 1): the reason is the operator's only clue ----------------------


def test_reason_for_a_torn_frame_header_counts_its_bytes():
    data, starts = image(3)
    offsets, s = scan(data[: starts[2] + 5])
    assert offsets == [1, 2]
    assert s.damage.reason == f"truncated frame header (5 of {FRAME_HEADER_SIZE} bytes)"
    assert (s.damage.position, s.damage.size) == (starts[2], starts[2] + 5)
    assert (s.end, s.next_offset) == (starts[2], 3)


def test_reason_for_a_frame_whose_payload_is_missing_entirely():
    data, starts = image(3)
    length = len(payload(3))
    offsets, s = scan(data[: starts[2] + FRAME_HEADER_SIZE])
    assert offsets == [1, 2]
    assert s.damage.reason == f"truncated payload (0 of {length} bytes)"


def test_reason_for_a_torn_payload_counts_its_bytes():
    data, starts = image(3)
    length = len(payload(3))
    offsets, s = scan(data[:-3])
    assert offsets == [1, 2]
    assert s.damage.reason == f"truncated payload ({length - 3} of {length} bytes)"


def test_a_length_of_exactly_max_payload_is_not_over_the_limit():
    data, starts = image(2)
    over = bytearray(data)
    struct.pack_into(">I", over, starts[1] + 12, MAX_PAYLOAD)
    _, s = scan(bytes(over))
    assert s.damage.reason.startswith("truncated payload (")
    struct.pack_into(">I", over, starts[1] + 12, MAX_PAYLOAD + 1)
    _, s = scan(bytes(over))
    assert s.damage.reason == f"frame length {MAX_PAYLOAD + 1} exceeds {MAX_PAYLOAD}"


def test_reason_for_a_bad_checksum_in_the_last_frame():
    data, starts = image(3)
    broken = bytearray(data)
    broken[-2] ^= 0x01
    offsets, s = scan(bytes(broken))
    assert offsets == [1, 2] and s.damage.reason == "payload checksum mismatch"
    assert s.damage == type(s.damage)(starts[2], len(data), "payload checksum mismatch")


def test_every_good_frame_passes_the_check_replicas_share():
    """replica/consumer.py judges each received frame with `frame_error`: None is "good"."""
    data, starts = image(3)
    assert [frame_error(data, p, o) for p, o in zip(starts, (1, 2, 3))] == [None, None, None]
    frame = encode_frame(9, payload(9))
    assert frame_error(frame, 0, 9) is None and frame_error(frame, 0, 8) == "frame offset 9, expected 8"


# -- torn tail or damage before it (rules 2 and 3) -------------------------------------------


def test_a_skipped_offset_at_the_end_is_a_torn_tail():
    """Frames 1, 2 and then 4: nothing after the bad frame proves an acknowledged write."""
    data, starts = image(2)
    data += encode_frame(4, payload(4))
    offsets, s = scan(data)
    assert offsets == [1, 2] and s.damage.position == starts[1] + FRAME_HEADER_SIZE + len(payload(2))
    assert s.damage.reason == "frame offset 4, expected 3"


def test_one_stray_byte_before_a_good_frame_refuses_and_says_where():
    data, starts = image(2)
    at = len(data)
    data += b"\x01" + encode_frame(3, payload(3))
    with pytest.raises(CorruptLog) as info:
        scan(data)
    assert info.value.offset == at
    assert info.value.reason.endswith(f"; a good frame follows at byte {at + 1}, so this is not a torn tail")


def test_a_later_good_frame_proves_damage_even_when_offsets_were_skipped():
    data, starts = image(2)
    data += b"\x07" * 40 + encode_frame(5, payload(5))
    with pytest.raises(CorruptLog) as info:
        scan(data)
    assert info.value.offset == starts[1] + FRAME_HEADER_SIZE + len(payload(2))


def test_a_frame_whose_offset_could_not_fit_is_no_evidence():
    """After damage at P only (size - P) / 16 more frames fit; a checksummed frame claiming a
    far higher offset (a stale copy from elsewhere) does not make the tail 'damage before'."""
    data, starts = image(2)
    tail = b"\x07" * 3 + encode_frame(1000, payload(1000))
    offsets, s = scan(data + tail)
    assert offsets == [1, 2] and s.damage.position == len(data)


def test_a_checksum_failing_frame_after_damage_is_no_evidence():
    """Garbage that merely looks like the next frame's header does not make a torn tail
    'damage before a good frame': only a frame whose CRC matches proves an append."""
    data, starts = image(2)
    bad = bytearray(encode_frame(3, payload(3)))
    bad[-2] ^= 0x01
    offsets, s = scan(data + b"\x07" + bytes(bad))
    assert offsets == [1, 2] and s.damage.position == len(data)


def test_a_frame_that_just_fits_after_damage_is_evidence():
    """After damage at P, offsets up to expected + (size - P) // 16 are possible; a good
    frame with exactly the highest one still proves the damage is not a tail."""
    data, starts = image(2)
    frame = encode_frame(9, payload(9))
    junk = b"\x07" * 3
    assert 3 + (len(junk) + len(frame)) // FRAME_HEADER_SIZE == 9  # offset 9 is the highest
    with pytest.raises(CorruptLog) as info:
        scan(data + junk + frame)
    assert info.value.offset == len(data)
    # one more than fits (and far more) is no evidence: cut as a tail
    for offset in (10, 20):
        offsets, s = scan(data + junk + encode_frame(offset, payload(offset)))
        assert offsets == [1, 2] and s.damage.position == len(data)


def test_a_largest_allowed_frame_after_damage_is_evidence():
    data, starts = image(2)
    body = b'{"kind":"insert","model":"User","offset":3,"watermark":3,"id":3,"record":{"pad":"'
    big = body + b"a" * (MAX_PAYLOAD - len(body) - 3) + b'"}}'
    assert len(big) == MAX_PAYLOAD
    with pytest.raises(CorruptLog) as info:
        scan(data + b"\x07" + encode_frame(3, big))
    assert info.value.offset == len(data)


@pytest.mark.parametrize("gap", [1, 16, 300])
def test_zeros_then_a_good_frame_are_cut_like_a_torn_tail(gap):
    """Power loss: a later append reached the disk, an earlier one is still zeros (rule 3)."""
    data, starts = image(2)
    offsets, s = scan(data + bytes(gap) + encode_frame(4, payload(4)))
    assert offsets == [1, 2] and s.damage.position == len(data)


def test_a_frame_torn_to_zeros_before_a_good_frame_is_cut():
    data, starts = image(3)
    torn = bytearray(data)
    torn[starts[2] + 20 :] = bytes(len(torn) - starts[2] - 20)
    offsets, s = scan(bytes(torn) + encode_frame(4, payload(4)))
    assert offsets == [1, 2] and s.damage.position == starts[2]


def test_store_refuses_a_stray_byte_and_keeps_the_file(tenant, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    s.close()
    path = os.path.join(tenant, "log")
    with open(path, "rb") as f:
        data = f.read()
    frame = encode_frame(2, data[HEADER_SIZE + FRAME_HEADER_SIZE :].replace(b'"offset":1', b'"offset":2'))
    broken = data + b"\x01" + frame
    with open(path, "wb") as f:
        f.write(broken)
    with pytest.raises(CorruptLog) as info:
        stores(tenant)
    assert info.value.path == path and info.value.offset == len(data)
    with open(path, "rb") as f:
        assert f.read() == broken


# -- read_frames: what /replicate sends ------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, FRAME_HEADER_SIZE, 100, 1 << 20])
def test_read_frames_gives_whole_frames_at_any_chunk_size(tmp_path, chunk):
    data, starts = image(5)
    path = tmp_path / "log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        got = list(read_frames(fd, HEADER_SIZE, len(data), chunk))
        assert [o for o, _ in got] == [1, 2, 3, 4, 5]
        assert b"".join(f for _, f in got) == data[HEADER_SIZE:]
        # stop at a frame boundary: nothing from there on
        part = list(read_frames(fd, starts[1], starts[3], chunk))
        assert [o for o, _ in part] == [2, 3] and b"".join(f for _, f in part) == data[starts[1] : starts[3]]
    finally:
        os.close(fd)


def test_read_frames_stops_quietly_where_the_file_ends(tmp_path):
    data, starts = image(3)
    path = tmp_path / "log"
    path.write_bytes(data[:-5])
    fd = os.open(path, os.O_RDONLY)
    try:
        assert [o for o, _ in read_frames(fd, HEADER_SIZE, len(data))] == [1, 2]
        assert [o for o, _ in read_frames(fd, HEADER_SIZE, len(data), chunk=20)] == [1, 2]
    finally:
        os.close(fd)


# -- renumber_frames: online compaction's carried rows ---------------------------------------


def test_renumbered_frames_move_only_their_models_watermark_and_stay_checksummed():
    frames = (
        encode_frame(11, payload(11, "User", 4))
        + encode_frame(12, payload(12, "Post", 9))
        + encode_frame(13, payload(13, "User", 5))
    )
    checkpoints: list[tuple[int, int]] = []
    out = b"".join(renumber_frames(FrameWalk(frames, 0, len(frames)), {"User": -3}, HEADER_SIZE, 2, checkpoints))
    offsets, s = scan(encode_header(EPOCH, 10) + out)
    assert offsets == [11, 12, 13] and s.damage is None
    events = [json.loads(p) for _, p in LogScan("log", encode_header(EPOCH, 10) + out).records()]
    assert [(e["model"], e["watermark"]) for e in events] == [("User", 1), ("Post", 9), ("User", 2)]
    second = HEADER_SIZE + FRAME_HEADER_SIZE + len(payload(11, "User", 1))
    assert checkpoints == [(12, second)]
    assert out[
        second - HEADER_SIZE : second - HEADER_SIZE + FRAME_HEADER_SIZE + len(payload(12, "Post", 9))
    ] == encode_frame(12, payload(12, "Post", 9))


def test_renumbering_with_no_delta_copies_the_bytes():
    frames = encode_frame(4, payload(4)) + encode_frame(5, payload(5))
    checkpoints: list[tuple[int, int]] = []
    assert b"".join(renumber_frames(FrameWalk(frames, 0, len(frames)), {"Post": 7}, 1000, 5, checkpoints)) == frames
    assert checkpoints == [(5, 1000 + FRAME_HEADER_SIZE + len(payload(4)))]


# -- FrameWalk (one loop for every frame reader) ----------------------------------------------


def test_an_unchecked_walk_yields_payloads_when_asked(tmp_path):
    data, starts = image(3)
    frames = list(FrameWalk(data, HEADER_SIZE, len(data)))
    assert [(o, f) for o, f in frames] == [(o, encode_frame(o, payload(o))) for o in (1, 2, 3)]
    assert list(FrameWalk(data, HEADER_SIZE, len(data), payloads=True)) == [(o, payload(o)) for o in (1, 2, 3)]
    path = tmp_path / "log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert list(FrameWalk(fd, starts[1], len(data), payloads=True, chunk=20)) == [(2, payload(2)), (3, payload(3))]
    finally:
        os.close(fd)


def test_a_checked_walk_of_an_image_stopping_inside_a_frame_says_how_much_is_missing():
    data, starts = image(3)
    stop = len(data) - 5  # frame 3's payload lacks its last 5 bytes
    walk = FrameWalk(data, HEADER_SIZE, stop, 1)
    assert [o for o, _ in walk] == [1, 2]
    size = len(payload(3))
    assert walk.error == f"truncated payload ({size - 5} of {size} bytes)"
    assert walk.end == starts[2] and walk.next_offset == 3


@pytest.fixture
def asked(monkeypatch) -> list[int]:
    """The sizes asked of `os.pread`, in order: how much a walk holds at once."""
    sizes: list[int] = []
    real_pread = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        sizes.append(n)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    return sizes


def test_a_damaged_length_in_a_file_is_named_without_reading_past_a_chunk(tmp_path, asked):
    # A length over MAX_PAYLOAD is no frame to read whole: the walk stops at its header and
    # holds no more than a chunk (or a good frame), however much of the segment is left.
    data, starts = image(2)
    data += struct.pack(">QII", 3, 0, MAX_PAYLOAD + 1) + b"x" * 1000
    path = tmp_path / "log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        walk = FrameWalk(fd, HEADER_SIZE, len(data), 1, chunk=20)
        assert [o for o, _ in walk] == [1, 2]
    finally:
        os.close(fd)
    assert (walk.error, walk.end) == (f"frame length {MAX_PAYLOAD + 1} exceeds {MAX_PAYLOAD}", len(data) - 1016)
    largest = max(len(encode_frame(o, payload(o))) for o in (1, 2))
    assert max(asked) <= max(20, largest) < 1000


def test_a_largest_allowed_frame_is_walked_from_an_image_and_from_a_file_in_chunks(tmp_path):
    data, starts = image(1)
    body = b'{"kind":"insert","model":"User","offset":2,"watermark":2,"id":2,"record":{"pad":"'
    big = body + b"a" * (MAX_PAYLOAD - len(body) - 3) + b'"}}'
    data += encode_frame(2, big) + encode_frame(3, payload(3))
    walk = FrameWalk(data, HEADER_SIZE, len(data), 1)
    assert [(o, len(f)) for o, f in walk] == [
        (1, len(encode_frame(1, payload(1)))),
        (2, FRAME_HEADER_SIZE + MAX_PAYLOAD),
        (3, len(encode_frame(3, payload(3)))),
    ]
    assert walk.error is None
    path = tmp_path / "log"
    path.write_bytes(data)
    del data, big
    fd = os.open(path, os.O_RDONLY)
    try:
        walk = FrameWalk(fd, HEADER_SIZE, os.path.getsize(path), 1, payloads=True, chunk=1 << 20)
        assert [(o, len(p)) for o, p in walk] == [(1, len(payload(1))), (2, MAX_PAYLOAD), (3, len(payload(3)))]
        assert walk.error is None
    finally:
        os.close(fd)


def test_read_frames_reads_at_most_a_chunk_at_a_time_unless_a_frame_is_larger(tmp_path, asked):
    # /replicate's reader: a slow consumer holds one chunk at most.
    data, starts = image(6)
    path = tmp_path / "log"
    path.write_bytes(data)
    largest = max(len(encode_frame(o, payload(o))) for o in range(1, 7))
    fd = os.open(path, os.O_RDONLY)
    try:
        frames = list(read_frames(fd, HEADER_SIZE, len(data), chunk=40))
    finally:
        os.close(fd)
    assert [o for o, _ in frames] == [1, 2, 3, 4, 5, 6]
    assert asked and max(asked) <= max(40, largest) < len(data) - HEADER_SIZE
