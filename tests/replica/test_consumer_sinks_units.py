"""sinks.py's decisions at the unit where each is made, in process (so a mutation run sees
them): FILE (`ReplicaFile`, rules 2 and 3: created empty, written a mebibyte at a time, reopened
after its last whole frame with a torn tail cut, damage that a good frame follows refused and
the file kept, its history record), `scan_frames` and `last_frame`, a FILE never left inside
a batch, and standard output (one JSON line an event).

Frames are built from the documented layout (offset u64, CRC32 u32, length u32, then the
payload, big-endian) by tests/support/replica_kit.py, never with logfile.py's encoder; every
message is compared word for word."""

from __future__ import annotations

import os
import zlib

import pytest

from dbsvc.errors import ConfigError, CorruptLog
from dbsvc.replica.sinks import ReplicaFile, StdoutSink, last_frame, read_file_history, scan_frames
from dbsvc.storage import files
from dbsvc.storage.history import History
from support.replica_kit import MiB, event, frame, payload

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
    ],
)
def test_a_payload_without_a_readable_batch_mark_is_a_plain_row(body):
    data = F4 + frame(5, body)
    assert scan_frames("r.log", data) == (len(data), 5, None)


def test_a_payload_that_is_not_json_under_a_good_crc_is_refused_not_taken_for_a_plain_row():
    # It was a plain row (only a readable mark counted); now every payload is parsed strictly.
    with pytest.raises(CorruptLog) as info:
        scan_frames("r.log", F4 + frame(5, b'{"batch":'))
    assert info.value.offset == len(F4)
    assert info.value.reason.startswith("the frame at offset 5 is not JSON (Expecting value"), info.value.reason


def test_a_batch_mark_whose_numbers_are_strings_of_digits_is_read():
    body = b'{"batch":{"first":"5","last":"7"}}'
    assert scan_frames("r.log", F4 + frame(5, body)) == (
        len(F4),
        4,
        "an unfinished batch: rows 5 to 7, the file ends after row 5",
    )
