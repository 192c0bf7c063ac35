"""What a feed sends for an event: the change-feed and live-query transforms, sans-IO.

A feed is a `FeedSpec`: a model, the filters and operators of its query string (parsed by
the generated `parse_feed_query`: exact filters, `field__gt`/`__gte`/`__lt`/`__lte`/
`__prefix` ranges, `field__null` tests), an optional projection, and its kind (`/subscribe`
or `/live-query`). Given a committed row event, the spec decides which frame, if any, its
socket gets; whether a record is in the query is the generated matcher's decision
(`CompiledModel.match(record, filters, ranges, nulls)`), never interpreted here. A record
"matches" below when it passes all of them: an update moving a record into a range is an
`Added`, out of it a `Removed`.

Change feed (docs/guide/realtime.md, docs/realtime.md), for a spec on model M:
- a row event of M: insert and delete pass when their record matches, update when its
  old (`previous`) or new record matches; the frame is the event's JSON, with `record`
  and `previous` projected when the spec has a projection.
- a `link` event (derived here, never stored): when a record of a model C with a field
  `f @ref(M)` starts or stops referencing an M record (insert, a change of `f`, delete),
  M's feed gets `{"kind":"link","model":M,"id":parent,"child_model":C,"child_id":id,
  "field":f,"linked":true|false,"offset":<the row's offset>}`; it passes when the parent
  record (read from the store when the link is delivered) matches.

Access rules (docs/realtime.md, "Access rules"): the spec of a model with `@allow` rules
carries the `Scope` its socket's token got from the model's `subscribe` rule, and the
Scopes of the models whose records reference it (for links). A record is *visible* when
the Scope lets the token see it, and *in view* when it is visible and passes the query's
filters. An event passes when a side of it is in view (insert: the new record; delete:
the old; update: either), as the filters alone decide without rules; visibility decides
its form:

    update, both sides visible   -> update (with `previous`)
    update, only old visible     -> delete of the old record (it left the token's view)
    update, only new visible     -> insert of the new record (`previous` never sent)

The insert or delete so made is the frame a real insert or delete of that record would be,
at the update's own offset and watermark (so `after=` resumes past it), and shows nothing
the token may not see. A `link` passes when its parent is in view and its child (`child`:
the new record of a link, the old one of an unlink) is visible under the child model's
Scope for the same token. A model without rules has no Scope: everything is visible.

Live query, stateless: membership before and after a row follows from the event alone,
because an update carries `previous` and a delete its last record::

    was = in_view(previous) for update, in_view(record) for delete, False for insert
    now = in_view(record) for insert and update, False for delete
    not was, now  -> Added      was, now -> Updated      was, not now -> Removed

so a resumed live query (`after=`) gets exactly the deltas of the later events with no
per-socket result set held in memory.

Batches (docs/realtime.md, "Batches"): every frame a row of a store batch makes (a row frame,
a link) carries the row's `"batch":{"first":F,"last":L}` as its last key, and the last frame
one socket gets from a batch carries `"end":true` in it (`end_of_batch`): marked by the
broker when it delivers live (broker.py rule 11), by `replay_frames` in a replay, so the two
send the same bytes.

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
from dataclasses import field as dataclass_field
from typing import Any

from dbsvc.http.frames import text_frame
from dbsvc.rules import Scope
from dbsvc.runtime import CompiledModel, json_bytes
from dbsvc.storage.events import ChangeEvent, EventKind, event_payload
from dbsvc.storage.logfile import frame_payload

Lookup = Callable[[str, Any], "dict | None"]  # (model name, id) -> current record
Ranges = tuple[tuple[str, Any, bool, Any, bool], ...]  # Query.ranges
Nulls = tuple[tuple[str, bool], ...]  # Query.nulls


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
    # the child record on the side the link is about (new when linked, old when not): what
    # a feed under access rules tests against the child model's Scope; not in the frame
    child: dict | None = dataclass_field(default=None, compare=False)
    batch: tuple[int, int] | None = None  # the causing row's batch (first, last), as its event

    def frame(self) -> bytes:
        body: dict[str, Any] = {
            "kind": "link",
            "model": self.model,
            "id": self.id,
            "child_model": self.child_model,
            "child_id": self.child_id,
            "field": self.field,
            "linked": self.linked,
            "offset": self.offset,
        }
        if self.batch is not None:  # a link a batch's row caused ("Batches" above)
            body["batch"] = {"first": self.batch[0], "last": self.batch[1]}
        return text_frame(json_bytes(body))


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
        before = previous if kind is EventKind.UPDATE else record
        if old is not None:
            yield LinkEvent(parent, old, model.name, event.id, field, False, event.offset, before, event.batch)
        if new is not None:
            yield LinkEvent(parent, new, model.name, event.id, field, True, event.offset, record, event.batch)


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

    def as_kind(self, kind: EventKind, projection: str | None) -> bytes:
        """An update shown as the insert of its new record (`INSERT`) or the delete of its
        old one (`DELETE`), to a token that may see only that side (module docstring): the
        frame a real insert or delete of that record would be, at the update's offset and
        watermark."""
        key = (kind, projection)
        frame = self._cache.get(key)
        if frame is None:
            event = self.event
            assert event.kind is EventKind.UPDATE and event.previous is not None
            record = event.record if kind is EventKind.INSERT else event.previous
            if projection is not None:
                record = self.model.project[projection](record)
            payload = event_payload(
                kind, event.model, event.offset, event.watermark, event.id, record, None, event.batch
            )
            frame = self._cache[key] = text_frame(payload)
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
            if event.batch is not None:  # a row of a batch (events.py "Batches")
                body["batch"] = {"first": event.batch[0], "last": event.batch[1]}
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
    scope: Scope | None = None  # the token's `subscribe` Scope; None: the model has no rules
    link_scopes: Mapping[str, Scope] = dataclass_field(default_factory=dict)  # child model -> Scope; absent: no rules
    ranges: Ranges = ()  # the query's `field__gt`... and `__prefix` (Query.ranges)
    nulls: Nulls = ()  # the query's `field__null` tests (Query.nulls)
    search: tuple[str, ...] = ()  # `search=`'s words (Query.search): the generated matcher tests them too

    @property
    def conditions(self) -> bool:
        """The query has a filter, an operator or search words: not every record is in it."""
        return bool(self.filters or self.ranges or self.nulls or self.search)

    def matches(self, record: dict) -> bool:
        """`record` passes the query: the generated matcher with the filters, the operators
        and, on a model with `@search` fields, the search words."""
        if self.search:
            return self.model.match(record, self.filters, self.ranges, self.nulls, self.search)
        return self.model.match(record, self.filters, self.ranges, self.nulls)

    def route(self) -> tuple[str, frozenset] | None:
        """The (field, index keys) the broker files this feed under (broker.py rule 2), or
        None: it is tested for every event. A Scope pinned to a field routes on it, its
        keys narrowed by the query's own filter on that field; else the first filter
        field; a Scope that sees nothing routes under no key at all."""
        scope, filters = self.scope, self.filters
        if scope is not None and not scope.everything:
            if scope.nothing:
                return self.model.id_field, frozenset()
            if scope.field is not None:
                keys = scope.keys if scope.field not in filters else scope.keys & filters[scope.field]
                return scope.field, keys
        if not filters:
            return None
        first = next(f for f in self.model.fields if f in filters)
        return first, filters[first]

    def in_view(self, record: dict | None) -> bool:
        """`record` passes the filters and the token may see it."""
        if record is None or not self.matches(record):
            return False
        return self.scope is None or self.scope.visible(record)

    def row_frame(self, frames: EventFrames) -> bytes | None:
        """The frame this feed sends for a row event of its model, or None."""
        if self.scope is not None and not self.scope.everything:
            return self._ruled_frame(frames)
        event = frames.event
        match = self.matches
        kind = event.kind
        if self.kind is FeedKind.SUBSCRIBE:
            if match(event.record) or (kind is EventKind.UPDATE and match(event.previous)):  # type: ignore[arg-type]
                return frames.change(self.projection)
            return None
        if kind is EventKind.INSERT:
            was, now = False, match(event.record)
        elif kind is EventKind.UPDATE:
            was, now = match(event.previous), match(event.record)  # type: ignore[arg-type]
        else:
            was, now = match(event.record), False
        return self._delta(frames, was, now)

    def _ruled_frame(self, frames: EventFrames) -> bytes | None:
        """`row_frame` under a Scope (module docstring, "Access rules")."""
        event = frames.event
        kind, in_view = event.kind, self.in_view
        if kind is EventKind.INSERT:
            was, now = False, in_view(event.record)
        elif kind is EventKind.UPDATE:
            was, now = in_view(event.previous), in_view(event.record)
        else:
            was, now = in_view(event.record), False
        if self.kind is FeedKind.LIVE:
            return self._delta(frames, was, now)
        if not (was or now):
            return None
        if kind is not EventKind.UPDATE:
            return frames.change(self.projection)
        scope = self.scope
        assert scope is not None
        before = was or scope.visible(event.previous)
        after = now or scope.visible(event.record)
        if before and after:
            return frames.change(self.projection)
        return frames.as_kind(EventKind.DELETE if before else EventKind.INSERT, self.projection)

    def _delta(self, frames: EventFrames, was: bool, now: bool) -> bytes | None:
        if now:
            return frames.delta(Delta.UPDATED if was else Delta.ADDED, self.projection)
        if was:
            return frames.delta(Delta.REMOVED, self.projection)
        return None

    def link_frame(self, link: LinkFrames) -> bytes | None:
        """The frame this feed sends for a link to one of its model's records, or None."""
        if self.kind is not FeedKind.SUBSCRIBE:
            return None
        scope = self.scope
        if self.conditions or (scope is not None and not scope.everything):
            if not self.in_view(link.parent):
                return None
        if self.link_scopes:
            child_scope = self.link_scopes.get(link.link.child_model)
            if child_scope is not None and not child_scope.visible(link.link.child):
                return None
        return link.frame


def end_of_batch(frame: bytes) -> bytes:
    """`frame` (a text frame of a batch's row: its JSON ends with the `batch` object) as the
    last frame its socket gets from that batch: `"end":true` added to the `batch` object
    ("Batches" above)."""
    n = frame[1] & 0x7F
    body = frame[2 if n < 126 else 4 if n == 126 else 10 :]
    assert body.endswith(b"}}") and b',"batch":{"first":' in body, "not a frame of a batch's row"
    return text_frame(body[:-2] + b',"end":true}}')


def replay_frames(
    spec: FeedSpec, events: Iterator[ChangeEvent], models: Mapping[str, CompiledModel], lookup: Lookup
) -> Iterator[tuple[int, bytes | None]]:
    """(offset, frame or None) for each event of a replay, in offset order: the same
    decisions as live delivery, for one feed. None marks an event that sends nothing (the
    caller still advances past it). A batch's frames are held until its last row is read,
    so the last of them carries `end` ("Batches" above); its last step is at that row's
    offset, with a frame or None."""
    held: list[tuple[int, bytes]] = []
    for event in events:
        batch = event.batch
        if batch is None:
            yield from _replay_steps(spec, event, models, lookup)
            continue
        held.extend((offset, frame) for offset, frame in _replay_steps(spec, event, models, lookup) if frame)
        if event.offset < batch[1]:
            continue
        if held:
            offset, frame = held[-1]
            held[-1] = offset, end_of_batch(frame)
            yield from held
        if not held or held[-1][0] < event.offset:
            yield event.offset, None
        held = []


def _replay_steps(
    spec: FeedSpec, event: ChangeEvent, models: Mapping[str, CompiledModel], lookup: Lookup
) -> Iterator[tuple[int, bytes | None]]:
    """`replay_frames`' steps for one event."""
    name = spec.model.name
    model = models.get(event.model)
    if model is None:
        yield event.offset, None
        return
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
