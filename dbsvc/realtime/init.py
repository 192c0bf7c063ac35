"""A live query's Init, built and sent a slice at a time (sans-IO).

A live query opened without `after` first gets its result set as of one offset `O` (the
store's applied offset when the socket was opened), then the deltas of the events after
`O`. A large result set is not one message: it goes out as `Init` messages each carrying
a slice of `records`, in id order, the last one marked `"complete": true` (the others
`false`); every slice carries the same `model`, `watermark` and `offset`::

    {"type":"Init","model":"User","records":[...],"watermark":W,"offset":O,"complete":false}
    ...
    {"type":"Init","model":"User","records":[...],"watermark":W,"offset":O,"complete":true}

A result set that fits one slice is one `Init` with `"complete": true` (docs/decisions.md,
"Live query Init in slices").

Rules:
1. The snapshot is the list of matching ids at `O` (`store.live_ids`: no record read; a
   query's ranges and null tests are served by storage's range scans, storage/seek.py);
   records are read when their slice is built, at most `SLICE_BYTES` of JSON (or
   `SLICE_RECORDS` records) per slice, so a 100,000-record Init costs the loop one slice
   per turn and holds about 36 bytes per id, never the encoded result set.
2. A slice holds each record as it was at `O`. The broker hands this object every event
   of its model after `O` while the Init runs (`observe`); the first event touching an
   id carries the id's state at `O` (an update's `previous`, a delete's `record`), kept in
   `changed`. An id not in `changed` is unchanged since `O` up to the last event
   observed, so it is read with `as_of` that event's model watermark: the rows the store
   applied but the broker has not yet published (an fsync in flight) are stepped over.
3. Ids are ascending, so a change to an id already sent is a delta the socket's queue
   holds, not a change to keep, and so is a change to an id not in the result set (found
   by bisection); `changed` keeps at most `limit` entries, past which the
   Init cannot finish in bounded memory and the socket is closed 1013 (session.py).
4. Access rules: under a `subscribe` Scope (dbsvc/rules.py) the Init holds only the
   records in view (feeds.py): a Scope pinned to a field narrows the ids through that
   field's hash index exactly as a filter on it would (intersected with the query's own
   filter on the same field); its `where` tests each record, as it was at `O`, when its
   slice is built, so a record the token may not see is never read into a frame.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any

from dbsvc.http.frames import text_frame
from dbsvc.interfaces import ServedStore
from dbsvc.rules import Scope
from dbsvc.runtime import json_bytes
from dbsvc.storage.events import ChangeEvent, EventKind

SLICE_BYTES = 64 * 1024  # JSON of one Init message's records, at most about
SLICE_RECORDS = 2000

_ABSENT = object()


class InitSlices:
    """The Init of one live query: its ids at `offset`, the position reached, and the
    state at `offset` of every id changed since (rules 1-3)."""

    __slots__ = (
        "model",
        "offset",
        "watermark",
        "epoch",
        "projection",
        "_ids",
        "_pos",
        "_seen",
        "_changed",
        "_limit",
        "_store",
        "_tail",
        "_where",
    )

    def __init__(
        self,
        store: ServedStore,
        model: Any,
        filters: Any,
        projection: str | None,
        offset: int,
        limit: int,
        scope: Scope | None = None,
        ranges: tuple = (),
        nulls: tuple = (),
        search: tuple[str, ...] = (),
    ) -> None:
        self.model = model
        self.offset = offset
        self.watermark = store.watermarks()[model.name]
        self.epoch = store.epoch
        self.projection = None if projection is None else model.project[projection]
        self._where = None if scope is None or scope.everything else scope.where
        self._ids: Sequence[Any] = (
            []
            if scope is not None and scope.nothing
            else store.live_ids(model.name, scoped_filters(filters, scope), ranges, nulls, search)
        )
        self._pos = 0
        self._seen = self.watermark  # model watermark of the last event observed
        self._changed: dict[Any, dict | None] = {}
        self._limit = limit
        self._store = store
        self._tail = b'],"watermark":%d,"offset":%d,"complete":' % (self.watermark, offset)

    @property
    def done(self) -> bool:
        return self._pos >= len(self._ids)

    @property
    def overflowed(self) -> bool:
        return len(self._changed) > self._limit

    def observe(self, event: ChangeEvent) -> None:
        """Rule 2: an event of this model after `offset`, in offset order."""
        if event.offset <= self.offset:
            return
        self._seen = event.watermark
        if event.kind is EventKind.INSERT:
            return  # absent at `offset`: not among the ids
        id_, pos = event.id, self._pos
        ids = self._ids
        if pos and id_ <= ids[pos - 1]:
            return  # rule 3: already sent
        at = bisect_left(ids, id_, pos)
        if at == len(ids) or ids[at] != id_:
            return  # not in the result set at `offset` (its filter or Scope left it out)
        if id_ not in self._changed:
            self._changed[id_] = event.previous if event.kind is EventKind.UPDATE else event.record

    def next_frame(self) -> bytes:
        """The next slice's `Init` message (the last one once `done`)."""
        ids, pos, end = self._ids, self._pos, len(self._ids)
        changed, get, name, seen = self._changed, self._store.get, self.model.name, self._seen
        project, where = self.projection, self._where
        parts: list[bytes] = []
        size = 0
        stop = min(end, pos + SLICE_RECORDS)
        while pos < stop and size < SLICE_BYTES:
            id_ = ids[pos]
            pos += 1
            record = changed.pop(id_, _ABSENT)
            if record is _ABSENT:
                record, _watermark = get(name, id_, seen)
            if not isinstance(record, dict):  # None cannot happen: an id at `offset` has a state
                continue
            if where is not None and not where(record):
                continue  # rule 4: not visible to this token at `offset`
            part = json_bytes(record if project is None else project(record))
            parts.append(part)
            size += len(part) + 1
        self._pos = pos
        complete = b"true}" if pos >= end else b"false}"
        if pos >= end:
            self._ids = []
            self._changed.clear()
        head = b'{"type":"Init","model":%s,"records":[' % json_bytes(name)
        return text_frame(b"".join((head, b",".join(parts), self._tail, complete)))


def scoped_filters(filters: Mapping[str, frozenset], scope: Scope | None) -> Mapping[str, frozenset]:
    """`filters` narrowed by a Scope pinned to a field (rule 4): that field's keys are the
    Scope's, intersected with the filter's own when the query filters on it too."""
    if scope is None or scope.everything or scope.field is None:
        return filters
    field = scope.field
    keys = scope.keys if field not in filters else scope.keys & filters[field]
    return {**filters, field: keys}
