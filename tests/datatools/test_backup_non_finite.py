"""A backup's files holding a number JSON does not have (`NaN`, `Infinity`, `1e400`, which
json.loads reads as inf; dbsvc/strictjson.py), written by hand under good checksums: the
backup and the restore (dbsvc/datatools/backup.py) refuse them with the file, the place and
the number, and nothing changes: the backup's files and the tenant backed up stay byte for
byte as they were, and no tenant (nor a staging directory) appears.

A log frame's payload and a snapshot's rows were only CRC-checked: a restore installed them,
and the tenant then refused to open. They are parsed strictly now."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dbsvc.datatools.backup import restore_backup, take_backup
from dbsvc.errors import BadBackup, CorruptLog
from support.backupkit import compact, files_of, rewrite_frame, rewrite_line, rewrite_manifest, state

WORDS = ["NaN", "Infinity", "1e400"]


def refusal(word: str) -> str:
    if word in ("NaN", "Infinity"):
        return f"{word} is not valid JSON (RFC 8259 §6: numbers are finite)"
    return f"the number {word} is out of range: expected a finite number (a 64-bit float, RFC 8259 §6)"


@pytest.fixture
def bk(tenant, tmp_path) -> Path:
    take_backup(tenant, str(tmp_path / "bk"), "t")
    return tmp_path / "bk"


@pytest.fixture
def compacted_bk(tenant, tmp_path) -> Path:
    compact(tenant)
    take_backup(tenant, str(tmp_path / "cbk"), "t")
    return tmp_path / "cbk"


def assert_restore_refused(bk: Path, data: Path, message: str) -> None:
    before = files_of(bk)
    with pytest.raises((BadBackup, CorruptLog)) as info:
        restore_backup(str(bk), str(data), "r")
    assert str(info.value) == message
    assert files_of(bk) == before
    assert sorted(os.listdir(data)) == ["t"]  # no tenant "r", no .restoring-r-* left


@pytest.mark.parametrize("word", WORDS)
def test_a_manifest_holding_a_non_finite_number_is_refused(bk, data, word):
    manifest = bk / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"head_offset": 4', f'"head_offset": {word}'))
    assert_restore_refused(bk, data, f"{bk}/manifest.json: not JSON: {refusal(word)}")


@pytest.mark.parametrize("word", WORDS)
def test_a_history_holding_a_non_finite_number_is_refused(bk, data, word):
    rewrite_line(bk / "history", b'"format"', b'"format":1', f'"format":{word}'.encode())
    rewrite_manifest(bk)
    assert_restore_refused(bk, data, f"{bk}/history: corrupt at byte 0: history file is not JSON: {refusal(word)}")


@pytest.mark.parametrize("word", WORDS)
def test_a_log_frame_holding_a_non_finite_number_is_refused(bk, data, word):
    # The restore installed it (its CRC held) and the tenant then refused to open.
    at, offset = rewrite_frame(bk / "log", b'"age":null', b'"age":' + word.encode())
    rewrite_manifest(bk)
    assert_restore_refused(
        bk, data, f"{bk}/log: corrupt at byte {at}: the frame at offset {offset} is not JSON: {refusal(word)}"
    )


@pytest.mark.parametrize("word", WORDS)
def test_a_snapshot_header_holding_a_non_finite_number_is_refused(compacted_bk, data, word):
    rewrite_line(compacted_bk / "snapshot", b'"head_offset"', b'"head_offset":4', f'"head_offset":{word}'.encode())
    rewrite_manifest(compacted_bk)
    assert_restore_refused(
        compacted_bk, data, f"{compacted_bk}/snapshot: corrupt at byte 0: snapshot header is not JSON: {refusal(word)}"
    )


@pytest.mark.parametrize("word", WORDS)
def test_a_snapshot_row_holding_a_non_finite_number_is_refused(compacted_bk, data, word):
    # The restore installed it (its line's CRC held) and the tenant then refused to open.
    at = rewrite_line(compacted_bk / "snapshot", b'{"id":1,"email"', b'"age":null', f'"age":{word}'.encode())
    rewrite_manifest(compacted_bk)
    with pytest.raises(CorruptLog) as info:
        restore_backup(str(compacted_bk), str(data), "r")
    assert (info.value.path, info.value.offset) == (f"{compacted_bk}/snapshot", at)
    assert refusal(word) in info.value.reason and "model 'User'" in info.value.reason, info.value.reason
    assert sorted(os.listdir(data)) == ["t"]


@pytest.mark.parametrize("word", WORDS)
def test_a_backup_of_a_tenant_whose_history_holds_a_non_finite_number_is_refused(tenant, tmp_path, word):
    rewrite_line(Path(tenant, "history"), b'"format"', b'"format":1', f'"format":{word}'.encode())
    before = files_of(tenant)
    with pytest.raises(CorruptLog) as info:
        take_backup(tenant, str(tmp_path / "bk"), "t")
    assert str(info.value) == f"{tenant}/history: corrupt at byte 0: history file is not JSON: {refusal(word)}"
    assert files_of(tenant) == before  # not a byte of the tenant changed
    assert not (tmp_path / "bk" / "manifest.json").exists()  # no backup is complete


def test_the_good_backup_the_refused_ones_were_made_from_restores(bk, data):
    restore_backup(str(bk), str(data), "r")
    assert state(str(data / "r"))[3] == state(str(data / "t"))[3]
