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
   error. A reader sees each row once it is applied, as it sees a local write.

6. Each row committed is noted in the store's `applied_rows` (its offset, model, the
   model's max id before it, its frame's position in the log; the last RECENT_ROWS):
   what a compaction at the primary's cut needs when rows after that cut were applied
   already (compactor.py invariant 4). A restart empties it, and so does a compaction's
   switch (the positions are the old log's).

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from dbsvc.errors import EpochChanged, NotFound, RequestError, StreamError, Unavailable
from dbsvc.storage import recovery
from dbsvc.storage.batchwrite import Undo, WriteHost
from dbsvc.storage.compact import SNAPSHOT_NAME
from dbsvc.storage.compactor import Applied
from dbsvc.storage.epoch import Epoch
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.logfile import FRAME_HEADER_SIZE, frame_offset
from dbsvc.storage.snapshot import ModelImage, SnapshotImage, encode_snapshot
from dbsvc.storage.table import Table

_DECODE = json.JSONDecoder().decode  # json.loads without its per-call type and encoding sniffing
_KINDS = {kind.value: kind for kind in EventKind}
RECENT_ROWS = 1 << 16  # rows kept in `applied_rows` (rule 6): a primary's writes during its compaction


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
    def applied_rows(self) -> deque[Applied]: ...

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
    try:
        for frame in frames:
            _take(store, group, frame)
    except (StreamError, EpochChanged):
        if group.frames:
            group.submit()  # rule 2: the good frames before it still count
        raise
    return group.submit()


class _Group:
    """The frames of one `apply_replicated_frames` call, applied to memory, not yet committed."""

    def __init__(self, writes: WriteHost, recent: deque[Applied]) -> None:
        self.writes = writes
        self.recent = recent
        self.commit = writes.writable()
        self.frames: list[bytes] = []
        self.events: list[ChangeEvent] = []
        self.undos: list[Undo] = []

    def apply(self, table: Table, frame: bytes, event: ChangeEvent, apply: Callable[[], object]) -> None:
        """Apply one checked row to memory at the next offset, as a local write's commit
        would (writes.py: the compaction's cut, the version stamp, the next offset)."""
        writes = self.writes
        offset = event.offset
        max_id = table.max_id
        compactor = writes.compactor
        if compactor is not None and compactor.cut is not None:
            compactor.cut[table.name].note_write(event.id)
        apply()
        table.stamp(offset)
        writes.next_offset = offset + 1
        self.frames.append(frame)
        self.events.append(event)
        self.undos.append((table, max_id, offset))

    def undo_from(self, count: int) -> None:
        """Take back the rows applied after the first `count` (an unfinished batch: rule 4)."""
        while len(self.undos) > count:
            self.writes.rollback(self.undos.pop())
            self.frames.pop()
            self.events.pop()

    def submit(self) -> asyncio.Future[None]:
        """Hand the rows to the commit queue as one group: one write call, one fsync."""
        writes, commit = self.writes, self.commit
        if not self.frames:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        checkpoints = writes.epoch_of().checkpoints
        position = commit.writer.written
        for event, frame in zip(self.events, self.frames):
            if event.offset % recovery.CHECKPOINT_EVERY == 0:
                checkpoints.append((event.offset, position))
            position += len(frame)
        recent = self.recent
        position = commit.writer.written
        for frame, (table, max_id, offset) in zip(self.frames, self.undos):
            recent.append((offset, table.name, max_id, position))  # rule 6
            position += len(frame)
        future = commit.submit_group(self.frames, self.events, self.undos)
        compactor = writes.compactor
        if compactor is not None and commit.writer.written > compactor.compact_bytes and compactor.task is None:
            compactor.after_write(commit)
        self.frames, self.events, self.undos = [], [], []
        return future


def _take(store: Replicated, group: _Group, frame: bytes) -> None:
    """One frame of `apply_replicated_frames`: held while its batch is unfinished, else
    applied with the held rows before it (rule 4)."""
    held = store.held_frames
    offset = frame_offset(frame)
    applied = group.writes.next_offset - 1
    if held and offset == applied + 1:
        held.clear()  # the stream started again at our head: its batch comes again whole
    expected = applied + 1 + len(held)
    if offset != expected:
        raise StreamError(offset, f"expected offset {expected}")
    event = _decode(store, frame, offset)
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


def _decode(store: Replicated, frame: bytes, offset: int) -> ChangeEvent:
    """The frame's event, decoded once (rule 5), after its size is checked (rule 2)."""
    size = len(frame) - FRAME_HEADER_SIZE
    if size > store.max_payload:
        raise StreamError(
            offset, f"record too large: a frame payload of {size} bytes, over this store's limit of {store.max_payload}"
        )
    try:
        fields = _DECODE(frame[FRAME_HEADER_SIZE:].decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError included
        raise StreamError(offset, f"payload is not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise StreamError(offset, f"payload is a JSON {type(fields).__name__}, expected a change event")
    try:
        kind = fields["kind"]
        if kind not in _KINDS:
            raise StreamError(offset, f"payload is not an insert, update or delete event (kind {kind!r})")
        batch = fields.get("batch")
        event = ChangeEvent(
            _KINDS[kind],
            fields["model"],
            fields["offset"],
            fields["watermark"],
            fields["id"],
            fields["record"],
            fields.get("previous"),
            None if batch is None else (batch["first"], batch["last"]),
        )
    except (KeyError, TypeError) as exc:  # a field missing, a kind or a batch of another shape
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
    if list(event.record) != list(table.model.fields):
        raise StreamError(
            offset, f"{event.model} record has fields {list(event.record)}, expected {list(table.model.fields)}"
        )
    if event.watermark != table.watermark + 1:
        raise EpochChanged(
            offset,
            f"{event.model} watermark {event.watermark} follows "
            f"{table.watermark} here: the primary started a new epoch",
        )
    record, kind = event.record, event.kind
    if kind is not EventKind.DELETE:
        _check_replicated_record(table, offset, event)
    try:
        current = table.live.get(event.id)
    except TypeError:  # an unhashable id
        raise StreamError(offset, f"{event.model} id {event.id!r} is not an id value") from None
    if kind is EventKind.INSERT:
        if current is not None:
            raise StreamError(offset, f"insert of {event.model} {event.id!r}, which exists here")
        values = table.model.row(record)
        group.apply(table, frame, event, lambda: table.insert(values))
        return
    if current is None:
        raise StreamError(offset, f"{kind.value} of {event.model} {event.id!r}, which does not exist here")
    if kind is EventKind.UPDATE:
        values = table.model.row(record)
        group.apply(table, frame, event, lambda: table.replace(current, values))
        return
    group.apply(table, frame, event, lambda: table.delete(event.id, current))


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


def _check_replicated_record(table: Table, offset: int, event: ChangeEvent) -> None:
    """A replicated record must be one this schema could have stored: the model's generated
    replace validator accepts it under its own id. A frame can pass its CRC and still hold
    values of other types (a bad primary, a proxy rewriting payloads), and such a value
    would fail inside the indexes, half applied."""
    model = table.model
    record = event.record
    if record.get(model.id_field) != event.id:
        raise StreamError(
            offset,
            f"{event.model} event id {event.id!r} differs from the record's "
            f"{model.id_field} {record.get(model.id_field)!r}",
        )
    try:
        model.validate_replace(record, event.id)
    except RequestError as exc:
        raise StreamError(offset, f"{event.model} {event.id!r} does not fit the schema: {exc}") from None
