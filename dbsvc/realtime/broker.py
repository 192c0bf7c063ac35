"""The broker: the store's one change-stream callback, fanned out to every feed socket.

Sans-IO: the broker is handed a `schedule(callback)` (the event loop's `call_soon`) and
never touches a socket; it hands frames to `FeedSession`s, which hand them to channels.

Rules:
1. Publishing is cheap: the store calls `_on_group(events, log_frames)` on its commit path
   once per durable group (a write, a batch, a replica's group of frames; after resolving
   the writers' futures); with no socket open only the head moves, else each row goes to
   `_on_event`, which appends it to a list and, for the first of a batch, schedules
   `_drain` two hops away, behind the responses those writes answer. Encoding and sending
   happen in `_drain`, never inside the commit.
2. Routing scales with the matches, not the subscribers. Per model, feeds without a
   filter are in one set; a filtered feed is indexed under one of its filter fields (its
   first, in declaration order; a feed whose access-rule Scope pins a field, that field,
   with the Scope's keys narrowed by the query's own filter on it: `FeedSpec.route`) by
   each of that field's values, as
   `routed[field][index key] -> feeds`. An event looks up its record's (and, for an
   update, its previous record's) key under each field in use and tests only those
   candidates with the generated matcher, so it costs O(feeds it may reach), not
   O(all feeds). (Supabase Realtime runs every subscriber's filter for every event.)
   A feed whose Scope only tests records (`where`) is filed by its filter, or with the
   unfiltered ones, and tested; one no event can reach (its Scope sees nothing, or its
   filter and Scope share no key) is kept in `idle`, in no route.
3. Each event's frames are encoded once per distinct form and projection (`EventFrames`)
   and the same bytes go to every receiver.
4. `head` is the offset of the last event drained. A live query's Init waits in
   `_waiting` until `head` reaches its offset (session.py rule 3).
5. `/replicate` streams get every event as one binary frame (the log frame), built once.
6. Counters for /metrics: open subscriptions, live queries and replication streams, events
   sent, lagged closes.
7. Turns: the work of a session that is more than one live frame (a replay from the ring
   or the log, a live query's Init slices) runs in `_run_turns`, one callback a loop turn,
   round-robin over the sessions that asked (`want_turn`), at most TURN_BYTES in all and
   SESSION_TURN_BYTES for one session a turn. Fifty replays or Inits starting at once
   share the loop with every other client instead of each taking it for its whole length.
8. While a live query's Init runs, every event of its model is shown to it (`observe`,
   init.py rule 2) before the fan-out, so its slices hold the records as of its offset.
9. Plain feeds (no filter: the same decision for every socket) are grouped (fanout.py):
   one frame decision per group per event, and when the drain ends one `deliver_batch` per
   session with every frame of the drain, written in one send. The per-session cost is
   then per drain, not per event.
10. Drains are held while fan-outs are heavy (like hub.py rule 10 for writes): after a
   drain that took DRAIN_HOLD_MIN (1 ms) of CPU time or more (its delivery's slices
   included), the next one runs that long after its first event is published (at most
   DRAIN_HOLD_MAX, 50 ms), so the events committed meanwhile reach each socket in one
   batch. Events published while a delivery is under way wait for its end (fanout.py
   rule 5) and the same hold after it: the loop is the other clients' that long. A drain
   costs per socket, so the cost per event falls as the write rate rises, and the delay
   added is never more than the drain before it took.
11. The end of a store batch (`POST /batch`; its rows carry `batch` (first, last) and are
   drained together, rule 1): of the frames a socket gets from one batch, the last carries
   `"end":true` (feeds.py `end_of_batch`, docs/realtime.md "Batches"), whichever row made
   it. A group's is its `Batch`'s last frame once the batch's last row is dispatched (the
   group's batch is not taken before the drain ends); a routed or unfiltered session's
   frames of the batch are held in `_held` until then and delivered in order, the last one
   marked. A socket that gets nothing from a batch gets nothing.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from dbsvc.http.frames import binary_frame
from dbsvc.interfaces import ServedStore
from dbsvc.realtime.fanout import DELIVERY_SLICE, Delivery, Group, PlainFeeds
from dbsvc.realtime.feeds import EventFrames, FeedKind, LinkFrames, derive_links, end_of_batch
from dbsvc.realtime.session import FeedSession, ReplicationSession, StreamSession
from dbsvc.runtime import CompiledModel
from dbsvc.storage.events import ChangeEvent, EventKind

log = logging.getLogger("dbsvc.realtime")

Schedule = Callable[[Callable[[], None]], Any]
Later = Callable[[float, Callable[[], None]], Any]  # the loop's call_later

TURN_BYTES = 512 * 1024  # rule 7: replay and Init bytes sent per loop turn, all sessions
SESSION_TURN_BYTES = 128 * 1024  # ... and for one session
DEFAULT_MAX_BYTES = 8 << 20  # session.py rule 4: bytes a socket's queue may hold
DRAIN_HOLD_MIN = 0.001  # rule 10: a drain this long or longer ...
DRAIN_HOLD_MAX = 0.050  # ... holds the next one that long, at most this


class ModelFeeds:
    """The feed sockets of one model, indexed for routing (rule 2)."""

    __slots__ = ("everyone", "routed", "idle")

    def __init__(self) -> None:
        self.everyone: set[FeedSession] = set()
        self.routed: dict[str, dict[Any, set[FeedSession]]] = {}
        self.idle: set[FeedSession] = set()  # rule 2: routed under no key

    def sessions(self) -> set[FeedSession]:
        """Every feed of the model, however filed."""
        found = self.everyone | self.idle
        for by_key in self.routed.values():
            for group in by_key.values():
                found |= group
        return found

    def add(self, session: FeedSession) -> None:
        route = session.spec.route()
        if route is None:
            self.everyone.add(session)
            return
        field, keys = route
        if not keys:
            self.idle.add(session)  # a Scope that sees nothing, or a filter its Scope excludes
            return
        by_key = self.routed.setdefault(field, {})
        for key in keys:
            by_key.setdefault(key, set()).add(session)

    def remove(self, session: FeedSession) -> None:
        route = session.spec.route()
        if route is None:
            self.everyone.discard(session)
            return
        field, keys = route
        self.idle.discard(session)
        by_key = self.routed.get(field)
        if by_key is None:
            return
        for key in keys:
            sessions = by_key.get(key)
            if sessions is not None:
                sessions.discard(session)
                if not sessions:
                    del by_key[key]
        if not by_key:
            del self.routed[field]

    def candidates(self, model: CompiledModel, record: dict | None, previous: dict | None) -> set[FeedSession]:
        """Every feed `record` or `previous` may match: the unfiltered ones plus the ones
        routed under their keys. The caller still runs the matcher."""
        routed = self.routed
        if not routed:
            return self.everyone
        found = [self.everyone]
        keys = model.keys
        for field, by_key in routed.items():
            key_of = keys[field]
            for rec in (record, previous):
                if rec is not None:
                    sessions = by_key.get(key_of(rec[field]))
                    if sessions:
                        found.append(sessions)
        return found[0] if len(found) == 1 else set().union(*found)


class Broker:
    """Fan-out from the store's change stream to feed sessions (see the module docstring)."""

    def __init__(
        self, store: ServedStore, models: Mapping[str, CompiledModel], capacity: int, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.store = store
        self.models = dict(models)  # by declared name
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.head = store.head_offset
        self.schedule: Schedule = _not_attached
        self.later: Later | None = None
        self.events_sent = 0
        self.lagged = 0
        self._feeds = {name: ModelFeeds() for name in self.models}
        self._plain = {name: PlainFeeds[FeedSession]() for name in self.models}  # rule 9
        self._touched: list[Group[FeedSession]] = []  # groups with a batch in this drain
        self._hold = 0.0  # rule 10: the delay of the next drain
        self._delivery = Delivery[FeedSession]()  # rule 9: a drain's batches, a slice a turn
        self._delivery_cost = 0.0  # CPU time of the drain and delivery under way
        self._pending: list[tuple[ChangeEvent, bytes]] = []
        self._held: dict[FeedSession, list[tuple[int, bytes]]] = {}  # rule 11: a batch's frames
        self._waiting: list[FeedSession] = []
        self._initializing: dict[str, list[FeedSession]] = {}  # rule 8, by model name
        self._turns: deque[StreamSession] = deque()  # rule 7
        self._in_turns: set[StreamSession] = set()
        self._turn_scheduled = False
        self._replicas: set[ReplicationSession] = set()
        self._counts = {FeedKind.SUBSCRIBE: 0, FeedKind.LIVE: 0}
        self._open = 0  # sessions registered, of every kind
        self._detach: Callable[[], None] | None = None

    def attach(self, schedule: Schedule, later: Later | None = None) -> None:
        """Start receiving the store's events; `schedule` runs a callback on a later turn,
        `later(delay, callback)` after a delay (rule 10; without it drains are never held)."""
        self.schedule = schedule
        if later is not None:
            self.later = later
        self.head = self.store.head_offset
        self._detach = self.store.subscribe_groups(self._on_group)

    def detach(self) -> None:
        if self._detach is not None:
            self._detach()
            self._detach = None

    def rebind(self, store: ServedStore, code: int, reason: str) -> None:
        """Serve `store` from now on (a read replica bootstrapped again): every open socket
        is closed with `code` (its offsets may no longer be replayable) and the change
        stream comes from the new store."""
        sessions: list[StreamSession] = [*self._replicas]
        for plain in self._plain.values():
            sessions.extend(plain.sessions())
        for feeds in self._feeds.values():
            sessions.extend(feeds.sessions())
        for session in set(sessions):
            session.close(code, reason)
        self._pending.clear()
        self._held.clear()
        self._touched.clear()
        self._delivery.clear()
        self._waiting.clear()
        self._initializing.clear()
        self._turns.clear()
        self._in_turns.clear()
        self.detach()
        self.store = store
        if self.schedule is not _not_attached:
            self.attach(self.schedule)

    # -- reads the sessions need ----------------------------------------------------------

    def lookup(self, model: str, id: Any) -> dict | None:
        record, _watermark = self.store.get(model, id)
        return record

    def store_head(self) -> int:
        return self.store.head_offset

    def events_after(self, offset: int) -> Iterator[ChangeEvent]:
        return self.store.events_after(offset)

    # -- registration -------------------------------------------------------------------

    def register(self, session: FeedSession) -> None:
        name = session.spec.model.name
        if not self._plain[name].add(session):  # rule 9
            self._feeds[name].add(session)
        if session.init is not None:
            self._initializing.setdefault(session.spec.model.name, []).append(session)
        self._counts[session.spec.kind] += 1
        self._open += 1

    def register_replica(self, session: ReplicationSession) -> None:
        self._replicas.add(session)
        self._open += 1

    def unregister(self, session: StreamSession) -> None:
        self._open -= 1
        if isinstance(session, ReplicationSession):
            self._replicas.discard(session)
            return
        assert isinstance(session, FeedSession)
        name = session.spec.model.name
        if not self._plain[name].remove(session):
            self._feeds[name].remove(session)
        self._counts[session.spec.kind] -= 1
        if session in self._waiting:
            self._waiting.remove(session)
        self.init_finished(session)

    def init_finished(self, session: FeedSession) -> None:
        """`session`'s Init is sent (or abandoned): it observes events no more (rule 8)."""
        name = session.spec.model.name
        sessions = self._initializing.get(name)
        if sessions is not None and session in sessions:
            sessions.remove(session)
            if not sessions:
                del self._initializing[name]

    def want_turn(self, session: StreamSession) -> None:
        """Rule 7: `session` has more to send than a live frame; give it a turn."""
        if session not in self._in_turns:
            self._in_turns.add(session)
            self._turns.append(session)
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self.schedule(self._run_turns)

    def _run_turns(self) -> None:
        """Rule 7: one pass of the round-robin, bounded in bytes; the rest next turn."""
        self._turn_scheduled = False
        turns, in_turns = self._turns, self._in_turns
        budget = TURN_BYTES
        for _ in range(len(turns)):
            if budget <= 0:
                break
            session = turns.popleft()
            in_turns.discard(session)
            try:
                budget -= session.work(min(budget, SESSION_TURN_BYTES))
            except Exception:  # one session's bug must not stop the others' turns
                log.exception("realtime session work failed")
                session.close(1011, "internal error")
        if turns and not self._turn_scheduled:
            self._turn_scheduled = True
            self.schedule(self._run_turns)

    def release_init(self, session: FeedSession) -> None:
        """Send `session`'s Init now if its offset is drained, else when it is (rule 4)."""
        if session.last <= self.head:
            session.send_init()
        elif session not in self._waiting:
            self._waiting.append(session)

    def metrics(self) -> dict[str, int]:
        return {
            "subscriptions": self._counts[FeedKind.SUBSCRIBE],
            "live_queries": self._counts[FeedKind.LIVE],
            "replication_streams": len(self._replicas),
            "events_sent": self.events_sent,
            "lagged_closes": self.lagged,
        }

    # -- the change stream ----------------------------------------------------------------

    def _on_group(self, events: Sequence[ChangeEvent], frames: Sequence[bytes]) -> None:
        """Rule 1 for a committed group (storage/changes.py rule 4), a replica's group of
        frames at once: with no socket open and nothing queued only the head moves."""
        if not self._open and not self._pending:
            self.head = events[-1].offset
            return
        deque(map(self._on_event, events, frames), 0)

    def _on_event(self, event: ChangeEvent, frame: bytes) -> None:
        """Rule 1: called on the commit path; only enqueue (nothing at all while no socket
        is open: a socket opened later starts from the store, past this event)."""
        pending = self._pending
        if not self._open and not pending:
            self.head = event.offset
            return
        pending.append((event, frame))
        if len(pending) == 1 and not self._delivery:  # else the delivery's end drains them
            if self._hold and self.later is not None:  # rule 10
                self.later(self._hold, self._drain)
            else:
                self.schedule(self._drain_after_responses)

    def _drain_after_responses(self) -> None:
        """Rule 1: one more hop, so the fan-out runs after the writers' responses of this
        commit are written (their callbacks were queued first, and queue the turn-end
        write ahead of this): a write's latency does not grow with its subscribers."""
        self.schedule(self._drain)

    def _drain(self) -> None:
        started = time.thread_time()  # rule 10: CPU time, so a drain preempted is not heavier
        events, self._pending = self._pending, []
        for event, frame in events:
            try:
                self._dispatch(event, frame)
            except Exception:  # a bug must not cost the other events their delivery
                log.exception("fan-out of offset %d failed", event.offset)
            self.head = event.offset
            if self._waiting:
                self._release_waiting()
        touched, self._touched = self._touched, []
        for group in touched:  # rule 9: each session gets the drain's frames at once
            taken = group.take()
            if taken is not None:
                self._delivery.add(*taken)
        self._delivery_cost = time.thread_time() - started
        self._deliver()

    def _deliver(self) -> None:
        """Rule 9 (fanout.py rule 5): a slice of the drain's deliveries this turn, the rest
        on the next; once all are done, the hold of rule 10 and any events that waited."""
        started = time.thread_time()
        delivery = self._delivery
        try:
            delivery.run(DELIVERY_SLICE)
        except Exception:  # a bug must not stop the other sockets' delivery
            log.exception("fan-out delivery failed")
        self._delivery_cost += time.thread_time() - started
        if delivery:
            self.schedule(self._deliver)
            return
        cost = self._delivery_cost
        self._hold = min(cost, DRAIN_HOLD_MAX) if cost >= DRAIN_HOLD_MIN else 0.0
        if self._pending:  # published during the delivery: drained after the same hold
            if self._hold and self.later is not None:
                self.later(self._hold, self._drain)
            else:
                self.schedule(self._drain)

    def _release_waiting(self) -> None:
        head = self.head
        ready = [s for s in self._waiting if s.last <= head]
        if ready:
            self._waiting = [s for s in self._waiting if s.last > head]
            for session in ready:
                session.send_init()

    def _dispatch(self, event: ChangeEvent, log_frame: bytes) -> None:
        try:
            self._fan_out(event, log_frame)
        finally:
            batch = event.batch
            if batch is not None and event.offset == batch[1]:
                self._end_batch(batch[0])

    def _end_batch(self, first: int) -> None:
        """Rule 11: the store batch from offset `first` is dispatched; mark each socket's
        last frame of it and hand the held ones over."""
        ends: dict[bytes, bytes] = {}  # one end frame for the sockets sharing a frame
        for group in self._touched:  # one group a (kind, projection): no two share a frame
            batch = group.batch
            if batch is not None and batch.last >= first:
                last = batch.frames[-1]
                ends[last] = end_of_batch(last)
                batch.replace_last(ends[last])
        held, self._held = self._held, {}
        for session, frames in held.items():
            offset, frame = frames[-1]
            end = ends.get(frame)
            if end is None:
                end = ends[frame] = end_of_batch(frame)
            frames[-1] = offset, end
            for offset, frame in frames:
                session.deliver(offset, frame)

    def _fan_out(self, event: ChangeEvent, log_frame: bytes) -> None:
        offset = event.offset
        held = None if event.batch is None else self._held  # rule 11
        if self._initializing:
            for session in tuple(self._initializing.get(event.model, ())):
                session.observe(event)
        if self._replicas:  # rule 5: the log frame is the replication message
            frame = binary_frame(log_frame)
            for replica in tuple(self._replicas):
                replica.deliver(offset, frame)
        model = self.models.get(event.model)
        if model is None:
            return
        feeds = self._feeds[model.name]
        groups = self._plain[model.name].groups
        frames: EventFrames | None = None
        if groups:  # rule 9: one decision per group
            frames = EventFrames(event, model, log_frame)
            touched = self._touched
            for group in groups.values():
                message = group.spec.row_frame(frames)
                if message is not None:
                    if group.batch is None:
                        touched.append(group)
                    group.add(offset, message)
        if feeds.everyone or feeds.routed:
            previous = event.previous if event.kind is EventKind.UPDATE else None
            receivers = feeds.candidates(model, event.record, previous)
            if receivers:
                if frames is None:
                    frames = EventFrames(event, model, log_frame)
                for session in tuple(receivers):
                    message = session.spec.row_frame(frames)
                    if message is not None:
                        if held is None:
                            session.deliver(offset, message)
                        else:
                            held.setdefault(session, []).append((offset, message))
        if not model.refs:
            return
        for link in derive_links(event, model):
            parent_groups = self._plain[link.model].groups if link.model in self._plain else {}
            parent_feeds = self._feeds.get(link.model)
            link_frames = LinkFrames(link, self.lookup)  # the parent is read once, if at all
            if parent_groups:
                for group in parent_groups.values():
                    message = group.spec.link_frame(link_frames)
                    if message is not None:
                        if group.batch is None:
                            self._touched.append(group)
                        group.add(offset, message)
            if parent_feeds is None or not (parent_feeds.everyone or parent_feeds.routed):
                continue
            if parent_feeds.routed:
                parent = link_frames.parent
                receivers = (
                    parent_feeds.candidates(self.models[link.model], parent, None)
                    if parent is not None
                    else parent_feeds.everyone
                )
            else:
                receivers = parent_feeds.everyone
            for session in tuple(receivers):
                message = session.spec.link_frame(link_frames)
                if message is not None:
                    if held is None:
                        session.deliver(offset, message)
                    else:
                        held.setdefault(session, []).append((offset, message))


def _not_attached(callback: Callable[[], None]) -> None:
    raise RuntimeError("the broker is not attached to an event loop (call attach first)")
