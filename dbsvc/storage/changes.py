"""The change stream: committed events to subscribers, the ring of recent events, the head.

    stream = ChangeStream(log, recent_payloads, ring_capacity, replication=False)
    unsubscribe = stream.subscribe(callback)        # callback(ChangeEvent, frame)
    unsubscribe = stream.subscribe_groups(callback) # callback(events, frames): once a group
    stream.publish(event, frame)                    # the committer, after the event's fsync
    stream.publish_group(events, frames)            # ... after a group's fsync (one call)
    stream.publish_batch(planned, first)            # an offline batch, after its one fsync
    stream.events_after(offset), stream.frames_after(offset), stream.head

Rules (store.py rules 3-5 are the promises these keep):

1. `head` is the offset of the last *published* (acknowledged) event: only `publish` and
   `publish_batch` move it, in offset order, after the commit.
2. Subscribers are called on the loop, in offset order, each with the event's log frame;
   a subscriber that raises is logged and the others still get the event.
3. Without replication the ring keeps the last `ring_capacity` published events (after
   a restart, the log's last rows) and `events_after` serves from it; with replication the
   ring is empty and `events_after` decodes `frames_after` (replay.py).
4. A group's subscribers (`subscribe_groups`) are called once per group the committer
   publishes (a replica's group of frames, a `POST /batch`), with its events and frames
   in offset order, after the event subscribers have had each of them; a single event is
   a group of one. What a group subscriber sees is what an event subscriber sees at the
   group's last event: on a replica a group is up to 1,024 frames, and a subscriber that only
   needs the head (workers/forward.py `AppliedOffsets`, the broker with no socket open)
   costs one call a group instead of one a frame (bench/README.md, wt-rep84).
5. A compaction's switch renumbers the ring's events after its cut (`renumber`): offsets
   never change, watermarks restart in the new epoch.

Imports events, replay and the error types; never store.py (the store hands in a
`replay.LogSource`, which it implements itself).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from dbsvc.errors import OffsetGone
from dbsvc.storage import replay
from dbsvc.storage.events import ChangeEvent, EventKind, decode_event
from dbsvc.storage.logfile import frame_payload

if TYPE_CHECKING:
    from dbsvc.storage.table import Table

log = logging.getLogger("dbsvc.storage")

Callback = Callable[[ChangeEvent, bytes], None]
GroupCallback = Callable[[Sequence[ChangeEvent], Sequence[bytes]], None]


class ChangeStream:
    """Subscribers, the ring and the head of one store (module docstring)."""

    def __init__(
        self, log_source: replay.LogSource, recent: Iterable[bytes], ring_capacity: int, head: int, *, replication: bool
    ) -> None:
        self._log = log_source
        self._replication = replication
        self._head = head
        self._ring: deque[ChangeEvent] = deque((decode_event(p) for p in recent), maxlen=ring_capacity)
        self._subscribers: list[Callback] = []
        self._group_subscribers: list[GroupCallback] = []  # rule 4

    @property
    def head(self) -> int:
        """Offset of the last acknowledged event (rule 1)."""
        return self._head

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers) + len(self._group_subscribers)

    def ring(self) -> list[ChangeEvent]:
        """The events the ring holds now, oldest first (a copy)."""
        return list(self._ring)

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        return _subscribe(self._subscribers, callback)

    def subscribe_groups(self, callback: GroupCallback) -> Callable[[], None]:
        """`callback(events, frames)` once per published group (rule 4)."""
        return _subscribe(self._group_subscribers, callback)

    def publish(self, event: ChangeEvent, frame: bytes) -> None:
        self._head = event.offset
        self._ring.append(event)
        for callback in tuple(self._subscribers):
            try:
                callback(event, frame)
            except Exception:
                log.exception("change-stream subscriber %r failed on offset %d", callback, event.offset)
        if self._group_subscribers:
            self._tell_groups((event,), (frame,))

    def publish_group(self, events: Sequence[ChangeEvent], frames: Sequence[bytes]) -> None:
        """A committed group's events in offset order (rules 1, 2 and 4): each to the event
        subscribers as `publish` gives it, then the group to the group subscribers once."""
        if not events:
            return
        if self._subscribers:
            subscribers = tuple(self._subscribers)
            for event, frame in zip(events, frames):
                self._head = event.offset
                self._ring.append(event)
                for callback in subscribers:
                    try:
                        callback(event, frame)
                    except Exception:
                        log.exception("change-stream subscriber %r failed on offset %d", callback, event.offset)
        else:
            self._head = events[-1].offset
            self._ring.extend(events)
        if self._group_subscribers:
            self._tell_groups(events, frames)

    def _tell_groups(self, events: Sequence[ChangeEvent], frames: Sequence[bytes]) -> None:
        for callback in tuple(self._group_subscribers):
            try:
                callback(events, frames)
            except Exception:
                log.exception("change-stream group subscriber %r failed on offsets to %d", callback, events[-1].offset)

    def publish_batch(self, planned: Sequence[tuple[Table, dict]], first: int) -> None:
        """The batch's events, after its commit: to the subscribers, if any, all of them;
        otherwise only the ring's last `maxlen`, so a million-row import builds no events."""
        self._head = first + len(planned) - 1
        told = self._subscribers or self._group_subscribers
        keep = len(planned) if told else min(len(planned), self._ring.maxlen or 0)
        watermarks = {t.name: t.watermark for t, _r in planned}
        events = []
        for offset in range(self._head, self._head - keep, -1):  # newest first
            table, record = planned[offset - first]
            events.append(
                ChangeEvent(
                    EventKind.INSERT, table.name, offset, watermarks[table.name], record[table.id_field], record
                )
            )
            watermarks[table.name] -= 1
        events.reverse()
        if told:
            self.publish_group(events, [event.frame() for event in events])
        else:
            self._ring.extend(events)

    def renumber(self, renumbered: Callable[[ChangeEvent], ChangeEvent], cut_head: int) -> None:
        """A compaction's switch (rule 5): the ring keeps the events after `cut_head`, renumbered."""
        self._ring = deque((renumbered(e) for e in self._ring if e.offset > cut_head), maxlen=self._ring.maxlen)

    def events_after(self, offset: int) -> Iterator[ChangeEvent]:
        """Committed events with offsets > `offset`, oldest first (rule 3; store.py rule 5)."""
        if self._replication:
            return (decode_event(frame_payload(frame)) for frame in self.frames_after(offset))
        return iter(self._ring_after(offset))

    def frames_after(self, offset: int) -> Iterator[bytes]:
        """Committed log frames after `offset`, read lazily: the retained segment's, then
        the log's (replay.py)."""
        return replay.frames_after(self._log, offset)

    def _ring_after(self, offset: int) -> list[ChangeEvent]:
        replay.check_offset(offset, self._head)
        if offset == self._head:
            return []
        log_base = self._log.epoch_state.log_base
        if offset < log_base:
            raise OffsetGone(f"offset {offset} was compacted away; the epoch starts after {log_base}", oldest=log_base)
        if not self._ring or offset < self._ring[0].offset - 1:
            oldest = self._ring[0].offset - 1 if self._ring else self._head
            raise OffsetGone(f"offset {offset} is no longer retained; the oldest retained is {oldest}", oldest=oldest)
        return [e for e in self._ring if e.offset > offset]


def _subscribe(subscribers: list, callback: Any) -> Callable[[], None]:
    subscribers.append(callback)

    def unsubscribe() -> None:
        try:
            subscribers.remove(callback)
        except ValueError:
            pass

    return unsubscribe
