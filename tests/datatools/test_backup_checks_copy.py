"""`dbsvc backup` checks what it copies as a restore would (dbsvc/datatools/backup.py step 4,
restore's own functions): every frame's CRC and every snapshot line's, every frame's payload
and every snapshot row strict JSON. A tenant holding a `NaN`, `Infinity` or `1e400` under a
good CRC (a hand edit) was copied and the backup only refused at restore; it is refused when
taken now, naming the file, the byte and the frame's offset (or the snapshot's line), exit
status 1 from the command line. Nothing changes: the tenant's files stay byte for byte as
they were, and the destination as it was (absent: not even created; empty: still empty).

The tenant is tests/datatools/conftest.py's (three users and a post, through the store);
the command runs through its in-process entry point (`cli_in_process`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dbsvc.datatools.backup import take_backup
from dbsvc.errors import CorruptLog
from support.backupkit import compact, files_of, rewrite_frame, rewrite_line

WORDS = ["NaN", "Infinity", "-Infinity", "1e400"]


def refusal(word: str) -> str:
    """The strict decoder's words for `word` (dbsvc/strictjson.py)."""
    if word.lstrip("-") in ("NaN", "Infinity"):
        return f"{word} is not valid JSON (RFC 8259 §6: numbers are finite)"
    return f"the number {word} is out of range: expected a finite number (a 64-bit float, RFC 8259 §6)"


def assert_backup_refused(tenant: str, dest: Path) -> CorruptLog:
    """take_backup refused with CorruptLog; the tenant and the destination as they were."""
    before = files_of(tenant)
    existed = dest.exists()
    with pytest.raises(CorruptLog) as info:
        take_backup(tenant, str(dest), "t")
    assert files_of(tenant) == before
    assert dest.exists() == existed
    if existed:
        assert os.listdir(dest) == []
    return info.value


@pytest.mark.parametrize("word", WORDS)
def test_a_log_frame_holding_a_non_finite_number_refuses_the_backup(tenant, tmp_path, word):
    at, offset = rewrite_frame(Path(tenant, "log"), b'"age":null', b'"age":' + word.encode())
    refused = assert_backup_refused(tenant, tmp_path / "bk")
    assert (
        str(refused) == f"{tenant}/log: corrupt at byte {at}: the frame at offset {offset} is not JSON: {refusal(word)}"
    )


def test_a_log_frame_that_is_not_json_under_a_good_crc_refuses_the_backup(tenant, tmp_path):
    at, offset = rewrite_frame(Path(tenant, "log"), b'"age":null', b'"age":nul')
    refused = assert_backup_refused(tenant, tmp_path / "bk")
    assert str(refused).startswith(f"{tenant}/log: corrupt at byte {at}: the frame at offset {offset} is not JSON: ")


def test_the_last_frame_holding_one_is_refused_too_not_left_out_as_a_tail(tenant, tmp_path):
    # Its CRC is good: it is a whole frame, not an append in flight.
    data = Path(tenant, "log").read_bytes()
    assert data.count(b'"model":"BlogPost"') == 1 and data.rindex(b'{"kind"') < data.index(b'"model":"BlogPost"')
    at, offset = rewrite_frame(Path(tenant, "log"), b'"model":"BlogPost"', b'"x":NaN,"model":"BlogPost"')
    assert at == data.rindex(b'{"kind"') - 16
    refused = assert_backup_refused(tenant, tmp_path / "bk")
    assert (
        str(refused)
        == f"{tenant}/log: corrupt at byte {at}: the frame at offset {offset} is not JSON: {refusal('NaN')}"
    )


def test_a_frame_whose_crc_fails_before_a_good_one_refuses_the_backup_destination_not_created(tenant, tmp_path):
    log = bytearray(Path(tenant, "log").read_bytes())
    log[60] ^= 1  # inside the first frame's payload
    Path(tenant, "log").write_bytes(bytes(log))
    refused = assert_backup_refused(tenant, tmp_path / "bk")
    assert str(refused).startswith(f"{tenant}/log: corrupt at byte 40: ")
    assert not (tmp_path / "bk").exists()


@pytest.mark.parametrize("word", WORDS)
def test_a_snapshot_row_holding_a_non_finite_number_refuses_the_backup(tenant, tmp_path, word):
    compact(tenant)
    at = rewrite_line(Path(tenant, "snapshot"), b'{"id":1,"email"', b'"age":null', f'"age":{word}'.encode())
    refused = assert_backup_refused(tenant, tmp_path / "bk")
    assert (refused.path, refused.offset) == (f"{tenant}/snapshot", at)
    assert refusal(word) in refused.reason and "model 'User'" in refused.reason, refused.reason


def test_an_empty_destination_stays_empty(tenant, tmp_path):
    (tmp_path / "bk").mkdir()
    rewrite_frame(Path(tenant, "log"), b'"age":null', b'"age":NaN')
    assert_backup_refused(tenant, tmp_path / "bk")


def test_the_command_says_one_line_and_exits_1(data, tenant, tmp_path, cli_in_process):
    at, offset = rewrite_frame(Path(tenant, "log"), b'"age":null', b'"age":1e400')
    before = files_of(tenant)
    done = cli_in_process(data, "backup", str(tmp_path / "bk"))
    assert done.returncode == 1, done.stderr
    message = f"{tenant}/log: corrupt at byte {at}: the frame at offset {offset} is not JSON: {refusal('1e400')}"
    assert done.stderr == f"dbsvc: error: {message}\n"
    assert files_of(tenant) == before
    assert not (tmp_path / "bk").exists()


def test_a_good_tenant_is_still_backed_up_whole(tenant, tmp_path):
    compact(tenant)
    manifest = take_backup(tenant, str(tmp_path / "bk"), "t")
    assert sorted(manifest["files"]) == ["history", "log", "schema.json", "snapshot"]
    assert files_of(tmp_path / "bk").keys() == {*manifest["files"], "manifest.json"}
