"""Change events: one per committed row, in the layout of contract section 5.

An event's JSON (its log payload, byte for byte)::

    {"kind":"insert","model":"User","offset":41,"watermark":12,"id":7,"record":{...}}
    {"kind":"update","model":"User","offset":42,"watermark":13,"id":7,"record":{...},"previous":{...}}
    {"kind":"delete","model":"User","offset":43,"watermark":14,"id":7,"record":{...}}

`offset` is the global row offset (1, 2, ...; gap-free, never reused), `watermark` the
model's row count in the current epoch after this row, `record` the stored record (for a
delete, the last one). `link` events are derived by the realtime layer, never stored.

`encoded` holds the payload bytes when the event was made from them or for them (the store
encodes each event once for its log frame, and the realtime layer sends those same bytes
to unprojected subscribers); `payload()` encodes only when it is empty (an event whose
watermark was renumbered by a compaction).

Delivery (store.py): `Store.subscribe(callback)` calls `callback(event)` on the event loop
after the event's commit (its fsync, under `sync="full"`), in offset order, exactly once per
subscriber. A callback must not block and must not raise; an exception is logged and the
callback stays subscribed. Events are immutable; the record dicts inside them are shared
with the store and must not be mutated.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
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
    encoded: bytes = field(default=b"", repr=False, compare=False)

    @classmethod
    def encode(cls, kind: EventKind, model: str, offset: int, watermark: int, id: Any,
               record: dict, previous: dict | None) -> ChangeEvent:
        """A new event with its payload encoded once (the log frame and the feeds share it)."""
        payload = compact_json(_layout(kind, model, offset, watermark, id, record, previous)).encode("utf-8")
        return cls(kind, model, offset, watermark, id, record, previous, payload)

    def to_dict(self) -> dict[str, Any]:
        """The event as contract section 5 shows it (key order included)."""
        return _layout(self.kind, self.model, self.offset, self.watermark, self.id, self.record, self.previous)

    def payload(self) -> bytes:
        """Compact JSON: the log payload and the text of a `/subscribe` frame."""
        if self.encoded:
            return self.encoded
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
    """The event of a log payload, keeping the payload bytes as its `encoded` form."""
    data = bytes(payload)
    d = json.loads(data)
    return ChangeEvent(EventKind(d["kind"]), d["model"], d["offset"], d["watermark"], d["id"],
                       d["record"], d.get("previous"), data)
