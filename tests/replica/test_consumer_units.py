"""consumer.py's and sinks.py's decisions at the unit where each is made, in process (so a
mutation run sees them; test_consumer_fake_primary.py runs the command as a subprocess): the URL
(`parse_endpoint`), the check of one message (`check_frame`, rule 1), which refusal ends
the run and what it says (`refusal_message`, rule 4), the head-frame comparison and its
message (`same_row`, `diverged_message`, rule 7), and FILE (`ReplicaFile`, `scan_frames`,
rules 2 and 3).

Frames are built here from the documented layout (offset u64, CRC32 u32, length u32, then
the payload, big-endian), never with logfile.py's encoder; every message is compared word
for word."""

from __future__ import annotations

import json
import os
import struct
import zlib

import pytest

from dbsvc.errors import ConfigError, CorruptLog, HandshakeRefused
from dbsvc.replica.consumer import (
    Endpoint,
    FrameError,
    check_frame,
    diverged_message,
    parse_endpoint,
    refusal_message,
    same_row,
)
from dbsvc.replica.sinks import ReplicaFile, StdoutSink, last_frame, read_file_history, scan_frames
from dbsvc.storage import files
from dbsvc.storage.history import History

MiB = 1024 * 1024


def event(at: int, **over) -> dict:
    return {"kind": "insert", "model": "User", "offset": at, "watermark": at, "id": at, "record": {"id": at}, **over}


def payload(at: int, **over) -> bytes:
    return json.dumps(event(at, **over), separators=(",", ":")).encode()


def frame(offset: int, body: bytes | None = None, *, crc: int | None = None, length: int | None = None) -> bytes:
    body = payload(offset) if body is None else body
    return (
        struct.pack(">QII", offset, zlib.crc32(body) if crc is None else crc, len(body) if length is None else length)
        + body
    )


# --- parse_endpoint -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, ws, http",
    [
        ("http://h:8080", "ws://h:8080", "http://h:8080"),
        ("ws://h:8080/", "ws://h:8080", "http://h:8080"),
        ("https://db.example/base/", "wss://db.example/base", "https://db.example/base"),
        ("WSS://db.example:9/base/replicate", "wss://db.example:9/base", "https://db.example:9/base"),
        ("  http://h:1/replicate/  ", "ws://h:1", "http://h:1"),
        ("http://h:1/DBX/", "ws://h:1/DBX", "http://h:1/DBX"),
    ],
)
def test_a_base_url_names_both_the_stream_and_the_http_side(url, ws, http):
    endpoint = parse_endpoint(url)
    assert endpoint == Endpoint(ws, http)
    assert endpoint.replicate_url(17) == f"{ws}/replicate?after=17"


@pytest.mark.parametrize("url", ["ftp://h:1", "h:1", "http://:80", "http://h:0", "http://h:99999", "http://h:x"])
def test_a_url_that_is_not_a_server_base_is_a_usage_error(url):
    with pytest.raises(ConfigError) as caught:
        parse_endpoint(url)
    assert str(caught.value) == f"URL {url!r} is not a server base URL: expected http://HOST:PORT or ws://HOST:PORT"


@pytest.mark.parametrize("url", ["http://h:1/?after=3", "http://h:1/#top"])
def test_a_url_with_a_query_or_fragment_is_a_usage_error(url):
    with pytest.raises(ConfigError) as caught:
        parse_endpoint(url)
    assert str(caught.value) == f"URL {url!r}: give the server's base URL without a query; use --after N"


# --- check_frame (rule 1) -----------------------------------------------------------------

P4 = payload(4)

BAD = [
    # message after offset 3; the offset the error names; its reason, word for word
    ("text", "hello", 4, "a text message (5 characters), expected a binary frame"),
    ("empty", b"", 4, "truncated frame header (0 of 16 bytes)"),
    ("short header", frame(4)[:10], 4, "truncated frame header (10 of 16 bytes)"),
    ("short payload", frame(4)[:-5], 4, f"truncated payload ({len(P4) - 5} of {len(P4)} bytes)"),
    ("crc", frame(4, crc=12345), 4, "payload checksum mismatch"),
    (
        "length past the message",
        frame(4, length=len(P4) + 10),
        4,
        f"truncated payload ({len(P4)} of {len(P4) + 10} bytes)",
    ),
    (
        "length short",
        frame(4, length=len(P4) - 3),
        4,
        f"length {len(P4) - 3} is short of the message's {len(P4)} payload bytes",
    ),
    ("gap of one", frame(5), 5, "offset gap: expected 4, offsets 4 are missing"),
    ("gap", frame(6), 6, "offset gap: expected 4, offsets 4..5 are missing"),
    ("repeat", frame(3), 3, "offset repeats: 3 was already received, expected 4"),
    ("far behind", frame(1), 1, "offset repeats: 1 was already received, expected 4"),
    ("not json", frame(4, b'{"kind": '), 4, "payload is not JSON (Expecting value: line 1 column 10 (char 9))"),
    (
        "not utf-8",
        frame(4, b'"\xff"'),
        4,
        "payload is not JSON ('utf-8' codec can't decode byte 0xff in position 1: invalid start byte)",
    ),
    ("a list", frame(4, b"[1,2]"), 4, "payload is a JSON list, expected an event object"),
    ("a link", frame(4, payload(4, kind="link")), 4, "payload is not an insert, update or delete event (kind 'link')"),
    ("no kind", frame(4, b'{"offset":4}'), 4, "payload is not an insert, update or delete event (kind None)"),
    (
        "kind object",
        frame(4, payload(4, kind={"a": 1})),
        4,
        "payload is not an insert, update or delete event (kind {'a': 1})",
    ),
    ("event offset", frame(4, payload(4, offset=7)), 4, "the event's offset 7 disagrees with the frame's 4"),
    ("no event offset", frame(4, b'{"kind":"delete"}'), 4, "the event's offset None disagrees with the frame's 4"),
]


@pytest.mark.parametrize("message, offset, reason", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_each_bad_message_is_refused_naming_its_offset_and_fault(message, offset, reason):
    with pytest.raises(FrameError) as caught:
        check_frame(message, 4)
    assert (caught.value.offset, caught.value.reason) == (offset, reason)
    assert str(caught.value) == f"bad frame at offset {offset}: {reason}"


def test_an_event_offset_of_true_is_not_offset_1():
    with pytest.raises(FrameError) as caught:
        check_frame(frame(1, payload(1, offset=True)), 1)
    assert caught.value.reason == "the event's offset True disagrees with the frame's 1"


@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
def test_a_good_frame_gives_its_offset_and_event(kind):
    assert check_frame(frame(4, payload(4, kind=kind)), 4) == (4, event(4, kind=kind))


def test_the_payload_limit_is_inclusive_and_names_itself():
    body = payload(4, record={"id": 4, "pad": "x" * 100})
    assert check_frame(frame(4, body), 4, max_payload=len(body))[0] == 4
    with pytest.raises(FrameError) as caught:
        check_frame(frame(4, body), 4, max_payload=len(body) - 1)
    assert caught.value.offset == 4
    assert caught.value.reason == (
        f"record too large: a frame payload of {len(body)} bytes, over the limit of {len(body) - 1} "
        "(a log holding it would not reopen); nothing of it is kept"
    )
    # the log's own limit, 64 MiB, by default: a length over it, whatever the message holds
    with pytest.raises(FrameError) as caught:
        check_frame(frame(4, body, length=64 * MiB + 1), 4)
    assert caught.value.reason.startswith(
        f"record too large: a frame payload of {64 * MiB + 1} bytes, over the limit of {64 * MiB} "
    )
    with pytest.raises(FrameError) as caught:
        check_frame(frame(4, body, length=64 * MiB), 4)
    assert caught.value.reason == f"truncated payload ({len(body)} of {64 * MiB} bytes)"


# --- refusal_message (rule 4) -------------------------------------------------------------


def refused(status: int, body: dict | bytes | None = None) -> HandshakeRefused:
    data = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
    return HandshakeRefused(status, [], data)


def test_offset_gone_says_to_rebootstrap_and_where_the_log_now_starts():
    text = (
        "HTTP 410 offset_gone: the server no longer holds the rows after offset 12{}; "
        "they were compacted away, so this replica cannot be continued. Re-bootstrap it: copy "
        "the server's current records (note the Dbsvc-Offset header of the reads) and start a "
        "new replica file with --after that offset"
    )
    gone = {"code": "offset_gone", "detail": "compacted"}
    assert refusal_message(refused(410, {**gone, "oldest": 40}), 12) == text.format(
        " (its log now starts after offset 40)"
    )
    assert refusal_message(refused(410, gone), 12) == text.format("")
    assert refusal_message(refused(410, {**gone, "oldest": "40"}), 12) == text.format("")


@pytest.mark.parametrize("status, code", [(401, "unauthorized"), (403, "forbidden")])
def test_a_refused_token_says_how_to_give_one(status, code):
    exc = refused(status, {"code": code, "detail": "the token expired"})
    assert refusal_message(exc, 0) == (
        f"HTTP {status} {code}: the token expired (give a valid token with --token or SERVICE_TOKEN)"
    )


def test_replication_off_says_what_the_schema_needs():
    exc = refused(404, {"code": "replication_disabled", "detail": "replication is off"})
    assert refusal_message(exc, 0) == (
        "HTTP 404 replication_disabled: replication is off (the server's schema needs `[runtime] replication = true`)"
    )
    assert refusal_message(refused(404, {"code": "not_found", "detail": "no such path"}), 0) == (
        "HTTP 404 not_found: no such path"
    )


def test_a_replica_ahead_of_its_server_says_so():
    exc = refused(400, {"code": "offset_out_of_range", "detail": "after=9 is past the head 5"})
    assert refusal_message(exc, 9) == (
        "HTTP 400 offset_out_of_range: after=9 is past the head 5; this replica is ahead of the server, whose "
        "history no longer reaches offset 9 (a server restored from a backup, a different "
        "or reset server, or a wrong --after?). The rows after the server's head are not the "
        "server's: start a new replica file, keeping this one if its rows matter"
    )
    assert refusal_message(refused(400, {"code": "bad_query", "detail": "after=x"}), 9) == "HTTP 400 bad_query: after=x"


def test_other_client_errors_end_the_run_and_name_the_body_when_there_is_no_problem():
    assert refusal_message(refused(418, b"short and stout"), 0) == "HTTP 418 : short and stout"
    assert refusal_message(refused(499, b"x" * 300), 0) == "HTTP 499 : " + "x" * 200
    assert refusal_message(refused(422, {"code": "invalid"}), 0) == 'HTTP 422 invalid: {"code": "invalid"}'


def test_a_body_that_is_not_utf_8_is_shown_with_replacement_characters_and_single_spaces():
    assert refusal_message(refused(418, b"\xffbad  body"), 0) == "HTTP 418 : \ufffdbad body"


@pytest.mark.parametrize("status", [399, 408, 429, 500, 502, 503])
def test_busy_failing_or_timed_out_servers_are_retried(status):
    assert refusal_message(refused(status, {"code": "unavailable", "detail": "busy"}), 0) is None


# --- same_row and diverged_message (rule 7) -----------------------------------------------


def test_the_head_frame_is_the_files_when_byte_equal_or_equal_but_for_the_watermark():
    mine = frame(5)
    assert same_row(mine, mine)
    assert same_row(bytearray(mine), mine)
    assert same_row(frame(5, payload(5, watermark=2)), mine)
    no_watermark = b'{"kind":"insert","model":"User","offset":5,"id":5,"record":{"id":5}}'
    assert same_row(frame(5, no_watermark), mine)
    assert same_row(mine, frame(5, no_watermark))  # FILE's frame may be the one without it


@pytest.mark.parametrize(
    "theirs",
    [
        frame(5, payload(5, record={"id": 5, "name": "other"})),
        frame(5, payload(5, model="Post")),
        frame(6, payload(5)),  # the same payload under another offset
        frame(5)[:12],  # not even a header
        frame(5, b'{"kind":'),  # not JSON
        frame(5, b"[5]"),  # not an object
        frame(5).decode("latin-1"),  # a text message
    ],
    ids=["record", "model", "offset", "short", "not-json", "a-list", "text"],
)
def test_any_other_difference_is_another_history(theirs):
    assert not same_row(theirs, frame(5))


def test_a_file_frame_that_is_not_an_object_matches_only_itself():
    mine = frame(5, b"[5]")
    assert same_row(mine, mine)
    assert not same_row(frame(5, b"[5 ]"), mine)


def test_the_divergence_message_names_the_offset_and_the_file():
    assert diverged_message("r.log", 12) == (
        "the server's frame at offset 12 differs from the one r.log holds: the server's history "
        "is no longer this file's (restored from a backup, or rewritten), so its offsets after 12 "
        "may name other rows. r.log was left as it is; start a new replica file (keep this one if "
        "its rows matter)"
    )


# --- FILE (sinks.py, rules 2 and 3) -------------------------------------------------------


class Said:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, message: str) -> None:
        self.lines.append(message)


F5, F6, F7 = frame(5), frame(6), frame(7)


def test_a_new_file_is_created_empty_and_takes_frames_in_writes_of_a_mebibyte(tmp_path, monkeypatch):
    path = str(tmp_path / "r.log")
    said = Said()
    sink = ReplicaFile.open(path, said)
    assert (sink.last_offset, sink.last_frame, sink.history, sink.closed) == (None, None, None, False)
    assert os.path.getsize(path) == 0 and said.lines == []
    sink.write(F5, event(5))
    assert (sink.last_offset, sink.last_frame, sink.unsynced) == (5, F5, len(F5))
    assert os.path.getsize(path) == 0  # held until a mebibyte or a sync
    big = frame(6, payload(6, record={"id": 6, "pad": "x" * MiB}))
    sink.write(big, event(6))
    assert os.path.getsize(path) == len(F5) + len(big)  # the buffer reached 1 MiB: written
    assert sink.unsynced == len(F5) + len(big)
    sink.write(F7, event(7))
    sink.sync()
    assert sink.unsynced == 0 and os.path.getsize(path) == len(F5) + len(big) + len(F7)
    sink.write(frame(8), event(8))
    sink.close()
    sink.close()  # a second close does nothing
    with open(path, "rb") as f:
        assert f.read() == F5 + big + F7 + frame(8)


class Seen(files.FileOps):
    """storage's file seam (files.ops), recording the calls FILE's life makes."""

    def __init__(self) -> None:
        self.calls: list = []

    def fsync_dir(self, path: str) -> None:
        self.calls.append(("fsync_dir", path))
        super().fsync_dir(path)

    def close(self, fd: int) -> None:  # type: ignore[override]
        self.calls.append("close")
        os.close(fd)


def test_a_created_file_is_0644_and_its_directory_fsynced_and_a_closed_one_closed_once(tmp_path):
    path = tmp_path / "r.log"
    old_umask = os.umask(0o022)
    try:
        with files.use(Seen()) as seen:
            sink = ReplicaFile.open(str(path), Said())
            sink.close()
            sink.close()
            assert seen.calls == [("fsync_dir", str(tmp_path)), "close"]
            seen.calls.clear()
            ReplicaFile.open(str(path), Said()).close()  # it exists: no directory entry to make durable
            assert seen.calls == ["close"]
    finally:
        os.umask(old_umask)
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_buffer_of_exactly_a_mebibyte_is_written_and_the_count_starts_again_after(tmp_path):
    path = tmp_path / "r.log"
    sink = ReplicaFile.open(str(path), Said())
    body = payload(6, record={"id": 6, "pad": ""})
    body = payload(6, record={"id": 6, "pad": "x" * (MiB - len(F5) - 16 - len(body))})
    sink.write(F5, event(5))
    sink.write(frame(6, body), event(6))
    assert os.path.getsize(path) == MiB  # exactly 1 MiB held: written
    sink.write(F7, event(7))
    sink.sync()  # the buffer flushed: the count starts from nothing again
    short = payload(8, record={"id": 8, "pad": ""})
    short = payload(8, record={"id": 8, "pad": "x" * (MiB - 1 - 16 - len(short))})
    sink.write(frame(8, short), event(8))
    assert os.path.getsize(path) == MiB + len(F7)  # 1 MiB - 1 byte: held
    sink.close()


def test_a_buffer_one_byte_short_of_a_mebibyte_is_held(tmp_path):
    sink = ReplicaFile.open(str(tmp_path / "r.log"), Said())
    fill = MiB - len(F5) - 16
    body = payload(6, record={"id": 6, "pad": ""})
    body = payload(6, record={"id": 6, "pad": "x" * (fill - len(body) - 1)})
    sink.write(F5, event(5))
    sink.write(frame(6, body), event(6))
    assert sink.unsynced == MiB - 1 and os.path.getsize(tmp_path / "r.log") == 0
    sink.write(F7, event(7))
    assert os.path.getsize(tmp_path / "r.log") == MiB - 1 + len(F7)
    sink.close()


def test_reopening_resumes_after_the_last_frame_and_cuts_a_torn_tail(tmp_path):
    path = tmp_path / "r.log"
    path.write_bytes(F5 + F6 + F7[:30])
    said = Said()
    sink = ReplicaFile.open(str(path), said)
    assert (sink.last_offset, sink.last_frame) == (6, F6)
    assert said.lines == [
        f"{path}: cutting a torn tail of 30 bytes at byte {len(F5 + F6)} "
        f"(truncated payload (14 of {len(F7) - 16} bytes)); resuming after offset 6"
    ]
    assert path.read_bytes() == F5 + F6
    sink.close()
    path.write_bytes(F5[:9])
    said = Said()
    sink = ReplicaFile.open(str(path), said)
    assert (sink.last_offset, sink.last_frame) == (None, None)
    assert said.lines == [
        f"{path}: cutting a torn tail of 9 bytes at byte 0 (truncated frame header (9 of 16 bytes)); "
        "the file held no whole frame"
    ]
    assert path.read_bytes() == b""
    sink.close()


def test_a_whole_file_is_opened_as_it_is(tmp_path):
    path = tmp_path / "r.log"
    path.write_bytes(F5 + F6 + F7)
    said = Said()
    sink = ReplicaFile.open(str(path), said)
    assert (sink.last_offset, sink.last_frame, said.lines) == (7, F7, [])
    sink.close()
    assert path.read_bytes() == F5 + F6 + F7


def test_a_second_consumer_and_an_unopenable_path_are_refused(tmp_path):
    path = str(tmp_path / "r.log")
    first = ReplicaFile.open(path, Said())
    with pytest.raises(ConfigError) as caught:
        ReplicaFile.open(path, Said())
    assert str(caught.value) == f"{path!r} is in use by another `dbsvc replicate`"
    first.close()
    ReplicaFile.open(path, Said()).close()  # the lock went with the close
    missing = str(tmp_path / "no" / "r.log")
    with pytest.raises(ConfigError) as caught:
        ReplicaFile.open(missing, Said())
    assert str(caught.value) == f"cannot open {missing!r}: No such file or directory"


def test_damage_a_good_frame_follows_is_refused_and_the_file_kept(tmp_path):
    path = tmp_path / "r.log"
    data = F5 + b"garbage" + F6
    path.write_bytes(data)
    with pytest.raises(CorruptLog) as caught:
        ReplicaFile.open(str(path), Said())
    assert (caught.value.path, caught.value.offset, caught.value.reason) == (
        str(path),
        len(F5),
        f"frame offset {int.from_bytes(b'garbage' + F6[:1], 'big')}, expected 6; "
        f"a good frame follows at byte {len(F5) + 7}, so this is not a torn tail",
    )
    assert path.read_bytes() == data
    ReplicaFile.open(str(path.with_name("other.log")), Said()).close()  # the failed open let go of nothing else


def test_the_history_record_is_written_once_and_read_back(tmp_path):
    path = str(tmp_path / "r.log")
    sink = ReplicaFile.open(path, Said())
    history = History("a" * 32)
    sink.adopt_history(history)
    assert sink.history == history and read_file_history(path) == history
    with open(path + ".history", "rb") as f:
        record = f.read()
    body = b'{"format":1,"id":"' + b"a" * 32 + b'","forks":[]}'
    assert record == b"%08x " % zlib.crc32(body) + body + b"\n"
    os.unlink(path + ".history")
    sink.adopt_history(history)  # the same history: nothing written again
    assert not os.path.exists(path + ".history")
    sink.close()
    assert ReplicaFile.open(path, Said()).history is None


def test_last_frame_is_the_last_whole_frame_before_the_end():
    data = F5 + F6 + F7
    assert last_frame(data, len(data)) == F7
    assert last_frame(data, len(F5 + F6)) == F6
    assert last_frame(data, len(F5)) == F5


SCANS = [
    ("empty", b"", (0, None, None)),
    ("whole", F5 + F6 + F7, (len(F5 + F6 + F7), 7, None)),
    ("tiny", F5[:9], (0, None, "truncated frame header (9 of 16 bytes)")),
    ("half the first", F5[:30], (0, None, f"truncated payload (14 of {len(F5) - 16} bytes)")),
    ("half the last", F5 + F6 + F7[:30], (len(F5 + F6), 6, f"truncated payload (14 of {len(F7) - 16} bytes)")),
    ("a header only last", F5 + F6[:16], (len(F5), 5, f"truncated payload (0 of {len(F6) - 16} bytes)")),
    ("a bad checksum last", F5 + F6[:20] + bytes([F6[20] ^ 1]) + F6[21:], (len(F5), 5, "payload checksum mismatch")),
    ("zeros", F5 + bytes(100), (len(F5), 5, "frame offset 0, expected 6")),
    ("unsynced append lost", F5 + bytes(len(F6)) + F7, (len(F5), 5, "frame offset 0, expected 6")),
    (
        "first offset disagrees, nothing after",
        frame(4, payload(5)),
        (0, None, "frame offset 4 disagrees with its payload's offset 5"),
    ),
    (
        "first payload without an offset",
        frame(4, b'{"kind":"insert"}'),
        (0, None, "frame offset 4 disagrees with its payload's offset None"),
    ),
    ("first payload not JSON", frame(4, b"{"), (0, None, "frame offset 4 disagrees with its payload's offset None")),
    ("first payload a list", frame(4, b"[4]"), (0, None, "frame offset 4 disagrees with its payload's offset None")),
    ("first bad, a lone header", F5[:16], (0, None, f"truncated payload (0 of {len(F5) - 16} bytes)")),
]


@pytest.mark.parametrize("data, expected", [c[1:] for c in SCANS], ids=[c[0] for c in SCANS])
def test_scan_finds_the_last_good_frame_and_why_the_rest_is_a_torn_tail(data, expected):
    assert scan_frames("r.log", data) == expected


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


CORRUPT = [
    ("bad first checksum", flip(F5, 20) + F6 + F7, 0, "payload checksum mismatch", len(F5)),
    (
        "first offset field flipped",
        flip(F5, 7) + F6 + F7,
        0,
        "frame offset 4 disagrees with its payload's offset 5",
        len(F5),
    ),
    # the payload says 5: the search for a later frame expects 5, and finds F5' copy
    (
        "first offset field flipped, the payload's frame after",
        flip(F5, 7) + F5,
        0,
        "frame offset 4 disagrees with its payload's offset 5",
        len(F5),
    ),
    ("bad middle checksum", F5 + flip(F6, 20) + F7, len(F5), "payload checksum mismatch", len(F5 + F6)),
    ("middle offset flipped", F5 + flip(F6, 7) + F7, len(F5), "frame offset 7, expected 6", len(F5 + F6)),
]


@pytest.mark.parametrize("data, position, reason, later", [c[1:] for c in CORRUPT], ids=[c[0] for c in CORRUPT])
def test_scan_refuses_damage_a_good_frame_follows(data, position, reason, later):
    with pytest.raises(CorruptLog) as caught:
        scan_frames("r.log", data)
    assert (caught.value.path, caught.value.offset, caught.value.reason) == (
        "r.log",
        position,
        f"{reason}; a good frame follows at byte {later}, so this is not a torn tail",
    )


def test_the_search_after_damage_starts_at_the_offset_the_first_payload_confirms():
    """A first frame whose header offset disagrees with its payload: the search for a good
    frame after the damage expects the payload's offset (0 included), not the header's."""
    high = F5[:2] + bytes([F5[2] ^ 0x01]) + F5[3:]  # offset 5 + 2**40 in the header
    with pytest.raises(CorruptLog) as caught:
        scan_frames("r.log", high + F6 + F7)
    assert caught.value.reason == (
        f"frame offset {5 + 2**40} disagrees with its payload's offset 5; "
        f"a good frame follows at byte {len(F5)}, so this is not a torn tail"
    )
    zero = frame(4, payload(0))
    with pytest.raises(CorruptLog) as caught:
        scan_frames("r.log", zero + frame(2))
    assert caught.value.reason.endswith(f"a good frame follows at byte {len(zero)}, so this is not a torn tail")


def test_after_good_frames_only_a_later_offset_after_the_damage_is_a_good_frame():
    """F5, F6, junk, then F6 again: an offset already kept is no evidence; a torn tail."""
    assert scan_frames("r.log", F5 + F6 + b"junk" + F6) == (
        len(F5 + F6),
        6,
        f"frame offset {int.from_bytes(b'junk' + F6[:4], 'big')}, expected 7",
    )


def test_a_first_frame_whose_payload_names_a_negative_offset_searches_from_its_header():
    """The payload's offset is used for the search only when it can be one (an int >= 0)."""
    bad = frame(4, payload(-1))
    assert scan_frames("r.log", bad) == (0, None, "frame offset 4 disagrees with its payload's offset -1")
    with pytest.raises(CorruptLog) as caught:
        scan_frames("r.log", bad + frame(4))
    assert caught.value.reason.endswith(f"a good frame follows at byte {len(bad)}, so this is not a torn tail")


# --- standard output (sinks.py) -----------------------------------------------------------


def test_without_a_file_each_event_is_a_json_line(tmp_path):
    with open(tmp_path / "out", "wb") as out:
        sink = StdoutSink(out)
        assert (sink.path, sink.last_offset, sink.closed) == ("standard output", None, False)
        sink.write(F5, event(5))
        sink.write(F6, event(6))
        assert (sink.last_offset, sink.unsynced) == (6, len(F5) + len(F6))
        before = sink.synced_at
        sink.sync()
        assert sink.unsynced == 0 and sink.synced_at >= before  # consumer.py reads it as a clock
        sink.close()
    assert (tmp_path / "out").read_bytes() == payload(5) + b"\n" + payload(6) + b"\n"


def test_a_reader_that_went_away_closes_the_sink_quietly():
    r, w = os.pipe()
    out = os.fdopen(w, "wb")
    sink = StdoutSink(out)
    sink.write(F5, event(5))
    sink.sync()
    assert not sink.closed and os.read(r, 1000) == payload(5) + b"\n"
    os.close(r)
    sink.sync()  # the pipe's reader left: noticed at the sync, before any write
    assert sink.closed
    sink.write(F6, event(6))  # goes nowhere, raises nothing
    sink.close()
    out.close()


# --- scan_frames and batches (events.py "Batches": FILE never ends inside one) ------------


def row(at: int, first: int, last: int) -> bytes:
    return frame(at, payload(at, batch={"first": first, "last": last}))


F4 = frame(4)
B5, B6, B7 = row(5, 5, 7), row(6, 5, 7), row(7, 5, 7)


@pytest.mark.parametrize(
    "data, expected",
    [
        (F4 + B5 + B6 + B7, (len(F4 + B5 + B6 + B7), 7, None)),
        (F4 + B5 + B6, (len(F4), 4, "an unfinished batch: rows 5 to 7, the file ends after row 6")),
        (B5 + B6, (0, None, "an unfinished batch: rows 5 to 7, the file ends after row 6")),
        (
            F4 + B5 + B6[:30],
            (
                len(F4),
                4,
                f"an unfinished batch: rows 5 to 7, the file ends after row 5 (truncated payload (14 of {len(B6) - 16} bytes) there)",
            ),
        ),
        (F4[:30], (0, None, f"truncated payload (14 of {len(F4) - 16} bytes)")),
        (
            row(5, 5, 6) + row(6, 5, 6) + row(7, 7, 8),
            (len(row(5, 5, 6) + row(6, 5, 6)), 6, "an unfinished batch: rows 7 to 8, the file ends after row 7"),
        ),
        (row(6, 5, 7) + row(7, 5, 7), (len(row(6, 5, 7) + row(7, 5, 7)), 7, None)),
        (row(6, 5, 7), (0, None, "an unfinished batch: rows 6 to 7, the file ends after row 6")),
        (F4 + B5 + B6 + B7 + frame(8), (len(F4 + B5 + B6 + B7 + frame(8)), 8, None)),
        (B7, (len(B7), 7, None)),
    ],
    ids=[
        "whole",
        "ends inside",
        "starts with the unfinished batch",
        "torn inside",
        "torn without a batch",
        "a whole batch then an unfinished one",
        "starts inside a batch that ends",
        "starts inside a batch that does not",
        "a plain row after a batch",
        "starts at a batch's last row",
    ],
)
def test_a_file_that_ends_inside_a_batch_is_cut_back_to_the_batchs_first_frame(data, expected):
    assert scan_frames("r.log", data) == expected


@pytest.mark.parametrize(
    "body",
    [
        b'{"offset":5,"record":{"note":"\\"batch\\":"}}',
        b'{"batch":null}',
        b'{"batch":[5,7]}',
        b'{"batch":{"first":5}}',
        b'{"batch":{"last":7}}',
        b'{"batch":{"first":"x","last":7}}',
        b'{"batch":{"first":5,"last":"y"}}',
        b'[{"batch":{"first":5,"last":7}}]',
        b'{"batch":',
    ],
)
def test_a_payload_without_a_readable_batch_mark_is_a_plain_row(body):
    data = F4 + frame(5, body)
    assert scan_frames("r.log", data) == (len(data), 5, None)


def test_a_batch_mark_whose_numbers_are_strings_of_digits_is_read():
    body = b'{"batch":{"first":"5","last":"7"}}'
    assert scan_frames("r.log", F4 + frame(5, body)) == (
        len(F4),
        4,
        "an unfinished batch: rows 5 to 7, the file ends after row 5",
    )


def test_dbsvc_replicate_takes_as_many_messages_at_once_as_a_read_replica_s_group():
    """The two readers of /replicate take the stream alike (consumer.py BATCH's comment): a
    count changed in one is changed in both, or this says which one moved."""
    from dbsvc.replica import consumer, groups

    assert (consumer.BATCH, consumer.BATCH_BYTES) == (groups.BATCH, groups.BATCH_BYTES) == (1024, 1 << 20)
