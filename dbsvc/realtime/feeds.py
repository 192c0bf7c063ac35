"""What a feed sends for an event: the change-feed and live-query transforms, sans-IO.

A feed is a `FeedSpec`: a model, the filters of its query string (parsed by the generated
`parse_feed_query`), an optional projection, and its kind (`/subscribe` or `/live-query`).
Given a committed row event, the spec decides which frame, if any, its socket gets; the
decision is the generated matcher's (`CompiledModel.match`), never interpreted here.

Change feed (docs/guide/realtime.md, docs/realtime.md), for a spec on model M:
- a row event of M: insert and delete pass when their record matches, update when its
  old (`previous`) or new record matches; the frame is the event's JSON, with `record`
  and `previous` projected when the spec has a projection.
- a `link` event (derived here, never stored): when a record of a model C with a field
  `f @ref(M)` starts or stops referencing an M record (insert, a change of `f`, delete),
  M's feed gets `{"kind":"link","model":M,"id":parent,"child_model":C,"child_id":id,
  "field":f,"linked":true|false,"offset":<the row's offset>}`; it passes when the parent
  record (read from the store when the link is delivered) matches.

Live query, stateless: membership before and after a row follows from the event alone,
because an update carries `previous` and a delete its last record::

    was = match(previous) for update, match(record) for delete, False for insert
    now = match(record) for insert and update, False for delete
    not was, now  -> Added      was, now -> Updated      was, not now -> Removed

so a resumed live query (`after=`) gets exactly the deltas of the later events with no
per-socket result set held in memory.

Frames are encoded once per event and per distinct (form, projection) in an `EventFrames`,
shared by every socket that receives them: an unprojected change-feed frame is the payload
of the event's log frame, the bytes the store encoded for its log.

Imports storage's event types and log frame accessors (logfile.py, the one owner of the frame
layout) and http's frame builder; no sockets, no wsproto, no h11.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dbsvc.http.frames import text_frame
from dbsvc.runtime import CompiledModel, json_bytes
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.logfile import frame_payload

Lookup = Callable[[str, Any], "dict | None"]  # (model name, id) -> current record


class FeedKind(enum.Enum):
    SUBSCRIBE = "subscribe"
    LIVE = "live-query"


class Delta(enum.Enum):
    ADDED = "Added"
    UPDATED = "Updated"
    REMOVED = "Removed"


@dataclass(frozen=True, slots=True)
class LinkEvent:
    """A child record started (`linked`) or stopped referencing a parent record."""

    model: str  # the parent model
    id: Any  # the parent id
    child_model: str
    child_id: Any
    field: str
    linked: bool
    offset: int

    def frame(self) -> bytes:
        return text_frame(
            json_bytes(
                {
                    "kind": "link",
                    "model": self.model,
                    "id": self.id,
                    "child_model": self.child_model,
                    "child_id": self.child_id,
                    "field": self.field,
                    "linked": self.linked,
                    "offset": self.offset,
                }
            )
        )


def derive_links(event: ChangeEvent, model: CompiledModel) -> Iterator[LinkEvent]:
    """The link events a row event of `model` causes, one per @ref field that changed."""
    kind, record, previous = event.kind, event.record, event.previous
    for field, parent in model.refs:
        if kind is EventKind.INSERT:
            old, new = None, record[field]
        elif kind is EventKind.DELETE:
            old, new = record[field], None
        else:
            assert previous is not None
            old, new = previous[field], record[field]
            if old == new:
                continue
        if old is not None:
            yield LinkEvent(parent, old, model.name, event.id, field, False, event.offset)
        if new is not None:
            yield LinkEvent(parent, new, model.name, event.id, field, True, event.offset)


class EventFrames:
    """The frames of one row event, each encoded on first use and then shared."""

    __slots__ = ("event", "model", "_log_frame", "_cache")

    def __init__(self, event: ChangeEvent, model: CompiledModel, log_frame: bytes | None = None) -> None:
        self.event = event
        self.model = model
        self._log_frame = log_frame  # live events: the log's whole frame (header and payload)
        self._cache: dict[Any, bytes] = {}

    def change(self, projection: str | None) -> bytes:
        frame = self._cache.get(projection)
        if frame is None:
            event = self.event
            if projection is None:
                log_frame = self._log_frame
                frame = text_frame(frame_payload(log_frame) if log_frame is not None else event.payload())
            else:
                project = self.model.project[projection]
                body = event.to_dict()
                body["record"] = project(event.record)
                if event.previous is not None and "previous" in body:
                    body["previous"] = project(event.previous)
                frame = text_frame(json_bytes(body))
            self._cache[projection] = frame
        return frame

    def delta(self, delta: Delta, projection: str | None) -> bytes:
        key = (delta, projection)
        frame = self._cache.get(key)
        if frame is None:
            event = self.event
            body: dict[str, Any] = {
                "type": delta.value,
                "model": event.model,
                "offset": event.offset,
                "watermark": event.watermark,
            }
            if delta is Delta.REMOVED:
                body["id"] = event.id
            else:
                record = event.record
                body["record"] = record if projection is None else self.model.project[projection](record)
            frame = self._cache[key] = text_frame(json_bytes(body))
        return frame


class LinkFrames:
    """A link event with its frame (shared) and its parent's record (read once)."""

    __slots__ = ("link", "_lookup", "_parent", "_looked", "_frame")

    def __init__(self, link: LinkEvent, lookup: Lookup) -> None:
        self.link = link
        self._lookup = lookup
        self._parent: dict | None = None
        self._looked = False
        self._frame: bytes | None = None

    @property
    def parent(self) -> dict | None:
        if not self._looked:
            self._looked = True
            self._parent = self._lookup(self.link.model, self.link.id)
        return self._parent

    @property
    def frame(self) -> bytes:
        if self._frame is None:
            self._frame = self.link.frame()
        return self._frame


@dataclass(frozen=True, slots=True)
class FeedSpec:
    """One socket's feed: which events it gets and in which form."""

    kind: FeedKind
    model: CompiledModel
    filters: Mapping[str, frozenset]
    projection: str | None

    def row_frame(self, frames: EventFrames) -> bytes | None:
        """The frame this feed sends for a row event of its model, or None."""
        event = frames.event
        match, filters = self.model.match, self.filters
        kind = event.kind
        if self.kind is FeedKind.SUBSCRIBE:
            if match(event.record, filters) or (kind is EventKind.UPDATE and match(event.previous, filters)):  # type: ignore[arg-type]
                return frames.change(self.projection)
            return None
        if kind is EventKind.INSERT:
            was, now = False, match(event.record, filters)
        elif kind is EventKind.UPDATE:
            was, now = match(event.previous, filters), match(event.record, filters)  # type: ignore[arg-type]
        else:
            was, now = match(event.record, filters), False
        if now:
            return frames.delta(Delta.UPDATED if was else Delta.ADDED, self.projection)
        if was:
            return frames.delta(Delta.REMOVED, self.projection)
        return None

    def link_frame(self, link: LinkFrames) -> bytes | None:
        """The frame this feed sends for a link to one of its model's records, or None."""
        if self.kind is not FeedKind.SUBSCRIBE:
            return None
        if self.filters:
            parent = link.parent
            if parent is None or not self.model.match(parent, self.filters):
                return None
        return link.frame


def replay_frames(
    spec: FeedSpec, events: Iterator[ChangeEvent], models: Mapping[str, CompiledModel], lookup: Lookup
) -> Iterator[tuple[int, bytes | None]]:
    """(offset, frame or None) for each event of a replay, in offset order: the same
    decisions as live delivery, for one feed. None marks an event that sends nothing (the
    caller still advances past it)."""
    name = spec.model.name
    for event in events:
        model = models.get(event.model)
        if model is None:
            yield event.offset, None
            continue
        if event.model == name:
            yield event.offset, spec.row_frame(EventFrames(event, model))
        if spec.kind is FeedKind.SUBSCRIBE:
            for link in derive_links(event, model):
                if link.model == name:
                    frame = spec.link_frame(LinkFrames(link, lookup))
                    if frame is not None:
                        yield event.offset, frame
        if event.model != name:
            yield event.offset, None
