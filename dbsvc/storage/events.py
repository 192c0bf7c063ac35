"""Change events: one per committed row, in the layout of docs/guide/realtime.md (docs/realtime.md).

An event's JSON (its log payload, byte for byte)::

    {"kind":"insert","model":"User","offset":41,"watermark":12,"id":7,"record":{...}}
    {"kind":"update","model":"User","offset":42,"watermark":13,"id":7,"record":{...},"previous":{...}}
    {"kind":"delete","model":"User","offset":43,"watermark":14,"id":7,"record":{...}}

`offset` is the global row offset (1, 2, ...; gap-free, never reused), `watermark` the
model's row count in the current epoch after this row, `record` the stored record (for a
delete, the last one). `link` events are derived by the realtime layer, never stored.

Delivery (store.py): `Store.subscribe(callback)` calls `callback(event, frame)` on the event loop
after the event's commit (its fsync, under `sync="full"`), in offset order, exactly once per
subscriber. A callback must not block and must not raise; an exception is logged and the
callback stays subscribed. Events are immutable; the record dicts inside them are shared
with the store and must not be mutated.
"""

from __future__ import annotations

import enum
import json
from typing import Any, NamedTuple

from dbsvc.runtime import compact_json
from dbsvc.storage.logfile import encode_frame


class EventKind(enum.Enum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


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

    def to_dict(self) -> dict[str, Any]:
        """The event as docs/realtime.md shows it (key order included)."""
        return _layout(self.kind, self.model, self.offset, self.watermark, self.id, self.record, self.previous)

    def payload(self) -> bytes:
        """Compact JSON: the log payload and the text of a `/subscribe` frame."""
        return event_payload(*self)

    def frame(self) -> bytes:
        """The `PersistedEvent` of `/replicate`: offset, crc32, length, payload."""
        return encode_frame(self.offset, self.payload())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChangeEvent:
        return cls(EventKind(d["kind"]), d["model"], d["offset"], d["watermark"], d["id"],
                   d["record"], d.get("previous"))


def event_payload(kind: EventKind, model: str, offset: int, watermark: int, id_: Any,
                  record: dict, previous: dict | None = None) -> bytes:
    """The payload of the event these fields make (`ChangeEvent.payload`; batch.py builds an
    import's frames with it, no event made). The bytes of `compact_json(_layout(...))`, made
    without that dict: the fixed head of each kind and model is made once (`_head`), the
    record (and an update's previous one) are the only objects encoded, and the text is
    encoded to UTF-8 once."""
    shown = id_ if type(id_) is int else compact_json(id_)
    tail = f',"previous":{compact_json(previous)}}}' if kind is EventKind.UPDATE else "}"
    return (f'{_head(kind, model)}{offset},"watermark":{watermark},"id":{shown},'
            f'"record":{compact_json(record)}{tail}').encode("utf-8")


_HEADS: dict[tuple[EventKind, str], str] = {}
_HEADS_MAX = 1024                   # kinds times models; past that (never in one schema) not kept


def _head(kind: EventKind, model: str) -> str:
    """`{"kind":...,"model":...,"offset":` of an event of `kind` on `model`."""
    head = _HEADS.get((kind, model))
    if head is None:
        head = '{"kind":%s,"model":%s,"offset":' % (compact_json(kind.value), compact_json(model))
        if len(_HEADS) < _HEADS_MAX:
            _HEADS[(kind, model)] = head
    return head


def _layout(kind: EventKind, model: str, offset: int, watermark: int, id: Any,
            record: dict, previous: dict | None) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind.value, "model": model, "offset": offset,
                           "watermark": watermark, "id": id, "record": record}
    if kind is EventKind.UPDATE:
        out["previous"] = previous
    return out


def decode_event(payload: bytes | memoryview) -> ChangeEvent:
    return ChangeEvent.from_dict(json.loads(bytes(payload)))
