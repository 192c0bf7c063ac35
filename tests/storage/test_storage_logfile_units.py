"""logfile.py's frame helpers, which the replica, the data tools and realtime read frames
through (module docstring: nobody else slices a frame): `frame_header`, `frame_end`,
`frame_payload_at`, `frame_offset`, `frame_payload`, `frame_error` and `frame_after_damage`,
each at its edges, on images built here byte by byte (offset u64, crc32 u32, length u32,
payload: docs/guide/operations.md's frame layout), never with the module's encoder."""

from __future__ import annotations

import struct
import zlib

import pytest

from dbsvc.storage.logfile import (
    FrameHeader,
    frame_after_damage,
    frame_end,
    frame_error,
    frame_header,
    frame_offset,
    frame_payload,
    frame_payload_at,
)


def frame(offset: int, payload: bytes, crc: int | None = None, length: int | None = None) -> bytes:
    crc = zlib.crc32(payload) if crc is None else crc
    return struct.pack(">QII", offset, crc, len(payload) if length is None else length) + payload


A = frame(7, b'{"a":1}')  # 16 + 7 = 23 bytes
B = frame(8, b'{"bb":22}')  # 16 + 9 = 25 bytes


def test_a_header_is_read_where_sixteen_bytes_are_left_and_none_where_fewer():
    image = b"xx" + A
    assert frame_header(image, 2) == FrameHeader(7, zlib.crc32(b'{"a":1}'), 7)
    assert frame_header(A) == FrameHeader(7, zlib.crc32(b'{"a":1}'), 7)  # at byte 0 unless told
    assert frame_header(A[:16]) == FrameHeader(7, zlib.crc32(b'{"a":1}'), 7)  # a header alone
    assert frame_header(A[:15]) is None
    assert frame_header(image, len(image) - 15) is None
    assert frame_header(memoryview(image), 2).offset == 7


def test_a_frames_end_and_payload_follow_its_length():
    image = A + B
    assert frame_end(image, 0) == 23
    assert frame_end(image, 23) == 48
    assert frame_payload_at(image, 0) == b'{"a":1}'
    assert frame_payload_at(image, 23) == b'{"bb":22}'
    copied = frame_payload_at(memoryview(image), 23)
    assert type(copied) is bytes and copied == b'{"bb":22}'


def test_a_frames_offset_and_payload_are_read_from_the_frame_alone():
    assert frame_offset(B) == 8
    assert frame_offset(frame(2**64 - 1, b"")) == 2**64 - 1
    assert type(frame_offset(memoryview(B))) is int
    payload = frame_payload(B)
    assert type(payload) is memoryview and bytes(payload) == b'{"bb":22}'
    assert bytes(frame_payload(frame(1, b""))) == b""


@pytest.mark.parametrize(
    ("image", "pos", "expected", "size", "reason"),
    [
        (A, 0, 7, None, None),
        (b"zz" + A + B, 25, 8, None, None),
        (A + B, 23, 8, 47, "truncated payload (8 of 9 bytes)"),
        (A, 0, 7, 15, "truncated frame header (15 of 16 bytes)"),
        (A[:10], 0, 7, None, "truncated frame header (10 of 16 bytes)"),
        (A, 23, 8, None, "truncated frame header (0 of 16 bytes)"),
        (A, 0, 8, None, "frame offset 7, expected 8"),
        (A, 0, 6, None, "frame offset 7, expected 6"),
        (A[:16], 0, 7, None, "truncated payload (0 of 7 bytes)"),
        (A[:22], 0, 7, None, "truncated payload (6 of 7 bytes)"),
        (frame(7, b'{"a":2}', crc=zlib.crc32(b'{"a":1}')), 0, 7, None, "payload checksum mismatch"),
        (frame(7, b"", length=64 * 1024 * 1024 + 1), 0, 7, None, "frame length 67108865 exceeds 67108864"),
        (frame(7, b"", length=64 * 1024 * 1024), 0, 7, None, "truncated payload (0 of 67108864 bytes)"),
    ],
)
def test_a_frame_is_good_or_its_reason_is_said_exactly(image, pos, expected, size, reason):
    assert frame_error(image, pos, expected, size) == reason


def test_the_size_given_stands_for_the_images_end():
    # the image holds the whole frame, but the frame runs past the size given
    assert frame_error(A + B, 0, 7, 23) is None
    assert frame_error(A + B, 0, 7, 22) == "truncated payload (6 of 7 bytes)"


def test_damage_before_a_later_good_frame_is_refused_and_zeros_before_it_are_a_torn_tail():
    stray = A + b"\x01" + B
    assert frame_after_damage(stray, 23, 8) == 24  # a byte that is not zero: damage, the frame at 24
    zeros = A + b"\x00\x00" + B
    assert frame_after_damage(zeros, 23, 8) is None  # appends no fsync covered: cut
    assert frame_after_damage(A + b"\x05" * 40, 23, 8) is None  # no good frame after it
    assert frame_after_damage(A + b"\x00" * 40, 23, 8) is None  # zero-filled to the end
    # a frame after damage whose offset is below the one expected is no evidence
    assert frame_after_damage(A + b"\x01" + frame(7, b"{}"), 23, 8) is None
