"""`dbsvc backup DIR` and `dbsvc tenant create NAME --from DIR`: copy a live tenant, restore it.

A backup is taken beside a running server without its lock and without pausing it: the
files are only ever opened read-only (a read-only tool, docs/guide/operations.md#data-tools-and-backups), so not a
byte of the tenant changes, LOCK included. Layout of DIR::

    DIR/
      schema.json     the tenant's stored schema (absent if no server ever opened it)
      snapshot        the epoch's snapshot, byte for byte (absent before the first compaction)
      log             the epoch's log, cut at the last whole frame read
      history         the tenant's history record (storage/history.py; absent for a tenant
                      written before histories)
      manifest.json   written last, so its presence means the copy is complete:
        {"format": 1, "kind": "dbsvc-backup", "tenant": "shop", "created": "<RFC 3339>",
         "epoch": "<32 hex>", "base_offset": 0, "head_offset": 1234, "frames": 1234,
         "files": {"log": {"bytes": 5678, "sha256": "<hex>"}, ...}}

Consistency. The writer only ever appends whole frames to the log, and a compaction (offline
or online, storage/compact.py) replaces snapshot and log by renames, never in place. So:

1. open `snapshot` and `log` (file descriptors pin those very files: a rename over either
   later does not change what is read through them);
2. the pair is consistent when the log header's epoch and base offset equal the snapshot's
   epoch and head (or, without a snapshot, the log starts at offset 0). A compaction caught
   between its commit point and its log rename leaves `log.new` as the partner of the new
   snapshot (what a read-only open reads too); any other mismatch means a compaction
   switched files between the two opens: close both and start again (up to ATTEMPTS);
3. read both through the descriptors and cut the log after its last good frame (a frame
   being appended right now is simply not included: rule 2 of logfile.py). Damage before
   the tail refuses the backup with `CorruptLog`, as it would refuse a server start;
4. check what was read as a restore checks it, with the same functions (`_whole_frames`,
   `_check_snapshot_rows`): every frame's CRC and every snapshot line's, and every row (a
   frame's payload, a snapshot's rows) strict JSON, so a backup that would not restore is
   refused when it is taken, naming the file, the byte and the frame's offset (or the
   snapshot's line). DIR is created only after that, so a refused backup leaves it as it
   was (absent, or an empty directory).

The copy is the tenant as it was after some row the server had written: every write
acknowledged before the backup began is in it (it was in the log before the log was
read), and writes are never reordered. It may also hold a few writes whose fsync was still
in flight (as a read may see them). The retained segment (`log.retained`, kept only for
replicas) is not copied.

Restore (`restore_backup`) verifies before it installs: the manifest lists only known
files, each with an object of its size and SHA-256, each file has that size and SHA-256,
every snapshot line and every log frame passes its CRC, the log continues the snapshot and
ends exactly at the head the manifest names, and every row (a frame's payload, a snapshot's
rows) is JSON a writer writes (dbsvc/strictjson.py): a CRC vouches only for the bytes, and a
`NaN` or `1e400` put there by hand under a good CRC was restored into a tenant that then
refused to open. Those rows are parsed once, as an open parses them.
Then the files are written into a hidden `.restoring-NAME-*` directory under SERVICE_DATA,
fsynced, and the directory is renamed to NAME (refused if NAME exists), so a tenant
appears whole or not at all. The restored tenant keeps the epoch, offsets and watermarks,
but not the history: its offsets after the backup's head will name rows the original
never had, so it starts a new history forked from the backup's at that head
(storage/history.py rule 3). A replica of the original then sees that it cannot continue
(replica/follower.py rule 7) instead of serving rows the restored tenant no longer has.

Both write through storage's file seam (`files.write_new`, `write_atomic`, `files.ops`), so
the power-loss simulator judges a backup as it judges the log
(tests/datatools/test_datatools_powerloss.py): after a power loss DIR holds no manifest
(refused as incomplete) or a complete backup.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dbsvc.errors import BadBackup, CorruptLog, StorageError, TenantError
from dbsvc.storage import files
from dbsvc.storage.files import fsync_dir, write_atomic, write_new
from dbsvc.storage.history import History, decode_history, encode_history, new_history_id
from dbsvc.storage.logfile import HEADER_SIZE, LogScan, decode_header
from dbsvc.storage.snapshotreader import model_windows, read_snapshot, snapshot_lines
from dbsvc.storage.tenants import tenant_dir
from dbsvc.strictjson import strict_loads

FORMAT = 1
KIND = "dbsvc-backup"
MANIFEST = "manifest.json"
SCHEMA, SNAPSHOT, LOG, HISTORY = "schema.json", "snapshot", "log", "history"
FILES = (SCHEMA, SNAPSHOT, LOG, HISTORY)
ATTEMPTS = 50
RESTORING_PREFIX = ".restoring-"


@dataclass(slots=True)
class Capture:
    """A consistent image of a tenant's files, read but not yet written anywhere."""

    files: dict[str, bytes]
    epoch: str
    base_offset: int
    head_offset: int
    frames: int


def _read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    position = 0
    while True:
        chunk = os.pread(fd, 1 << 22, position)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        position += len(chunk)


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def _read_optional(path: str) -> bytes | None:
    fd = _open(path)
    if fd is None:
        return None
    try:
        return _read_fd(fd)
    finally:
        os.close(fd)


def snapshot_header(path: str, data: bytes) -> dict[str, Any]:
    """The snapshot's first line (format, epoch, head_offset, models), its CRC checked."""
    nl = data.find(b"\n")
    if nl < 9 or data[8:9] != b" ":
        raise CorruptLog(path, 0, "snapshot header line is missing or has no checksum")
    body = data[9:nl]
    if f"{zlib.crc32(body):08x}".encode("ascii") != data[:8]:
        raise CorruptLog(path, 0, "snapshot header checksum mismatch")
    try:
        header = strict_loads(body)  # no NaN, no 1e400 (dbsvc/strictjson.py)
    except ValueError as exc:
        raise CorruptLog(path, 0, f"snapshot header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise CorruptLog(path, 0, "snapshot header is not an object")
    return header


def _whole_frames(path: str, data: bytes) -> tuple[bytes, LogScan, int]:
    """(the log cut after its last good frame, its scan, frames). CorruptLog for damage
    that is not a tail, and for a whole frame (its CRC good) whose payload is not strict
    JSON (module docstring): the one check of a log's rows, backup's and restore's."""
    scan = LogScan(path, data)
    frames = 0
    for offset, payload in scan.records():
        try:
            strict_loads(payload)
        except ValueError as exc:
            raise CorruptLog(path, scan.end, f"the frame at offset {offset} is not JSON: {exc}") from None
        frames += 1
    return data[: scan.end], scan, frames


def _check_snapshot_rows(path: str, snapshot: bytes) -> None:
    """Every line of a snapshot passes its CRC and every row is strict JSON (module
    docstring); `CorruptLog` naming the line: the one check of a snapshot, backup's and
    restore's."""
    for part in read_snapshot(path, snapshot)[2]:
        for _window in model_windows(path, part):
            pass


def _capture_once(directory: str) -> Capture | None:
    """One attempt at steps 1-4 of the module docstring; None when files moved under it."""
    schema = _read_optional(os.path.join(directory, SCHEMA))
    snap_path, log_path = os.path.join(directory, SNAPSHOT), os.path.join(directory, LOG)
    snap_fd = _open(snap_path)
    log_fd = _open(log_path)
    try:
        snapshot = _read_fd(snap_fd) if snap_fd is not None else None
        expected: tuple[Any, Any] = (None, 0)
        if snapshot is not None:
            header = snapshot_header(snap_path, snapshot)
            expected = (header.get("epoch"), header.get("head_offset"))
        if log_fd is None:
            if snapshot is None:  # never opened by a writer: nothing but its schema
                contents = {SCHEMA: schema} if schema is not None else {}
                return Capture(contents, "", 0, 0, 0)
            return None
        header_bytes = os.pread(log_fd, HEADER_SIZE, 0)
        log_header = decode_header(log_path, header_bytes)
        if not _continues(expected, log_header.epoch, log_header.base_offset):
            # Between a compaction's commit point and its log rename, log.new continues the
            # new snapshot (compact.py steps 5-8); otherwise the files moved: try again.
            os.close(log_fd)
            log_fd = _open(log_path + ".new")
            if log_fd is None:
                return None
            log_header = decode_header(log_path, os.pread(log_fd, HEADER_SIZE, 0))
            if not _continues(expected, log_header.epoch, log_header.base_offset):
                return None
        log_data = _read_fd(log_fd)
    finally:
        for fd in (snap_fd, log_fd):
            if fd is not None:
                os.close(fd)
    if _read_optional(os.path.join(directory, SCHEMA)) != schema:
        return None  # a server migrated the schema meanwhile
    log_data, scan, frames = _whole_frames(log_path, log_data)
    if snapshot is not None:
        _check_snapshot_rows(snap_path, snapshot)
    contents = {LOG: log_data}
    history = _read_optional(os.path.join(directory, HISTORY))  # changed only offline: stable
    if history is not None:
        decode_history(os.path.join(directory, HISTORY), history)
        contents[HISTORY] = history
    if snapshot is not None:
        contents[SNAPSHOT] = snapshot
    if schema is not None:
        contents[SCHEMA] = schema
    return Capture(contents, scan.header.epoch, scan.header.base_offset, scan.next_offset - 1, frames)


def _continues(expected: tuple[Any, Any], epoch: str, base: int) -> bool:
    want_epoch, want_head = expected
    if want_epoch is None:
        return base == 0
    return epoch == want_epoch and base == want_head


def capture(directory: str) -> Capture:
    """A consistent image of the tenant at `directory`, retrying while compactions race it."""
    for attempt in range(ATTEMPTS):
        image = _capture_once(directory)
        if image is not None:
            return image
        time.sleep(min(0.002 * (attempt + 1), 0.05))
    raise StorageError(
        f"{directory}: snapshot and log kept changing during {ATTEMPTS} attempts (compactions in a loop?); try again"
    )


def _check_destination(dest: str) -> None:
    if os.path.lexists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise BadBackup(f"backup directory {dest!r} already exists and is not empty")


def take_backup(directory: str, dest: str, tenant: str) -> dict[str, Any]:
    """Copy the tenant at `directory` into the new (or empty) directory `dest`; returns
    the manifest written there. `dest` is created only once the copy in memory passed
    every check (`capture`), so a refused tenant leaves it as it was: absent, or empty."""
    _check_destination(dest)
    image = capture(directory)
    _check_destination(dest)  # filled meanwhile by someone else
    os.makedirs(dest, exist_ok=True)
    for name, data in image.files.items():
        write_new(os.path.join(dest, name), data)
    manifest = {
        "format": FORMAT,
        "kind": KIND,
        "tenant": tenant,
        "created": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "epoch": image.epoch,
        "base_offset": image.base_offset,
        "head_offset": image.head_offset,
        "frames": image.frames,
        "files": {
            name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for name, data in sorted(image.files.items())
        },
    }
    # The commit point: the manifest is written last, through a .tmp name and a rename.
    write_atomic(os.path.join(dest, MANIFEST), json.dumps(manifest, indent=1).encode("utf-8") + b"\n")
    fsync_dir(os.path.dirname(os.path.abspath(dest)))
    return manifest


# -- restore --------------------------------------------------------------------------------


def read_manifest(src: str) -> dict[str, Any]:
    path = os.path.join(src, MANIFEST)
    try:
        with open(path, "rb") as f:
            manifest = strict_loads(f.read())  # no NaN, no 1e400 (dbsvc/strictjson.py)
    except FileNotFoundError:
        raise BadBackup(f"{src!r} is not a complete backup: {MANIFEST} is missing") from None
    except ValueError as exc:
        raise BadBackup(f"{path}: not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND or manifest.get("format") != FORMAT:
        raise BadBackup(f"{path}: not a dbsvc backup manifest of format {FORMAT}")
    listed = manifest.get("files")
    if not isinstance(listed, dict) or any(name not in FILES or not isinstance(listed[name], dict) for name in listed):
        raise BadBackup(f"{path}: \"files\" must map some of {', '.join(FILES)} to their size and sha256")
    return manifest


def verify_backup(src: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """(manifest, file contents) of a backup that passes every check of the module
    docstring; `BadBackup` or `CorruptLog` naming the first that fails."""
    manifest = read_manifest(src)
    contents: dict[str, bytes] = {}
    for name, meta in manifest["files"].items():
        path = os.path.join(src, name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise BadBackup(f"{path}: missing (the manifest lists it)") from None
        if len(data) != meta.get("bytes"):
            raise BadBackup(f"{path}: {len(data)} bytes, the manifest says {meta.get('bytes')!r}")
        if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            raise BadBackup(f"{path}: SHA-256 differs from the manifest's (the file was altered)")
        contents[name] = data
    if HISTORY in contents:
        decode_history(os.path.join(src, HISTORY), contents[HISTORY])
    snapshot = contents.get(SNAPSHOT)
    expected: tuple[Any, Any] = (None, 0)
    if snapshot is not None:
        path = os.path.join(src, SNAPSHOT)
        snapshot_lines(path, snapshot)
        header = snapshot_header(path, snapshot)
        expected = (header.get("epoch"), header.get("head_offset"))
    log = contents.get(LOG)
    if log is None:
        if snapshot is not None:
            raise BadBackup(f"{src}: a snapshot without its log")
        return manifest, contents
    path = os.path.join(src, LOG)
    cut, scan, _frames = _whole_frames(path, log)
    if len(cut) != len(log):
        damage = scan.damage
        raise CorruptLog(path, len(cut), damage.reason if damage else "bytes after the last frame")
    if not _continues(expected, scan.header.epoch, scan.header.base_offset):
        raise BadBackup(
            f"{path}: the log (epoch {scan.header.epoch}, base {scan.header.base_offset}) "
            f"does not continue the snapshot (epoch {expected[0]}, head {expected[1]})"
        )
    if scan.next_offset - 1 != manifest.get("head_offset"):
        raise BadBackup(
            f"{path}: ends at offset {scan.next_offset - 1}, the manifest says {manifest.get('head_offset')!r}"
        )
    if snapshot is not None:
        _check_snapshot_rows(os.path.join(src, SNAPSHOT), snapshot)
    return manifest, contents


def restored_history(src: str, contents: dict[str, bytes], manifest: dict[str, Any]) -> History:
    """The restored tenant's history: forked from the backup's at its head (module
    docstring); a fresh one for a backup taken before histories."""
    if HISTORY not in contents:
        return History(new_history_id())
    return decode_history(os.path.join(src, HISTORY), contents[HISTORY]).fork(int(manifest.get("head_offset") or 0))


def restore_backup(src: str, data_dir: str, name: str) -> dict[str, Any]:
    """Verify the backup in `src`, then install it as the new tenant `name`; the manifest."""
    target = tenant_dir(data_dir, name)
    if os.path.exists(target):
        raise TenantError(f"tenant {name!r} already exists at {target!r}")
    manifest, contents = verify_backup(src)
    if LOG in contents:  # a never-opened tenant gets one when first opened
        contents[HISTORY] = encode_history(restored_history(src, contents, manifest))
    root = os.path.dirname(target)
    os.makedirs(root, exist_ok=True)
    staging = os.path.join(root, f"{RESTORING_PREFIX}{name}-{secrets.token_hex(4)}")
    os.mkdir(staging, 0o755)
    try:
        for file_name, data in contents.items():
            write_new(os.path.join(staging, file_name), data)
        fsync_dir(staging)
        if os.path.exists(target):
            raise TenantError(f"tenant {name!r} already exists at {target!r}")
        files.ops.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(root)
    return manifest
