"""The checks a read replica's reading thread makes on each frame (dbsvc/replica/follower.py
rule 3, `_stream`): since issue 36 it checks the header, the offset, the length and the CRC
inline and asks `check_frame_bytes` only for a frame that fails one of them, for the reason.
Each case below fails exactly one of the inline checks, after two good frames: following
stops with that check's reason word for word, and the good frames before it are kept. A
frame whose payload is exactly the store's limit is applied, one byte more is not. Two
frames are forged (a payload whose crc32 is the offset expected, one whose crc32 is its own
length) so that a check reading the wrong header field would let them through.

In process, over tests/support/follower_kit.py's scripted primary; written from the survivors of
the session-7 mutation run of `_stream` (docs/mutation.md): the old tests sent only a gap, an
oversized frame and a message shorter than a header, so an inline check that let a damaged
frame through went unseen.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from support.follower_kit import EPOCH_A, H1, ScriptedPrimary, body, epoch_stream, history, insert

HEADER = struct.Struct(">QII")  # a frame's header: offset, crc32 of the payload, payload length
GOOD = insert(3)
OFFSET, CRC, LENGTH = HEADER.unpack_from(GOOD)
assert (OFFSET, LENGTH) == (3, len(GOOD) - 16)


def forged(payload: bytes, crc: int) -> bytes:
    """`payload` and 4 more bytes whose crc32 is `crc` (crc32 is affine in the bytes appended:
    solve for them bit by bit)."""
    base = zlib.crc32(payload + bytes(4))
    basis: dict[int, tuple[int, int]] = {}  # top bit -> (crc change, the suffix bits giving it)
    for bit in range(32):
        change, bits = zlib.crc32(payload + (1 << bit).to_bytes(4, "little")) ^ base, 1 << bit
        for top in range(31, -1, -1):
            if change >> top & 1:
                if top not in basis:
                    basis[top] = (change, bits)
                    break
                change, bits = change ^ basis[top][0], bits ^ basis[top][1]
    want, suffix = crc ^ base, 0
    for top in range(31, -1, -1):
        if want >> top & 1:
            want, suffix = want ^ basis[top][0], suffix ^ basis[top][1]
    out = payload + suffix.to_bytes(4, "little")
    assert zlib.crc32(out) == crc
    return out


NOISE = b"not an event, 32 bytes of it...."
CRC_3 = forged(NOISE, 3)  # a payload whose crc32 is 3, the offset expected
CRC_LENGTH = forged(NOISE, len(NOISE) + 4)  # a payload whose crc32 is its own length


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ("x" * 40, "bad frame at offset 3: a text message (40 characters), expected a binary frame"),
        (GOOD[:15], "bad frame at offset 3: truncated frame header (15 of 16 bytes)"),
        (insert(2), "bad frame at offset 2: offset repeats: 2 was already received, expected 3"),
        (GOOD[:-1] + bytes([GOOD[-1] ^ 1]), "bad frame at offset 3: payload checksum mismatch"),
        (
            HEADER.pack(3, CRC, LENGTH + 1) + GOOD[16:],
            f"bad frame at offset 3: truncated payload ({LENGTH} of {LENGTH + 1} bytes)",
        ),
        (
            HEADER.pack(3, CRC, LENGTH - 1) + GOOD[16:],
            f"bad frame at offset 3: length {LENGTH - 1} is short of the message's {LENGTH} payload bytes",
        ),
        # the offset is the header's first field, never its CRC (here 3, the offset expected)
        (HEADER.pack(7, 3, 36) + CRC_3, "bad frame at offset 7: offset gap: expected 3, offsets 3..6 are missing"),
        # the payload's CRC is compared with the header's CRC, never its length (here equal to it)
        (HEADER.pack(3, 0, 36) + CRC_LENGTH, "bad frame at offset 3: payload checksum mismatch"),
    ],
    ids=["text", "short-header", "repeat", "crc", "length-over", "length-under", "offset-not-crc", "crc-not-length"],
)
def test_a_frame_failing_one_inline_check_stops_following_with_its_reason(replica, bad, error):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2), bad]]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == error
    assert node.store.head_offset == 2
    assert node.user_ids() == [1, 2]


def sized(payload: int) -> bytes:
    """The User insert at offset 3 whose payload is `payload` bytes (its name padded)."""
    frame = insert(3, name="x" * (payload - (len(insert(3, name="")) - 16)))
    assert len(frame) == 16 + payload
    return frame


def test_a_frame_whose_payload_is_exactly_the_limit_is_applied_and_one_byte_more_is_not(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2), sized(4096)]]
    node = replica(primary, max_payload=4096).start()
    node.wait("at 3", lambda: node.store.head_offset == 3)
    assert node.status.state == "following" and node.status.error is None
    assert node.user_ids() == [1, 2, 3]

    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2), sized(4097)]]
    node = replica(primary, directory="over", max_payload=4096).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == (
        "bad frame at offset 3: record too large: a frame payload of 4097 bytes, over the limit of 4096 "
        "(a log holding it would not reopen); nothing of it is kept"
    )
    assert node.store.head_offset == 2
