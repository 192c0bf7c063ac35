"""A read replica's groups (follower.py rule 3): the frames its reading thread takes from
the `/replicate` stream at once, each checked, and the pipeline that applies them.

Imports the consumer's frame check, the log's frame layout and the store's type; never a
socket (a group is read from a `primary.Stream`) and nothing of the follower's decisions.

Rules:
G1. A group is what the stream has ready: the first message waits up to `wait` seconds,
    then every message already received joins it, up to BATCH frames or BATCH_BYTES bytes
    (the frame that reaches BATCH_BYTES joins and ends it), in one `receive_many` call
    (ws/client.py C7: no call a message). `full` says it ended at a bound: more is
    waiting. A stream that ends (closed, broken) after the group's first message ends the
    group, and the next read raises its error: the frames read before it are applied.
G2. Each frame is checked before the group is handed on: binary, a whole header, the
    offset expected (one past the last), a length equal to the rest and within the store's
    `max_payload`, the CRC. The group's messages are checked together once it is read (`checked`:
    each check one C-level `map` over them; a `check_frame_bytes` call per frame was a fifth of
    the reading thread, an inline check per frame still ~1 us). The headers are joined and
    read by one `unpack` (`_heads`: a group's n headers are 16n bytes only when every message
    holds a whole header), and the offsets, CRCs and lengths are every third value of it:
    no tuple a frame (bench/README.md, session 27, wt-rep25). When a check fails, each
    message goes to `check_frame_bytes` in turn, and `BadFrame` carries the first bad one's
    reason and the good frames before it, which still count (the follower applies them
    before it stops); the messages after it are dropped, as they were never read. A stream
    that fails (closed, broken) after a bad frame of the group reports the bad frame first
    (G1: the error waits for the next read, which a bad frame stops).
G3. The pipeline (`Pipeline.apply`, on the event loop): a group is applied as one
    (`Store.apply_replicated_frames`: one write, one fsync), then the group before it is
    awaited until durable; with `pipelined` (more frames are waiting) this one is not, so
    the reading thread reads and checks the next group while this one is written: never
    more than two groups are unacknowledged. A refused frame (`StreamError`,
    `EpochChanged`) waits for the frames committed before it, then raises.
G4. The hand-off (`Handoff`): the reading thread hands each group to the loop with
    `call_soon_threadsafe` (no coroutine, task or concurrent future a group) and goes on
    reading the next while the loop applies it; one task on the loop applies the groups
    handed over one after another, in the order they were read, each by G3. At most DEPTH
    groups are in hand (handed, their `apply` not returned): the thread waits for room
    before it hands another, so a slow apply still pushes back on the socket, and memory
    holds DEPTH groups, the one being read and G3's one unacknowledged. A group that is not
    full (the stream quiet, or the frames before a bad one) is waited for until every group
    in hand is applied and durable (`drain`), as before: the stream's end, a quiet turn and
    a reconnect never leave a group behind them. An apply that raises drops the groups
    queued after it, never applied (the next connection asks for them again from the
    store's head), and the thread gets the error at its next `hand` or `drain`.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from functools import lru_cache
from itertools import repeat
from operator import getitem, sub
from typing import Any
from zlib import crc32

from dbsvc.errors import EpochChanged, StreamError
from dbsvc.replica.consumer import BATCH, BATCH_BYTES, FrameError, check_frame_bytes
from dbsvc.replica.primary import Stream
from dbsvc.storage.logfile import FRAME, FRAME_HEADER_SIZE
from dbsvc.storage.store import Store

# BATCH frames and BATCH_BYTES bytes bound a group (G1): the stream's take, consumer.py's, so
# `dbsvc replicate` and a replica read /replicate alike (why 1,024: consumer.py).
_HEAD = slice(0, FRAME_HEADER_SIZE)
_PAYLOAD = slice(FRAME_HEADER_SIZE, None)
_BYTES = {bytes}
DEPTH = 2  # groups in hand (G4): one applied, one queued behind it
Apply = Callable[[list[bytes], bool], Coroutine[Any, Any, None]]


@lru_cache(maxsize=4)
def _heads(n: int) -> struct.Struct:
    """The layout of n frame headers in a row (offset, crc32, length each: `FRAME`). Kept
    for a few sizes: a catching-up replica's groups are all BATCH frames, and one for
    1,024 frames takes ~40 us to build (about what it saves), ~100 KB to keep."""
    return struct.Struct(">" + FRAME.format.lstrip(">") * n)


class BadFrame(Exception):
    """A frame failed G2's checks: `reason` says why, `frames` are the good ones before it."""

    def __init__(self, reason: str, frames: list[bytes]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.frames = frames


def read_group(ws: Stream, expected: int, limit: int, wait: float) -> tuple[list[bytes], bool]:
    """G1 and G2: the checked frames from offset `expected` on that `ws` has ready (the first
    awaited up to `wait` seconds), and whether the group is full."""
    batch: list[Any] = ws.receive_many(BATCH, BATCH_BYTES, wait)  # as read; `checked` makes them frames
    full = len(batch) >= BATCH or sum(map(len, batch)) >= BATCH_BYTES
    return checked(batch, expected, limit), full


def checked(batch: list[Any], expected: int, limit: int) -> list[bytes]:
    """G2 for messages read in a row: `batch` itself when every one passes (each check one
    C-level `map` over them), else each in turn, `BadFrame` for the first that fails."""
    n = len(batch)
    if n and set(map(type, batch)) == _BYTES:
        try:  # a message shorter than a header makes the joined heads short of 16n bytes
            heads = _heads(n).unpack(b"".join(map(getitem, batch, repeat(_HEAD))))
        except struct.error:
            heads = ()
        if (
            heads
            and heads[0::3] == tuple(range(expected, expected + n))
            and heads[2::3] == tuple(map(sub, map(len, batch), repeat(FRAME_HEADER_SIZE)))
            and max(heads[2::3]) <= limit
            and heads[1::3] == tuple(map(crc32, map(getitem, batch, repeat(_PAYLOAD))))  # type: ignore[arg-type]
        ):
            return batch
    frames: list[bytes] = []
    for message in batch:
        try:
            frames.append(check_frame_bytes(message, expected, limit))
        except FrameError as exc:
            raise BadFrame(str(exc), frames) from None
        expected += 1
    return frames


class Pipeline:
    """G3: the groups applied and not yet known durable (at most two)."""

    def __init__(self) -> None:
        self.unsynced: asyncio.Future[None] | None = None  # the last group applied

    async def apply(self, store: Store, frames: list[bytes], pipelined: bool) -> None:
        """G3: apply `frames` as one group, then wait until the group before them is
        durable, and without `pipelined` this one too."""
        previous, self.unsynced = self.unsynced, None
        try:
            if frames:
                self.unsynced = store.apply_replicated_frames(frames)
        except (StreamError, EpochChanged):
            # The frames before the refused one were committed (follow.py rule 2): wait for them.
            if previous is not None:
                await previous
            while store.head_offset < store.applied_offset and store.health().writable:
                await asyncio.sleep(0.001)
            raise
        if previous is not None:
            await previous
        if not pipelined and self.unsynced is not None:
            current, self.unsynced = self.unsynced, None
            await current


class Handoff:
    """G4: groups from the reading thread to the loop, at most DEPTH in hand. `hand` and
    `drain` are called on the reading thread, everything else runs on `loop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, apply: Apply) -> None:
        self._loop = loop
        self._apply = apply  # G3 of one group: (frames, pipelined)
        self._changed = threading.Condition()  # guards the two fields below
        self._in_hand = 0
        self._error: BaseException | None = None
        self._queued: deque[tuple[list[bytes], bool]] = deque()  # the loop's only
        self._applying = False  # the loop's only: the task of `_apply_queued` runs

    def hand(self, frames: list[bytes], full: bool, stop: threading.Event, timeout: float) -> None:
        """Queue `frames` (one group, G1) for the loop once there is room; with `full`
        false, then `drain`. An error of an earlier group is raised instead (the group is
        dropped); so is `TimeoutError` past `timeout` seconds. A stop while it waits for
        room drops the group: nothing of it was applied."""
        with self._changed:
            deadline = time.monotonic() + timeout
            while self._in_hand >= DEPTH and self._error is None and not stop.is_set():
                if not self._changed.wait(min(0.5, max(deadline - time.monotonic(), 0.0))):
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"the loop took no group for {timeout:.0f} s")
            self._raise()
            if stop.is_set():
                return
            self._in_hand += 1
        try:
            self._loop.call_soon_threadsafe(self._arrive, frames, full)
        except RuntimeError:  # the loop is closed: nothing will apply it
            with self._changed:
                self._in_hand -= 1
            raise
        if not full:
            self.drain(timeout)

    def in_hand(self) -> int:
        """The groups handed over whose apply has not returned."""
        with self._changed:
            return self._in_hand

    def drain(self, timeout: float) -> None:
        """Wait until every group handed over was applied, and a group that was not full
        also durable (G3: a full group is `pipelined`, its fsync awaited by the next
        group's apply), then raise the error of one that failed."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._in_hand == 0, timeout):
                raise TimeoutError(f"the loop applied no group for {timeout:.0f} s")
            self._raise()

    def _raise(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _arrive(self, frames: list[bytes], full: bool) -> None:
        self._queued.append((frames, full))
        if not self._applying:
            self._applying = True
            self._loop.create_task(self._apply_queued())

    async def _apply_queued(self) -> None:
        queued = self._queued
        try:
            while queued:
                frames, full = queued.popleft()
                try:
                    await self._apply(frames, full)
                except BaseException as exc:  # the reading thread raises it (G4)
                    dropped = len(queued)
                    queued.clear()
                    with self._changed:
                        # A cancelled task (the loop shutting down) reaches the thread as an
                        # error it handles, as a cancelled concurrent future did.
                        self._error = (
                            exc if isinstance(exc, Exception) else RuntimeError("the group's apply was cancelled")
                        )
                        self._in_hand -= 1 + dropped
                        self._changed.notify_all()
                    if not isinstance(exc, Exception):
                        raise
                    return
                with self._changed:
                    self._in_hand -= 1
                    self._changed.notify_all()
        finally:
            self._applying = False
