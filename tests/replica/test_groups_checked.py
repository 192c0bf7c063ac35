"""A group's frames checked together once read (dbsvc/replica/groups.py G2, `checked`): the
same frames, the same `BadFrame` reason and the same good frames before it as the check of
each frame in turn (`consumer.check_frame_bytes`), for every kind of bad frame at the
group's start, middle and end; and a stream that fails after a bad frame reports the bad
frame. The stream is a script of messages (what the blocking client's `receive` returns)."""

from __future__ import annotations

import struct
import zlib

import pytest

from dbsvc.errors import WebSocketClosed
from dbsvc.replica.consumer import FrameError, check_frame_bytes
from dbsvc.replica.groups import BATCH, BATCH_BYTES, BadFrame, checked, read_group

HEADER = struct.Struct(">QII")  # offset, crc32 of the payload, length
LIMIT = 64


class Script:
    """A `primary.Stream` that answers its messages in order, then None (or raises an
    exception placed among them)."""

    def __init__(self, messages: list) -> None:
        self.messages = list(messages)

    def receive(self, timeout: float | None = None):  # noqa: ANN201 - bytes | str | None
        if not self.messages:
            return None
        message = self.messages.pop(0)
        if isinstance(message, BaseException):
            raise message
        return message

    def receive_many(self, limit: int, max_bytes: int, timeout: float | None = None) -> list:
        """ws/client.py C7 over the messages: an error after the first waits for the next call."""
        batch: list = []
        message = self.receive(timeout)
        while message is not None:
            batch.append(message)
            if len(batch) >= limit or sum(map(len, batch)) >= max_bytes:
                break
            if self.messages and isinstance(self.messages[0], BaseException):
                break
            message = self.receive(0)
        return batch


def good(offset: int, size: int = 8) -> bytes:
    payload = bytes([offset % 251]) * size
    return HEADER.pack(offset, zlib.crc32(payload), len(payload)) + payload


def bad(kind: str, offset: int) -> bytes | str:
    frame = good(offset)
    payload = frame[16:]
    return {
        "text": "a text message",
        "long text": "a text message longer than a frame's header",
        "short header": frame[:10],
        "offset repeats": good(offset - 1) if offset > 1 else HEADER.pack(0, zlib.crc32(payload), 8) + payload,
        "offset gap": good(offset + 1),
        "crc": HEADER.pack(offset, zlib.crc32(payload) ^ 1, 8) + payload,
        "length short": HEADER.pack(offset, zlib.crc32(payload), 7) + payload,
        "length long": HEADER.pack(offset, zlib.crc32(payload), 9) + payload,
        "over the limit": good(offset, LIMIT + 1),
        "empty": b"",
    }[kind]


KINDS = [
    "text",
    "long text",
    "short header",
    "offset repeats",
    "offset gap",
    "crc",
    "length short",
    "length long",
    "over the limit",
    "empty",
]


def one_at_a_time(messages: list, expected: int) -> tuple[list, str | None]:
    """The reference: each message checked in turn, as G2 read them before."""
    frames = []
    for message in messages:
        try:
            frames.append(check_frame_bytes(message, expected, LIMIT))
        except FrameError as exc:
            return frames, str(exc)
        expected += 1
    return frames, None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("at", [0, 5, 19])
def test_a_bad_frame_is_found_with_the_good_ones_before_it(kind, at):
    messages = [good(n) for n in range(7, 27)]
    messages[at] = bad(kind, 7 + at)
    frames, reason = one_at_a_time(messages, 7)
    assert reason is not None
    with pytest.raises(BadFrame) as caught:
        read_group(Script(messages), 7, LIMIT, 0)
    assert (caught.value.frames, caught.value.reason) == (frames, reason)


def test_good_frames_are_the_group_as_read():
    messages = [good(n) for n in range(1, BATCH + 3)]
    group, full = read_group(Script(messages), 1, LIMIT, 0)
    assert (group, full) == (messages[:BATCH], True)
    assert checked([], 1, LIMIT) == []


def test_a_stream_that_fails_after_a_bad_frame_reports_the_bad_frame():
    script = Script([good(1), "text", WebSocketClosed(1006, "gone")])
    with pytest.raises(BadFrame) as caught:
        read_group(script, 1, LIMIT, 0)
    assert caught.value.frames == [good(1)]


def test_a_stream_that_fails_after_good_frames_hands_them_over_then_raises_its_error():
    # G1: the frames read before the end are a group (applied); the next read raises. Before
    # the group was taken in one call (ws/client.py C7), they were dropped with the error.
    script = Script([good(1), good(2), WebSocketClosed(1006, "gone")])
    assert read_group(script, 1, LIMIT, 0) == ([good(1), good(2)], False)
    with pytest.raises(WebSocketClosed):
        read_group(script, 3, LIMIT, 0)


def test_a_group_ends_at_the_frame_that_reaches_the_byte_bound():
    messages = [good(n, BATCH_BYTES // 3) for n in range(1, 6)]
    group, full = read_group(Script(messages), 1, BATCH_BYTES, 0)
    assert (group, full) == (messages[:3], True)  # the third passes BATCH_BYTES: it joins, and ends it


def test_a_good_group_is_taken_whole_at_once():
    """The checks together pass a good group as it is (the same list: no frame was taken
    one at a time), a payload of exactly the limit included."""
    messages = [good(n) for n in range(4, 10)] + [good(10, LIMIT)]
    assert checked(messages, 4, LIMIT) is messages


def test_groups_of_each_size_in_turn_are_checked_whole_and_their_last_frame_too():
    """G2's joined headers are read by a layout of the group's size, a few of them kept: each
    size in turn (one kept, one built again after others) passes a good group as it is and
    finds a bad CRC in the group's last frame, with every frame before it good."""
    offset = 1
    for n in [1, 2, 3, 5, BATCH, 7, 11, 13, BATCH, 1]:
        messages = [good(k) for k in range(offset, offset + n)]
        assert checked(messages, offset, LIMIT) is messages
        messages[-1] = bad("crc", offset + n - 1)
        with pytest.raises(BadFrame) as caught:
            checked(messages, offset, LIMIT)
        assert caught.value.frames == messages[:-1]
        assert caught.value.reason == one_at_a_time(messages, offset)[1]
        offset += n
