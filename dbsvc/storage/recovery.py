"""Opening a tenant: recover files, check the schema, load the snapshot, replay the log.

Order of a writer open (each step touches disk only once the previous ones succeeded)::

    1  take the writer lock (TenantLocked: nothing touched)
    2  finish or discard an interrupted compaction (compact.py)
    3  compare the stored schema (migrate.py; IncompatibleSchema: nothing touched)
    4  load the snapshot, if any, and scan + replay the log; damage before the tail raises
       CorruptLog before anything was truncated
    5  a torn tail is logged, counted and truncated away (ftruncate + fsync); a log that
       ends inside a batch is cut from the batch's first frame (logfile.py rule 5); a
       batch mark that does not fit its row's offsets is CorruptLog in step 4 (`_batch_row`)
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

Replay memory: a writer maps the log instead of reading it into the heap, and every record
replayed is rebuilt with the model's own key strings (`_rebuilder`), so a restarted store
costs about what the live one did.

A read-only open does steps 2-4 and 7 in memory only: it renames, truncates and writes nothing,
ignores a torn tail (a writer may be appending it right now) and so sees a consistent
prefix of the log. If a compaction swaps files under it, it retries.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import mmap
import operator
import os
from array import array
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, pairwise, starmap
from typing import Any

from dbsvc import runtime
from dbsvc.errors import CorruptLog, TenantError
from dbsvc.runtime import CompiledModel
from dbsvc.storage import compact, heap, history, migrate, retain
from dbsvc.storage.epoch import Epoch
from dbsvc.storage.files import NO_FAULTS, FaultPlan, truncate_durably
from dbsvc.storage.logfile import HEADER_SIZE, Damage, LogScan
from dbsvc.storage.rows import Stored, Values, pack
from dbsvc.storage.snapshot import ModelImage, SnapshotImage
from dbsvc.storage.snapshotreader import ModelPart, model_blocks, model_versions, model_windows, read_snapshot
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


def _install_snapshot(
    tables: dict[str, Table], parts: list[ModelPart], path: str, migrating: set[str], head: int
) -> None:
    """Each model's records into its empty table: from the snapshot's key columns when they
    fit the table, its rows parsed otherwise (snapshotreader.py, "Two ways to read a model");
    their versions from its versions lines (`head` for a file without: versions.py)."""
    for m in parts:
        table = tables.get(m.name)
        if table is None:
            raise CorruptLog(path, 0, f"snapshot holds model {m.name!r}, which the schema does not declare")
        model = table.model
        if model.id_field not in m.fields:
            raise CorruptLog(path, 0, f"snapshot rows of {m.name} have no {model.id_field!r} field")
        as_stored = m.fields == list(model.fields) and m.name not in migrating
        try:
            if as_stored and m.keys is not None and set(table.key_fields) <= set(m.keys):
                stored, columns = _from_keys(table, m, path)
            else:
                stored, columns = _from_rows(table, m, path, as_stored)
            table.load_base(stored, columns.columns, m.max_id, model_versions(path, m, head))
        except (TypeError, OverflowError) as exc:
            # A value no index can take: a list where a key goes; a float, or an int past
            # 64 bits, where an int key goes (its sublists are arrays, indexes.py OrderedIndex).
            raise CorruptLog(
                path, m.position, f"snapshot rows of {m.name} hold a value its indexes cannot take ({exc})"
            ) from None


def _from_keys(table: Table, m: ModelPart, path: str) -> tuple[list[Stored], _KeyColumns]:
    """A format-2 model's stored records as the file's row texts, and its index columns
    from its keys lines: no row parsed but the reader's sample."""
    stored: list[Stored] = []
    columns = _KeyColumns(table)
    order = _IdOrder(m, path)
    id_field, at = table.id_field, table.positions
    for texts, keyed in model_blocks(path, m):
        order.check(keyed[id_field])
        stored.extend(texts)
        columns.add({at[f]: keyed[f] for f in table.key_fields})
        del texts, keyed
    return stored, columns


def _from_rows(table: Table, m: ModelPart, path: str, as_stored: bool) -> tuple[list[Stored], _KeyColumns]:
    """A model's stored records and index columns from its rows, parsed a window at a time:
    format 1, or keys that do not fit the table. Its texts are kept as the stored records
    where they are the rows as the table stores them, and only the index keys of its
    parsed rows, so the rows go before the next window is parsed and it reuses their
    memory (snapshotreader.py, "Windows")."""
    model = table.model
    stored: list[Stored] = []
    columns = _KeyColumns(table)
    order = _IdOrder(m, path)
    id_at = operator.itemgetter(m.fields.index(model.id_field))
    names, fixup, row = m.fields, table.fixup, model.row
    for rows, texts in model_windows(path, m):
        _check_shape(rows, m, path)
        order.check(list(map(id_at, rows)))
        if not as_stored:
            assert fixup is not None
            rows = [row(fixup(dict(zip(names, values)))) for values in rows]
            texts = None
        stored.extend(map(pack, rows) if texts is None else texts)
        columns.add(list(zip(*rows)))
        del rows, texts
    return stored, columns


class _KeyColumns:
    """The index key columns `Table.load_base` takes (`Table.columns`), filled a window
    or a block at a time: each field's keys (`CompiledModel.keys`; enum members as the model's own
    strings), and the number keys of an array-keyed sort field (`key_arrays`) written into
    an array as they come, so the window's key objects go with the window. Made at the
    end, 1,000,000 float keys in a list of their own would be freed after the index took
    them into arrays, but the pages they filled, shared with the ids that stay, would not
    (32 bytes of RSS a record). A null key among number keys turns that column into a
    list (an array holds no None)."""

    __slots__ = ("columns", "plan")

    def __init__(self, table: Table) -> None:
        model = table.model
        self.columns: dict[int, Any] = {}
        self.plan: list[tuple[int, Callable[[Any], Any] | None, Mapping[Any, Any] | None]] = []
        for position in table.columns:
            f = model.fields[position]
            typecode = model.key_arrays.get(f, "")
            self.columns[position] = array(typecode) if typecode else []
            key = model.keys[f]
            members = model.shared_values.get(position)
            self.plan.append((position, None if key is runtime.identity else key, members))

    def add(self, fields: Sequence[Sequence[Any]] | Mapping[int, Sequence[Any]]) -> None:
        """Take a window's keys from its values by field position: a window's rows
        transposed (`zip(*rows)`, one C-level pass), or a block's key columns."""
        for position, key, members in self.plan:
            keys: Any = fields[position] if fields else ()
            if key is not None:
                keys = list(map(key, keys))
            if members is not None:
                keys = _shared_members(keys, members)
            column = self.columns[position]
            if type(column) is array and None in keys:
                column = self.columns[position] = list(column)
            column.extend(keys)


def _shared_members(column: list[Any], members: Mapping[Any, Any]) -> list[Any]:
    """An enum field's column with each member as the model's own string, as `row_m`
    holds it (runtime.shared): its index keys are then a few objects, not one a record."""
    try:
        return list(map(members.get, column, column))
    except TypeError:  # an unhashable value, unchecked data: kept as it is
        return [runtime.shared(members, value) for value in column]


def _check_shape(rows: list, m: ModelPart, path: str) -> None:
    """A snapshot's parsed rows each hold one value per field of its header."""
    width = len(m.fields)
    if set(map(type, rows)) - {list} or set(map(len, rows)) - {width}:
        raise CorruptLog(path, m.position, f"snapshot rows of {m.name} are not lists of its {width} fields")


class _IdOrder:
    """A snapshot's rows are in strictly ascending id order (snapshot.py), which
    `Table.load_base` builds its indexes on without sorting: a file that breaks the rule
    (damage the CRC cannot see, another writer) is refused, never half indexed. Checked
    on each window's or block's ids in turn."""

    __slots__ = ("last", "m", "path")

    def __init__(self, m: ModelPart, path: str) -> None:
        self.m, self.path = m, path
        self.last: list[Any] = []  # the previous window's last id, once there is one

    def check(self, ids: list[Any] | range) -> None:
        if type(ids) is range:  # a block of ids without gaps (snapshot.py `_column`)
            ids = ids[:: max(len(ids) - 1, 1)]  # its first and last ids, or its one id
        try:
            ascending = all(starmap(operator.lt, pairwise(chain(self.last, ids))))
        except TypeError:  # ids of types that do not compare
            ascending = False
        if not ascending:
            raise CorruptLog(
                self.path, self.m.position, f"snapshot rows of {self.m.name} are not in strictly ascending id order"
            )
        if ids:
            self.last = [ids[-1]]


def _rebuilder(table: Table, migrating: bool) -> Callable[[dict], Values]:
    """The values a record read from the log is stored from (the generated
    `CompiledModel.row`, as a write takes them). A migrating model's records are first
    brought to its current fields."""
    row = table.model.row
    if migrating:
        return lambda record: row(_migrated(table, record))
    return row


def _replay(
    tables: dict[str, Table], scan: LogScan, ring_capacity: int, checkpoints: list[tuple[int, int]], migrating: set[str]
) -> deque:
    recent: deque = deque(maxlen=max(ring_capacity, 0))
    loads = json.loads
    rebuild = {name: _rebuilder(table, name in migrating) for name, table in tables.items()}
    batch: _OpenBatch | None = None  # a batch whose last row is still to come
    for offset, payload in scan.records():
        position = scan.end
        if offset % CHECKPOINT_EVERY == 0:
            checkpoints.append((offset, position))
        ev = loads(payload)
        mark = ev.get("batch")
        if mark is not None or batch is not None:
            batch = _batch_row(scan.path, position, offset, mark, batch)
        table = tables.get(ev["model"])
        if table is None:
            raise CorruptLog(scan.path, position, f"row for model {ev['model']!r}, which the schema does not declare")
        if ev["watermark"] != table.watermark + 1:
            raise CorruptLog(
                scan.path, position, f"row watermark {ev['watermark']}, expected {table.watermark + 1} for {table.name}"
            )
        kind, id_ = ev["kind"], ev["id"]
        current = table.live.get(id_)
        max_id = table.max_id
        try:
            if kind == "insert" and current is None:
                table.insert(_stored(rebuild[table.name], ev["record"], scan.path, position))
            elif kind == "update" and current is not None:
                table.replace(current, _stored(rebuild[table.name], ev["record"], scan.path, position))
            elif kind == "delete" and current is not None:
                table.delete(id_, current)
            else:
                raise CorruptLog(
                    scan.path, position, f"{kind} of {table.name} {id_!r} does not fit the records replayed so far"
                )
        except (TypeError, OverflowError) as exc:  # a value no index can take (see _install_snapshot)
            raise CorruptLog(
                scan.path, position, f"{kind} of {table.name} {id_!r} holds a value its indexes cannot take ({exc})"
            ) from None
        table.stamp(offset)  # the record's version (versions.py)
        if ring_capacity:
            recent.append(payload)
        if batch is not None:
            if offset == batch.last:
                batch = None
            else:
                batch.undo.append((table, max_id))
    if batch is not None:
        _cut_batch(scan, batch, checkpoints, recent)
    return deque((bytes(p) for p in recent), maxlen=max(ring_capacity, 0))


@dataclass(slots=True)
class _OpenBatch:
    """The rows replayed so far of a batch (events.py "Batches") whose last row is not yet seen."""

    first: int
    last: int
    position: int  # byte position of its first frame
    undo: list[tuple[Table, int]] = dataclasses.field(default_factory=list)  # (table, max id before the row)


def _batch_row(path: str, position: int, offset: int, mark: Any, batch: _OpenBatch | None) -> _OpenBatch:
    """The batch row `offset` belongs to, from its `mark` and the batch replay has open
    (events.py "Batches"): inside an open batch every row carries that batch's mark; outside
    one, a mark opens a batch of two or more rows at its own row. A mark that breaks either
    rule passed its CRC, so a writer wrote it wrong: CorruptLog at the row's frame, before a
    byte is cut (cutting on its word could drop acknowledged rows)."""
    span = _span(mark)
    shown = "no batch mark" if mark is None else f"batch mark {runtime.compact_json(mark)}"
    if batch is not None:
        if span != (batch.first, batch.last):
            raise CorruptLog(
                path,
                position,
                f'row {offset}: {shown}, expected {{"first":{batch.first},"last":{batch.last}}}: '
                f"row {offset} is inside the batch of rows {batch.first} to {batch.last}",
            )
        return batch
    if span is None:
        raise CorruptLog(path, position, f'row {offset}: {shown} is not {{"first":F,"last":L}} with integers F < L')
    if span[0] != offset:
        raise CorruptLog(
            path,
            position,
            f"row {offset}: {shown} names rows {span[0]} to {span[1]}, "
            f"but no batch is open and row {offset} does not start one",
        )
    return _OpenBatch(offset, span[1], position)


def _span(mark: Any) -> tuple[int, int] | None:
    """(first, last) of a well-formed batch mark: an object of two integers, first < last."""
    if type(mark) is dict:
        first, last = mark.get("first"), mark.get("last")
        if type(first) is int and type(last) is int and first < last:
            return first, last
    return None


def _cut_batch(scan: LogScan, batch: _OpenBatch, checkpoints: list[tuple[int, int]], recent: deque) -> None:
    """The log ends inside a batch: a crash before its one fsync covered it, so none of it
    was acknowledged. Its rows are undone, last first, and the scan's end and damage moved
    to its first frame, so the open cuts it like a torn tail (logfile.py rule 5)."""
    for table, max_id in reversed(batch.undo):
        table.undo_last(max_id)
    while checkpoints and checkpoints[-1][0] >= batch.first:
        checkpoints.pop()
    for _ in range(min(len(batch.undo), len(recent))):
        recent.pop()
    reason = f"unfinished batch: rows {batch.first} to {batch.last}, the log ends after row {scan.next_offset - 1}" + (
        f" ({scan.damage.reason} there)" if scan.damage is not None else ""
    )
    size = len(scan.source) if not isinstance(scan.source, int) else scan.end
    scan.damage = Damage(batch.position, size, reason)
    scan.end = batch.position
    scan.next_offset = batch.first


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
        _install_snapshot(tables, parts, files.snapshot, migrating, head)
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
        recent = _replay(tables, scan, ring_capacity, checkpoints, migrating)
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


def _stored(rebuild: Callable[[dict], Values], record: dict, path: str, position: int) -> Values:
    try:
        return rebuild(record)
    except KeyError as exc:
        raise CorruptLog(path, position, f"record without its field {exc.args[0]!r}: {record!r}") from None


def _migrated(table: Table, record: dict) -> dict:
    """`record` as written under an older schema, brought to the table's current fields."""
    assert table.fixup is not None, f"{table.name} is migrating but has no fixup"
    return table.fixup(record)
