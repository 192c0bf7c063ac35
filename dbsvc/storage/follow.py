"""The follower side of replication: applying a primary's frames, and what a follower
bootstraps from (dbsvc/replica is the caller of both, through `Store`).

    future                    = apply_replicated(store, frame)   # Store.apply_replicated
    epoch, base, chunks       = epoch_snapshot(store)            # Store.epoch_snapshot

Rules:

1. A replicated frame is applied as the primary wrote it: its bytes go to this log
   unchanged, with the primary's offset and watermark, so a follower's log, offsets and
   `as_of` history are the primary's.
2. Every check runs before anything is applied: nothing is applied when it raises
   (`StreamError` for a frame that does not fit this store, `EpochChanged` when the
   primary started a new epoch). The write itself goes through the store's public
   `submit_frame`, the same commit path as a local write. A frame whose payload is over
   this store's `max_payload` is a `StreamError` before it is even decoded: a follower
   never stores a frame its own open would refuse (events.py "Sizes").
3. `epoch_snapshot` hands out the snapshot file of the current epoch only: a file that
   already belongs to the next epoch (a compaction's switch in progress) is refused with
   `Unavailable`, never served under the wrong epoch.
4. A batch is applied as a unit (events.py "Batches"): a frame whose payload's `batch`
   mark says more rows follow is held (`held_frames`), and the batch's frames are checked
   and committed in the one call that brings its last row, with no await between them,
   so a read on the follower sees all of a batch or none, and its log gets the whole
   batch in one group (its own recovery cuts a torn one: logfile.py rule 5). A stream
   that starts again at the follower's head drops what was held (it is sent again). Every
   row of a complete batch is checked against the state the rows before it leave before
   any is submitted, so a row that does not fit (a bad or diverged primary) is a
   `StreamError` with nothing of its batch applied, and the follower stops
   (replica/follower.py rule 4) showing none of it.

Uses only the Store's public surface, named by the `Replicated` protocol below
(`check_writable`, `table`, `tables`, `applied_offset`, `epoch_state`, `held_frames`, `submit_frame`);
store.py imports this module, never the other way round.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from dbsvc.errors import EpochChanged, NotFound, RequestError, StreamError, Unavailable
from dbsvc.storage.compact import SNAPSHOT_NAME
from dbsvc.storage.epoch import Epoch
from dbsvc.storage.events import ChangeEvent, EventKind, decode_event
from dbsvc.storage.logfile import FRAME_HEADER_SIZE, frame_offset, frame_payload
from dbsvc.storage.snapshot import ModelImage, SnapshotImage, encode_snapshot
from dbsvc.storage.table import Table


class Replicated(Protocol):
    """What the follower side needs of a store (store.py's `Store` implements it)."""

    @property
    def directory(self) -> str: ...

    @property
    def tables(self) -> Mapping[str, Table]: ...

    @property
    def applied_offset(self) -> int: ...

    @property
    def epoch_state(self) -> Epoch: ...

    @property
    def max_payload(self) -> int: ...

    @property
    def held_frames(self) -> list[bytes]: ...

    def check_writable(self) -> None: ...

    def table(self, model: str) -> Table: ...

    def submit_frame(
        self, table: Table, frame: bytes, event: ChangeEvent, apply: Callable[[], object]
    ) -> asyncio.Future[None]: ...


def apply_replicated(store: Replicated, frame: bytes) -> asyncio.Future[None]:
    """Apply one frame of a primary's `/replicate` stream (rule 1), or hold it while its
    batch is unfinished (rule 4). The frame was checked by the stream reader (CRC,
    continuity); this checks that it fits this store: `StreamError` for a frame out of
    sequence, an unknown model, a record of other fields, or a row that contradicts the
    state (insert of a present id, update or delete of an absent one, a record whose
    values the model's validator refuses); `EpochChanged` when its watermark is not the
    next one (the primary compacted)."""
    store.check_writable()
    held = store.held_frames
    offset = frame_offset(frame)
    if held and offset == store.applied_offset + 1:
        held.clear()  # the stream started again at our head: its batch comes again whole
    expected = store.applied_offset + 1 + len(held)
    if offset != expected:
        raise StreamError(offset, f"expected offset {expected}")
    mark = _batch_mark(frame)
    if mark is not None and offset < mark[1]:
        held.append(frame)  # rule 4: applied with the batch's last row
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done
    if held:
        frames = [*held, frame]
        held.clear()
        seen = _Batch()
        checked = [_check(store, one, seen) for one in frames]  # rule 4: all, before any applies
        durable = None
        for one, (table, event) in zip(frames, checked):
            durable = _submit(store, table, one, event)
        assert durable is not None
        return durable
    table, event = _check(store, frame, None)
    return _submit(store, table, frame, event)


def _batch_mark(frame: bytes) -> tuple[int, int] | None:
    """The (first, last) offsets of the batch the frame's row belongs to, or None; a
    payload that does not decode is left to `_check` to refuse."""
    if b'"batch":' not in frame:
        return None
    try:
        return decode_event(frame_payload(frame)).batch
    except (ValueError, KeyError, TypeError):
        return None


class _Batch:
    """What the checked rows of a batch will have changed once applied (rule 4): rows per
    model, and the ids they insert (True) or delete (False)."""

    __slots__ = ("rows", "present")

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.present: dict[tuple[str, Any], bool] = {}


def _check(store: Replicated, frame: bytes, batch: _Batch | None) -> tuple[Table, ChangeEvent]:
    """The checks of one frame (`apply_replicated`), against the store as the rows of
    `batch` checked before it will leave it (None: a frame applied on its own)."""
    offset = frame_offset(frame)
    expected = store.applied_offset + 1 + (0 if batch is None else sum(batch.rows.values()))
    if offset != expected:
        raise StreamError(offset, f"expected offset {expected}")
    size = len(frame) - FRAME_HEADER_SIZE
    if size > store.max_payload:
        raise StreamError(
            offset, f"record too large: a frame payload of {size} bytes, over this store's limit of {store.max_payload}"
        )
    try:
        event = decode_event(frame_payload(frame))
    except (ValueError, KeyError, TypeError) as exc:
        raise StreamError(offset, f"payload is not a change event: {exc}") from None
    try:
        table = store.table(event.model)
    except NotFound:
        raise StreamError(offset, f"unknown model {event.model!r}") from None
    if event.offset != offset:
        raise StreamError(offset, f"payload says offset {event.offset}")
    if list(event.record) != list(table.model.fields):
        raise StreamError(
            offset, f"{event.model} record has fields {list(event.record)}, expected {list(table.model.fields)}"
        )
    earlier = 0 if batch is None else batch.rows.get(event.model, 0)
    if event.watermark != table.watermark + earlier + 1:
        raise EpochChanged(
            offset,
            f"{event.model} watermark {event.watermark} follows "
            f"{table.watermark + earlier} here: the primary started a new epoch",
        )
    kind = event.kind
    if kind is not EventKind.DELETE:
        _check_replicated_record(table, offset, event)
    try:
        exists = table.live.get(event.id) is not None
    except TypeError:  # an unhashable id
        raise StreamError(offset, f"{event.model} id {event.id!r} is not an id value") from None
    if batch is not None:
        exists = batch.present.get((event.model, event.id), exists)
    if kind is EventKind.INSERT:
        if exists:
            raise StreamError(offset, f"insert of {event.model} {event.id!r}, which exists here")
    elif not exists:
        raise StreamError(offset, f"{kind.value} of {event.model} {event.id!r}, which does not exist here")
    if batch is not None:
        batch.rows[event.model] = earlier + 1
        batch.present[(event.model, event.id)] = kind is not EventKind.DELETE
    return table, event


def _submit(store: Replicated, table: Table, frame: bytes, event: ChangeEvent) -> asyncio.Future[None]:
    """The commit of one frame `_check` passed, against the store as it is now."""
    record, kind = event.record, event.kind
    current = table.live.get(event.id)
    if kind is EventKind.INSERT:
        values = table.model.row(record)
        return store.submit_frame(table, frame, event, lambda: table.insert(values))
    assert current is not None, "checked: the record exists"
    if kind is EventKind.UPDATE:
        values = table.model.row(record)
        return store.submit_frame(table, frame, event, lambda: table.replace(current, values))
    return store.submit_frame(table, frame, event, lambda: table.delete(event.id, current))


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
