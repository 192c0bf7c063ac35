"""Reading committed frames back: the retained segment (retain.py), then the log.

`frames_after(store, offset)` is `Store.frames_after`: the frames (each the `/replicate`
message, logfile.py) with offsets after `offset`, oldest first, gap-free::

    offset < store.oldest_offset            OffsetGone (410), now
    oldest_offset <= offset < log base      the retained segment's frames after `offset`,
                                            then the log's, as the iterator advances
    log base <= offset <= head              the log's frames after `offset`
    offset > head (or < 0)                  OffsetOutOfRange (400), now

Rules:

1. The offset is checked when `frames_after` is called, so a route answers 410 / 400
   before it upgrades; the files are read only as the iterator advances, in 1 MiB chunks,
   so a slow consumer costs one chunk of memory and reads at its own pace.
2. The log is read up to its acknowledged end as of when its part starts; a consumer that
   wants more asks again from the last offset it got (the realtime sessions do).
3. A compaction may replace the files between two steps of the iterator. A part that has
   not started yet is looked up again from the last offset yielded: it may then come from
   a newer retained segment, or end in `OffsetGone` if nothing holds that offset any
   more. A part already being read goes on from its open descriptor (a renamed-over file
   stays readable and unchanged), so every frame yielded is one of the files' frames.
4. A retained frame's `watermark` is that of the epoch of the log it came from; offsets,
   kinds, ids and records are the same wherever a row is read.
5. Damage found in the retained segment (retain.py checks every frame it yields) makes
   the store ignore the segment from then on, logged once; the reader gets `OffsetGone`
   after the good frames before the damage.

It reads the store through `LogSource`, a narrow public view (the current `Epoch`, the
acknowledged end of the log, the head), and never imports store.py: the Store passes
itself, and a compaction that replaces the epoch is seen at the next part's lookup.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Iterator
from typing import Protocol

from dbsvc.errors import OffsetGone, OffsetOutOfRange
from dbsvc.storage import retain
from dbsvc.storage.epoch import Epoch
from dbsvc.storage.logfile import HEADER_SIZE, read_frames

log = logging.getLogger("dbsvc.storage")

# Where the frames after some offset start: the retained segment, or (epoch, byte range)
# of the log.
Source = retain.Segment | tuple[str, int, int]


class LogSource(Protocol):
    """What replay reads of a store (store.py implements it)."""

    @property
    def directory(self) -> str: ...

    @property
    def epoch_state(self) -> Epoch: ...

    @property
    def acked_log_bytes(self) -> int: ...

    @property
    def head_offset(self) -> int: ...

    def drop_retained(self, segment: retain.Segment) -> bool: ...


def check_offset(offset: int, head: int) -> None:
    """`OffsetOutOfRange` for an offset below 0 or beyond the head (store.py rule 5)."""
    if offset < 0 or offset > head:
        raise OffsetOutOfRange(f"offset {offset} is ahead of the head offset {head}", head=head)


def frames_after(store: LogSource, offset: int) -> Iterator[bytes]:
    check_offset(offset, store.head_offset)
    return _frames(store, offset, _source(store, offset))


def _source(store: LogSource, after: int) -> Source:
    epoch = store.epoch_state
    if after >= epoch.log_base:
        stop = store.acked_log_bytes
        checkpoints = epoch.checkpoints
        i = bisect_right(checkpoints, (after + 1, -1)) - 1
        return epoch.id, checkpoints[i][1] if i >= 0 else HEADER_SIZE, stop
    segment = epoch.retained
    if segment is None or after < segment.base:
        oldest = epoch.oldest_offset
        raise OffsetGone(
            f"offset {after} was compacted away and is not retained; the oldest retained offset is {oldest}",
            oldest=oldest,
        )
    return segment


def _frames(store: LogSource, after: int, source: Source) -> Iterator[bytes]:
    while True:
        if isinstance(source, retain.Segment):
            if source is not store.epoch_state.retained:  # rule 3: replaced or dropped
                source = _source(store, after)
                continue
            try:
                for frame_offset, frame in retain.read(source, after):
                    yield frame
                    after = frame_offset
            except retain.SegmentDamaged as exc:
                raise _drop(store, source, exc) from None
            source = _source(store, after)  # the log, or a newer segment
            continue
        epoch_id, start, stop = source
        epoch = store.epoch_state
        if epoch_id != epoch.id:  # rule 3: the log was replaced
            source = _source(store, after)
            continue
        fd = os.open(epoch.log_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            for frame_offset, frame in read_frames(fd, start, stop):
                if frame_offset > after:
                    yield frame
        finally:
            os.close(fd)
        return


def _drop(store: LogSource, segment: retain.Segment, exc: retain.SegmentDamaged) -> OffsetGone:
    """Rule 5: the segment is ignored from now on; the error for the reader."""
    if store.drop_retained(segment):
        log.error(
            "%s: ignoring the retained log segment: %s; offsets before %d answer 410 offset_gone",
            store.directory,
            exc,
            store.epoch_state.log_base,
        )
    oldest = store.epoch_state.oldest_offset
    return OffsetGone(
        f"the retained log is damaged ({exc.reason}); the oldest retained offset is {oldest}", oldest=oldest
    )
