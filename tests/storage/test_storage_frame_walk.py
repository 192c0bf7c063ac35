"""logfile.FrameWalk, the one loop over frames: the same frames and the same verdicts whether
it walks an image in memory (recovery) or a file in pread chunks of any size (replay, the
retained segment, online compaction's copy)."""

from __future__ import annotations

import os

import pytest

from dbsvc.errors import CorruptLog
from dbsvc.storage.logfile import FRAME_HEADER_SIZE, HEADER_SIZE, FrameWalk, LogScan, encode_frame, encode_header

EPOCH = "00112233445566778899aabbccddeeff"
CHUNKS = [1, FRAME_HEADER_SIZE, FRAME_HEADER_SIZE + 5, 100, 1 << 20]


def event(offset: int, pad: int = 0) -> bytes:
    return b'{"model":"User","offset":%d,"watermark":%d,"kind":"insert","id":%d,"pad":"%s"}' % (
        offset,
        offset,
        offset,
        b"x" * pad,
    )


def image(n: int) -> tuple[bytes, list[int]]:
    """A log of frames 1..n (of growing sizes) and where each starts."""
    out, starts = bytearray(encode_header(EPOCH, 0)), []
    for offset in range(1, n + 1):
        starts.append(len(out))
        out += encode_frame(offset, event(offset, pad=offset * 37))
    return bytes(out), starts


@pytest.fixture
def log_file(tmp_path):
    """(path, descriptor opener) for a log image written to a real file."""
    fds: list[int] = []

    def open_with(data: bytes) -> int:
        path = tmp_path / f"log{len(fds)}"
        path.write_bytes(data)
        fds.append(os.open(path, os.O_RDONLY))
        return fds[-1]

    yield open_with
    for fd in fds:
        os.close(fd)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_checked_walk_of_a_file_yields_what_the_image_walk_yields(log_file, chunk):
    data, _ = image(6)
    in_memory = FrameWalk(data, HEADER_SIZE, len(data), 1)
    on_disk = FrameWalk(log_file(data), HEADER_SIZE, len(data), 1, chunk=chunk)
    assert list(on_disk) == list(in_memory)
    assert b"".join(frame for _, frame in FrameWalk(data, HEADER_SIZE, len(data), 1)) == data[HEADER_SIZE:]
    assert (on_disk.end, on_disk.next_offset, on_disk.error) == (len(data), 7, None)


def test_payloads_are_the_frames_without_their_headers():
    data, _ = image(3)
    walk = FrameWalk(data, HEADER_SIZE, len(data), 1, payloads=True)
    assert [payload for _, payload in walk] == [event(n, pad=n * 37) for n in (1, 2, 3)]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_a_bad_checksum_stops_a_checked_file_walk_where_the_scan_stops(log_file, chunk):
    data, starts = image(5)
    broken = bytearray(data)
    broken[starts[3] + FRAME_HEADER_SIZE + 3] ^= 0x20
    walk = FrameWalk(log_file(bytes(broken)), HEADER_SIZE, len(data), 1, chunk=chunk)
    assert [offset for offset, _ in walk] == [1, 2, 3]
    scan = LogScan("log", bytes(broken))
    with pytest.raises(CorruptLog) as info:  # frame 5 is good after it: rule 3
        list(scan.records())
    assert walk.error == "payload checksum mismatch" and info.value.reason.startswith(walk.error)
    assert walk.end == starts[3] == scan.end and walk.next_offset == 4 == scan.next_offset


@pytest.mark.parametrize("chunk", CHUNKS)
def test_a_file_shorter_than_its_stop_is_a_truncated_payload(log_file, chunk):
    data, starts = image(4)
    walk = FrameWalk(log_file(data[:-7]), HEADER_SIZE, len(data), 1, chunk=chunk)
    assert [offset for offset, _ in walk] == [1, 2, 3]
    length = len(event(4, pad=4 * 37))
    assert walk.error == f"truncated payload ({length - 7} of {length} bytes)" and walk.end == starts[3]


def test_a_frame_running_past_stop_is_reported_by_a_checked_walk(log_file):
    data, starts = image(3)
    walk = FrameWalk(log_file(data), HEADER_SIZE, starts[2] + 20, 1, chunk=64)
    assert [offset for offset, _ in walk] == [1, 2]
    assert walk.error == f"truncated payload (4 of {len(event(3, pad=3 * 37))} bytes)"


def test_a_skipped_offset_stops_a_checked_walk_with_its_reason(log_file):
    data, starts = image(2)
    data += encode_frame(4, event(4))
    walk = FrameWalk(log_file(data), starts[1], len(data), 2, chunk=FRAME_HEADER_SIZE)
    assert [offset for offset, _ in walk] == [2]
    assert walk.error == "frame offset 4, expected 3" and walk.end == len(data) - len(encode_frame(4, event(4)))


@pytest.mark.parametrize("chunk", CHUNKS)
def test_an_unchecked_walk_stops_quietly_at_the_last_whole_frame(log_file, chunk):
    data, starts = image(4)
    walk = FrameWalk(log_file(data[:-1]), starts[1], len(data), chunk=chunk)
    assert [offset for offset, _ in walk] == [2, 3]
    assert walk.end == starts[3] and walk.error is None
