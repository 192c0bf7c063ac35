"""Opening a tenant: recover files, check the schema, load the snapshot, replay the log.

Order of a writer open (each step touches disk only once the previous ones succeeded)::

    1  take the writer lock (TenantLocked: nothing touched)
    2  finish or discard an interrupted compaction (compact.py)
    3  compare the stored schema (migrate.py; IncompatibleSchema: nothing touched)
    4  load the snapshot, if any, and scan + replay the log; damage before the tail raises
       CorruptLog before anything was truncated
    5  a torn tail is logged, counted and truncated away (ftruncate + fsync); a log that
       ends inside a batch is cut from the batch's first frame (logfile.py rule 5); a
       batch mark that does not fit its row's offsets is CorruptLog in step 4 (logreplay.py)
    6  a fresh tenant gets its history (history.py) and its first log (epoch, base offset
       0), each created durably, the history first
    7  the retained segment (retain.py) is checked against the log's base: used, or logged
       and ignored (never fatal); with `retain_bytes=0` it is deleted
    8  compaction if a migration reshaped a model holding records, or if the log is over
       `compact_bytes` (AUTO_COMPACT_BYTES unless `Store.open` says otherwise) and is more
       than twice the live data, by rows or by bytes (`needs_compaction`: the
       log-size-to-live-data rule of docs/guide/operations.md#compaction; a running store applies the same
       rule after its writes, online.py); it retains up to `retain_bytes` of the log
    9  the stored schema is replaced if it changed

Step 4 by job: snapshotload.py puts the snapshot's records into the tables, logreplay.py
applies the log's rows after them (and checks and cuts the batches, step 5's second case);
this module orders the steps, owns the files' bytes and decides what is truncated, compacted
and written.

Replay memory: a writer maps the log instead of reading it into the heap, and every record
replayed is rebuilt with the model's own key strings (logreplay.py `_rebuilder`), so a
restarted store costs about what the live one did.

A read-only open does steps 2-4 and 7 in memory only: it renames, truncates and writes nothing,
ignores a torn tail (a writer may be appending it right now) and so sees a consistent
prefix of the log. If a compaction swaps files under it, it retries.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import mmap
import os
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from dbsvc.errors import CorruptLog, TenantError
from dbsvc.runtime import CompiledModel
from dbsvc.storage import compact, heap, history, migrate, retain
from dbsvc.storage.epoch import Epoch
from dbsvc.storage.files import NO_FAULTS, FaultPlan, truncate_durably
from dbsvc.storage.logfile import HEADER_SIZE, Damage, LogScan
from dbsvc.storage.logreplay import replay_log
from dbsvc.storage.snapshot import ModelImage, SnapshotImage
from dbsvc.storage.snapshotload import install_snapshot
from dbsvc.storage.snapshotreader import read_snapshot
from dbsvc.storage.table import Table

log = logging.getLogger("dbsvc.storage")

AUTO_COMPACT_BYTES = 64 * 1024 * 1024
CHECKPOINT_EVERY = 1024  # one (offset, byte position) per this many frames, for replay reads


@dataclass(slots=True)
class Loaded:
    tables: dict[str, Table]
    epoch: Epoch  # the epoch as recovered (or as compacting on open made it)
    head_offset: int
    log_size: int  # bytes of good frames (the append position)
    damage: Damage | None
    recent: deque  # payloads of the last `ring_capacity` rows
    compacted: bool = False
    history: history.History | None = None  # history.py; None: written before histories


def needs_compaction(log_bytes: int, rows_in_log: int, live: int, snapshot_bytes: int, compact_bytes: int) -> bool:
    """docs/guide/operations.md#compaction: the log is over the threshold and more than twice the live data,
    judged two ways: by rows (more than twice as many as there are live records) or by
    bytes (more than twice the snapshot, the live data as of the last compaction; none
    before the first). Rows alone miss big updates: each update frame holds the record
    twice, so records updated once each made a log more than twice the live data that the
    row rule never compacted, and that replayed slowly (bench/README.md). Used at open and by the running store (online.py)."""
    return log_bytes > compact_bytes and (rows_in_log > 2 * live or log_bytes > 2 * snapshot_bytes)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _map(path: str) -> bytes | mmap.mmap:
    """The log's bytes for a writer's replay, mapped rather than read: the pages are the
    page cache's, not the heap's, so replaying a 500 MB log does not first allocate 500 MB
    (and the heap is not left with the hole). Only under the writer lock: a mapping read
    past a file's end after someone else truncated it would kill the process (SIGBUS)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)


def image_of(tables: dict[str, Table], epoch: str, head: int) -> SnapshotImage:
    models = []
    for table in tables.values():
        records = table.live
        rows = [records[i] for i in table.pk]  # stored records are row texts already
        versions = list(map(table.versions.get, table.pk))
        models.append(ModelImage(table.name, list(table.model.fields), rows, table.max_id, table.key_fields, versions))
    return SnapshotImage(epoch, head, models)


def load(
    directory: str,
    models: Sequence[CompiledModel],
    description: dict,
    *,
    readonly: bool,
    ring_capacity: int,
    faults: FaultPlan = NO_FAULTS,
    compact_bytes: int = AUTO_COMPACT_BYTES,
    retain_bytes: int = 0,
) -> Loaded:
    """Steps 2-9 of the module docstring (the caller holds the lock for a writer open)."""
    if not os.path.isdir(directory):
        raise TenantError(f"tenant directory {directory!r} does not exist")
    attempts = 3 if readonly else 1
    # Loading creates millions of long-lived objects: with the cyclic GC running, every
    # young-generation pass would rescan them (quadratic in practice). None of them form
    # cycles, so the collector is paused while loading and the result is frozen into the
    # permanent generation, out of every later collection's way.
    # What is already garbage (a store closed before this open: its commit queue and
    # threads hold cycles) is collected first: freeze() below would otherwise keep it in
    # the permanent generation for good, ~90 KB each open (a process opening stores one
    # after another, as the power-loss seeds do, grew to 10 GB). Cheap: what earlier opens
    # froze is not scanned. A full collection, not a young one as a compaction's freeze
    # (compactor.py `freeze_live`): a store that lived a while has its cycles in the oldest
    # generation, and a young collection froze all of it for good (decisions.md, wt-tidy).
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for attempt in range(attempts):
            try:
                loaded = _load_once(
                    directory, models, description, readonly, ring_capacity, faults, compact_bytes, retain_bytes
                )
                loaded.history = history.read_history(directory)
                break
            except CorruptLog:
                if attempt + 1 == attempts:
                    raise
                log.info("%s: files changed while opening read-only; retrying", directory)
    finally:
        if was_enabled:
            gc.enable()
    gc.freeze()
    heap.release_free_memory()
    return loaded


def _load_once(
    directory: str,
    models: Sequence[CompiledModel],
    description: dict,
    readonly: bool,
    ring_capacity: int,
    faults: FaultPlan,
    compact_bytes: int,
    retain_bytes: int,
) -> Loaded:
    files = compact.finish_interrupted(directory, readonly=readonly)
    plan = migrate.plan_migration(directory, description)
    tables = {m.name: Table(m) for m in models}
    for table in tables.values():
        table.fixup = migrate.make_fixup(table.model, description)
    migrating = plan.reshaped
    snapshot = None
    snapshot_bytes = 0
    if files.snapshot is not None:
        # Mapped like the log (`_map`), for a writer: a snapshot is never truncated, only
        # replaced by a rename, but a read-only open keeps to reading all the same.
        image = _read(files.snapshot) if readonly else _map(files.snapshot)
        snapshot_bytes = len(image)
        epoch, head, parts = read_snapshot(files.snapshot, image)
        install_snapshot(tables, parts, files.snapshot, migrating, head)
        del image, parts  # the mapping goes with the last view into it
        snapshot = SnapshotImage(epoch, head, [])  # its rows are in the tables now
    if not os.path.exists(files.log):
        if snapshot is not None:
            raise CorruptLog(files.log, 0, "the log is missing beside a snapshot")
        if readonly:
            return Loaded(tables, Epoch("0" * 32, files.log, 0, []), 0, 0, None, deque())
        epoch = compact.new_epoch()
        if history.read_history(directory) is None:  # first: a crash before the log keeps it
            history.write_history(directory, history.History(history.new_history_id()))
        compact.create_log(directory, epoch)
        files = compact.TenantFiles(None, files.log)
    data = _read(files.log) if readonly else _map(files.log)
    try:
        scan = LogScan(files.log, data)
        compact.check_pair(files, snapshot, scan)
        checkpoints: list[tuple[int, int]] = []
        recent = replay_log(tables, scan, ring_capacity, checkpoints, migrating, CHECKPOINT_EVERY)
    finally:
        if isinstance(data, mmap.mmap):
            data.close()
    head = scan.next_offset - 1
    loaded = Loaded(
        tables,
        Epoch(scan.header.epoch, files.log, scan.header.base_offset, checkpoints, snapshot_bytes=snapshot_bytes),
        head,
        scan.end,
        scan.damage,
        recent,
    )
    if scan.damage is not None:
        d = scan.damage
        log.warning(
            "%s: torn tail at byte %d (%d bytes, %s)%s",
            files.log,
            d.position,
            d.size - d.position,
            d.reason,
            "" if readonly else "; truncated",
        )
        if not readonly:
            truncate_durably(files.log, d.position)
    if readonly or retain_bytes > 0:
        retained = retain.load(files.retained, loaded.epoch.log_base)
        if retained is not None:
            loaded.epoch = dataclasses.replace(loaded.epoch, retained=retained)
    elif retain.remove(directory):
        log.info("%s: removed the retained log segment (retain_bytes is 0)", directory)
    if readonly:
        return loaded
    rows_in_log = head - loaded.epoch.log_base
    live = sum(len(t.live) for t in tables.values())
    reshaped = any(tables[name].live for name in migrating if name in tables)
    if reshaped or needs_compaction(scan.end, rows_in_log, live, snapshot_bytes, compact_bytes):
        why = (
            "migration reshaped records"
            if reshaped
            else f"log of {scan.end} bytes and {rows_in_log} rows for {live} live records, snapshot of {snapshot_bytes} bytes"
        )
        log.info("%s: compacting on open (%s)", directory, why)
        epoch = compact.new_epoch()
        old = loaded.epoch
        keep = retain.plan(retain_bytes, old.id, old.retained, files.log, scan.end, old.log_base, head)
        retained = compact.install(directory, image_of(tables, epoch, head), faults, keep)
        for table in tables.values():
            table.base_ids = list(table.pk)
            table.rows = []
            table.prior = array("q")
        loaded.epoch = Epoch(
            epoch, files.log, head, [], retained, os.path.getsize(os.path.join(directory, compact.SNAPSHOT_NAME))
        )
        loaded.compacted = True
        loaded.log_size = HEADER_SIZE
    if plan.write_description:
        if plan.changes:
            log.info("%s: schema migrated:\n%s", directory, "\n".join(f"  - {c}" for c in plan.changes))
        migrate.write_description(directory, description)
    return loaded
