"""dbsvc/datatools/backup.py's restore in-process (issue 33): every refusal of a backup
directory, each with its exact message (a manifest that is not ours or missing, a file
missing or of another size or checksum, a damaged log or snapshot, a log that does not end
at the manifest's head or does not pair with its snapshot, a damaged history), and where the
tenant goes (never over one that exists, nothing left behind by a restore that fails, the
directory 0755, a new history forked at the backup's head).
"""

from __future__ import annotations

import json
import os
import re
import zlib
from pathlib import Path

import pytest

from dbsvc.datatools import backup
from dbsvc.datatools.backup import read_manifest, restore_backup, take_backup
from dbsvc.errors import BadBackup, TenantError
from dbsvc.storage import files
from dbsvc.storage.tenants import create_tenant
from support.backupkit import compact, history, refusal, rewrite_manifest, state, write
from support.storage import open_store

# -- restore's checks ------------------------------------------------------------------------------


@pytest.fixture
def bk(tenant, tmp_path) -> Path:
    take_backup(tenant, str(tmp_path / "bk"), "t")
    return tmp_path / "bk"


@pytest.mark.parametrize(
    "manifest, message",
    [
        (
            b"{",
            "{bk}/manifest.json: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (b"[]", "{bk}/manifest.json: not a dbsvc backup manifest of format 1"),
        (b'{"kind": "dbsvc-backup", "format": 2}', "{bk}/manifest.json: not a dbsvc backup manifest of format 1"),
        (b'{"kind": "backup", "format": 1}', "{bk}/manifest.json: not a dbsvc backup manifest of format 1"),
        (
            b'{"kind": "dbsvc-backup", "format": 1}',
            '{bk}/manifest.json: "files" must map some of schema.json, snapshot, log, history to their size and sha256',
        ),
        (
            b'{"kind": "dbsvc-backup", "format": 1, "files": []}',
            '{bk}/manifest.json: "files" must map some of schema.json, snapshot, log, history to their size and sha256',
        ),
        (
            b'{"kind": "dbsvc-backup", "format": 1, "files": {"log": {}, "LOCK": {}}}',
            '{bk}/manifest.json: "files" must map some of schema.json, snapshot, log, history to their size and sha256',
        ),
        # a file's entry that is not an object was an AttributeError (a traceback) before
        (
            b'{"kind": "dbsvc-backup", "format": 1, "files": {"log": "5678"}}',
            '{bk}/manifest.json: "files" must map some of schema.json, snapshot, log, history to their size and sha256',
        ),
    ],
)
def test_a_manifest_that_is_not_ours_is_refused(bk, manifest, message):
    (bk / "manifest.json").write_bytes(manifest)
    with pytest.raises(BadBackup) as caught:
        read_manifest(str(bk))
    assert str(caught.value) == message.format(bk=bk)


def test_a_missing_manifest_means_an_incomplete_backup(bk):
    os.unlink(bk / "manifest.json")
    with pytest.raises(BadBackup) as caught:
        read_manifest(str(bk))
    assert str(caught.value) == f"{str(bk)!r} is not a complete backup: manifest.json is missing"


def test_each_file_must_be_there_with_its_size_and_checksum(bk):
    log = (bk / "log").read_bytes()
    os.unlink(bk / "log")
    assert refusal(bk) == f"{bk}/log: missing (the manifest lists it)"
    (bk / "log").write_bytes(log + b"x")
    assert refusal(bk) == f"{bk}/log: {len(log) + 1} bytes, the manifest says {len(log)}"
    (bk / "log").write_bytes(log[:-1] + bytes([log[-1] ^ 1]))
    assert refusal(bk) == f"{bk}/log: SHA-256 differs from the manifest's (the file was altered)"
    manifest = json.loads((bk / "manifest.json").read_text())
    manifest["files"]["log"] = {"sha256": manifest["files"]["log"]["sha256"]}
    (bk / "manifest.json").write_text(json.dumps(manifest))
    assert refusal(bk) == f"{bk}/log: {len(log)} bytes, the manifest says None"


def test_a_log_with_bytes_after_its_last_frame_is_refused(bk):
    log = (bk / "log").read_bytes()
    (bk / "log").write_bytes(log + b"\x00\x00\x00")
    rewrite_manifest(bk)
    assert refusal(bk) == f"{bk}/log: corrupt at byte {len(log)}: truncated frame header (3 of 16 bytes)"


def test_a_log_damaged_before_its_tail_is_refused_naming_the_file(bk):
    log = bytearray((bk / "log").read_bytes())
    log[60] ^= 1  # inside the first frame: good frames follow
    (bk / "log").write_bytes(bytes(log))
    rewrite_manifest(bk)
    assert refusal(bk).startswith(f"{bk}/log: corrupt at byte 40: ")


@pytest.fixture
def compacted_bk(tenant, tmp_path) -> Path:
    compact(tenant)
    write(tenant, 4)
    take_backup(tenant, str(tmp_path / "cbk"), "t")
    return tmp_path / "cbk"


def test_a_damaged_snapshot_line_is_refused_naming_the_file(compacted_bk):
    snap = bytearray((compacted_bk / "snapshot").read_bytes())
    snap[-3] ^= 1
    (compacted_bk / "snapshot").write_bytes(bytes(snap))
    rewrite_manifest(compacted_bk)
    message = refusal(compacted_bk)
    assert message.startswith(f"{compacted_bk}/snapshot: corrupt at byte ")
    assert message.endswith(": snapshot line checksum mismatch")


def test_a_snapshot_header_that_is_not_json_is_refused_naming_the_file(compacted_bk):
    (compacted_bk / "snapshot").write_bytes(b"%08x {x}\n" % zlib.crc32(b"{x}"))
    rewrite_manifest(compacted_bk)
    assert refusal(compacted_bk).startswith(
        f"{compacted_bk}/snapshot: corrupt at byte 0: snapshot header is not JSON: "
    )


def test_the_log_must_end_at_the_head_the_manifest_names(bk):
    rewrite_manifest(bk, head_offset=3)
    assert refusal(bk) == f"{bk}/log: ends at offset 4, the manifest says 3"
    rewrite_manifest(bk, head_offset=None)
    assert refusal(bk) == f"{bk}/log: ends at offset 4, the manifest says None"


def test_a_backup_without_a_snapshot_must_hold_a_log_from_offset_0(data, tenant, tmp_path):
    compact(tenant)
    write(tenant, 4)
    take_backup(tenant, str(tmp_path / "bk"), "t")
    bk = tmp_path / "bk"
    os.unlink(bk / "snapshot")
    rewrite_manifest(bk)
    assert refusal(bk) == (
        f"{bk}/log: the log (epoch {state(tenant)[0]}, base 4) does not continue the snapshot (epoch None, head 0)"
    )
    with pytest.raises(BadBackup):
        restore_backup(str(bk), str(data), "copy")
    assert sorted(os.listdir(data)) == ["t"]


def test_a_snapshot_without_its_log_is_refused(tenant, tmp_path):
    compact(tenant)
    take_backup(tenant, str(tmp_path / "bk"), "t")
    bk = tmp_path / "bk"
    os.unlink(bk / "log")
    rewrite_manifest(bk)
    assert refusal(bk) == f"{bk}: a snapshot without its log"


def test_a_snapshot_of_another_epoch_is_refused(tenant, tmp_path):
    compact(tenant)
    take_backup(tenant, str(tmp_path / "old"), "t")
    write(tenant, 4)
    compact(tenant)
    take_backup(tenant, str(tmp_path / "bk"), "t")
    bk = tmp_path / "bk"
    (bk / "snapshot").write_bytes((tmp_path / "old" / "snapshot").read_bytes())
    rewrite_manifest(bk)
    epoch = state(tenant)[0]
    old_epoch = json.loads((tmp_path / "old" / "manifest.json").read_text())["epoch"]
    assert refusal(bk) == (
        f"{bk}/log: the log (epoch {epoch}, base 5) does not continue the snapshot (epoch {old_epoch}, head 4)"
    )


def test_a_damaged_history_is_refused(bk):
    raw = bytearray((bk / "history").read_bytes())
    raw[-3] ^= 1
    (bk / "history").write_bytes(bytes(raw))
    rewrite_manifest(bk)
    assert refusal(bk) == f"{bk}/history: corrupt at byte 0: history file checksum mismatch"


def test_restore_refuses_a_tenant_that_exists(data, bk):
    with pytest.raises(TenantError) as caught:
        restore_backup(str(bk), str(data), "t")
    assert str(caught.value) == f"tenant 't' already exists at {str(data / 't')!r}"


def test_a_restore_that_fails_on_disk_leaves_no_tenant_and_no_staging(data, bk, monkeypatch, tmp_path):
    """The files are staged in `.restoring-NAME-<8 hex>` beside the tenants (never in the
    working directory), and removed when the rename fails."""
    seen: list[str] = []

    def refuse(src, dst):
        seen.append(src)
        raise OSError(28, "No space left on device")

    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(files.ops, "rename", refuse)
    with pytest.raises(OSError):
        restore_backup(str(bk), str(data), "copy")
    (staging,) = seen
    assert os.path.dirname(staging) == str(data)
    assert re.fullmatch(r"\.restoring-copy-[0-9a-f]{8}", os.path.basename(staging)), staging
    assert sorted(os.listdir(data)) == ["t"]
    assert os.listdir(elsewhere) == []


def test_a_tenant_created_while_restoring_is_not_replaced(data, bk, monkeypatch):
    """NAME is checked again just before the rename: a tenant created meanwhile wins."""
    real = backup.fsync_dir

    def meanwhile(path: str) -> None:
        real(path)
        if os.path.basename(path).startswith(".restoring-"):
            os.mkdir(data / "copy")

    monkeypatch.setattr(backup, "fsync_dir", meanwhile)
    with pytest.raises(TenantError) as caught:
        restore_backup(str(bk), str(data), "copy")
    assert str(caught.value) == f"tenant 'copy' already exists at {str(data / 'copy')!r}"
    assert sorted(os.listdir(data)) == ["copy", "t"] and os.listdir(data / "copy") == []


def test_the_restored_tenant_directory_is_0755_whatever_the_umask(data, bk):
    old = os.umask(0)
    try:
        restore_backup(str(bk), str(data), "copy")
    finally:
        os.umask(old)
    assert os.stat(data / "copy").st_mode & 0o777 == 0o755


def test_a_tenant_opened_but_never_written_restores_forked_at_offset_0(data, tmp_path):
    directory = create_tenant(str(data), "blank")
    open_store(directory).close()
    manifest = take_backup(directory, str(tmp_path / "bk"), "blank")
    assert (manifest["head_offset"], manifest["frames"]) == (0, 0)
    restore_backup(str(tmp_path / "bk"), str(data), "copy")
    before, after = history(directory), history(str(data / "copy"))
    assert [(f.id, f.at) for f in after.forks] == [(before.id, 0)]


def test_restore_into_a_data_directory_that_does_not_exist_yet(bk, tmp_path):
    restore_backup(str(bk), str(tmp_path / "new" / "data"), "copy")
    assert sorted(os.listdir(tmp_path / "new" / "data" / "copy")) == ["history", "log", "schema.json"]
