"""Change events: one per committed row, in the layout of docs/guide/realtime.md (docs/realtime.md).

An event's JSON (its log payload, byte for byte)::

    {"kind":"insert","model":"User","offset":41,"watermark":12,"id":7,"record":{...}}
    {"kind":"update","model":"User","offset":42,"watermark":13,"id":7,"record":{...},"previous":{...}}
    {"kind":"delete","model":"User","offset":43,"watermark":14,"id":7,"record":{...}}

`offset` is the global row offset (1, 2, ...; gap-free, never reused), `watermark` the
model's row count in the current epoch after this row, `record` the stored record (for a
delete, the last one). `link` events are derived by the realtime layer, never stored.

Batches (`POST /batch`, batchwrite.py): every row of a batch of two or more rows ends with
`"batch":{"first":F,"last":L}`, the offsets of the batch's first and last rows (its rows
take every offset from F to L). The key comes after the records, so every reader that
looks only at the head (logfile.py `renumber_frames`) is unchanged, and an older log, which has none, reads
as rows of one. Recovery cuts a batch whose row L is missing (recovery.py), a follower
applies a batch only once it holds row L (follow.py).

Delivery (store.py): `Store.subscribe(callback)` calls `callback(event, frame)` on the event loop
after the event's commit (its fsync, under `sync="full"`), in offset order, exactly once per
subscriber. A callback must not block and must not raise; an exception is logged and the
callback stays subscribed. Events are immutable; the record dicts inside them are shared
with the store and must not be mutated.

Sizes (issue 30: the writer never acknowledges what the reader refuses). A log frame's
payload is at most `max_payload` bytes (logfile.MAX_PAYLOAD, 64 MiB, unless a store was
opened with less), and every writer checks the payload it built before anything changes:
`size_refusal` gives the `PayloadTooLarge` (413) to raise, or None. A record itself is at
most `record_limit(max_payload)` bytes of compact JSON, `(max_payload - HEAD_RESERVE) // 2`
(33,553,920 bytes for 64 MiB), so that any later frame that carries it fits: an update holds
the record and the one it replaces, a delete the last record, both at any offset and
watermark (the head is reckoned at LARGEST_COUNTER; an id so long that the head is over
HEAD_RESERVE lowers that record's limit by as much). A frame of a record stored before this
rule (a larger one) is still checked whole, so an update or delete it cannot fit is refused
too, never acknowledged.
"""

from __future__ import annotations

import enum
import json
from typing import Any, NamedTuple

from dbsvc.errors import PayloadTooLarge
from dbsvc.runtime import compact_json
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.rows import layout

HEAD_RESERVE = 1024  # bytes of an update's payload besides its two records (docstring)
LARGEST_COUNTER = 2**64 - 1  # the widest offset and watermark a head can show (u64)


class EventKind(enum.Enum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"

    # A member is its only instance and equal only to itself, so its identity is its hash:
    # hashed in C, where `Enum.__hash__` is a Python call each time a write's event looks up
    # its head (`_head`) or a feed keys on its kind.
    __hash__ = object.__hash__


class ChangeEvent(NamedTuple):
    """One committed row. Immutable, and a named tuple rather than a frozen dataclass
    because every write builds one, and a frozen dataclass costs several times more to build
    (it sets each field through `object.__setattr__`; bench/README.md has the figures)."""

    kind: EventKind
    model: str
    offset: int
    watermark: int
    id: Any
    record: dict
    previous: dict | None = None
    batch: tuple[int, int] | None = None  # (first, last) offsets of its batch (docstring)

    def to_dict(self) -> dict[str, Any]:
        """The event as docs/realtime.md shows it (key order included)."""
        return _layout(
            self.kind, self.model, self.offset, self.watermark, self.id, self.record, self.previous, self.batch
        )

    def payload(self) -> bytes:
        """Compact JSON: the log payload and the text of a `/subscribe` frame."""
        return event_payload(*self)

    def frame(self) -> bytes:
        """The `PersistedEvent` of `/replicate`: offset, crc32, length, payload."""
        return encode_frame(self.offset, self.payload())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChangeEvent:
        batch = d.get("batch")
        return cls(
            EventKind(d["kind"]),
            d["model"],
            d["offset"],
            d["watermark"],
            d["id"],
            d["record"],
            d.get("previous"),
            None if batch is None else (batch["first"], batch["last"]),
        )


def event_payload(
    kind: EventKind,
    model: str,
    offset: int,
    watermark: int,
    id_: Any,
    record: dict,
    previous: dict | None = None,
    batch: tuple[int, int] | None = None,
    *,
    record_text: str | None = None,
    previous_text: str | None = None,
) -> bytes:
    """The payload of the event these fields make (`ChangeEvent.payload`; batch.py builds an
    import's frames with it, no event made). The bytes of `compact_json(_layout(...))`, made
    without that dict: the fixed head of each kind and model is made once (`_head`), the
    record (and an update's previous one) are the only objects encoded, and the text is
    encoded to UTF-8 once. `record_text`, `previous_text`: `compact_json(record)` and
    `compact_json(previous)` when the writer has them already (writes.py makes them with
    the stored form, storage/rows.py `pack_parts`, `record_text`, `previous_parts`)."""
    if record_text is None:
        record_text = compact_json(record)
    shown = id_text(id_)
    if kind is EventKind.UPDATE:
        tail = f',"previous":{compact_json(previous) if previous_text is None else previous_text}}}'
    else:
        tail = "}"
    if batch is not None:
        tail = tail[:-1] + batch_mark(*batch) + "}"
    return (f'{_head(kind, model)}{offset},"watermark":{watermark},"id":{shown},"record":{record_text}{tail}').encode(
        "utf-8"
    )


def payload_templates(model: str, fields: tuple[str, ...]) -> tuple[str, str]:
    """The payloads of an insert and of an update of `model` as %-templates: the offset, the
    watermark, the id's text, then the text of each of `fields`' values (rows.py
    `pack_parts`), and for an update those of the record it replaces. One `%` fills a
    write's payload from the texts its record's one encoding made, the bytes of
    `event_payload`'s: a writer makes them once per model (writes.py)."""
    record = layout(fields)
    insert = _head(EventKind.INSERT, model).replace("%", "%%") + '%s,"watermark":%s,"id":%s,"record":' + record
    update = _head(EventKind.UPDATE, model).replace("%", "%%") + '%s,"watermark":%s,"id":%s,"record":' + record
    return insert + "}", update + ',"previous":' + record + "}"


def id_text(id_: Any) -> Any:
    """What a payload shows of a record id: an int as it is (its text), anything else as JSON."""
    return id_ if type(id_) is int else compact_json(id_)


def batch_mark(first: int, last: int) -> str:
    """The `,"batch":{...}` a payload of a batch's row ends with (module docstring)."""
    return f',"batch":{{"first":{first},"last":{last}}}'


BATCH_MARK_MAX = len(batch_mark(LARGEST_COUNTER, LARGEST_COUNTER))  # the widest mark, in bytes


_HEADS: dict[tuple[EventKind, str], str] = {}
_HEADS_MAX = 1024  # kinds times models; past that (never in one schema) not kept


def _head(kind: EventKind, model: str) -> str:
    """`{"kind":...,"model":...,"offset":` of an event of `kind` on `model`."""
    head = _HEADS.get((kind, model))
    if head is None:
        head = '{"kind":%s,"model":%s,"offset":' % (compact_json(kind.value), compact_json(model))
        if len(_HEADS) < _HEADS_MAX:
            _HEADS[(kind, model)] = head
    return head


def _layout(
    kind: EventKind,
    model: str,
    offset: int,
    watermark: int,
    id: Any,
    record: dict,
    previous: dict | None,
    batch: tuple[int, int] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": kind.value,
        "model": model,
        "offset": offset,
        "watermark": watermark,
        "id": id,
        "record": record,
    }
    if kind is EventKind.UPDATE:
        out["previous"] = previous
    if batch is not None:
        out["batch"] = {"first": batch[0], "last": batch[1]}
    return out


def fitted_delete_payload(event: ChangeEvent, id_field: str, max_payload: int) -> bytes:
    """The payload of the delete `event` within `max_payload` bytes where it can be (module
    docstring, "Sizes": the largest values of its record, never `id_field`, null and named in
    `omitted`); as `event.payload()` when that fits, or as small as it gets when nothing does
    (the caller's `size_refusal` then refuses it)."""
    assert event.kind is EventKind.DELETE
    payload = event.payload()
    if len(payload) <= max_payload:
        return payload
    sizes = sorted(
        ((len(compact_json(v).encode("utf-8")), k) for k, v in event.record.items() if k != id_field and v is not None),
        reverse=True,
    )
    record = dict(event.record)
    omitted: list[str] = []
    excess = len(payload) - max_payload + len(',"omitted":[]')
    for size, key in sizes:
        record[key] = None
        omitted.append(key)
        # the value out, its name in `omitted` (after a comma, but for the first name)
        excess -= size - len("null") - len(compact_json(key)) - (1 if len(omitted) > 1 else 0)
        if excess <= 0:
            break
    head = event_payload(EventKind.DELETE, event.model, event.offset, event.watermark, event.id, record)
    tail = f',"omitted":{compact_json(omitted)}'
    if event.batch is not None:  # the mark ends a batch's payload ("Batches")
        tail += batch_mark(*event.batch)
    return head[:-1] + tail.encode("utf-8") + b"}"


def write_event(
    kind: EventKind,
    model: str,
    offset: int,
    watermark: int,
    id_: Any,
    record: dict | None,
    previous: dict | None,
    batch: tuple[int, int] | None = None,
) -> ChangeEvent:
    """The event of a write: `record` the new record (None for a delete, which shows the
    last one, `previous`), `previous` kept for an update only; `batch` its batch's bounds."""
    shown = record if record is not None else previous
    assert shown is not None
    return ChangeEvent(
        kind, model, offset, watermark, id_, shown, previous if kind is EventKind.UPDATE else None, batch
    )


def write_payload(
    event: ChangeEvent, id_field: str, room: int, record_text: str | None = None, previous_text: str | None = None
) -> bytes:
    """The payload a write of `event` puts in the log, within `room` bytes: a delete's fitted
    where it is over (a delete is always possible), an insert's or update's refused with
    `size_refusal` when its record may not be stored. Only a large payload is measured.
    `record_text`, `previous_text`: as `event_payload` takes them."""
    payload = event_payload(*event, record_text=record_text, previous_text=previous_text)
    if event.kind is EventKind.DELETE and len(payload) > room:
        payload = fitted_delete_payload(event, id_field, room)
    return check_payload(event, payload, room, record_text)


def check_payload(event: ChangeEvent, payload: bytes, room: int, record_text: str | None = None) -> bytes:
    """`payload`, the payload of `event`, unless `size_refusal` refuses it within `room`
    bytes (raised). Only a large payload is measured."""
    if 2 * len(payload) + HEAD_RESERVE > room:
        refusal = size_refusal(event.kind, event.model, event.id, event.record, len(payload), room, record_text)
        if refusal is not None:
            raise refusal
    return payload


def decode_event(payload: bytes | memoryview) -> ChangeEvent:
    return ChangeEvent.from_dict(json.loads(bytes(payload)))


def record_limit(max_payload: int) -> int:
    """The largest record, in bytes of compact JSON, a store whose frames hold at most
    `max_payload` bytes takes (module docstring, "Sizes")."""
    return (max_payload - HEAD_RESERVE) // 2


def _worst_head(model: str, id_: Any) -> int:
    """Bytes of an update's payload of `model` `id_` besides its two records, at the widest
    offset and watermark."""
    return len(event_payload(EventKind.UPDATE, model, LARGEST_COUNTER, LARGEST_COUNTER, id_, {}, {})) - 4


def size_refusal(
    kind: EventKind, model: str, id_: Any, record: dict, payload_size: int, max_payload: int, text: str | None = None
) -> PayloadTooLarge | None:
    """The refusal of a write whose payload is `payload_size` bytes (`record` the record it
    stores: the new one of an insert or update; a delete stores none), or None when it fits
    and, for an insert or update, its record may be stored (module docstring). `text`: the
    record's compact JSON when the caller has it. Cheap unless the payload is near half the
    limit: only then is the record measured on its own."""
    if kind is not EventKind.DELETE and 2 * payload_size + HEAD_RESERVE > max_payload:
        if text is None:
            text = compact_json(record)
        size = len(text.encode("utf-8"))
        limit = (max_payload - max(HEAD_RESERVE, _worst_head(model, id_))) // 2
        if size > limit:
            return PayloadTooLarge(
                f"record too large: the {model} record is {size} bytes of JSON, the limit is {limit} "
                f"(an update's log frame holds a record and the one it replaces, and a frame holds at most "
                f"{max_payload} bytes)",
                model=model,
                size=size,
                limit=limit,
            )
    if payload_size > max_payload:
        return PayloadTooLarge(
            f"record too large: the {kind.value} of {model} {id_!r} makes a log frame of {payload_size} bytes, "
            f"over the limit of {max_payload} (the record was stored before the record size limit; "
            "it can still be read)",
            model=model,
            size=payload_size,
            limit=max_payload,
        )
    return None
