"""One socket's stream: replay, then live delivery, through a bounded queue (sans-IO).

A `StreamSession` is the `http.types.Session` of one realtime socket: a `FeedSession` for
`/subscribe` and `/live-query`, a `ReplicationSession` for `/replicate`. It is created
(and registered with the broker) while the upgrade request is answered, in the same
synchronous step that reads its starting point from the store, so no event can fall
between the two; the protocol layer then calls `on_open` with the channel.

Lifecycle::

    created --(after=N)--> REPLAY --caught up--> LIVE --close--> CLOSED
    created --(live query, no after)--> INIT held until its offset is durable --> LIVE
    LIVE --queue full--> CLOSED with 1013 (feeds)  |  REPLAY from the log (replication)

Rules:
1. Offsets only grow: `last` is the offset of the last event this stream has taken into
   account (sent, queued or skipped); any event below it is ignored, and one at it too
   unless live delivery reached it (a row can make several frames: a row event and links).
   Replay and live delivery can therefore overlap without a duplicate, and since both are
   in offset order and the replay runs until it reaches the store's head, without a gap.
2. Work that is not one live frame (a replay, a live query's Init) is done in turns the
   broker hands out round-robin (broker.py rule 7): a session asks for a turn with
   `want_turn` and, given one, sends at most the bytes it is granted (and REPLAY_BATCH
   events), then asks again. Nothing is produced while the channel is not writable:
   `on_writable` asks again. Live events that arrive during a replay are left to it (it
   re-reads until it reaches the head).
3. A live query's `Init` is the store's state at its last applied offset `O`, sent in
   slices (init.py) once the broker has published `O` (the write is durable), so a client
   never sees a record that a crash could take back. Events up to `O` are skipped (rule
   1); the deltas after `O` wait in the queue until the last slice is sent.
4. Live frames go straight to the channel while it is writable and nothing is queued
   (queued ones leave joined, up to BATCH_BYTES a write, when it is writable again)
   (a drain's batch for a grouped feed in one `send_frames`, fanout.py rule 2, counted as
   its frames); otherwise into a queue of at most `capacity` frames and `max_bytes` bytes,
   frame by frame (the channel is not writable as soon as the kernel does not take a write
   whole, ws/server.py rule 5, so the frames not started on the wire are here). Past either
   is an overflow: a feed closes with 1013 `lagged after <offset>` (the last offset sent,
   or where the stream started), every frame of that offset sent first and the rest of the
   queue dropped, so the close is next in line behind what is on the wire, or with 1013
   `lagged during init` while its Init is unfinished (the client opens the live query
   again, without `after`); a replica's stream drops its queue and goes back to replaying
   from the log, so a slow replica costs disk reads, never server memory.
5. Client data messages are ignored.
"""

from __future__ import annotations

import enum
import logging
import zlib
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dbsvc.errors import OffsetGone, OffsetOutOfRange
from dbsvc.http.frames import binary_frame, text_frame
from dbsvc.http.types import Channel
from dbsvc.realtime.fanout import BATCH_BYTES
from dbsvc.realtime.feeds import FeedSpec, replay_frames
from dbsvc.realtime.init import InitSlices
from dbsvc.runtime import json_bytes
from dbsvc.storage.events import ChangeEvent
from dbsvc.storage.logfile import frame_offset

if TYPE_CHECKING:
    from dbsvc.realtime.broker import Broker
    from dbsvc.realtime.fanout import Batch

log = logging.getLogger("dbsvc.realtime")

REPLAY_BATCH = 2000
LAGGED = 1013
INTERNAL = 1011

Steps = Iterator[tuple[int, "bytes | None"]]  # (offset, frame or None: nothing to send)


class Phase(enum.Enum):
    REPLAY = "replay"
    INIT = "init"
    LIVE = "live"
    CLOSED = "closed"


class StreamSession:
    """What every realtime socket does; subclasses say where a replay reads and what an
    overflow means (rules 2 and 4)."""

    __slots__ = (
        "_broker",
        "_channel",
        "_queue",
        "_queued_bytes",
        "capacity",
        "max_bytes",
        "last",
        "sent",
        "phase",
        "_replay",
        "_pumping",
        "_live_last",
        "_closing",
    )

    def __init__(self, broker: Broker, start: int, phase: Phase, replay: Steps | None = None) -> None:
        self._broker = broker
        self._channel: Channel | None = None
        self._queue: deque[tuple[int, bytes]] = deque()
        self._queued_bytes = 0
        self.capacity = broker.capacity
        self.max_bytes = broker.max_bytes
        self.last = start  # rule 1
        self._live_last = False  # `last` was reached by live delivery
        self.sent = start  # the offset a lagged close names
        self.phase = phase
        self._replay = replay
        self._pumping = False
        self._closing = (1000, "")

    def _replay_from(self, offset: int) -> Steps:
        """The replay steps after `offset` (may raise OffsetGone / OffsetOutOfRange)."""
        raise NotImplementedError

    def _overflow(self) -> None:
        raise NotImplementedError

    # -- http.types.Session -------------------------------------------------------------

    def on_open(self, channel: Channel) -> None:
        self._channel = channel
        if self.phase is Phase.CLOSED:  # closed before the 101 was even written
            channel.close(*self._closing)
            return
        self._pump()

    def on_message(self, data: str | bytes) -> None:
        pass  # rule 5

    def on_writable(self) -> None:
        self._pump()

    def on_close(self, code: int) -> None:
        # The channel holds this session too: dropping it here frees both at once, without
        # waiting for the cyclic garbage collector (a loaded server runs it rarely).
        self._channel = None
        if self.phase is not Phase.CLOSED:
            self.phase = Phase.CLOSED
            self._queue.clear()
            self._queued_bytes = 0
            self._replay = None
            self._broker.unregister(self)

    # -- from the broker ----------------------------------------------------------------

    def deliver(self, offset: int, frame: bytes) -> None:
        """A live frame for the event at `offset` (rules 1 and 4)."""
        last = self.last
        if (
            offset < last
            or (offset == last and not self._live_last)
            or self.phase is Phase.REPLAY
            or self.phase is Phase.CLOSED
        ):
            return  # one row may make several frames (links)
        self.last = offset
        self._live_last = True
        channel = self._channel
        if channel is not None and not self._queue and self.phase is Phase.LIVE and channel.writable:
            channel.send_frame(frame)
            self.sent = offset
            self._broker.events_sent += 1
            return
        self._queue.append((offset, frame))
        self._queued_bytes += len(frame)
        if len(self._queue) > self.capacity or self._queued_bytes > self.max_bytes:
            self._overflow()

    def deliver_batch(self, batch: Batch) -> None:
        """A drain's frames for this socket at once (fanout.py rule 2): one write of the
        joined bytes when the socket takes them now, else each frame through `deliver`."""
        channel = self._channel
        if (
            channel is not None
            and batch.size <= BATCH_BYTES
            and batch.first > self.last
            and self.phase is Phase.LIVE
            and not self._queue
            and channel.writable
        ):
            count = batch.count
            channel.send_frames(batch.data, count)
            self.last = self.sent = batch.last
            self._live_last = True
            self._broker.events_sent += count
            return
        for offset, frame in batch.items():
            self.deliver(offset, frame)

    # -- internals --------------------------------------------------------------------

    def _pump(self) -> None:
        """Send queued frames while the channel takes them, then ask for a turn if a
        replay or an Init remains (rule 2)."""
        channel = self._channel
        if channel is None or self._pumping or self.phase is Phase.CLOSED:
            return
        if self.phase is Phase.INIT:
            if channel.writable and self.init_ready():
                self._broker.want_turn(self)
            return
        self._pumping = True
        try:
            queue = self._queue
            while queue and channel.writable:  # whole frames, up to BATCH_BYTES a write
                frames: list[bytes] = []
                size = 0
                offset = self.sent
                while queue and size < BATCH_BYTES:
                    offset, frame = queue.popleft()
                    frames.append(frame)
                    size += len(frame)
                self._queued_bytes -= size
                channel.send_frames(frames[0] if len(frames) == 1 else b"".join(frames), len(frames))
                self.sent = offset
                self._broker.events_sent += len(frames)
            if self.phase is Phase.REPLAY and not queue and channel.writable:
                self._broker.want_turn(self)
        finally:
            self._pumping = False

    def init_ready(self) -> bool:
        return False

    def work(self, budget: int) -> int:
        """The broker's turn (rule 2): send up to about `budget` bytes of replay; the bytes sent."""
        channel = self._channel
        if channel is None or self.phase is not Phase.REPLAY or self._queue:
            return 0
        return self._replay_some(channel, budget)

    def _replay_some(self, channel: Channel, budget: int) -> int:
        """Rule 2: up to `budget` bytes and REPLAY_BATCH events, then a later turn."""
        broker = self._broker
        events = REPLAY_BATCH
        used = 0
        while channel.writable and events > 0 and used < budget:
            replay = self._replay
            if replay is None:
                return used
            try:
                step = next(replay, None)
            except (OffsetGone, OffsetOutOfRange):  # a compaction replaced the log under us
                self._lagged()
                return used
            except OSError as exc:
                log.error("replay after %d failed: %s", self.last, exc)
                self._close(INTERNAL, "replay failed")
                return used
            if step is None:
                if self.last >= broker.store_head():
                    self.phase = Phase.LIVE  # caught up: what follows comes from the broker
                    self._replay = None
                    return used
                try:  # more arrived meanwhile: read on from `last`
                    self._replay = self._replay_from(self.last)
                except (OffsetGone, OffsetOutOfRange):
                    self._lagged()
                    return used
                continue
            events -= 1
            offset, frame = step
            if offset > self.last:
                self.last = offset
            if frame is not None:
                channel.send_frame(frame)
                used += len(frame)
                self.sent = offset
                broker.events_sent += 1
        if self.phase is Phase.REPLAY and channel.writable:
            broker.want_turn(self)
        return used

    def _lagged(self) -> None:
        """Rule 4 for a feed: the peer resumes with `after=<sent>`. A row can make several
        frames (a ref change: two links); the rest of the last one sent go out before the
        close, so `after=<sent>` never skips part of a row."""
        channel, queue = self._channel, self._queue
        self._broker.lagged += 1
        if self.phase is Phase.INIT:
            self._close(LAGGED, "lagged during init")
            return
        while channel is not None and queue and queue[0][0] == self.sent:
            channel.send_frame(queue.popleft()[1])
        self._close(LAGGED, f"lagged after {self.sent}")

    def close(self, code: int, reason: str) -> None:
        """End this stream from the server's side with `code`."""
        self._close(code, reason)

    def _close(self, code: int, reason: str) -> None:
        channel = self._channel
        self.on_close(code)
        self._closing = (code, reason)
        if channel is not None:
            channel.close(code, reason)


class FeedSession(StreamSession):
    """A `/subscribe` or `/live-query` socket: `spec` decides what each event sends."""

    __slots__ = ("spec", "init", "_init_ready")

    def __init__(
        self,
        spec: FeedSpec,
        broker: Broker,
        start: int,
        *,
        replay: Iterator[ChangeEvent] | None = None,
        init: InitSlices | None = None,
    ) -> None:
        self.spec = spec
        self.init = init
        self._init_ready = False
        if replay is not None:
            super().__init__(broker, start, Phase.REPLAY, replay_frames(spec, replay, broker.models, broker.lookup))
        else:
            super().__init__(broker, start, Phase.INIT if init is not None else Phase.LIVE)
        broker.register(self)

    def _replay_from(self, offset: int) -> Steps:
        broker = self._broker
        return replay_frames(self.spec, broker.events_after(offset), broker.models, broker.lookup)

    def _overflow(self) -> None:
        self._lagged()

    def on_open(self, channel: Channel) -> None:
        super().on_open(channel)
        if self.phase is Phase.INIT:
            self._broker.release_init(self)

    def on_close(self, code: int) -> None:
        super().on_close(code)
        self.init = None  # the ids and kept states go now

    def send_init(self) -> None:
        """Rule 3: the Init's offset is durable; its slices may go out."""
        if self.init is None or self.phase is not Phase.INIT:
            return
        self._init_ready = True
        self._pump()

    def init_ready(self) -> bool:
        return self._init_ready

    def observe(self, event: ChangeEvent) -> None:
        """An event of this live query's model while its Init runs (init.py rule 2)."""
        init = self.init
        if init is None or self.phase is not Phase.INIT:
            return
        init.observe(event)
        if init.overflowed:
            self._lagged()

    def work(self, budget: int) -> int:
        """Rule 3: one slice of the Init; after the last, the queued deltas and live."""
        if self.phase is not Phase.INIT:
            return super().work(budget)
        channel, init = self._channel, self.init
        if channel is None or init is None or not self._init_ready or not channel.writable:
            return 0
        if init.epoch != self._broker.store.epoch:  # a compaction renumbered the watermarks
            self._lagged()
            return 0
        frame = init.next_frame()
        channel.send_frame(frame)
        if init.done:
            self.init = None
            self.phase = Phase.LIVE
            self._broker.init_finished(self)
            self._pump()
        elif channel.writable:
            self._broker.want_turn(self)
        return len(frame)


def log_frame_steps(frames: Iterator[bytes]) -> Steps:
    """Replay steps of raw log frames: each the binary message of `/replicate`, under the
    offset its header carries."""
    for raw in frames:
        yield frame_offset(raw), binary_frame(raw)


class ReplicationSession(StreamSession):
    """A `/replicate` socket: every committed frame after `start`, from the log, then live."""

    __slots__ = ()

    def __init__(self, broker: Broker, start: int, frames: Iterator[bytes]) -> None:
        super().__init__(broker, start, Phase.REPLAY, log_frame_steps(frames))
        broker.register_replica(self)

    def _replay_from(self, offset: int) -> Steps:
        return log_frame_steps(self._broker.store.frames_after(offset))

    def _overflow(self) -> None:
        """Rule 4 for a replica: back to the log from the last offset sent."""
        self._queue.clear()
        self._queued_bytes = 0
        self.last = self.sent
        self._live_last = False
        self.phase = Phase.REPLAY
        self._replay = None
        try:
            self._replay = self._replay_from(self.sent)
        except (OffsetGone, OffsetOutOfRange):
            self._lagged()


class SnapshotSession:
    """A `/replicate/snapshot` socket: the epoch's snapshot file, at the socket's pace.

    Messages: a text header `{"type":"snapshot","format":1,"epoch":..,"offset":..,
    "fingerprint":..,"history":..}` (history: storage/history.py's record, or null), the snapshot file's bytes as binary messages (each line of it
    carries its own CRC, storage/snapshot.py), then `{"type":"end","bytes":n,"crc32":c}`
    over all of them, then a normal close. A follower installs the file as its own epoch
    base and follows `/replicate?after=<offset>`.
    """

    __slots__ = ("_header", "_chunks", "_channel", "_size", "_crc", "_done")

    def __init__(
        self, epoch: str, offset: int, fingerprint: str, chunks: Iterator[bytes], history: dict[str, Any] | None = None
    ) -> None:
        self._header = json_bytes(
            {
                "type": "snapshot",
                "format": 1,
                "epoch": epoch,
                "offset": offset,
                "fingerprint": fingerprint,
                "history": history,
            }
        )
        self._chunks = chunks
        self._channel: Channel | None = None
        self._size = 0
        self._crc = 0
        self._done = False

    def on_open(self, channel: Channel) -> None:
        self._channel = channel
        channel.send_frame(text_frame(self._header))
        self._pump()

    def on_message(self, data: str | bytes) -> None:
        pass

    def on_writable(self) -> None:
        self._pump()

    def on_close(self, code: int) -> None:
        self._done = True
        self._channel = None
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()  # the file descriptor goes now, not at GC

    def _pump(self) -> None:
        channel = self._channel
        if channel is None or self._done:
            return
        while channel.writable:
            try:
                chunk = next(self._chunks, None)
            except OSError as exc:
                log.error("snapshot stream failed: %s", exc)
                self._done = True
                channel.close(INTERNAL, "snapshot read failed")
                return
            if chunk is None:
                self._done = True
                channel.send_frame(text_frame(json_bytes({"type": "end", "bytes": self._size, "crc32": self._crc})))
                channel.close(1000, "")
                return
            self._size += len(chunk)
            self._crc = zlib.crc32(chunk, self._crc)
            channel.send_frame(binary_frame(chunk))
