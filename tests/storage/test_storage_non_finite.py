"""A tenant's files edited by hand to hold a number JSON does not have: `1e400` and `-1e400`
(which json.loads reads as infinities), `NaN` and `Infinity` (words json.loads takes). No
writer writes one (`compact_json` refuses them), so an open refuses each as CorruptLog
naming the file, the byte and the number (dbsvc/strictjson.py's words), changes nothing in
the directory, and once the edit is undone the tenant opens with every record.

Each file is edited as its text, checksums made good again, so only the number is wrong:
the log's frame (its CRC), a snapshot's rows line and its keys line (their line CRCs), the
history record (its CRC) and the stored schema (no checksum).
"""

from __future__ import annotations

import os
import re
import struct
import zlib

import pytest

from dbsvc.storage.history import HISTORY_NAME
from dbsvc.storage.logfile import HEADER_SIZE
from dbsvc.storage.migrate import SCHEMA_NAME
from support.recovery_kit import assert_intact, assert_refused, log_of, read, snapshot_of, write

WORDS = [b"1e400", b"-1e400", b"NaN", b"Infinity"]
RANGE = "is out of range: expected a finite number (a 64-bit float, RFC 8259 §6)"


def refusal(word: bytes) -> str:
    """The strict decoder's words for `word`."""
    text = word.decode()
    if text in ("NaN", "Infinity"):
        return f"{text} is not valid JSON (RFC 8259 §6: numbers are finite)"
    return f"the number {text} {RANGE}"


def _edited_log(data: bytes, old: bytes, new: bytes) -> tuple[bytes, int]:
    """The log with `old` replaced by `new` in the one frame whose payload holds it, its
    CRC and length made good; and the byte position that frame starts at."""
    out, pos, start = [data[:HEADER_SIZE]], HEADER_SIZE, -1
    while pos < len(data):
        offset, _crc, length = struct.unpack(">QII", data[pos : pos + 16])
        payload = data[pos + 16 : pos + 16 + length]
        if old in payload:
            payload = payload.replace(old, new)
            start = sum(map(len, out))
        out.append(struct.pack(">QII", offset, zlib.crc32(payload), len(payload)) + payload)
        pos += 16 + length
    assert start > 0, f"no frame holds {old!r}"
    return b"".join(out), start


def _edited_line(data: bytes, pattern: bytes, old: bytes, new: bytes) -> tuple[bytes, int]:
    """A checksummed-lines file (a snapshot, a history record) with `old` replaced by
    `new` in the first line matching `pattern`, its CRC made good; and that line's position."""
    lines = data.split(b"\n")
    pos = 0
    for i, line in enumerate(lines):
        if re.search(pattern, line):
            body = line[9:].replace(old, new, 1)
            lines[i] = b"%08x " % zlib.crc32(body) + body
            return b"\n".join(lines), pos
        pos += len(line) + 1
    raise AssertionError(f"no line matches {pattern!r}")


@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.decode())
def test_a_log_row_holding_a_non_finite_number_is_refused_at_its_frame(history, word):
    log = log_of(history)
    good = read(log)
    edited, position = _edited_log(good, b'"score":0.0', b'"score":' + word)
    write(log, edited)
    assert_refused(
        history, log, position, f"insert of BlogPost 1: the row is not JSON a writer writes: {refusal(word)}"
    )
    write(log, good)
    assert_intact(history)


@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.decode())
def test_a_snapshot_row_holding_a_non_finite_number_is_refused_at_its_line(compacted, word):
    # The BlogPost block's rows line (format 4: each row its record's object); the keys
    # reader scans its first row (the sample), which is post 1.
    snap = snapshot_of(compacted)
    good = read(snap)
    edited, position = _edited_line(good, rb'^[0-9a-f]{8} \[\{"id":1,"author_id"', b'"score":0.0', b'"score":' + word)
    write(snap, edited)
    reason = f"model 'BlogPost': row 1 of a block is not one row of 7 fields matching its keys line ({refusal(word)})"
    assert_refused(compacted, snap, position, reason)
    write(snap, good)
    assert_intact(compacted)


@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.decode())
def test_a_snapshot_keys_line_holding_a_non_finite_number_is_refused_at_its_line(compacted, word):
    # The BlogPost block's keys line: its score column is [0.0].
    snap = snapshot_of(compacted)
    good = read(snap)
    edited, position = _edited_line(good, rb"^[0-9a-f]{8} \[.*\[0\.0\]", b"[0.0]", b"[" + word + b"]")
    write(snap, edited)
    assert_refused(compacted, snap, position, f"model 'BlogPost': a keys line is not JSON ({refusal(word)})")
    write(snap, good)
    assert_intact(compacted)


@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.decode())
def test_a_history_record_holding_a_non_finite_number_is_refused(history, word):
    path = os.path.join(history, HISTORY_NAME)
    good = read(path)
    edited, position = _edited_line(good, rb'"format":1', b'"format":1', b'"format":' + word)
    write(path, edited)
    assert_refused(history, path, position, f"history file is not JSON: {refusal(word)}")
    write(path, good)
    assert_intact(history)


@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.decode())
def test_a_stored_schema_holding_a_non_finite_number_is_refused(history, word):
    path = os.path.join(history, SCHEMA_NAME)
    good = read(path)
    assert b'"version": 1,' in good
    write(path, good.replace(b'"version": 1,', b'"version": ' + word + b",", 1))
    assert_refused(history, path, 0, f"stored schema is not JSON: {refusal(word)}")
    write(path, good)
    assert_intact(history)
