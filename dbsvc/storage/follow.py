"""The follower side of replication: applying a primary's frames, and what a follower
bootstraps from (dbsvc/replica is the caller of both, through `Store`).

    future                    = apply_replicated_frames(store, frames)  # Store.apply_replicated_frames
    future                    = apply_replicated(store, frame)          # the same, of one frame
    epoch, base, chunks       = epoch_snapshot(store)                   # Store.epoch_snapshot

Rules:

1. A replicated frame is applied as the primary wrote it: its bytes go to this log
   unchanged, with the primary's offset and watermark, so a follower's log, offsets and
   `as_of` history are the primary's.
2. Every check of a frame runs before anything of it is applied: nothing of it is applied
   when it raises (`StreamError` for a frame that does not fit this store, `EpochChanged`
   when the primary started a new epoch), and nothing after it; the frames before it in
   the same call are committed. A frame whose payload is over this store's
   `max_payload` is a `StreamError` before it is even decoded: a follower never stores a
   frame its own open would refuse (events.py "Sizes").
3. `epoch_snapshot` hands out the snapshot file of the current epoch only: a file that
   already belongs to the next epoch (a compaction's switch in progress) is refused with
   `Unavailable`, never served under the wrong epoch.
4. A batch is applied as a unit (events.py "Batches"): a frame whose payload's `batch`
   mark says more rows follow is held (`held_frames`, with its decoded event), and the
   batch's rows are checked and applied in the call that brings its last row, with no
   await between them, so a read on the follower sees all of a batch or none, and its
   log gets the whole batch in one group (its own recovery cuts a torn one: logfile.py
   rule 5). A stream that starts again at the follower's head drops what was held (it is
   sent again). A held row that fails its check once the batch is complete is a
   `StreamError`, and the batch's rows applied before it are taken back: a primary whose
   stream breaks mid-batch is a diverged primary, the follower stops (replica/follower.py
   rule 4), and it keeps no part of the batch.
5. The frames of one call are a group, as a local batch's rows are (batchwrite.py): each
   payload decoded once, checked against the state the rows before it leave and applied
   to memory at its offset (the version stamp, the compaction's cut: as writes.py applies
   a local write), then all handed to the commit queue together (`submit_group`): one
   write call and one fsync for the group, one future, or all rolled back on an I/O
   error. A reader sees each row once it is applied, as it sees a local write. Inserts
   into one table in a row are a run: each checked against the table and the run's rows
   before it (ids, watermark), then put into the table together (tableruns.py `insert_run`,
   runs.py: each index takes the run's entries at once) before anything else touches
   the table (an update or a delete, another table's insert, the group's end, an undo).
   All of it happens in one turn of the loop: no reader sees a run half in. The group's
   payloads are scanned first, and its spans of plain inserts into one model, or plain
   updates of one model (no batch mark), are checked a run at a time (followrun.py): a
   run passes every check above or goes one frame at a time through `_take`, which finds
   the frame that fails. A group that is all plain inserts into one model, each payload
   the primary's own text, is one run read from its records alone (followrun.py rule 5,
   `_take_inserts`): a catch-up's common group (a frame alone goes as before: a run is
   two frames or more, as a span is).

6. Each row committed is noted in the store's `applied_rows` (its offset, model, the
   model's max id before it, its frame's position in the log; the last RECENT_ROWS):
   what a compaction at the primary's cut needs when rows after that cut were applied
   already (compactor.py invariant 4). A restart empties it, and so does a compaction's
   switch (the positions are the old log's).
7. What a record is checked for: the payload is compact JSON (the json module's C
   scanner: nothing around the object, no `NaN` or `Infinity`), its record has the
   model's fields in order and its own id, and it can be applied whole. The primary
   validated it before logging it (same schema fingerprint: follower.py rule 1) and the
   CRC carried it here, so a replica trusts its constraints as a primary's recovery
   trusts its own log; it checks what keeps a bad frame from failing half way in the
   indexes (followrun.py `check_fit`): each value's type, where a record of value types
   new to its model passes the model's replace validator once (those types are known
   good after it), and the index keys that can fail for a value of the right type (a
   datetime's key parses it, an int64 key column holds no larger int). docs/decisions.md
   says why.

Uses only the Store's public surface, named by the `Replicated` protocol below
(`check_writable`, `table`, `tables`, `epoch_state`, `held_frames`, `writes`: the write
path's fields a batch uses, batchwrite.py's `WriteHost`); store.py imports this module,
never the other way round.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate, repeat
from operator import attrgetter
from typing import Any, Protocol

from dbsvc.errors import EpochChanged, NotFound, StreamError, Unavailable
from dbsvc.storage import recovery
from dbsvc.storage.batchwrite import Undo, WriteHost
from dbsvc.storage.compact import SNAPSHOT_NAME
from dbsvc.storage.compactor import Applied
from dbsvc.storage.epoch import Epoch
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.followrun import (
    FRAME_SCAN,
    Run,
    check_fit,
    insert_group,
    insert_run,
    insert_texts,
    joined_parts,
    plain_spans,
    scan_group,
    update_run,
)
from dbsvc.storage.logfile import FRAME_HEADER_SIZE, frame_offset
from dbsvc.storage.snapshot import ModelImage, SnapshotImage, encode_snapshot
from dbsvc.storage.table import Table
from dbsvc.storage.tableruns import insert_run as insert_table_run

_ID, _OFFSET = attrgetter("id"), attrgetter("offset")
UPDATE, DELETE = 1, 2  # what `_Group.apply` does with a row (an insert goes by `add_insert`)
_KINDS = {kind.value: kind for kind in EventKind}
RECENT_ROWS = 1 << 16  # rows kept in `applied_rows` (rule 6): a primary's writes during its compaction


class AppliedRows:
    """Rule 6's notes, kept a group at a time: the group's undos (each row's table, the max
    id before it, its offset: `Undo`) and its frames' starts in the log, as the group left
    them, the rows made only when a cut reads them (`__iter__`: each `Applied`, oldest
    first). At least the last RECENT_ROWS rows are kept; a group goes once the groups after
    it hold as many."""

    def __init__(self) -> None:
        self._groups: deque[tuple[list[Undo], list[int]]] = deque()
        self._rows = 0

    def add(self, undos: list[Undo], starts: list[int]) -> None:
        """One group's rows: `undos[i]` and `starts[i]` are the i-th's (neither is changed after)."""
        groups = self._groups
        groups.append((undos, starts))
        self._rows += len(undos)
        while self._rows - len(groups[0][0]) >= RECENT_ROWS:
            self._rows -= len(groups.popleft()[0])

    def clear(self) -> None:
        self._groups.clear()
        self._rows = 0

    def __iter__(self) -> Iterator[Applied]:
        for undos, starts in self._groups:
            for (table, top, offset), start in zip(undos, starts):
                yield offset, table.name, top, start


class Replicated(Protocol):
    """What the follower side needs of a store (store.py's `Store` implements it)."""

    @property
    def directory(self) -> str: ...

    @property
    def tables(self) -> Mapping[str, Table]: ...

    @property
    def epoch_state(self) -> Epoch: ...

    @property
    def max_payload(self) -> int: ...

    @property
    def held_frames(self) -> list[tuple[bytes, ChangeEvent]]: ...

    @property
    def writes(self) -> WriteHost: ...

    @property
    def applied_rows(self) -> AppliedRows: ...

    def check_writable(self) -> None: ...

    def table(self, model: str) -> Table: ...


def apply_replicated(store: Replicated, frame: bytes) -> asyncio.Future[None]:
    """Apply one frame of a primary's `/replicate` stream: `apply_replicated_frames` of one."""
    return apply_replicated_frames(store, (frame,))


def apply_replicated_frames(store: Replicated, frames: Sequence[bytes]) -> asyncio.Future[None]:
    """Apply frames of a primary's `/replicate` stream (rule 1) as one group (rule 5): each
    decoded once, checked and applied to memory in order, then all committed with one
    write and one fsync; the future resolves when they are durable. A frame whose batch
    is unfinished is held (rule 4). The frames were checked by the stream reader (CRC,
    continuity); this checks that each fits this store: `StreamError` for a frame out of
    sequence, an unknown model, a record of other fields, or a row that contradicts the
    state (insert of a present id, update or delete of an absent one, a record whose
    values the model's validator refuses); `EpochChanged` when its watermark is not the
    next one (the primary compacted). When one raises, the frames before it are committed
    (rows of an unfinished batch excepted) and nothing of it or after it is applied."""
    store.check_writable()
    group = _Group(store.writes, store.applied_rows)
    if len(frames) > 1 and not store.held_frames and _take_inserts(store, group, frames):
        return group.submit()
    fields = scan_group(frames, store.max_payload, FRAME_SCAN)
    try:
        if fields is None:
            for frame in frames:
                _take(store, group, frame, None)
        else:
            for start, end, plain in plain_spans(fields):
                if plain is not None and not store.held_frames:
                    take = _take_run if plain == "insert" else _take_updates
                    if take(store, group, frames[start:end], fields[start:end]):
                        continue
                for at in range(start, end):
                    _take(store, group, frames[at], fields[at])
    except (StreamError, EpochChanged):
        if group.frames:
            group.submit()  # rule 2: the good frames before it still count
        raise
    return group.submit()


class _Group:
    """The frames of one `apply_replicated_frames` call, applied to memory, not yet committed."""

    def __init__(self, writes: WriteHost, recent: AppliedRows) -> None:
        self.writes = writes
        self.recent = recent
        self.commit = writes.writable()
        self.frames: list[bytes] = []
        self.events: list[ChangeEvent] = []
        self.undos: list[Undo] = []
        # A run of inserts into one table, checked and counted but not yet in the table
        # (rule 5): their values, and their ids (what the next rows' checks look up).
        self.run_table: Table | None = None
        self.run_values: list[Any] = []
        self.run_ids: set[Any] = set()
        self.run_top = 0  # the table's max_id once the run is in
        # The checked runs the run's rows came in (followrun.py `Run`: the index keys and
        # columns their checks computed); None once a row came without one (`add_insert`).
        self.run_parts: list[Run] | None = []

    def pending(self, table: Table) -> int:
        """The rows of `table` checked and not yet in it (the run's)."""
        return len(self.run_values) if table is self.run_table else 0

    def holds(self, table: Table, id_: Any) -> bool:
        """Whether the run inserts `id_` into `table`."""
        return table is self.run_table and id_ in self.run_ids

    def add_insert(self, table: Table, frame: bytes, event: ChangeEvent, values: Any) -> None:
        """A checked insert, kept in the run (flushed by `flush`): its offset is taken now,
        its undo counts the max id the rows before it leave."""
        if table is not self.run_table:
            self.flush()
            self.run_table, self.run_top = table, table.max_id
        writes = self.writes
        offset = event.offset
        self.undos.append((table, self.run_top, offset))
        id_ = event.id
        if type(id_) is int and id_ > self.run_top:
            self.run_top = id_
        self.run_values.append(values)
        self.run_parts = None
        self.run_ids.add(id_)
        writes.next_offset = offset + 1
        self.frames.append(frame)
        self.events.append(event)

    def add_run(self, table: Table, frames: Sequence[bytes], run: Run) -> None:
        """`add_insert` of each row of a checked run (followrun.py `insert_run`)."""
        if table is not self.run_table:
            self.flush()
            self.run_table, self.run_top = table, table.max_id
        self.undos.extend(zip(repeat(table), run.tops, run.offsets))
        self.run_top = max(self.run_top, max(run.ids))
        if self.run_parts is not None:
            self.run_parts.append(run)
        self.run_values.extend(run.values)
        self.run_ids.update(run.ids)
        self.writes.next_offset = run.offsets[-1] + 1
        self.frames.extend(frames)
        self.events.extend(run.events)

    def flush(self) -> None:
        """Put the run into its table: `insert` of each row in turn, the indexes updated
        together (tableruns.py `insert_run`), each row stamped with its offset. A
        compaction's cut needs no note of an insert (online.py `TableCut.note_write`): its
        image reads only the ids live at the cut, and an insert's id was not one of them,
        or a delete after the cut noted it first."""
        table, values = self.run_table, self.run_values
        if table is None:
            return
        parts = self.run_parts
        self.run_table, self.run_values, self.run_ids, self.run_parts = None, [], set(), []
        count = len(values)
        if count == 1:
            table.insert(values[0])
        else:
            insert_table_run(table, values, *joined_parts(parts))
        # Table.stamp_inserts, its versions set together (Versions.set_run): a run that came
        # as one checked run (a catch-up's group) has its ids and offsets as lists already.
        if parts is not None and len(parts) == 1:
            ids, offsets = parts[0].ids, parts[0].offsets
        else:
            events = self.events[len(self.events) - count :]
            ids, offsets = list(map(_ID, events)), list(map(_OFFSET, events))
        table.versions.set_run(ids, offsets)

    def apply(
        self, table: Table, frame: bytes, event: ChangeEvent, kind: int, current: bytes | None, values: Any
    ) -> None:
        """Apply one checked update or delete to memory at the next offset, as a local
        write's commit would (writes.py: the compaction's cut, the version stamp, the next
        offset)."""
        self.flush()
        writes = self.writes
        offset = event.offset
        max_id = table.max_id
        compactor = writes.compactor
        if compactor is not None and compactor.cut is not None:
            compactor.cut[table.name].note_write(event.id)
        assert current is not None
        if kind == UPDATE:
            table.replace(current, values)
        else:
            table.delete(event.id, current)
        table.stamp(offset)
        writes.next_offset = offset + 1
        self.frames.append(frame)
        self.events.append(event)
        self.undos.append((table, max_id, offset))

    def undo_from(self, count: int) -> None:
        """Take back the rows applied after the first `count` (an unfinished batch: rule 4)."""
        self.flush()
        while len(self.undos) > count:
            self.writes.rollback(self.undos.pop())
            self.frames.pop()
            self.events.pop()

    def submit(self) -> asyncio.Future[None]:
        """Hand the rows to the commit queue as one group: one write call, one fsync."""
        self.flush()
        writes, commit = self.writes, self.commit
        if not self.frames:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        # Where each frame starts in the log; the group's offsets follow one another.
        starts = list(accumulate(map(len, self.frames), initial=commit.writer.written))
        first, every = self.events[0].offset, recovery.CHECKPOINT_EVERY
        writes.epoch_of().checkpoints.extend(
            (first + at, starts[at]) for at in range(-first % every, len(self.frames), every)
        )
        self.recent.add(self.undos, starts)  # rule 6
        future = commit.submit_group(self.frames, self.events, self.undos)
        compactor = writes.compactor
        if compactor is not None and commit.writer.written > compactor.compact_bytes and compactor.task is None:
            compactor.after_write(commit)
        self.frames, self.events, self.undos = [], [], []
        return future


def _take_inserts(store: Replicated, group: _Group, frames: Sequence[bytes]) -> bool:
    """A whole group of plain inserts into one model, in the primary's own spelling, taken
    as one run from its records alone (followrun.py rule 5): True when it is in the group;
    False, with nothing changed, when `scan_group` and the spans must take it."""
    found = insert_texts(frames, store.max_payload)
    if found is None:
        return False
    name, texts = found
    try:
        table = store.table(name)
    except (NotFound, TypeError):
        return False
    run = insert_group(table, name, frames, texts, group.writes.next_offset, table.watermark, FRAME_SCAN)
    if run is None:
        return False
    group.add_run(table, frames, run)
    return True


def _take_run(store: Replicated, group: _Group, frames: Sequence[bytes], fields: list[dict]) -> bool:
    """Plain inserts into one model taken as a run (followrun.py): True when all of them
    passed every check and are in the group; False, with nothing changed, when the general
    path must take them one by one (it finds the first that fails, rule 2)."""
    try:
        table = store.table(fields[0]["model"])
    except (NotFound, TypeError):
        return False
    same = table is group.run_table
    run = insert_run(
        table,
        frames,
        fields,
        group.writes.next_offset,
        table.watermark + group.pending(table),
        group.run_top if same else table.max_id,
        group.run_ids if same else set(),
    )
    if run is None:
        return False
    group.add_run(table, frames, run)
    return True


def _take_updates(store: Replicated, group: _Group, frames: Sequence[bytes], fields: list[dict]) -> bool:
    """Plain updates of one model (followrun.py `update_run`): checked as a run, then each
    applied in turn; False, with nothing changed, when the general path must take them."""
    try:
        table = store.table(fields[0]["model"])
    except (NotFound, TypeError):
        return False
    group.flush()  # the rows they are checked against are in their tables
    rows = update_run(table, frames, fields, group.writes.next_offset, table.watermark)
    if rows is None:
        return False
    live = table.live
    for frame, (event, values) in zip(frames, rows):
        group.apply(table, frame, event, UPDATE, live.get(event.id), values)
    return True


def _take(store: Replicated, group: _Group, frame: bytes, fields: Any) -> None:
    """One frame of `apply_replicated_frames`: held while its batch is unfinished, else
    applied with the held rows before it (rule 4). `fields`: its payload scanned already
    (followrun.py `scan_group`), or None."""
    held = store.held_frames
    offset = frame_offset(frame)
    applied = group.writes.next_offset - 1
    if held and offset == applied + 1:
        held.clear()  # the stream started again at our head: its batch comes again whole
    expected = applied + 1 + len(held)
    if offset != expected:
        raise StreamError(offset, f"expected offset {expected}")
    event = _decode(store, frame, offset, fields)
    if event.batch is not None and offset < event.batch[1]:
        held.append((frame, event))  # rule 4: applied with the batch's last row
        return
    if not held:
        _apply_one(store, group, frame, event)
        return
    rows = [*held, (frame, event)]
    held.clear()
    count = len(group.frames)
    try:
        for one, its in rows:
            _apply_one(store, group, one, its)
    except (StreamError, EpochChanged):
        group.undo_from(count)  # never a part of a batch: all of it or none (rule 4)
        raise


def _decode(store: Replicated, frame: bytes, offset: int, fields: Any) -> ChangeEvent:
    """The frame's event, decoded once (rule 5), after its size is checked (rule 2). The
    payload is read by the json module's C scanner itself, as rows.py reads a stored
    record: a primary writes compact JSON, so no whitespace is skipped around it, and
    `NaN`, `Infinity` or a number past the doubles (which json.loads takes, and no
    primary writes) is refused.
    `fields`: the payload scanned so already (`scan_group`, which checked its size), or None."""
    if fields is None:
        size = len(frame) - FRAME_HEADER_SIZE
        if size > store.max_payload:
            raise StreamError(
                offset,
                f"record too large: a frame payload of {size} bytes, over this store's limit of {store.max_payload}",
            )
        try:
            text = frame[FRAME_HEADER_SIZE:].decode("utf-8")
            fields, end = FRAME_SCAN(text, 0)
        except StopIteration as stop:
            raise StreamError(offset, f"payload is not JSON: expecting a value at character {stop.value}") from None
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError included
            raise StreamError(offset, f"payload is not JSON: {exc}") from None
        if end != len(text):
            raise StreamError(offset, f"payload is not JSON: extra data at character {end}")
    if type(fields) is not dict:
        raise StreamError(offset, f"payload is a JSON {type(fields).__name__}, expected a change event")
    try:
        kind = _KINDS[fields["kind"]]
        batch = fields.get("batch")
        event = ChangeEvent(
            kind,
            fields["model"],
            fields["offset"],
            fields["watermark"],
            fields["id"],
            fields["record"],
            fields.get("previous"),
            None if batch is None else (batch["first"], batch["last"]),
        )
    except KeyError as exc:  # a field missing, or a kind that is no kind name
        if "kind" in fields and exc.args == (fields["kind"],):
            raise StreamError(
                offset, f"payload is not an insert, update or delete event (kind {fields['kind']!r})"
            ) from None
        raise StreamError(offset, f"payload is not a change event: {exc!r}") from None
    except TypeError as exc:  # an unhashable kind, a batch of another shape
        if "kind" in fields and not isinstance(fields["kind"], str):
            raise StreamError(
                offset, f"payload is not an insert, update or delete event (kind {fields['kind']!r})"
            ) from None
        raise StreamError(offset, f"payload is not a change event: {exc!r}") from None
    if event.offset != offset or type(event.offset) is not int:
        raise StreamError(offset, f"payload says offset {event.offset!r}")
    if type(event.record) is not dict or not (event.previous is None or type(event.previous) is dict):
        raise StreamError(offset, "payload's record is not a JSON object")
    return event


def _apply_one(store: Replicated, group: _Group, frame: bytes, event: ChangeEvent) -> None:
    """The checks of one decoded frame against the state, then its apply (`group.apply`)."""
    offset = event.offset
    expected = group.writes.next_offset
    if offset != expected:
        raise StreamError(offset, f"expected offset {expected}")
    try:
        table = store.table(event.model)
    except NotFound:
        raise StreamError(offset, f"unknown model {event.model!r}") from None
    except TypeError:  # an unhashable model name
        raise StreamError(offset, f"model {event.model!r} is not a model name") from None
    record, kind = event.record, event.kind
    model = table.model
    if tuple(record) != model.fields:
        raise StreamError(offset, f"{event.model} record has fields {list(record)}, expected {list(model.fields)}")
    watermark = table.watermark + group.pending(table)
    if event.watermark != watermark + 1:
        raise EpochChanged(
            offset,
            f"{event.model} watermark {event.watermark} follows {watermark} here: the primary started a new epoch",
        )
    if kind is not EventKind.INSERT:
        group.flush()  # the rows it is checked against are in their tables
    try:
        current = table.live.get(event.id)
    except TypeError:  # an unhashable id
        raise StreamError(offset, f"{event.model} id {event.id!r} is not an id value") from None
    if kind is EventKind.DELETE:
        if current is None:
            raise StreamError(offset, f"delete of {event.model} {event.id!r}, which does not exist here")
        group.apply(table, frame, event, DELETE, current, None)
        return
    values = model.row(record)
    check_fit(table, offset, event, values)
    if kind is EventKind.INSERT:
        if current is not None or group.holds(table, event.id):
            raise StreamError(offset, f"insert of {event.model} {event.id!r}, which exists here")
        group.add_insert(table, frame, event, values)
        return
    if current is None:
        raise StreamError(offset, f"update of {event.model} {event.id!r}, which does not exist here")
    group.apply(table, frame, event, UPDATE, current, values)


def epoch_snapshot(store: Replicated) -> tuple[str, int, Iterator[bytes]]:
    """What a follower bootstraps from: the current epoch's id, its base offset (the
    offset its snapshot stands at), and the snapshot file's bytes in chunks, read
    lazily from a file descriptor opened now (a later compaction renames a new file
    over it without disturbing this one). An epoch that began without a snapshot
    (base 0) is an empty image. Raises `Unavailable` in the instant of an online
    compaction's switch, when the file already belongs to the next epoch (rule 3)."""
    epoch = store.epoch_state
    path = os.path.join(store.directory, SNAPSHOT_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        if epoch.log_base != 0:
            raise Unavailable("the epoch's snapshot file is missing; try again") from None
        image = SnapshotImage(
            epoch.id, 0, [ModelImage(t.name, list(t.model.fields), [], 0, t.key_fields) for t in store.tables.values()]
        )
        return epoch.id, 0, encode_snapshot(image)
    try:
        first = os.pread(fd, 1 << 16, 0).split(b"\n", 1)[0]
        header = json.loads(first[9:])
    except (OSError, ValueError) as exc:
        os.close(fd)
        raise Unavailable(f"the snapshot could not be read: {exc}") from None
    if header.get("epoch") != epoch.id or header.get("head_offset") != epoch.log_base:
        os.close(fd)
        raise Unavailable("a compaction is switching epochs; try again in a moment")
    return epoch.id, epoch.log_base, _read_chunks(fd)


def _read_chunks(fd: int, size: int = 256 * 1024) -> Iterator[bytes]:
    """The whole file behind `fd` in chunks; closes it at the end (or when abandoned)."""
    try:
        position = 0
        while True:
            chunk = os.pread(fd, size, position)
            if not chunk:
                return
            position += len(chunk)
            yield chunk
    finally:
        os.close(fd)
