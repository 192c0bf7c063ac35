"""Compaction: replace snapshot + log by a new snapshot and an empty log, in a new epoch.

Files of a tenant::

    <tenant>/snapshot        snapshot.py format (absent until the first compaction)
    <tenant>/log             logfile.py format; its header names the snapshot's epoch
    <tenant>/log.retained    retain.py format: the old log's newest rows, kept for replicas
    <tenant>/snapshot.new    transient: a compaction in progress
    <tenant>/log.new         transient: a compaction in progress
    <tenant>/log.retained.new  transient: a compaction in progress

Steps (`install`; 4-9 are `install_pair`, which online compaction shares), each followed by the `compact` fault hook (files.py)::

    1  write snapshot.new (epoch E2, head H), fsync it
    2  write log.retained.new (retain.py: the newest frames up to H of the old segment
       and the old log, within the budget), fsync it; nothing when nothing is retained
    3  write log.new (header: epoch E2, base offset H), fsync it
    4  fsync the directory
    5  rename snapshot.new -> snapshot          <- the commit point
    6  fsync the directory
    7  rename log.retained.new -> log.retained (or unlink log.retained if nothing is retained)
    8  rename log.new -> log
    9  fsync the directory

Recovery (`finish_interrupted`, run by every writer open before reading anything):

- `snapshot.new` exists: the commit point was not reached. The old snapshot, old log and
  old retained segment are intact and consistent; the `.new` files are deleted
  (`snapshot.new` last, so a crash while deleting still reads as "before").
- no `snapshot.new` but `log.new` or `log.retained.new`: the commit point passed. The
  snapshot is the new one; `log.retained.new` and `log.new` (complete and fsynced before
  step 5) are renamed into place.

An `install` that fails (an error, not a crash) before its commit point removes its `.new`
files itself, as online compaction does (online.py `discard`); past it they stay for the
next open to finish.

So an interrupted compaction yields the old files or the new ones, never a mix; a reader
checks anyway that the snapshot's epoch and head equal the log header's epoch and base, and
uses a retained segment only if it ends exactly at the log's base (retain.py), so one left
behind by a crash between steps 5 and 7 is ignored. A read-only open performs the same
recovery in its head, renaming nothing.

A running store compacts online with the same files, steps and fault hooks (online.py),
so its crashes recover the same way.

Offline compaction (`compact_directory`) needs no compiled schema: it replays snapshot and
log as plain JSON (records by id per model) and writes them back with the stored field
order. The log's torn tail, if any, is dropped (it was never acknowledged).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dbsvc.errors import CorruptLog
from dbsvc.storage import files, retain
from dbsvc.storage.files import NO_FAULTS, FaultPlan, fsync_dir, write_all, write_durably
from dbsvc.storage.logfile import LogScan, encode_header
from dbsvc.storage.snapshot import ModelImage, SnapshotImage, encode_snapshot
from dbsvc.storage.snapshotreader import decode_snapshot

log = logging.getLogger("dbsvc.storage")

SNAPSHOT_NAME = "snapshot"
LOG_NAME = "log"
RETAINED_NAME = retain.RETAINED_NAME
NEW_SUFFIX = retain.NEW_SUFFIX
DEFAULT_RETAIN_BYTES = 256 << 20  # `[runtime] replication_retain_mb` default


def new_epoch() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class TenantFiles:
    """Where to read a tenant's state after recovery (paths may be absent)."""

    snapshot: str | None
    log: str
    retained: str | None = None  # a retained segment to try (retain.load checks it)


def finish_interrupted(directory: str, *, readonly: bool) -> TenantFiles:
    snap = os.path.join(directory, SNAPSHOT_NAME)
    logp = os.path.join(directory, LOG_NAME)
    ret = os.path.join(directory, RETAINED_NAME)
    snap_new, log_new, ret_new = snap + NEW_SUFFIX, logp + NEW_SUFFIX, ret + NEW_SUFFIX
    if os.path.exists(snap_new):
        if not readonly:
            log.warning("%s: discarding an interrupted compaction (before its commit point)", directory)
            discard_new(directory)
    elif os.path.exists(log_new) or os.path.exists(ret_new):
        if readonly:
            return TenantFiles(
                snap if os.path.exists(snap) else None,
                log_new if os.path.exists(log_new) else logp,
                ret_new if os.path.exists(ret_new) else ret,
            )
        log.warning("%s: finishing an interrupted compaction (after its commit point)", directory)
        if os.path.exists(ret_new):
            files.ops.rename(ret_new, ret)
        if os.path.exists(log_new):
            files.ops.rename(log_new, logp)
        fsync_dir(directory)
    return TenantFiles(snap if os.path.exists(snap) else None, logp, ret)


def discard_new(directory: str) -> None:
    """Remove a compaction's `.new` files, before its commit point only: log.new and
    log.retained.new first, snapshot.new last, the directory fsynced after each, since a
    log.new or log.retained.new left without snapshot.new would read as "past the commit
    point" (`finish_interrupted`)."""
    for name in (LOG_NAME, RETAINED_NAME, SNAPSHOT_NAME):
        try:
            files.ops.unlink(os.path.join(directory, name + NEW_SUFFIX))
        except FileNotFoundError:
            pass
        fsync_dir(directory)


def _abandon(directory: str) -> None:
    """After a failed `install`: if its commit point was not passed (snapshot.new is still
    there, the test `finish_interrupted` applies), remove its `.new` files now, so the
    tenant is left as it was and a complete snapshot.new (the whole data's size, on a disk
    that may have just run out of room) does not wait for the next open. Past the commit
    point the new pair stands and the next open finishes it. A failure here is logged,
    never raised over the error that stopped the install."""
    if not os.path.exists(os.path.join(directory, SNAPSHOT_NAME + NEW_SUFFIX)):
        return
    try:
        discard_new(directory)
    except OSError as exc:
        log.error("%s: could not discard an unfinished compaction (the next open will): %s", directory, exc)


def _chunks(chunks: Iterable[bytes]) -> Callable[[int], None]:
    def fill(fd: int) -> None:
        for chunk in chunks:
            write_all(fd, chunk)

    return fill


def install(
    directory: str, image: SnapshotImage, faults: FaultPlan = NO_FAULTS, retained: retain.Plan | None = None
) -> retain.Segment | None:
    """Write `image` as the new snapshot plus an empty log of its epoch, keeping what
    `retained` allows of the old log (steps 1-9). Returns the retained segment, if any.
    An error before the commit point (step 5) removes the `.new` files before it goes on
    (`_abandon`): a failed install leaves the tenant as it was, with nothing behind."""
    try:
        write_durably(os.path.join(directory, SNAPSHOT_NAME + NEW_SUFFIX), _chunks(encode_snapshot(image)))
        faults.check("compact")
        pending = retain.write_pending(directory, retained)
        faults.check("compact")
        write_durably(
            os.path.join(directory, LOG_NAME + NEW_SUFFIX), _chunks([encode_header(image.epoch, image.head_offset)])
        )
        faults.check("compact")
        return install_pair(directory, faults, pending)
    except BaseException:
        _abandon(directory)
        raise


def install_pair(
    directory: str, faults: FaultPlan, pending: retain.Segment | None, committed: list[bool] | None = None
) -> retain.Segment | None:
    """Steps 4-9, shared by offline and online compaction: with snapshot.new, log.new and
    (if `pending`) log.retained.new complete and fsynced, put the new pair in place.
    `committed[0]` turns True once the snapshot's rename returned (an error after it leaves
    the new pair standing, so a running writer can no longer trust its old log). Returns
    the retained segment now in place."""
    snap = os.path.join(directory, SNAPSHOT_NAME)
    logp = os.path.join(directory, LOG_NAME)
    fsync_dir(directory)
    faults.check("compact")
    files.ops.rename(snap + NEW_SUFFIX, snap)
    if committed is not None:
        committed[0] = True
    faults.check("compact")
    fsync_dir(directory)
    faults.check("compact")
    segment = retain.commit_pending(directory, pending)
    faults.check("compact")
    files.ops.rename(logp + NEW_SUFFIX, logp)
    faults.check("compact")
    fsync_dir(directory)
    faults.check("compact")
    return segment


def create_log(directory: str, epoch: str) -> str:
    """A tenant's first log (no snapshot, base offset 0), created durably."""
    logp = os.path.join(directory, LOG_NAME)
    write_durably(logp + ".tmp", _chunks([encode_header(epoch, 0)]))
    files.ops.rename(logp + ".tmp", logp)
    fsync_dir(directory)
    return logp


def check_pair(files: TenantFiles, snapshot: SnapshotImage | None, scan: LogScan) -> None:
    """The log must continue the snapshot: same epoch, base offset = snapshot head."""
    header = scan.header
    if snapshot is None:
        if header.base_offset != 0:
            raise CorruptLog(files.log, 0, f"log starts after offset {header.base_offset} but there is no snapshot")
        return
    if header.epoch != snapshot.epoch or header.base_offset != snapshot.head_offset:
        raise CorruptLog(
            files.log,
            0,
            f"log (epoch {header.epoch}, base {header.base_offset}) does not continue the snapshot "
            f"(epoch {snapshot.epoch}, head {snapshot.head_offset})",
        )


def key_fields(model: dict) -> list[str]:
    """The fields of a model of a schema description whose keys a snapshot carries
    (snapshot.py): its id and every indexed or referencing field, in field order. The
    description's twin of `Table.key_fields` (a test holds them equal); were they ever
    to differ, an open would only parse the rows instead of reading the keys."""
    return [
        f["name"]
        for f in model["fields"]
        if f.get("id") or f.get("unique") or f.get("filter") or f.get("sort") or f.get("ref")
    ]


def compact_directory(
    directory: str, description: dict | None, faults: FaultPlan = NO_FAULTS, *, retain_bytes: int = DEFAULT_RETAIN_BYTES
) -> str:
    """Offline compaction of a locked tenant directory; returns a one-line report. The old
    log's newest rows are retained within `retain_bytes` (retain.py)."""
    files = finish_interrupted(directory, readonly=False)
    snapshot = None
    if files.snapshot:
        with open(files.snapshot, "rb") as f:
            snapshot = decode_snapshot(files.snapshot, f.read())
    with open(files.log, "rb") as f:
        data = f.read()
    scan = LogScan(files.log, data)
    check_pair(files, snapshot, scan)
    order: list[str] = []
    fields: dict[str, list[str]] = {}
    max_ids: dict[str, int] = {}
    live: dict[str, dict[Any, list[Any]]] = {}
    versions: dict[str, dict[Any, int]] = {}  # each live record's version (versions.py)
    id_fields: dict[str, str] = {}
    keys: dict[str, list[str]] = {}
    for m in (description or {}).get("models", ()):
        order.append(m["name"])
        fields[m["name"]] = [f["name"] for f in m["fields"]]
        id_fields[m["name"]] = next((f["name"] for f in m["fields"] if f["id"]), fields[m["name"]][0])
        keys[m["name"]] = key_fields(m)
    for image in snapshot.models if snapshot else ():
        if image.name not in fields:
            order.append(image.name)
            fields[image.name] = image.fields
            keys[image.name] = image.keys
        pos = [image.fields.index(f) if f in image.fields else None for f in fields[image.name]]
        idf = image.fields.index(id_fields.get(image.name, image.fields[0]))
        live[image.name] = {row[idf]: [None if p is None else row[p] for p in pos] for row in image.rows}
        assert image.versions is not None  # decode_snapshot reads them (the head's for an old file)
        versions[image.name] = {row[idf]: version for row, version in zip(image.rows, image.versions)}
        max_ids[image.name] = image.max_id
    rows = 0
    for offset, payload in scan.records():
        ev = json.loads(bytes(payload))
        name, record = ev["model"], ev["record"]
        if name not in fields:
            order.append(name)
            fields[name] = list(record)
        table = live.setdefault(name, {})
        stamps = versions.setdefault(name, {})
        if ev["kind"] == "delete":
            table.pop(ev["id"], None)
            stamps.pop(ev["id"], None)
        else:
            table[ev["id"]] = [record.get(f) for f in fields[name]]
            stamps[ev["id"]] = offset
        if type(ev["id"]) is int:
            max_ids[name] = max(max_ids.get(name, 0), ev["id"])
        rows += 1
    head = scan.next_offset - 1
    base = scan.header.base_offset
    segment = retain.load(files.retained, base)
    keep = retain.plan(retain_bytes, scan.header.epoch, segment, files.log, scan.end, base, head)
    models = []
    for name in order:
        table = live.get(name, {})
        ids = sorted(table)
        stamps = versions.get(name, {})
        models.append(
            ModelImage(
                name,
                fields[name],
                [table[k] for k in ids],
                max_ids.get(name, 0),
                keys.get(name, []),
                [stamps[k] for k in ids],
            )
        )
    epoch = new_epoch()
    kept = install(directory, SnapshotImage(epoch, head, models), faults, keep)
    size = sum(len(m.rows) for m in models)
    cut = f", dropped a torn tail of {scan.damage.size - scan.damage.position} bytes" if scan.damage else ""
    retained = f", retained {kept.size} bytes for replicas (offsets after {kept.base})" if kept else ""
    return (
        f"compacted {directory}: {rows} log rows -> {size} live records, "
        f"head offset {head}, new epoch {epoch}{cut}{retained}"
    )
