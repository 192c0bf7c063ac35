"""Online compaction: a serving store starts a new epoch without stopping its writers.

Trigger (checked after each write, compactor.py `Compactor.after_write`): the log is over `compact_bytes`
(`Store.open(..., compact_bytes=)`, default 64 MiB, the same rule as at open) and holds more
than twice as many rows as there are live records, or more than twice the snapshot's bytes
(recovery.py `needs_compaction`). One compaction runs at a time.

Steps (loop = the event-loop thread; thread = `asyncio.to_thread`)::

    loop    cut: for every model its primary key's sublists (shared copy-on-write,
            `SortedIndex.share`), its row count and watermark; note the head offset H and
            the log's byte size P there; freeze the heap (gc.freeze). Records are replaced,
            never mutated, so the records are not copied: until the snapshot is written,
            each replace or delete first notes the record it replaces (`TableCut.note_write`),
            and the thread reads the image through that. An insert notes nothing: its id
            was not live at the cut (a delete since the cut noted it first), and the image
            reads only the ids live there (writes.py rule 4).
    thread  gather the ids at the cut from the shared sublists; write snapshot.new (epoch
            E2, head H) from the cut, a block at a time, fsync it      -> fault step 1
    thread  write log.retained.new: the newest frames of the old retained segment and
            of the old log's [header, P) within `retain_bytes` (retain.py), fsync it;
            nothing when nothing is retained                           -> fault step 2
    thread  log.new = header (E2, base H) + the frames of the old log in [P, P1), P1 its
            size when this step starts; fsync it; then, while more than SWITCH_BYTES
            were written since (at most CATCH_UPS times), append those too (`catch_up`)
    loop    in the committer, between two fsyncs (commit.py `run_between_fsyncs`):
            append the frames in [P1, end) to log.new, fsync it        -> fault step 3
            fsync the directory                                        -> fault step 4
            rename snapshot.new -> snapshot (the commit point)         -> fault step 5
            fsync the directory                                        -> fault step 6
            rename log.retained.new -> log.retained, or unlink
            log.retained when nothing is retained                      -> fault step 7
            rename log.new -> log                                      -> fault step 8
            fsync the directory                                        -> fault step 9
            write to the new log from now on; every model's history becomes its rows
            after H on top of the snapshot's records; epoch E2, log base H; `frames_after`
            serves offsets up to H from the new retained segment

The file steps and their fault-hook numbers are exactly those of offline compaction
(compact.py `install`), so a crash after any of them recovers the same way: before the
commit point the old snapshot + old log + old retained segment stand (the `.new` files
are discarded); after it, `log.retained.new` and `log.new` (complete and fsynced before the
commit point) replace the old ones.

Writes in flight: the switch runs inside the committer task when no fsync is in flight,
so nothing is waiting on the old descriptor. Writes queued but not yet fsynced are *carried
over* rather than drained (under steady load the queue is never empty): their frames are
copied into log.new before its fsync, and rows at or before H are in the snapshot, so once
the switch returns every queued write is durable and is acknowledged at once. Draining
instead would stall writers for a whole fsync round at an arbitrary moment, or never end.

Watermarks restart in the new epoch (docs/guide/queries.md#epochs): a model's rows after H are
renumbered by (live records at H) - (watermark at H). Frames copied into the new log are
rewritten with the new `watermark` (logfile.py `renumber_frames`), as are the ring's and the
queued writes' events; offsets never change. Events published before the switch keep
their old-epoch watermark, and so do the frames of the retained segment (copied, never
renumbered). Offsets up to H are served from the retained segment afterwards as far as it
reaches back; older ones are gone (`OffsetGone`).

Pauses of the loop: the cut (the primary keys' sublists) and the switch (copy of the
frames written since P1 plus one file fsync, three directory fsyncs and two renames); both
short, and bench/README.md has the figures. The thread steps' files are fsynced each
`files.FLUSH_BYTES` as they are written, not only at their end: a group commit's fsync
meanwhile waits for the journal behind whatever another file's fsync is writing (ext4
data=ordered), so one 68 MB fsync held every writer ~130 ms (`files.flush_past`). The old snapshot's, retained segment's and log's blocks are freed
through descriptors held across the switch, in a thread afterwards (`hold_old_files`), not
inside the renames: each file nobody else reads is shrunk 4 MiB at a time with a pause
between pieces, then closed (`release_files`, freeing.py), so that no one free holds the
journal the group commits' fsyncs wait for; one a reader holds is freed whole by its
last reader's close. The thread steps hold the GIL in short pieces and are paced (`Pacer`):
the snapshot's records have their keys cut out 256 at a time and joined a column at a time
(snapshot.py, keycut.py), the frames since the cut renumbered 64 at a time, and after each piece the
thread sleeps twice the CPU it used, so it takes at most a third of the loop's core and the
loop, woken from a wait during which the thread took the GIL, waits for it at most one piece
(under a millisecond or two) instead of a whole block or the 5 ms switch interval. What the
thread waits for off the CPU is paced by its wall time (`WallPacer`): after each piece's
fsync of snapshot.new, log.retained.new and log.new's thread copies, and each piece of the
heap's collapse after the compaction (heap.py; in a task of its own, compactor.py invariant 5),
it sleeps PACE times that call's wall time (a collapse piece at least heap.py's
COLLAPSE_GAP), so that the disk and the
kernel's locks are the writers' two thirds of the time. A paced step runs
about three times as long, so what the loop wrote meanwhile is copied and fsynced by
`catch_up` steps until at most SWITCH_BYTES are left to the switch. Memory during a
compaction: the id lists (8 bytes per record), the records replaced since the cut, and one
block of rows; the old history and id lists are freed in the thread afterwards, a slice at
a time, and the heap is frozen again.

Failures: an error before the commit point (say ENOSPC writing snapshot.new) removes the
`.new` files, logs it and leaves the store serving on the old log; the next write past
the trigger tries again after `RETRY_AFTER` seconds. An error after it makes the store
read-only (the files are a valid new pair, the running writer can no longer trust its
descriptor); the next open finishes the switch. If the committer fails (an fsync error)
during the compaction, the compaction is abandoned with it. `close()` stops a compaction
in its thread step and waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dbsvc.errors import CorruptLog
from dbsvc.storage import compact, files, freeing, retain
from dbsvc.storage.files import FaultPlan, fsync_dir, write_all
from dbsvc.storage.idmap import LiveMap, records_at
from dbsvc.storage.logfile import FrameWalk, encode_header, renumber_frames
from dbsvc.storage.rows import Stored
from dbsvc.storage.snapshot import ModelStream, write_snapshot_stream

if TYPE_CHECKING:
    from dbsvc.storage.table import Table

log = logging.getLogger("dbsvc.storage")

CHUNK = 2048  # rows read from the cut at a time (the writer blocks them: snapshot.BLOCK_ROWS)
RETRY_AFTER = 30.0  # seconds between attempts after a failed compaction
COPY_CHUNK = 4 << 20  # bytes per read when copying frames into log.new
PACE = 2.0  # a thread step sleeps PACE times the CPU it used since its last pause (`Pacer`)
MAX_WALL_PAUSE = 0.25  # seconds: the longest pause after one piece's fsync or collapse (`WallPacer`)
PACE_FRAMES = 64  # frames renumbered between two pauses of `start_log`
SWITCH_BYTES = 32 << 10  # at most this much of the log is left for the switch to copy and fsync (`catch_up`)
CATCH_UPS = 8  # thread steps that copy the frames written meanwhile before the switch


class Cancelled(Exception):
    """The store closed while its compaction was in its thread step."""


@dataclass(slots=True)
class TableCut:
    """One model at the cut. The image is `records` (the live map, not a copy) as it stood
    at the cut: a replace or delete after the cut first notes the record it replaces in `before`
    (`note_write`, on the loop, before it touches `records`), and the snapshot thread reads
    `records` first and `before` second, so whichever of the two it saw, the value it
    keeps is the one at the cut."""

    table: Table
    records: LiveMap  # the table's live map: id -> stored record (table.py)
    pk_lists: list[list[Any]]  # the primary key's sublists at the cut (`SortedIndex.share`)
    count: int
    rows: int  # len(table.rows) at the cut
    watermark: int
    max_id: int
    before: dict[Any, Stored | None] = field(default_factory=dict)
    versions_before: dict[Any, int] = field(default_factory=dict)  # the versions `before`'s records had
    base_ids: list[Any] = field(default_factory=list)  # the ids at the cut, once gathered (`gather_ids`)

    @property
    def delta(self) -> int:
        return self.count - self.watermark

    def note_write(self, id_: Any) -> None:
        """A write to `id_` is about to change `records` (called on the loop)."""
        if id_ not in self.before:
            self.before[id_] = self.records.get(id_)
            self.versions_before[id_] = self.table.versions.get(id_)

    def gather_ids(self) -> list[Any]:
        """The ids at the cut, ascending, as one list (the new epoch's `base_ids`): filled
        in the snapshot thread one sublist at a time, so the GIL can pass back to the loop
        between two of them, instead of one 1,000,000-id copy on the loop at the cut. The
        list itself was made at the cut, before the store froze the heap there: a young
        list of every id would cost every young collection a walk over all of them
        (bench/README.md)."""
        ids = self.base_ids
        assert not ids, "the ids of a cut are gathered once"
        for sub in self.pk_lists:
            ids += sub
        assert len(ids) == self.count, f"{self.table.name}: {len(ids)} ids at the cut, {self.count} records"
        return ids

    def image_rows(self, ids: list[Any]) -> tuple[list[Stored], list[int]]:
        """The records of `ids` (ascending, live at the cut) and their versions as they
        stood at the cut (called in the snapshot thread): the table's map and versions
        read first, each as one lookup mapped over the ids in C (`records_at`,
        `Versions.get_many`: no Python frame an id, so the thread's hold on the GIL is the
        C call's), the notes second, so whichever of the two a write reached first, the
        value kept is the cut's (class docstring). Only the ids noted since the cut are
        looked up one by one."""
        records = records_at(self.records, ids)
        versions = self.table.versions.get_many(ids)
        before = self.before
        if before:
            noted = self.versions_before
            for id_ in before.keys() & ids:
                at = bisect_left(ids, id_)
                records[at] = before[id_]
                # noted with the record, unless this thread came between the two notes
                # (note_write): then nothing has changed the version yet
                versions[at] = noted.get(id_, versions[at])
        if None in records:
            missing = next(id_ for id_, record in zip(ids, records) if record is None)
            raise AssertionError(f"{self.table.name} {missing!r} was live at the cut")
        return records, versions  # type: ignore[return-value]  # no None: checked above


@dataclass(slots=True)
class Cut:
    epoch: str
    head: int  # offset of the last row in the image
    position: int  # byte size of the old log at the cut
    tables: list[TableCut]
    took: float  # seconds the loop spent copying
    snapshot_bytes: int = 0  # the size of snapshot.new once written

    def deltas(self) -> dict[str, int]:
        return {tc.table.name: tc.delta for tc in self.tables}


@dataclass(slots=True)
class Progress:
    """What a running compaction shares between its task, its thread and `close()`.
    `woken` is set by `cancel()`: a `WallPacer` pause under way ends at once, so `close()`
    waits for the call in flight, not for a pause (a collapse's is 0.1 s at least)."""

    cancelled: bool = False
    committed: list[bool] = field(default_factory=lambda: [False])
    idle: threading.Event = field(default_factory=threading.Event)
    woken: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    def cancel(self) -> None:
        """Stop the steps at their next check, and wake a pause under way."""
        self.cancelled = True
        self.woken.set()

    def check(self) -> None:
        if self.cancelled:
            raise Cancelled("the store closed during compaction")


class Pacer:
    """The pauses of a thread step (called in its thread, between pieces of its work): a
    check for `close()`, then a sleep of PACE times the thread's CPU since the last pause.

    Why: the snapshot thread is pure Python and C calls that hold the GIL; whenever the loop
    waits in select (for a group's fsync, say) the thread takes the GIL, and the loop, woken,
    waits for it back up to the switch interval (5 ms) or to the end of the thread's current
    C call. Unpaced, PATCH waves during the snapshot took 1.7-4.2 times the median wave
    before it (bench/compaction_tail.py; bench/README.md, wt-ptail). Paced, the thread takes
    at most 1 / (1 + PACE) of the core and is asleep, not queued for the GIL, the rest of
    the time; the snapshot takes about 1 + PACE times as long on the wall clock, which only
    keeps the cut's notes (`TableCut.before`) that much longer."""

    __slots__ = ("progress", "mark")

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.mark = time.thread_time()

    def __call__(self) -> None:
        self.progress.check()
        used = time.thread_time() - self.mark
        if used > 0:
            time.sleep(used * PACE)
        self.mark = time.thread_time()


class WallPacer:
    """The pause after a thread step's call that waits on the disk or the kernel rather than
    running Python (a piece's fsync, `files.flush_past`; a piece of the heap's collapse,
    heap.py `collapse_in_pieces`): a sleep of PACE times that call's wall time (at most
    MAX_WALL_PAUSE), which `Pacer` (thread CPU) does not see. Called with the seconds the
    call took; answers True once `progress` is cancelled (the store closing; for a
    collapse, also a compaction starting): a copy stops at its next `check`, a collapse at
    once.

    Why: the pieces of a 256 MiB retained copy fsynced back to back keep the disk this
    file's, and each group commit's fsync queues behind the piece in flight (up to 196 ms
    at 1M, bench/README.md, wt-fork); with a pause after each, the disk is left to the
    writers' fsyncs about two thirds of the step (measured at load only: bench/README.md,
    wt-pace). The step runs about 1 + PACE times as long. A pause waits on the progress's
    `woken`, so `Progress.cancel()` (a `close()`, a compaction starting over a collapse)
    ends it at once; one only marked `cancelled` sleeps it out, at most the cap.

    `floor`: the least pause, whatever the call took, 0 s included (the heap's collapse
    passes heap.py's COLLAPSE_GAP, at most the cap): pieces spaced so that no request lives
    across two of them. A pause of 0 s (no floor, a call timed at 0 s) is no wait at all.

    Fault hook: `faults.check(name)` in each pause (`DBSVC_FAULT=flush:N:KILL` kills in the
    Nth pause after a piece's fsync of snapshot.new or log.retained.new, before the commit
    point; `collapse:N:KILL` in the heap's collapse after a compaction, past it)."""

    __slots__ = ("progress", "faults", "name", "floor")

    def __init__(
        self, progress: Progress, faults: FaultPlan = files.NO_FAULTS, name: str = "flush", floor: float = 0.0
    ) -> None:
        assert 0.0 <= floor <= MAX_WALL_PAUSE, f"a pause's floor of {floor!r} s is past the cap"
        self.progress, self.faults, self.name, self.floor = progress, faults, name, floor

    def __call__(self, took: float) -> bool:
        self.faults.check(self.name)
        seconds = max(min(took * PACE, MAX_WALL_PAUSE), self.floor)
        if not self.progress.cancelled and seconds > 0:
            self.progress.woken.wait(seconds)
        return self.progress.cancelled


def take_cut(tables: dict[str, Table], head: int, position: int) -> Cut:
    """What the snapshot needs, on the loop with no await (see the docstring): the primary
    keys' sublists, shared until `end_cut` (`SortedIndex.share`: a write copies a sublist
    before changing it), and the counters. Neither the ids nor the records are copied here
    (`TableCut`): the loop pays O(records / 512) instead of a copy of every id."""
    start = time.perf_counter()
    cuts = [TableCut(t, t.live, t.pk.share(), len(t.live), len(t.rows), t.watermark, t.max_id) for t in tables.values()]
    return Cut(compact.new_epoch(), head, position, cuts, time.perf_counter() - start)


def _row_chunks(tc: TableCut, pause: Pacer, faults: FaultPlan) -> Iterator[tuple[list[Stored], list[int]]]:
    """The image's rows and their versions, CHUNK at a time: stored records are row texts
    already (rows.py). Fault hook: `faults.check("rows")` before a model's first row is
    read, the cut taken (`rows:1:HOLD=<path>` holds the thread there while writes land)."""
    faults.check("rows")
    ids = tc.gather_ids()
    for i in range(0, len(ids), CHUNK):
        pause()
        yield tc.image_rows(ids[i : i + CHUNK])


def end_cut(tables: dict[str, Table]) -> None:
    """The snapshot thread no longer reads the cut's sublists: writes change them in place
    again. Called once the snapshot is written, and whenever a compaction stops."""
    for table in tables.values():
        table.pk.unshare()


def write_snapshot(directory: str, cut: Cut, progress: Progress, faults: FaultPlan) -> None:
    """Thread step: snapshot.new from the cut, fsynced (fault step 1), paced (`Pacer`) and
    fsynced on the way each `files.FLUSH_BYTES` (`files.flush_past`)."""
    pause, waited = Pacer(progress), WallPacer(progress, faults)
    streams = [
        ModelStream(
            tc.table.name,
            list(tc.table.model.fields),
            tc.count,
            tc.max_id,
            _row_chunks(tc, pause, faults),
            tc.table.key_fields,
        )
        for tc in cut.tables
    ]
    path = os.path.join(directory, compact.SNAPSHOT_NAME + compact.NEW_SUFFIX)

    def fill(fd: int) -> None:
        flushed = 0

        def step() -> None:  # at each pause: the pace, then a flush each FLUSH_BYTES
            nonlocal flushed
            pause()
            flushed = files.flush_past(fd, os.lseek(fd, 0, os.SEEK_CUR), flushed, waited)

        write_snapshot_stream(fd, cut.epoch, cut.head, streams, step)

    cut.snapshot_bytes = compact.write_durably(path, fill)
    faults.check("compact")


@dataclass(slots=True)
class NewLog:
    fd: int
    size: int
    copied: int  # old-log bytes copied so far (the old log's [P, copied))
    checkpoints: list[tuple[int, int]]
    next_offset: int  # the offset of the old log's frame at `copied`


def _copy_frames(
    path: str,
    src_fd: int,
    start: int,
    stop: int,
    new: NewLog,
    deltas: dict[str, int],
    every: int,
    pause: Pacer | None = None,
) -> None:
    """Append the old log's frames in [start, stop) to log.new, renumbered, in writes of
    about COPY_CHUNK bytes; note a checkpoint at every offset that is a multiple of `every`.
    `pause` (a thread step's) is called every PACE_FRAMES frames, and the copy is fsynced
    each `files.FLUSH_BYTES` on the way; the switch copies on the loop, without either.

    Every frame is checked as recovery checks it (offset, length, CRC: a checked walk), so a
    frame damaged on disk since it was written fails the compaction (`CorruptLog`) instead of
    reaching the new log: a renumbered frame gets a fresh CRC, which would make the damage a
    good frame there."""
    out: list[bytes] = []
    pending = 0
    flushed = new.size
    waited = WallPacer(pause.progress) if pause is not None else None
    walk = FrameWalk(src_fd, start, stop, new.next_offset, chunk=COPY_CHUNK)
    for frame in renumber_frames(walk, deltas, new.size, every, new.checkpoints):
        out.append(frame)
        pending += len(frame)
        if pause is not None and len(out) % PACE_FRAMES == 0:
            pause()
        if pending >= COPY_CHUNK:
            write_all(new.fd, b"".join(out))
            new.size += pending
            out, pending = [], 0
            if pause is not None:  # a thread step's copy is fsynced in pieces (`files.flush_past`)
                flushed = files.flush_past(new.fd, new.size, flushed, waited)
    if out:
        write_all(new.fd, b"".join(out))
        new.size += pending
    next_offset = walk.next_offset
    assert next_offset is not None  # a checked walk's
    if walk.end != stop:
        reason = walk.error or "no whole frame"
        raise CorruptLog(
            path,
            walk.end,
            f"the frame of offset {next_offset}: {reason}, where frames up to byte {stop} were acknowledged",
        )
    new.copied, new.next_offset = stop, next_offset


def start_log(directory: str, old_path: str, cut: Cut, stop: int, every: int, progress: Progress) -> NewLog:
    """Thread step: log.new with the header and the frames written between the cut and
    `stop`, fsynced; its descriptor stays open for the switch. Paced (`Pacer`): the frames
    since the cut are renumbered one by one in Python."""
    progress.check()
    path = os.path.join(directory, compact.LOG_NAME + compact.NEW_SUFFIX)
    fd = files.ops.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        header = encode_header(cut.epoch, cut.head)
        write_all(fd, header)
        new = NewLog(fd, len(header), cut.position, [], cut.head + 1)
        catch_up(old_path, new, cut, stop, every, progress)  # from the cut: nothing copied yet
        # The three `.new` names exist now: make them durable here, off the loop, so the
        # switch's own directory fsync (step 4) finds nothing left to write.
        fsync_dir(directory)
    except BaseException:
        files.ops.close(fd)
        raise
    return new


def catch_up(old_path: str, new: NewLog, cut: Cut, stop: int, every: int, progress: Progress) -> None:
    """Thread step: the old log's frames from what log.new has copied up to `stop`,
    appended to log.new (paced) and fsynced. `start_log` makes its first copy so; after it,
    each call takes the frames written since the last, so that the switch, which copies the rest on
    the loop and fsyncs it there, finds at most about SWITCH_BYTES to copy and to flush
    however long the paced steps took (compactor.py): an fsync's time on the loop grows
    with the bytes it flushes (176 KB left to the switch: a 23 ms pause, bench/README.md)."""
    src = os.open(old_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _copy_frames(old_path, src, new.copied, stop, new, cut.deltas(), every, Pacer(progress))
    finally:
        os.close(src)
    files.ops.fsync(new.fd)


def write_retained(
    directory: str, keep: retain.Plan | None, progress: Progress, faults: FaultPlan
) -> retain.Segment | None:
    """Thread step: log.retained.new, fsynced (fault step 2), its pieces' fsyncs paced
    (`WallPacer`)."""
    pending = retain.write_pending(directory, keep, progress.check, WallPacer(progress, faults))
    faults.check("compact")
    return pending


def finish_log(old_path: str, end: int, new: NewLog, cut: Cut, every: int, faults: FaultPlan) -> None:
    """Switch, before the commit point: the rest of the frames, fsync (fault step 3)."""
    src = os.open(old_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _copy_frames(old_path, src, new.copied, end, new, cut.deltas(), every)
    finally:
        os.close(src)
    files.ops.fsync(new.fd)
    faults.check("compact")


def hold_old_files(directory: str) -> list[int]:
    """Thread step before the switch: read-only descriptors on the snapshot and retained
    segment the switch's renames will replace. Renaming over a file whose last link it
    was frees its blocks inside the rename (tens of milliseconds for a large snapshot);
    with a descriptor still open the rename only drops the name, and the blocks are
    freed by `release_files` in a thread afterwards. Read-write, so that the release can
    shrink them (freeing.py); never written through."""
    held = []
    for name in (compact.SNAPSHOT_NAME, compact.RETAINED_NAME):
        path = os.path.join(directory, name)
        try:
            try:
                held.append(os.open(path, os.O_RDWR | os.O_CLOEXEC))
            except PermissionError:  # not ours to shrink: its close frees it whole
                held.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except FileNotFoundError:
            pass
    return held


def release_files(
    held: list[int], writer_fds: list[int], progress: Progress, faults: FaultPlan = files.NO_FAULTS
) -> list[freeing.Release]:
    """Thread step after the switch: free the old files' blocks off the loop and close the
    held descriptors (`hold_old_files`) and the old log's writer descriptor. A file nobody
    else reads is shrunk a piece at a time first (freeing.py); `progress.cancelled`
    (`close()`, or a compaction failing before its switch, which sets it before the call)
    frees the rest whole, with no pauses. Returns how each file went."""
    stopped = lambda: progress.cancelled  # read at each piece, not now
    releases = []
    for fds, close in ((writer_fds, files.ops.close), (held, os.close)):
        while fds:
            fd = fds.pop()
            try:
                releases.append(freeing.free(fd, stopped, faults))
            finally:
                close(fd)
    return releases


def discard(directory: str) -> None:
    """Remove a compaction's `.new` files (before its commit point only): compact.py
    `discard_new`'s order, its failure logged, never raised over what stopped the compaction."""
    try:
        compact.discard_new(directory)
    except OSError as exc:
        log.error("%s: could not discard an unfinished compaction (the next open will): %s", directory, exc)


def drop_slowly(lists: list[list[Any]]) -> None:
    """Free large lists (the old epoch's history and id lists) from a thread, a slice of
    each at a time: freeing a million-entry list at once holds the GIL for tens of ms."""
    for rows in lists:
        while rows:
            del rows[-CHUNK:]
    lists.clear()


async def in_thread(progress: Progress, fn: Any, *args: Any) -> Any:
    """Run a thread step; `progress.idle` is clear while it runs (`close()` waits on it).

    The thread clears it, not the loop: a step cancelled while still queued in the executor
    (the task cancelled by `asyncio.run`'s end, or by `close()`, in the moment between the
    submit and a worker taking it) never runs, and an `idle` cleared on the loop would then
    never be set again: the cancelled task's `idle.wait(60)` held the loop a whole minute
    (about one run in thirty of a churn test). A step that starts once `close()` has
    cancelled the compaction before its commit point does no file work: the flag is read
    after the clear, so either `close()` waits for this step or the step sees the flag."""

    def call() -> Any:
        progress.idle.clear()
        try:
            if progress.cancelled and not progress.committed[0]:
                raise Cancelled("the store closed before this compaction step started")
            return fn(*args)
        finally:
            progress.idle.set()

    return await asyncio.to_thread(call)
