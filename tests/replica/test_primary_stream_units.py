"""How a replica reads the primary's `/replicate/snapshot` (dbsvc/replica/primary.py rule 4):
`read_snapshot_header` (the cut a follower compacts at, rule 9 of follower.py) and
`read_snapshot` (a bootstrap's whole snapshot), each decision at the unit that makes it.

A stream here is a list of messages played in order, recording the timeout of each receive;
every expectation is a literal (the messages word for word, the 30 s of rule 3, the offset
a `StreamError` names). Plain functions without fixtures: `bench/mutation_inprocess.py` runs
them too."""

from __future__ import annotations

import json
import zlib

import pytest

from dbsvc.errors import MalformedAnswer, StreamError, WebSocketClientError
from dbsvc.replica.answers import SnapshotHeader
from dbsvc.replica.primary import read_snapshot, read_snapshot_header
from dbsvc.storage.history import Fork, History


class Played:
    """A `Stream` that answers `messages` one receive at a time, then None (a quiet socket)."""

    def __init__(self, *messages: bytes | str | None) -> None:
        self.messages = list(messages)
        self.timeouts: list[float | None] = []

    def receive(self, timeout: float | None = None) -> bytes | str | None:
        self.timeouts.append(timeout)
        return self.messages.pop(0) if self.messages else None


HEADER = '{"type": "snapshot", "format": 1, "epoch": "e1", "offset": 7, "fingerprint": "f1"}'
READ = SnapshotHeader("e1", 7, "f1", None)  # HEADER as read (no history: an older primary)


def end(data: bytes, **over: object) -> str:
    return json.dumps({"type": "end", "bytes": len(data), "crc32": zlib.crc32(data), **over})


def test_the_header_is_the_first_message_parsed_and_read_alone():
    stream = Played(HEADER, b"rows that are not read")
    assert read_snapshot_header(stream) == READ
    assert stream.timeouts == [30.0]  # rule 3: 30 s for each message
    assert stream.messages == [b"rows that are not read"]  # the snapshot itself is never read


@pytest.mark.parametrize(
    "first, reason",
    [
        (b'{"type": "snapshot"}', "the snapshot stream did not start with its header"),
        (None, "the snapshot stream did not start with its header"),
        ('["snapshot"]', "the snapshot stream's header is not an object"),
        ("7", "the snapshot stream's header is not an object"),
        ("null", "the snapshot stream's header is not an object"),
    ],
)
def test_a_stream_without_a_json_object_first_is_a_stream_error_at_offset_0(first, reason):
    with pytest.raises(StreamError) as info:
        read_snapshot_header(Played(first))
    assert (info.value.offset, info.value.reason) == (0, reason)
    assert str(info.value) == f"replication frame at offset 0: {reason}"


NOT_JSON = [
    ("{not json", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ('{"offset": NaN}', "NaN is not valid JSON (RFC 8259 §6: numbers are finite)"),
    ('{"offset": -Infinity}', "-Infinity is not valid JSON (RFC 8259 §6: numbers are finite)"),
    ('{"offset": 1e400}', "the number 1e400 is out of range: expected a finite number (a 64-bit float, RFC 8259 §6)"),
]
HEADER_EXPECTED = 'expected a JSON object {"type": "snapshot", "epoch": ..., "offset": ...}'
END_EXPECTED = 'expected a JSON object {"type": "end", "bytes": ..., "crc32": ...}'


@pytest.mark.parametrize("text, words", NOT_JSON, ids=["broken", "nan", "infinity", "1e400"])
def test_a_header_that_is_not_json_is_a_stream_error_naming_what_was_expected(text, words):
    # It was a bare ValueError, which the follower's start did not take for damage.
    stream = Played(text, b"abc", end(b"abc"))
    with pytest.raises(StreamError) as info:
        read_snapshot(stream)
    assert info.value.offset == 0
    assert info.value.reason == f"the snapshot stream's header is not JSON: {words}; {HEADER_EXPECTED}"
    assert stream.messages == [b"abc", end(b"abc")]  # nothing read after it


@pytest.mark.parametrize("text, words", NOT_JSON, ids=["broken", "nan", "infinity", "1e400"])
def test_an_end_message_that_is_not_json_is_a_stream_error_at_the_headers_offset(text, words):
    with pytest.raises(StreamError) as info:
        read_snapshot(Played(HEADER, b"abc", text))
    assert (info.value.offset, info.value.reason) == (
        7,
        f"the snapshot stream's end message is not JSON: {words}; {END_EXPECTED}",
    )


H1, H2 = "1" * 32, "2" * 32
MALFORMED = "the primary answered a malformed /replicate/snapshot: "


def header_with(**fields: object) -> str:
    """HEADER with `fields` replaced; a field given as `...` is left out."""
    header = {"type": "snapshot", "format": 1, "epoch": "e1", "offset": 7, "fingerprint": "f1"}
    header.update(fields)
    return json.dumps({name: value for name, value in header.items() if value is not ...})


def test_a_header_names_its_history_as_a_record():
    record = {"id": H2, "forks": [{"id": H1, "at": 5}]}
    header, data = read_snapshot(Played(header_with(history=record), b"abc", end(b"abc")))
    assert (header, data) == (SnapshotHeader("e1", 7, "f1", History(H2, (Fork(H1, 5),))), b"abc")
    assert read_snapshot_header(Played(header_with(history=None))) == READ  # null: none, as absent


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"epoch": ...}, "epoch missing, expected a non-empty string"),
        ({"epoch": 7}, "epoch 7, expected a non-empty string"),
        ({"epoch": ""}, "epoch '', expected a non-empty string"),
        ({"offset": ...}, "offset missing, expected a non-negative integer"),
        ({"offset": "7"}, "offset '7', expected a non-negative integer"),
        ({"offset": [7]}, "offset [7], expected a non-negative integer"),
        ({"offset": {}}, "offset {}, expected a non-negative integer"),
        ({"offset": 7.5}, "offset 7.5, expected a non-negative integer"),
        ({"offset": True}, "offset True, expected a non-negative integer"),
        ({"offset": None}, "offset None, expected a non-negative integer"),
        ({"offset": -1}, "offset -1, expected a non-negative integer"),
        ({"fingerprint": ...}, "fingerprint missing, expected a string"),
        ({"fingerprint": None}, "fingerprint None, expected a string"),
        ({"history": "h"}, """history 'h', expected null or a history record {"id": ..., "forks": [...]}"""),
        (
            {"history": {"id": H1}},
            f"""history {{'id': '{H1}'}}, expected null or a history record {{"id": ..., "forks": [...]}}""",
        ),
        (
            {"history": {"id": "x" * 32, "forks": []}},
            """history {'id': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', 'forks': []}, expected null or a history """
            """record {"id": ..., "forks": [...]}""",
        ),
        (
            {"history": {"id": H2, "forks": [{"id": H1, "at": -1}]}},
            f"history {{'id': '{H2}', 'forks': [{{'id': '{H1[:16]}..., expected null or a "
            """history record {"id": ..., "forks": [...]}""",  # the value shown up to 80 characters
        ),
    ],
    ids=[
        "no-epoch",
        "epoch-number",
        "epoch-empty",
        "no-offset",
        "offset-text",
        "offset-list",
        "offset-object",
        "offset-float",
        "offset-true",
        "offset-null",
        "offset-negative",
        "no-fingerprint",
        "fingerprint-null",
        "history-text",
        "history-no-forks",
        "history-bad-id",
        "history-bad-fork-long",
    ],
)
def test_a_header_that_is_not_a_snapshot_header_is_malformed_before_any_byte_is_read(fields, message):
    # It was read with .get: a text offset named offset 0 for the damage after it, and a
    # garbled history counted as none (an older primary's), so it was never checked.
    stream = Played(header_with(**fields), b"abc", end(b"abc"))
    with pytest.raises(MalformedAnswer) as info:
        read_snapshot(stream)
    assert str(info.value) == MALFORMED + message
    assert info.value.route == "/replicate/snapshot"
    assert stream.messages == [b"abc", end(b"abc")]  # nothing after the header was read


def test_an_end_message_that_is_no_object_is_a_stream_error():
    with pytest.raises(StreamError) as info:
        read_snapshot(Played(HEADER, b"abc", "[1]"))
    assert (info.value.offset, info.value.reason) == (7, "the snapshot stream's end message is not an object")


def test_the_whole_snapshot_is_its_binary_messages_joined_and_checked_by_the_end_message():
    stream = Played(HEADER, b"abc", b"", b"defg", end(b"abcdefg"), b"after the end")
    assert read_snapshot(stream) == (READ, b"abcdefg")
    assert stream.timeouts == [30.0] * 5
    assert stream.messages == [b"after the end"]


def test_a_snapshot_of_no_bytes_ends_at_once():
    assert read_snapshot(Played(HEADER, end(b""))) == (READ, b"")


@pytest.mark.parametrize(
    "last",
    [
        end(b"abcdefg", type="snapshot"),
        json.dumps({"bytes": 7, "crc32": zlib.crc32(b"abcdefg")}),
        end(b"abcdefg", bytes=6),
        end(b"abcdefg", bytes=8),
        end(b"abcdefg", crc32=zlib.crc32(b"abcdefg") ^ 1),
        json.dumps({"type": "end", "bytes": 7}),
    ],
)
def test_an_end_message_that_disagrees_with_the_bytes_is_damage_at_the_headers_offset(last):
    with pytest.raises(StreamError) as info:
        read_snapshot(Played(HEADER, b"abc", b"defg", last))
    assert (info.value.offset, info.value.reason) == (7, "the snapshot arrived damaged (size or crc32)")


def test_a_stream_that_stalls_before_its_end_is_a_client_error():
    stream = Played(HEADER, b"abc")
    with pytest.raises(WebSocketClientError) as info:
        read_snapshot(stream)
    assert not isinstance(info.value, StreamError)
    assert str(info.value) == "the snapshot stream stalled"
    assert stream.timeouts == [30.0, 30.0, 30.0]


def test_a_damaged_header_is_refused_before_any_byte_is_read():
    stream = Played(b"\x00", b"abc", end(b"abc"))
    with pytest.raises(StreamError):
        read_snapshot(stream)
    assert stream.messages == [b"abc", end(b"abc")]
