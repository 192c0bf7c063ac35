"""Shared fan-out: feeds that make the same decisions get one decision and one batch a drain.

Job: the broker's fast path for the common case of many sockets with the same feed (10,000
browsers on `/subscribe/user`). Sans-IO, like the rest of the package.

A feed without filters or operators decides every event by its kind, model and projection alone (and,
under access rules, its scope: whatever `FeedSpec` compares equal on). Such feeds are
*plain*, and the plain feeds of one model with equal specs form a `Group`. Per drain of the
broker (broker.py rule 1):

1. Per event, the group asks its spec once for the frame (`row_frame`, `link_frame`) and
   appends it to the group's `Batch`: one decision per group per event, not one per socket.
2. When the drain ends, each touched group hands every one of its sessions the whole batch
   at once (`FeedSession.deliver_batch`): one call and, for a socket that is live, writable
   and has nothing queued, one write of the batch's joined bytes. A session that cannot
   take it whole (it is replaying, waiting for its Init, queueing, an offset of the batch
   is at or below its `last`, or the batch is over BATCH_BYTES, so that what one write may
   leave unsent in the transport stays small: ws/server.py rule 4) takes it frame by frame
   through `deliver`, so order, the
   no-gap/no-duplicate rule and the lag accounting (session.py rules 1 and 4) are the ones
   of the per-session path.
3. A session belongs to exactly one place: a group, or the model's routed feeds
   (`ModelFeeds`), never both, so it never gets an event twice.
4. Groups are keyed by (kind, projection) and checked with `FeedSpec ==`: a feed whose spec
   differs in anything else (a scope that is not equal, say) is not plain and goes to
   `ModelFeeds` as before.
5. Handing the batches out is sliced (`Delivery`): at most DELIVERY_SLICE sessions per turn
   of the loop (a send each: about 10-20 ms on a loaded machine), so 10,000 sockets never
   hold the loop for a whole pass and `/health` and HTTP clients are served in between.
   The broker starts no other drain until a delivery is done (events wait, in order, and
   join the next batch), so a socket still gets its frames in offset order.
6. The last frame of a `Batch` may be replaced before the batch is taken (`replace_last`):
   the broker marks the end of a store batch's frames that way (broker.py rule 11).

Invariants: a `Batch`'s offsets are in non-decreasing order (the drain's order); its frames
are the shared `bytes` of `EventFrames` (never copied until joined, once per group).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from dbsvc.realtime.feeds import FeedSpec

BATCH_BYTES = 64 * 1024  # rule 2: a batch larger than this goes frame by frame
DELIVERY_SLICE = 1000  # rule 5: sessions served per turn of the loop


class Receiver(Protocol):
    """What a group needs of a session (session.py's `FeedSession`; named here, not
    imported, so the two modules do not import each other)."""

    @property
    def spec(self) -> FeedSpec: ...

    def deliver_batch(self, batch: Batch) -> None: ...


S = TypeVar("S", bound=Receiver)


class Batch:
    """The frames one group's sessions get from one drain, in offset order."""

    __slots__ = ("offsets", "frames", "size", "_data")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.frames: list[bytes] = []
        self.size = 0
        self._data: bytes | None = None

    def add(self, offset: int, frame: bytes) -> None:
        self.offsets.append(offset)
        self.frames.append(frame)
        self.size += len(frame)
        self._data = None

    def replace_last(self, frame: bytes) -> None:
        """The last frame, as another (the end of a store batch's frames: broker.py rule 11)."""
        frames = self.frames
        self.size += len(frame) - len(frames[-1])
        frames[-1] = frame
        self._data = None

    @property
    def first(self) -> int:
        return self.offsets[0]

    @property
    def last(self) -> int:
        return self.offsets[-1]

    @property
    def count(self) -> int:
        return len(self.frames)

    @property
    def data(self) -> bytes:
        """Every frame joined, built once for all the group's sockets (a single frame is
        itself: `bytes.join` of one item returns it)."""
        data = self._data
        if data is None:
            data = self._data = b"".join(self.frames)
        return data

    def items(self) -> Iterator[tuple[int, bytes]]:
        return zip(self.offsets, self.frames)


class Group(Generic[S]):
    """Plain feeds of one model with equal specs (rule 4)."""

    __slots__ = ("spec", "sessions", "batch")

    def __init__(self, spec: FeedSpec) -> None:
        self.spec = spec
        self.sessions: dict[S, None] = {}  # insertion-ordered set
        self.batch: Batch | None = None

    def add(self, offset: int, frame: bytes) -> None:
        batch = self.batch
        if batch is None:
            batch = self.batch = Batch()
        batch.add(offset, frame)

    def take(self) -> tuple[Batch, tuple[S, ...]] | None:
        """This drain's batch and the sessions it goes to (those in the group now)."""
        batch, self.batch = self.batch, None
        if batch is None:
            return None
        return batch, tuple(self.sessions)


class Delivery(Generic[S]):
    """Rule 5: a drain's batches on their way to their sessions, at most `budget` sessions
    a call, in the drain's order."""

    __slots__ = ("_work", "_index")

    def __init__(self) -> None:
        self._work: deque[tuple[Batch, tuple[S, ...]]] = deque()
        self._index = 0  # sessions of the first batch already served

    def __bool__(self) -> bool:
        return bool(self._work)

    def add(self, batch: Batch, sessions: tuple[S, ...]) -> None:
        self._work.append((batch, sessions))

    def run(self, budget: int) -> None:
        """Hand batches to up to `budget` sessions; what is left waits for the next call."""
        work = self._work
        while work and budget > 0:
            batch, sessions = work[0]
            start = self._index
            end = min(len(sessions), start + budget)
            try:
                for i in range(start, end):
                    sessions[i].deliver_batch(batch)
            finally:
                budget -= end - start
                if end >= len(sessions):
                    work.popleft()
                    self._index = 0
                else:
                    self._index = end

    def clear(self) -> None:
        self._work.clear()
        self._index = 0


def plain_key(spec: FeedSpec) -> tuple[Any, str | None] | None:
    """The group key of a feed that may be plain (rule 4), or None. A feed under an access
    rule that does not show it everything is never plain: a pinned Scope is routed by its
    keys (broker.py rule 2), so an owner's write costs only its owner's feeds."""
    if spec.conditions or (spec.scope is not None and not spec.scope.everything):
        return None
    return spec.kind, spec.projection


class PlainFeeds(Generic[S]):
    """The groups of one model (rule 3's other place)."""

    __slots__ = ("groups",)

    def __init__(self) -> None:
        self.groups: dict[tuple[Any, str | None], Group[S]] = {}

    def add(self, session: S) -> bool:
        """Put `session` in its group; False when it is not plain (the caller routes it)."""
        spec = session.spec
        key = plain_key(spec)
        if key is None:
            return False
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group[S](spec)
        elif group.spec != spec:
            return False
        group.sessions[session] = None
        return True

    def remove(self, session: S) -> bool:
        """Take `session` out of its group; False when it was in none."""
        key = plain_key(session.spec)
        if key is None:
            return False
        group = self.groups.get(key)
        if group is None or session not in group.sessions:
            return False
        del group.sessions[session]
        if not group.sessions:  # a batch it still holds goes to no one
            del self.groups[key]
        return True

    def sessions(self) -> Iterator[S]:
        for group in self.groups.values():
            yield from group.sessions
