"""A read replica takes its primary's epoch: the snapshot stream read, checked, installed.

follower.py holds the rules (its docstring, numbered 1-9) and decides when each applies;
this module carries out their steps that read the primary's `/snapshot` and
`/replicate/snapshot` (rules 1, 2, 5 and 9) and the one that replaces the replica's store
(rule 2), so that the reading loop there stays a loop of decisions:

    upstream = Upstream(primary, endpoint, fingerprint)
    theirs = upstream.snapshot()         # GET /snapshot as a PrimarySnapshot, checked (rules 1, 5, 7a, 9)
    upstream.check_fingerprint(theirs.fingerprint)  # ConfigError for another schema (rule 1)
    epoch, after = upstream.cut()        # the stream's header only, checked, then closed (rule 9)
    image, history = upstream.image()    # the whole snapshot, checked (rule 2)
    tenant = Tenant(directory, opener, status, source)
    tenant.install(image, history)       # the store replaced, the writer lock kept (rule 2)

It exists apart because the follower's module had reached the house's 600 lines with two
jobs in it: following a stream, and swapping one store for another.

Invariants:
1. Nothing unchecked is installed: the snapshot arrives whole (its end message's size and
   crc32, primary.py rule 4), under our schema's fingerprint, decodes line by line and whole
   (storage/snapshotreader.py), and its own header names the epoch and offset the stream's
   header names. Damage in transit (`StreamError`, `CorruptLog`) goes up as it is: the
   follower takes it as transient (its rule 2). A stream that contradicts itself (it
   parsed, but says two things) stops following (`StopFollowing`).
2. The writer lock is never let go: the store is closed with `keep_lock=True` (what was
   applied is durable by then), `compact.install` lays the snapshot and an empty log of its
   epoch, and the opener is given the lock. An install that fails leaves the tenant as it
   was (compact.install): it is opened again and handed on before the error goes up. A
   store that does not open again stops following (rule 4).
3. The history record is adopted after the install, then the new store is handed on
   (`on_store`): a crash between the two leaves the old record, and the next start
   bootstraps again (rule 7).
4. The primary's answers are read in one place each (answers.py): its `/snapshot` body
   (`parse_snapshot_body`) into a `PrimarySnapshot`, and the `/replicate/snapshot`
   header (by primary.py's readers) into a `SnapshotHeader`: an object whose `epoch` is a
   non-empty string, `offset` a non-negative integer (a bool or a float is not one),
   `fingerprint` a string and `history` null, absent or a history record. Anything else
   is `MalformedAnswer`, naming the field, its value and what was expected: transient,
   like a primary that does not answer (the follower retries while serving), never taken
   for another schema, an offset of 0 or, for a garbled `history`, no history. What stays
   definitive: a fingerprint that is a string but not ours (`ConfigError`, rule 1) and a
   header whose epoch or offset contradicts the snapshot under it (`StopFollowing`).

Imports storage and the replica's primary seam (primary.py); no asyncio, no threads: where
a step runs (the event loop, or the start-up before it) is the follower's business.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from dbsvc.errors import ConfigError, HandshakeRefused
from dbsvc.replica.answers import PrimarySnapshot, parse_snapshot_body
from dbsvc.replica.consumer import Endpoint
from dbsvc.replica.groups import Pipeline
from dbsvc.replica.primary import Primary, Stream, read_snapshot, read_snapshot_header
from dbsvc.replica.status import ReplicaStatus
from dbsvc.storage import compact
from dbsvc.storage.history import History
from dbsvc.storage.lock import WriterLock
from dbsvc.storage.snapshot import SnapshotImage
from dbsvc.storage.snapshotreader import decode_snapshot
from dbsvc.storage.store import Store

log = logging.getLogger("dbsvc.replica")

Opener = Callable[[WriterLock | None], Store]


class StopFollowing(Exception):
    """A definitive answer: stop following (follower.py rule 4). Public because this module
    and the follower's both decide it."""


class Upstream:
    """The primary's answers as the replica judges them: its `/snapshot` (rules 1 and 5) and
    its `/replicate/snapshot`, whole (rule 2) or its header alone (rule 9)."""

    def __init__(self, primary: Primary, endpoint: Endpoint, fingerprint: str) -> None:
        self.primary = primary
        self.source = endpoint.http_base
        self.fingerprint = fingerprint

    def snapshot(self) -> PrimarySnapshot:
        """The primary's `/snapshot`, checked (invariant 4): OSError or ValueError for no
        answer or one that is not JSON (primary.py rule 1), MalformedAnswer for JSON that
        is not a `/snapshot` body."""
        return parse_snapshot_body(self.primary.snapshot())

    def check_fingerprint(self, theirs: object) -> None:
        """Rule 1: the primary serves our schema, or nothing of it is taken."""
        if theirs != self.fingerprint:
            raise ConfigError(
                f"the primary's schema fingerprint {theirs!r} differs from this replica's "
                f"{self.fingerprint!r}: serve the same schema on both"
            )

    def cut(self) -> tuple[str, int]:
        """Rule 9: the primary's epoch and the offset it starts after (its cut): the header
        of `/replicate/snapshot`, read and checked (answers.py rule 2), then the socket
        closed before the snapshot comes."""
        with self._open() as ws:
            header = read_snapshot_header(ws)
        self.check_fingerprint(header.fingerprint)
        return header.epoch, header.offset

    def image(self) -> tuple[SnapshotImage, History | None]:
        """Rule 2: the primary's epoch base, checked whole (invariant 1), and the history
        record its header names (None for a primary without one)."""
        with self._open() as ws:
            header, data = read_snapshot(ws)
        self.check_fingerprint(header.fingerprint)
        image = decode_snapshot(f"{self.source}/replicate/snapshot", data)
        if image.head_offset != header.offset or image.epoch != header.epoch:
            raise StopFollowing("the snapshot's own header disagrees with the stream's header")
        return image, header.history

    def _open(self) -> Stream:
        try:
            return self.primary.epoch_snapshot()
        except HandshakeRefused as exc:
            raise StopFollowing(f"the primary refused /replicate/snapshot: {exc}") from None


class Tenant:
    """The replica's own tenant: its open store, the groups applied to that store and not yet
    known durable (groups.py G3), and the install that replaces the store (invariants 2, 3).
    `on_store` is told of every store opened after the first."""

    def __init__(
        self,
        directory: str,
        opener: Opener,
        status: ReplicaStatus,
        source: str,
        on_store: Callable[[Store], None] | None = None,
    ) -> None:
        self.directory = directory
        self.opener = opener
        self.status = status
        self.source = source  # the primary's base URL, for the log
        self.on_store = on_store
        self.pipeline = Pipeline()
        self.store: Store = opener(None)

    async def apply(self, frames: list[bytes], pipelined: bool) -> None:
        """Follower rule 3: apply `frames` to the store as one group (groups.py G3)."""
        await self.pipeline.apply(self.store, frames, pipelined)

    def install(self, image: SnapshotImage, history: History | None) -> None:
        """Rule 2: our epoch base becomes the primary's (the lock never let go), then our
        history its history (invariant 3)."""
        lock = self.store.close(keep_lock=True)  # what was applied is durable by then
        self.pipeline.unsynced = None
        try:
            compact.install(self.directory, image)
        except BaseException:  # the tenant is as it was (compact.install): serve it again
            self._reopen(lock)
            raise
        self._reopen(lock, handed=False)
        if history is not None:
            self.store.adopt_history(history)
        self.status.bootstraps += 1
        self.status.synced = True  # rule 8
        log.info("bootstrapped from %s: epoch %s at offset %d", self.source, image.epoch, image.head_offset)
        if self.on_store is not None:
            self.on_store(self.store)  # its history adopted

    def _reopen(self, lock: WriterLock | None, handed: bool = True) -> None:
        """Open the store again, the lock kept (rule 2), and hand it on; else stop (rule 4)."""
        try:
            self.store = self.opener(lock)
        except Exception as exc:
            raise StopFollowing(f"the store did not open again after a bootstrap: {exc}") from exc
        if handed and self.on_store is not None:
            self.on_store(self.store)
