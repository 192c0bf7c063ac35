"""dbsvc/datatools/backup.py in-process (issue 33): backup and restore of a tenant without a
snapshot (never compacted) and with one, the consistency rule that pairs a log with its
snapshot, the snapshot's header line, and the destination a backup may be written to, each
refusal with its exact message. What restore checks of a backup directory, and where it
puts the tenant, is test_restore_units.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zlib
from pathlib import Path

import pytest

from dbsvc.datatools import backup
from dbsvc.datatools.backup import restore_backup, snapshot_header, take_backup
from dbsvc.errors import BadBackup, CorruptLog, StorageError
from dbsvc.storage.tenants import create_tenant
from support.backupkit import compact, files_of, history, refusal, rewrite_manifest, state, write

# -- backup and restore, without and with a snapshot ----------------------------------------------


def test_a_tenant_without_a_snapshot_is_backed_up_and_restored_whole(data, tenant, tmp_path):
    bk = tmp_path / "bk"
    manifest = take_backup(tenant, str(bk), "t")
    original = files_of(tenant)
    assert "snapshot" not in original
    copied = files_of(bk)
    assert sorted(copied) == ["history", "log", "manifest.json", "schema.json"]
    assert {name: copied[name] for name in ("history", "log", "schema.json")} == {
        name: original[name] for name in ("history", "log", "schema.json")
    }
    epoch = state(tenant)[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", manifest.pop("created"))
    assert manifest == {
        "format": 1,
        "kind": "dbsvc-backup",
        "tenant": "t",
        "epoch": epoch,
        "base_offset": 0,
        "head_offset": 4,
        "frames": 4,
        "files": {
            name: {"bytes": len(original[name]), "sha256": hashlib.sha256(original[name]).hexdigest()}
            for name in ("history", "log", "schema.json")
        },
    }
    assert json.loads(copied["manifest.json"])["head_offset"] == 4
    # one key a line, indented by one space, keys in this order, one newline at the end
    assert copied["manifest.json"].startswith(
        b'{\n "format": 1,\n "kind": "dbsvc-backup",\n "tenant": "t",\n "created": "'
    )
    assert copied["manifest.json"].endswith(b'\n  }\n }\n}\n')
    restored = restore_backup(str(bk), str(data), "copy")
    assert restored["head_offset"] == 4
    assert state(str(data / "copy")) == state(tenant)
    assert sorted(os.listdir(data)) == ["copy", "t"]  # no staging directory left
    before, after = history(tenant), history(str(data / "copy"))
    assert after.id != before.id and [(f.id, f.at) for f in after.forks] == [(before.id, 4)]


def test_a_tenant_with_a_snapshot_is_backed_up_and_restored_whole(data, tenant, tmp_path):
    compact(tenant)
    write(tenant, 4)
    bk = tmp_path / "bk"
    manifest = take_backup(tenant, str(bk), "t")
    original = files_of(tenant)
    copied = files_of(bk)
    assert sorted(copied) == ["history", "log", "manifest.json", "schema.json", "snapshot"]
    for name in ("history", "log", "schema.json", "snapshot"):
        assert copied[name] == original[name], name
    assert (manifest["base_offset"], manifest["head_offset"], manifest["frames"]) == (4, 5, 1)
    assert sorted(manifest["files"]) == ["history", "log", "schema.json", "snapshot"]
    restore_backup(str(bk), str(data), "copy")
    assert state(str(data / "copy")) == state(tenant)
    assert [r["id"] for r in state(str(data / "copy"))[3]["User"]] == [1, 2, 3, 4]


def test_a_compacted_tenant_with_no_row_after_its_snapshot_is_backed_up(data, tenant, tmp_path):
    compact(tenant)
    manifest = take_backup(tenant, str(tmp_path / "bk"), "t")
    assert (manifest["base_offset"], manifest["head_offset"], manifest["frames"]) == (4, 4, 0)
    restore_backup(str(tmp_path / "bk"), str(data), "copy")
    assert state(str(data / "copy")) == state(tenant)


def test_a_log_larger_than_one_read_is_copied_whole(data, tmp_path):
    """The files are read 4 MiB at a time: a 5 MB log is copied to its last byte."""
    directory = create_tenant(str(data), "big")
    write(directory, 1, 2, 3, 4, 5, big=1_100_000)
    assert os.path.getsize(os.path.join(directory, "log")) > 5_000_000
    manifest = take_backup(directory, str(tmp_path / "bk"), "big")
    assert (tmp_path / "bk" / "log").read_bytes() == Path(directory, "log").read_bytes()
    assert manifest["frames"] == 6


def test_a_never_opened_tenant_backs_up_nothing_but_its_schema(data, tmp_path):
    directory = create_tenant(str(data), "fresh")
    manifest = take_backup(directory, str(tmp_path / "bk0"), "fresh")
    assert (manifest["epoch"], manifest["base_offset"], manifest["head_offset"], manifest["frames"]) == ("", 0, 0, 0)
    assert manifest["files"] == {}
    Path(directory, "schema.json").write_bytes(b'{"kept": true}\n')
    manifest = take_backup(directory, str(tmp_path / "bk"), "fresh")
    assert sorted(manifest["files"]) == ["schema.json"]
    assert sorted(os.listdir(tmp_path / "bk")) == ["manifest.json", "schema.json"]
    restore_backup(str(tmp_path / "bk"), str(data), "copy")
    assert files_of(data / "copy") == {"schema.json": b'{"kept": true}\n'}  # no history: none to fork


def test_a_backup_taken_before_histories_restores_with_a_new_one(data, tenant, tmp_path):
    os.unlink(os.path.join(tenant, "history"))
    take_backup(tenant, str(tmp_path / "bk"), "t")
    assert sorted(os.listdir(tmp_path / "bk")) == ["log", "manifest.json", "schema.json"]
    restore_backup(str(tmp_path / "bk"), str(data), "copy")
    restored = history(str(data / "copy"))
    assert restored is not None and restored.forks == ()


# -- the pairing rule: a log must continue the snapshot beside it -----------------------------------


def test_a_log_not_starting_at_offset_0_without_a_snapshot_is_retried_then_refused(tenant, tmp_path, monkeypatch):
    compact(tenant)
    os.unlink(os.path.join(tenant, "snapshot"))  # the log now starts at 4 with nothing before it
    monkeypatch.setattr(backup, "ATTEMPTS", 3)
    with pytest.raises(StorageError) as caught:
        take_backup(tenant, str(tmp_path / "bk"), "t")
    assert str(caught.value) == (
        f"{tenant}: snapshot and log kept changing during 3 attempts (compactions in a loop?); try again"
    )


def test_a_snapshot_without_a_log_is_retried_then_refused(tenant, tmp_path, monkeypatch):
    compact(tenant)
    os.unlink(os.path.join(tenant, "log"))
    monkeypatch.setattr(backup, "ATTEMPTS", 2)
    with pytest.raises(StorageError, match="kept changing during 2 attempts"):
        take_backup(tenant, str(tmp_path / "bk"), "t")


def test_a_log_of_another_epoch_beside_the_snapshot_is_not_paired(data, tenant, tmp_path, monkeypatch):
    """The snapshot of one compaction beside the log of another (the files moved between
    the two opens): neither `log` nor a missing `log.new` continues it."""
    compact(tenant)
    snapshot = Path(tenant, "snapshot").read_bytes()
    write(tenant, 4)
    compact(tenant)
    Path(tenant, "snapshot").write_bytes(snapshot)
    monkeypatch.setattr(backup, "ATTEMPTS", 1)
    with pytest.raises(StorageError, match="kept changing during 1 attempts"):
        take_backup(tenant, str(tmp_path / "bk"), "t")


def test_between_a_compactions_commit_point_and_its_log_rename_log_new_is_read(data, tenant, tmp_path):
    """compact.py steps 5-8: the new snapshot is in place, its log still `log.new`, the old log
    still `log`. The backup pairs the snapshot with `log.new`."""
    compact(tenant)
    write(tenant, 4)
    old_log = Path(tenant, "log").read_bytes()
    expected = state(tenant)
    compact(tenant)
    os.rename(os.path.join(tenant, "log"), os.path.join(tenant, "log.new"))
    Path(tenant, "log").write_bytes(old_log)
    manifest = take_backup(tenant, str(tmp_path / "bk"), "t")
    assert (tmp_path / "bk" / "log").read_bytes() == Path(tenant, "log.new").read_bytes()
    assert (manifest["base_offset"], manifest["head_offset"], manifest["frames"]) == (5, 5, 0)
    restore_backup(str(tmp_path / "bk"), str(data), "copy")
    assert (state(str(data / "copy"))[1], state(str(data / "copy"))[3]) == (expected[1], expected[3])


def test_a_log_new_that_does_not_continue_the_snapshot_either_is_retried(tenant, tmp_path, monkeypatch):
    compact(tenant)
    stale = Path(tenant, "log").read_bytes()
    write(tenant, 4)
    compact(tenant)
    Path(tenant, "log.new").write_bytes(stale)  # a log of the compaction before: base 4, not 5
    Path(tenant, "log").write_bytes(stale)
    monkeypatch.setattr(backup, "ATTEMPTS", 1)
    with pytest.raises(StorageError, match="kept changing during 1 attempts"):
        take_backup(tenant, str(tmp_path / "bk"), "t")


def test_a_damaged_log_new_header_is_refused_naming_the_log(tenant, tmp_path):
    compact(tenant)
    stale = Path(tenant, "log").read_bytes()
    write(tenant, 4)
    compact(tenant)
    os.rename(os.path.join(tenant, "log"), os.path.join(tenant, "log.new"))
    Path(tenant, "log").write_bytes(stale)
    header = bytearray(Path(tenant, "log.new").read_bytes())
    header[0] ^= 1
    Path(tenant, "log.new").write_bytes(bytes(header))
    with pytest.raises(CorruptLog) as caught:
        take_backup(tenant, str(tmp_path / "bk"), "t")
    assert str(caught.value).startswith(f"{tenant}/log: corrupt at byte 0: ")


def test_a_damaged_log_header_is_refused_naming_the_log(tenant, tmp_path):
    raw = bytearray(Path(tenant, "log").read_bytes())
    raw[0] ^= 1
    Path(tenant, "log").write_bytes(bytes(raw))
    with pytest.raises(CorruptLog) as caught:
        take_backup(tenant, str(tmp_path / "bk"), "t")
    assert str(caught.value).startswith(f"{tenant}/log: corrupt at byte 0: ")


def test_a_damaged_snapshot_line_or_history_of_the_tenant_is_refused_naming_it(tenant, tmp_path):
    history_bytes = Path(tenant, "history").read_bytes()
    Path(tenant, "history").write_bytes(b"x" + history_bytes[1:])
    with pytest.raises(CorruptLog) as caught:
        take_backup(tenant, str(tmp_path / "bk"), "t")
    assert str(caught.value) == f"{tenant}/history: corrupt at byte 0: history file checksum mismatch"
    Path(tenant, "history").write_bytes(history_bytes)
    compact(tenant)
    snap = bytearray(Path(tenant, "snapshot").read_bytes())
    snap[-3] ^= 1
    Path(tenant, "snapshot").write_bytes(bytes(snap))
    with pytest.raises(CorruptLog) as caught:
        take_backup(tenant, str(tmp_path / "bk2"), "t")
    assert str(caught.value).startswith(f"{tenant}/snapshot: corrupt at byte ")


def test_a_snapshot_of_the_same_head_but_another_epoch_is_refused(tenant, tmp_path):
    """Two compactions with no row between them: same head, new epoch. The log of the second
    does not continue the snapshot of the first (both must match, not either)."""
    compact(tenant)
    take_backup(tenant, str(tmp_path / "old"), "t")
    compact(tenant)
    take_backup(tenant, str(tmp_path / "bk"), "t")
    bk = tmp_path / "bk"
    old = json.loads((tmp_path / "old" / "manifest.json").read_text())
    new = json.loads((bk / "manifest.json").read_text())
    assert old["epoch"] != new["epoch"] and old["base_offset"] == new["base_offset"] == 4
    (bk / "snapshot").write_bytes((tmp_path / "old" / "snapshot").read_bytes())
    rewrite_manifest(bk)
    assert refusal(bk) == (
        f"{bk}/log: the log (epoch {new['epoch']}, base 4) does not continue the snapshot "
        f"(epoch {old['epoch']}, head 4)"
    )


def test_a_tenant_with_a_damaged_snapshot_header_or_log_is_not_backed_up(tenant, tmp_path):
    log = bytearray(Path(tenant, "log").read_bytes())
    log[60] ^= 1
    Path(tenant, "log").write_bytes(bytes(log))
    with pytest.raises(CorruptLog) as caught:
        take_backup(tenant, str(tmp_path / "bk"), "t")
    assert str(caught.value).startswith(f"{tenant}/log: corrupt at byte 40: ")
    log[60] ^= 1
    Path(tenant, "log").write_bytes(bytes(log))
    compact(tenant)
    snap = bytearray(Path(tenant, "snapshot").read_bytes())
    snap[0] = ord("g")
    Path(tenant, "snapshot").write_bytes(bytes(snap))
    with pytest.raises(CorruptLog) as caught:
        take_backup(tenant, str(tmp_path / "bk2"), "t")
    assert str(caught.value) == f"{tenant}/snapshot: corrupt at byte 0: snapshot header checksum mismatch"


# -- the snapshot's header line -------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "snapshot header line is missing or has no checksum"),
        (b"0000000 {}\n", "snapshot header line is missing or has no checksum"),
        (b"00000000{}\n", "snapshot header line is missing or has no checksum"),
        (b"00000000 {}\n", "snapshot header checksum mismatch"),
        (b"00000000 \n", "snapshot header is not JSON: Expecting value: line 1 column 1 (char 0)"),
        (b"%08x {x}\n" % 0, None),
        (b"[]", None),
    ],
)
def test_a_bad_snapshot_header_is_corrupt(data, reason):
    if reason is None:  # a checksum that matches a body that is not a JSON object
        body = data.split(b" ", 1)[-1].rstrip(b"\n")
        data = b"%08x " % zlib.crc32(body) + body + b"\n"
        reason = "snapshot header is not JSON: " if body == b"{x}" else "snapshot header is not an object"
    with pytest.raises(CorruptLog) as caught:
        snapshot_header("snap", data)
    assert str(caught.value).startswith(f"snap: corrupt at byte 0: {reason}")


def test_a_good_snapshot_header_is_read():
    body = b'{"epoch":"e","head_offset":7}'
    assert snapshot_header("s", b"%08x " % zlib.crc32(body) + body + b"\nrest") == {"epoch": "e", "head_offset": 7}


# -- the destination --------------------------------------------------------------------------------


def test_an_empty_destination_is_used_and_anything_else_refused(tenant, tmp_path):
    (tmp_path / "empty").mkdir()
    take_backup(tenant, str(tmp_path / "empty"), "t")
    assert (tmp_path / "empty" / "manifest.json").exists()
    (tmp_path / "file").write_text("x")
    for dest in (tmp_path / "file", tmp_path / "empty"):
        with pytest.raises(BadBackup) as caught:
            take_backup(tenant, str(dest), "t")
        assert str(caught.value) == f"backup directory {str(dest)!r} already exists and is not empty"
    assert (tmp_path / "file").read_text() == "x"
