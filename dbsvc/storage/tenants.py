"""Tenant directories under SERVICE_DATA, and the companion tool's operations.

Layout::

    <SERVICE_DATA>/                 the data directory (created on first `create_tenant`)
      <tenant>/                     one per tenant; name matches TENANT_NAME
        LOCK  schema.json  snapshot  log  log.retained   (lock.py, migrate.py, compact.py, retain.py)
        workers/reader-K/           a reader's copy under `serve --workers N` (docs/workers.md)

A tenant name is validated before it is joined to a path, and the joined path is checked
to be a direct child of the data directory, so no name escapes SERVICE_DATA (no `..`, no
`/`, no absolute path, no leading dot or dash).

`create_tenant` makes the directory and fsyncs it and its parent, so a tenant reported
created survives a crash. `drop_tenant` takes the writer lock itself (so it is refused,
with the holder's pid, while a server holds the tenant, and no server can start while the
directory is being removed), and the lock of every reader's copy under `workers/` too: a
`--workers` server whose writer is being restarted leaves the tenant's lock free for a
moment while its readers still serve, and the drop is refused then as well. It renames the directory to a hidden `.dropping-*` name (one
atomic step, fsynced), then removes it; a crash mid-removal leaves only a hidden directory
that `list_tenants` ignores and the next drop or create of any tenant cleans up.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from dataclasses import dataclass

from dbsvc.errors import TenantError, TenantLocked
from dbsvc.storage.files import fsync_dir
from dbsvc.storage.lock import LOCK_NAME, WriterLock, probe_lock

TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
DROPPING_PREFIX = ".dropping-"


@dataclass(frozen=True, slots=True)
class TenantInfo:
    name: str
    path: str
    size_bytes: int
    locked: bool
    holder_pid: int | None


def validate_name(name: str) -> str:
    if not isinstance(name, str) or TENANT_NAME.fullmatch(name) is None:
        raise TenantError(
            f"invalid tenant name {name!r}: expected 1 to 63 characters of a-z, 0-9, '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def tenant_dir(data_dir: str, name: str) -> str:
    """The tenant's directory (validated; it need not exist)."""
    validate_name(name)
    root = os.path.abspath(data_dir)
    path = os.path.join(root, name)
    assert os.path.dirname(path) == root, "a validated name cannot leave the data directory"
    return path


def _clean_dropped(root: str) -> None:
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return
    for entry in names:
        if entry.startswith(DROPPING_PREFIX):
            shutil.rmtree(os.path.join(root, entry), ignore_errors=True)


def create_tenant(data_dir: str, name: str) -> str:
    path = tenant_dir(data_dir, name)
    root = os.path.dirname(path)
    created_root = not os.path.isdir(root)
    os.makedirs(root, exist_ok=True)
    _clean_dropped(root)
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        raise TenantError(f"tenant {name!r} already exists at {path!r}") from None
    fsync_dir(path)
    fsync_dir(root)
    if created_root:
        fsync_dir(os.path.dirname(root))
    return path


def _size(path: str) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except FileNotFoundError:
                pass
    return total


def list_tenants(data_dir: str) -> list[TenantInfo]:
    root = os.path.abspath(data_dir)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        path = os.path.join(root, name)
        if TENANT_NAME.fullmatch(name) is None or not os.path.isdir(path):
            continue
        locked, pid = probe_lock(path)
        out.append(TenantInfo(name, path, _size(path), locked, pid))
    return out


def drop_tenant(data_dir: str, name: str) -> None:
    path = tenant_dir(data_dir, name)
    if not os.path.isdir(path):
        raise TenantError(f"tenant {name!r} does not exist under {data_dir!r}")
    locks = [WriterLock.acquire(path)]  # TenantLocked while a server holds it
    root = os.path.dirname(path)
    doomed = os.path.join(root, f"{DROPPING_PREFIX}{name}-{secrets.token_hex(4)}")
    try:
        for reader in _reader_copies(path):
            try:
                locks.append(WriterLock.acquire(reader))
            except TenantLocked as exc:
                hint = f"{os.path.basename(reader)} of `serve --workers` serves it while its writer restarts"
                raise TenantLocked(path, exc.pid, hint) from None
        os.rename(path, doomed)
        fsync_dir(root)
    finally:
        for lock in locks:
            lock.release()
    shutil.rmtree(doomed)
    fsync_dir(root)


def _reader_copies(path: str) -> list[str]:
    """The readers' copies under `path` that a reader has opened (`workers/*/LOCK`, module
    docstring): a copy without a lock file was never served, and is left as it is."""
    workers = os.path.join(path, "workers")
    try:
        names = sorted(os.listdir(workers))
    except FileNotFoundError:
        return []
    return [os.path.join(workers, n) for n in names if os.path.isfile(os.path.join(workers, n, LOCK_NAME))]


def compact_tenant(data_dir: str, name: str, *, retain_bytes: int | None = None) -> str:
    """Offline compaction (`dbsvc compact`); refused with TenantLocked while a server runs.
    The old log's newest rows are kept for replicas within `retain_bytes` (default: the
    `[runtime] replication_retain_mb` default, 256 MiB; the command has no schema to read)."""
    from dbsvc.storage.compact import DEFAULT_RETAIN_BYTES, compact_directory
    from dbsvc.storage.files import FaultPlan
    from dbsvc.storage.migrate import read_description

    path = tenant_dir(data_dir, name)
    if not os.path.isdir(path):
        raise TenantError(
            f"tenant {name!r} does not exist under {data_dir!r}: create it with `dbsvc tenant create {name}`"
        )
    lock = WriterLock.acquire(path)
    try:
        if not os.path.exists(os.path.join(path, "log")) and not os.path.exists(os.path.join(path, "log.new")):
            return f"tenant {name!r} has never been opened; nothing to compact"
        return compact_directory(
            path,
            read_description(path),
            FaultPlan.from_env(),
            retain_bytes=DEFAULT_RETAIN_BYTES if retain_bytes is None else retain_bytes,
        )
    finally:
        lock.release()
