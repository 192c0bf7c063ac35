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
from dataclasses import dataclass
from typing import Any

from dbsvc.runtime import compact_json
from dbsvc.storage.logfile import encode_frame


class EventKind(enum.Enum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class ChangeEvent:
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
        return compact_json(self.to_dict()).encode("utf-8")

    def frame(self) -> bytes:
        """The `PersistedEvent` of `/replicate`: offset, crc32, length, payload."""
        return encode_frame(self.offset, self.payload())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChangeEvent:
        return cls(EventKind(d["kind"]), d["model"], d["offset"], d["watermark"], d["id"],
                   d["record"], d.get("previous"))


def _layout(kind: EventKind, model: str, offset: int, watermark: int, id: Any,
            record: dict, previous: dict | None) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind.value, "model": model, "offset": offset,
                           "watermark": watermark, "id": id, "record": record}
    if kind is EventKind.UPDATE:
        out["previous"] = previous
    return out


def decode_event(payload: bytes | memoryview) -> ChangeEvent:
    return ChangeEvent.from_dict(json.loads(bytes(payload)))
