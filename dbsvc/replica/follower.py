"""A read replica: this process's tenant follows a primary's `/replicate` stream.

`dbsvc serve SCHEMA --follow URL` opens its own tenant directory read-write, for the stream
only, and serves reads from it: GET, list, `as_of`, `/subscribe`, `/live-query`,
`/snapshot`, `/metrics`. The replica's log holds the primary's frames byte for byte, so
offsets, watermarks and `as_of` history are the primary's, and a client can switch between
them with `after=` and lose nothing.

Rules:
1. Fingerprint: at start the primary's `GET /snapshot` names its schema fingerprint; one
   that differs from ours refuses the start (`ConfigError`, both fingerprints in the
   message). A primary that cannot be reached yet does not stop the start: the check runs
   again at every connection, and a mismatch then stops following.
2. Bootstrap: when our epoch is not the primary's and rule 9 cannot follow it (an empty
   replica, another history, a cut this store cannot make), or the primary answers 410
   `offset_gone`, the replica fetches `/replicate/snapshot` (the primary's epoch base:
   checked per line and whole), installs it as its own epoch base (compact.install:
   snapshot plus an empty log of that epoch), reopens its store with the writer lock kept
   throughout, and follows from its offset: the snapshot rows, then the same log rows. A
   snapshot damaged on its way (primary.py rule 4, a line's CRC) or not installed (the
   tenant is left as it was) is transient, at start too: rule 4's retry, while serving.
3. Following: `/replicate?after=<our head>`; frames are read, checked (CRC, length within
   this store's `max_payload`, offset continuity) and grouped on the reading thread, then
   applied on the event loop a group at a time (up to groups.BATCH frames or BATCH_BYTES bytes)
   with `Store.apply_replicated_frames`, which decodes each payload once, checks it fits
   (model, fields, state) and commits the group with one write and one fsync
   (storage/follow.py rule 5). The thread hands a group over and reads and checks the next
   while the loop applies it, and a full group is written while the loop applies the next
   one; at most groups.DEPTH groups are in hand and two unacknowledged, so a fast primary
   never grows the replica's memory, and nothing unchecked is ever applied (groups.py
   G1-G4). A quiet stream, or a connection that ends, waits until every group handed over
   is applied and durable, so the next connection resumes at the replica's acknowledged
   head.
4. Reconnect with a capped, jittered backoff on anything transient (connection refused or
   dropped, 5xx, a `/snapshot` body or a `/replicate/snapshot` header that is not one,
   a garbled history included: bootstrap.py invariant 4, at start too). A definitive answer (401, 403, 404, another 4xx, a fingerprint
   mismatch, a frame that does not fit) stops following; so does a store that refuses
   writes (its log's fsync failed: fail-stop, commit.py) and any error not named here: the
   replica goes on serving what it has, `/metrics` shows the state and the error, and the
   log says why.
5. Lag: `primary_offset` is the primary's head (its `/snapshot`, polled every second, and
   our own head whenever the stream has gone quiet, which means caught up);
   `lag_offsets` = primary_offset - our head; `lag_seconds` = seconds since we were last
   caught up (0 while caught up).
6. Shutdown: `stop()` ends the thread within about a second; frames already applied are
   durable by then (the store flushes on close).
7. Histories (docs/replication.md, "Histories"): at every connection, before anything is
   applied, the replica proves that it holds a prefix of the primary's history:
   a. the history record (storage/history.py) of the primary's `/snapshot`: the same id as
      ours, or one that forked from ours at or after our head, passes (ours becomes the
      primary's); any other is a mismatch. A primary without a record (written before
      histories) is judged by (b) alone; a replica without one adopts the primary's once
      (b) passed.
   b. the head frame: at head H (> 0, frame H still in our log) we ask for
      `/replicate?after=H-1` and the first frame must be byte-equal to our frame H; we then
      go on after it. A primary whose head is below H is shorter (a mismatch); a 410 for
      H-1 means it no longer holds H (the same epoch, so bootstrap again).
   On a mismatch the replica bootstraps again (rule 2), but never discards rows the
   primary does not have: when the primary's head is below ours (shorter, or empty), it
   stops following, keeps serving what it has, reports state `diverged` in `/metrics`,
   `/snapshot` and `/health`, and logs what the operator can do: restart it with
   `--rebootstrap` (SERVICE_FOLLOW_REBOOTSTRAP=1), which lets it bootstrap anyway, or
   drop its tenant. The same guard holds for every bootstrap (an epoch change included).
8. Readiness (docs/replication.md, "Readiness"): the replica is ready (`status.synced`, so
   `/ready` 200) once its store holds a primary's epoch: after its first bootstrap, or a
   connection that finds it in the primary's epoch already, or at start when its store
   holds rows (it followed before: what it serves is a past state of the primary). An empty
   replica whose primary cannot be reached, or whose bootstrap failed, is not ready: it
   would answer empty lists, and a load balancer probing `/ready` must send reads elsewhere.
9. The primary compacts (docs/replication.md, "The primary compacts"): when its `/snapshot`
   (at every connection, and every poll) names another epoch, or a frame of its next
   epoch arrives (`EpochChanged`), and its history is ours (same id, its head not behind
   ours), the replica reads the primary's cut, the new epoch's id and the offset H it
   starts after, from the header of `/replicate/snapshot` (then closes it: the snapshot is
   never sent), and compacts at H itself (`Store.compact_at`, storage/compactor.py
   invariant 4): its epoch, snapshot, watermarks and `as_of` answers are then the
   primary's, nothing was downloaded, no socket closed. Behind H, it follows its own
   epoch up to H first (the primary serves those rows from `log.retained`; a 410 is rule
   2). Anything else, or a cut the store refuses, is rule 2's bootstrap.

The reading side runs in one thread; everything that touches the store runs on the event
loop. The primary is reached through `primary.py` (`HttpPrimary`: http.client and the blocking
client of `dbsvc.http.ws.client`); this module only decides. What a rule does to the primary's
`/snapshot` and `/replicate/snapshot` and to the store is bootstrap.py's: `Upstream` reads and
judges the primary's answers (its `/snapshot` as a typed `PrimarySnapshot`, rule 1's fingerprint, rule 2's snapshot checked whole, rule 9's
cut from the stream's header), and `Tenant` holds the store, the groups applied to it not yet
durable (rule 3) and rule 2's install with the lock kept. When each applies is decided here.

The `primary.py` seam is why a `Follower` takes a `primary=`: tests/support/follower_kit.py
plays a primary from a script (tests/replica/test_follower_*.py) and goes through every
decision above (a new epoch met mid-stream, the wait for a batch to be durable, the
fingerprint and history checks of every connection, each refusal) in process, on a real
store, without a server. `next_wait` is rule 4's backoff as a pure step
for the same reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar, TypeVarTuple

from dbsvc.errors import (
    ConfigError,
    EpochChanged,
    HandshakeRefused,
    MalformedAnswer,
    OffsetGone,
    OffsetOutOfRange,
    StorageError,
    StreamError,
    WebSocketClientError,
)
from dbsvc.replica.bootstrap import Opener, PrimarySnapshot, StopFollowing, Tenant, Upstream
from dbsvc.replica.consumer import Endpoint
from dbsvc.replica.groups import BadFrame, Handoff, read_group
from dbsvc.replica.primary import HttpPrimary, Primary, Stream
from dbsvc.replica.status import ReplicaStatus
from dbsvc.storage.history import History
from dbsvc.storage.logwriter import WriteState
from dbsvc.storage.snapshot import SnapshotImage
from dbsvc.storage.store import Store

log = logging.getLogger("dbsvc.replica")

POLL_SECONDS = 1.0
MAX_BACKOFF = 10.0
RETRIED = frozenset({408, 425, 429})
HEAD_FRAME_SECONDS = 10.0  # how long the primary's copy of our head frame may take (rule 7b)
COMPACT_SECONDS = 3600.0  # how long a compaction at the primary's cut may take (rule 9)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


def next_wait(delay: float, draw: float) -> tuple[float, float]:
    """Rule 4 after a failed attempt: (seconds to wait now, the delay after that): `delay`
    jittered to 0.5-1.5 times (`draw` in [0, 1), random.random()), then doubled up to
    MAX_BACKOFF, so replicas of one primary do not reconnect in step."""
    return delay * (0.5 + draw), min(delay * 2, MAX_BACKOFF)


class _Rebootstrap(Exception):
    """The stream cannot continue from our state: bootstrap again (rule 2)."""


class _NewEpoch(_Rebootstrap):
    """A frame of the primary's next epoch (`EpochChanged`): compact at its cut (rule 9)."""


class _Diverged(Exception):
    """Bootstrapping again would discard rows the primary does not have (rule 7)."""


class Follower:
    """Keeps one tenant's store in step with a primary (see the module docstring)."""

    def __init__(
        self,
        endpoint: Endpoint,
        directory: str,
        opener: Opener,
        fingerprint: str,
        *,
        token: str | None = None,
        on_store: Callable[[Store], None] | None = None,
        rebootstrap: bool = False,
        primary: Primary | None = None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        """`primary`: how the primary is reached (primary.py; by default over HTTP at
        `endpoint`, with `token`). `poll_seconds`: how often its `/snapshot` is polled
        (rule 5)."""
        self.endpoint = endpoint
        self.rebootstrap = rebootstrap  # rule 7: may discard rows the primary lacks
        self.directory = directory
        self.fingerprint = fingerprint
        self.status = ReplicaStatus(endpoint.http_base)
        reached = primary if primary is not None else HttpPrimary(endpoint, token)
        self._upstream = Upstream(reached, endpoint, fingerprint)  # rules 1, 2, 5 and 9's cut
        self.poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handoff: Handoff | None = None  # the groups read, handed to the loop (rule 3)
        self._cut: tuple[str, int] | None = None  # the primary's next epoch and its base (rule 9)
        # The store, the groups applied to it not yet durable (rule 3), its install (rule 2).
        self._tenant = Tenant(directory, opener, self.status, endpoint.http_base, on_store)
        self.status.synced = self.store.head_offset > 0  # rule 8: it followed before

    @property
    def store(self) -> Store:
        """The replica's store: another one after each bootstrap (rule 2)."""
        return self._tenant.store

    @property
    def on_store(self) -> Callable[[Store], None] | None:
        """Told of each store a bootstrap opens (the application serves that one from then)."""
        return self._tenant.on_store

    @on_store.setter
    def on_store(self, hand: Callable[[Store], None] | None) -> None:
        self._tenant.on_store = hand

    # -- start-up (before the loop runs) ---------------------------------------------------

    def prepare(self) -> None:
        """Rules 1 and 2 at start: check the fingerprint, bootstrap an empty store."""
        try:
            snapshot = self._upstream.snapshot()
        except (OSError, ValueError) as exc:
            log.warning("primary %s not reachable yet (%s); following starts when it is", self.endpoint.http_base, exc)
            self.status.error = f"the primary is not reachable: {exc}"
            return
        except MalformedAnswer as exc:  # as transient as no answer (bootstrap.py invariant 4)
            log.warning("following %s: %s; retrying while serving", self.endpoint.http_base, exc)
            self.status.error = str(exc)
            return
        self._upstream.check_fingerprint(snapshot.fingerprint)
        self.status.primary_offset = snapshot.offset
        if snapshot.epoch == self.store.epoch:
            self.status.synced = True  # rule 8
        elif self.store.head_offset > 0 and self._continues_ours(snapshot):
            pass  # rule 9: the first connection compacts at the primary's cut, or bootstraps
        else:
            try:
                self._bootstrap()
            except _Diverged as exc:
                self._diverge(str(exc))
            except StopFollowing as exc:
                raise ConfigError(f"cannot follow {self.endpoint.http_base}: {exc}") from None
            except (WebSocketClientError, OSError, ValueError, StorageError, MalformedAnswer) as exc:  # rule 2
                log.warning("bootstrap from %s failed (%s); retrying while serving", self.endpoint.http_base, exc)
                self.status.state, self.status.error = "reconnecting", f"bootstrap failed: {exc}"

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._handoff = Handoff(loop, self._tenant.apply)
        self._thread = threading.Thread(target=self._run, name="dbsvc-follower", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- the reading thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._follow_until_stopped()
        finally:
            self._upstream.primary.close()  # its kept /snapshot connection

    def _follow_until_stopped(self) -> None:
        delay = 0.2
        last_poll = 0.0
        while not self._stop.is_set() and self.status.state != "diverged":
            try:
                self._follow()
                delay = 0.2
                continue
            except _Rebootstrap as exc:
                log.warning("following %s: %s; bootstrapping again", self.endpoint.http_base, exc)
                try:
                    self._bootstrap()
                    delay = 0.2
                    continue
                except _Diverged as diverged:
                    self._diverge(str(diverged))
                    return
                except StopFollowing as stop:
                    self._stopped(str(stop))
                    return
                except Exception as again:  # the primary went away meanwhile
                    self._transient(f"bootstrap failed: {again}")
            except (StopFollowing, ConfigError) as exc:
                self._stopped(str(exc))
                return
            except (WebSocketClientError, OSError, ValueError, StreamError, MalformedAnswer) as exc:
                self._transient(str(exc))  # StreamError: a cut's header damaged (a frame's stops following)
            except Exception as exc:  # the store refuses writes (a failed fsync: commit.py), or a bug
                self._stopped(str(exc))  # never a reading thread gone while /metrics says "following"
                return
            if time.monotonic() - last_poll > self.poll_seconds:
                last_poll = time.monotonic()
                try:
                    self._poll_head()
                except Exception:  # noqa: BLE001 - the next connection meets it again and decides
                    pass
            wait, delay = next_wait(delay, random.random())
            self._stop.wait(wait)

    def _stopped(self, reason: str) -> None:
        self.status.state = "stopped"
        self.status.error = reason
        log.error("stopped following %s: %s", self.endpoint.http_base, reason)

    def _diverge(self, reason: str) -> None:
        """Rule 7: stop following, keep serving, say what the operator can do."""
        self.status.state = "diverged"
        self.status.error = reason
        log.error(
            "stopped following %s: %s. This replica keeps serving its %d rows but no longer follows. "
            "To discard them and copy the primary, restart it with --rebootstrap "
            "(or SERVICE_FOLLOW_REBOOTSTRAP=1), or drop its tenant (dbsvc tenant drop) and start it again; "
            "to keep them, back this tenant up first (dbsvc backup)",
            self.endpoint.http_base,
            reason,
            self.store.head_offset,
        )

    def _transient(self, reason: str) -> None:
        self.status.state = "reconnecting"
        self.status.error = reason
        self.status.reconnects += 1
        log.info("following %s: %s; reconnecting", self.endpoint.http_base, reason)

    def _follow(self) -> None:
        snapshot = self._upstream.snapshot()
        self._upstream.check_fingerprint(snapshot.fingerprint)
        self.status.primary_offset = snapshot.offset
        self._meet_epoch(snapshot)
        head = self.store.head_offset
        adopt = self._check_history(snapshot, head)
        if snapshot.offset < head:
            raise _Rebootstrap(f"the primary's head is offset {snapshot.offset}, behind this replica's {head}")
        own = self._call_on_loop(self._own_frame, head) if head > 0 else None
        after = head if own is None else head - 1
        try:
            ws = self._upstream.primary.replicate(after)
        except HandshakeRefused as exc:
            if exc.status == 410:
                raise _Rebootstrap(f"the primary no longer holds the rows after {after}") from None
            if exc.status == 400 and exc.code == "offset_out_of_range":
                raise _Rebootstrap(f"the primary's head is behind this replica's {head}") from None
            if exc.status >= 500 or exc.status in RETRIED:
                raise WebSocketClientError(f"the primary answered {exc.status}") from None
            raise StopFollowing(f"the primary refused /replicate: {exc}") from None
        with ws:
            if own is not None:
                theirs = ws.receive(timeout=HEAD_FRAME_SECONDS)
                if theirs is None:
                    raise WebSocketClientError(
                        f"the primary did not send its frame {head} within {HEAD_FRAME_SECONDS:.0f} s"
                    )
                if theirs != own:
                    raise _Rebootstrap(
                        f"the primary's frame at offset {head} differs from this replica's: "
                        "the histories diverged (a restore or a rewrite on the primary)"
                    )
            if adopt is not None:
                self._call_on_loop(self._adopt, adopt)
            self.status.state = "following"
            self.status.error = None
            self.status.synced = True  # rule 8: in the primary's epoch, its history proved
            try:
                self._stream(ws, head + 1)
            except _NewEpoch as exc:
                met = exc
            else:
                return
            finally:
                self._settle()
        self._meet_epoch(self._upstream.snapshot(), met)  # then the next connection goes on

    def _stream(self, ws: Stream, expected: int) -> None:
        """Rule 3: read, check and apply frames from `expected` on until stopped."""
        last_poll = time.monotonic()
        while not self._stop.is_set():
            try:
                batch, full = read_group(ws, expected, self.store.max_payload, 0.5)
            except BadFrame as exc:
                if exc.frames:  # the good frames before it still count
                    self._hand(exc.frames, False)
                raise StopFollowing(exc.reason) from None
            expected += len(batch)
            if batch or self._handoff_pending():
                # More is waiting only after a full group: read it while this one is applied.
                self._hand(batch, full)
            if not batch and self.store.head_offset >= self.status.primary_offset:
                self.status.caught_up_at = time.monotonic()  # quiet: caught up
            if time.monotonic() - last_poll > self.poll_seconds:
                last_poll = time.monotonic()
                self._poll_head()
            if self.store.head_offset >= self.status.primary_offset:
                self.status.primary_offset = self.store.head_offset
                self.status.caught_up_at = time.monotonic()

    def _poll_head(self) -> None:
        try:
            snapshot = self._upstream.snapshot()
        except (OSError, ValueError, MalformedAnswer):
            return  # the next connection asks again, and says why if it fails there
        self.status.primary_offset = max(self.status.primary_offset, snapshot.offset)
        self._meet_epoch(snapshot)

    def _check_history(self, snapshot: PrimarySnapshot, head: int) -> History | None:
        """Rule 7a: the primary's history to adopt once the head frame passed (None: keep
        ours); `_Rebootstrap` on a mismatch."""
        theirs = snapshot.history
        mine = self.store.history
        if theirs is None or (mine is not None and mine.id == theirs.id):
            return None
        if mine is None or head == 0 or theirs.shares_prefix(mine.id, head):
            return theirs
        raise _Rebootstrap(
            f"the primary is in history {theirs.id}, which does not continue this replica's "
            f"history {mine.id} at offset {head} (a restore or an import on the primary)"
        )

    async def _own_frame(self, head: int) -> bytes | None:
        """Our frame `head`, or None when our log no longer holds it (just bootstrapped)."""
        try:
            return next(iter(self.store.frames_after(head - 1)), None)
        except (OffsetGone, OffsetOutOfRange):
            return None

    async def _adopt(self, history: History) -> None:
        self.store.adopt_history(history)

    def _meet_epoch(self, snapshot: PrimarySnapshot, met: _NewEpoch | None = None) -> None:
        """Rule 9: the primary in another epoch than ours (its `/snapshot`, or `met`, a
        frame of its next epoch): compact at its cut, or follow on in ours up to the cut;
        `_Rebootstrap` when neither can be done."""
        epoch = snapshot.epoch
        if epoch == self.store.epoch:
            self._cut = None
            if met is not None:  # a renumbered frame with no new epoch: not the primary's history
                raise _Rebootstrap(str(met))
            return
        applied = self.store.applied_offset
        if not self._continues_ours(snapshot):
            raise _Rebootstrap(f"the primary is in epoch {epoch}, this replica in {self.store.epoch}")
        cut = self._cut
        if cut is None or cut[0] != epoch:
            cut = self._cut = self._upstream.cut()
        epoch, head = cut
        if head > applied and met is None:
            return  # its rows up to the cut come in our epoch (retained: else a 410, rule 2)
        reason = f"the primary is in epoch {epoch} from offset {head}, this replica in {self.store.epoch} at {applied}"
        if head > applied:
            raise _Rebootstrap(f"{reason}, and its frame {applied + 1} is of a later epoch")
        try:
            self._call_on_loop(self._compact_at, epoch, head, timeout=COMPACT_SECONDS)
        except ValueError as exc:
            raise _Rebootstrap(f"{reason}, and this replica cannot cut there: {exc}") from None
        self._cut = None

    def _continues_ours(self, snapshot: PrimarySnapshot) -> bool:
        """Rule 9: the primary's new epoch compacts the history we hold (same id, head not
        behind ours); else only a bootstrap, under rule 7's guard, may follow it."""
        theirs, mine = snapshot.history, self.store.history
        return (
            theirs is not None
            and mine is not None
            and theirs.id == mine.id
            and snapshot.offset >= self.store.applied_offset
        )

    async def _compact_at(self, epoch: str, head: int) -> None:
        await self.store.compact_at(epoch, head)
        if self.store.epoch != epoch:
            raise ValueError("the compaction failed (the log says why)")
        self.status.compactions += 1
        log.info("compacted at the primary's cut: epoch %s from offset %d (%s)", epoch, head, self.endpoint.http_base)

    def _call_on_loop(self, make: Callable[[*Ts], Coroutine[Any, Any, T]], *args: *Ts, timeout: float = 120) -> T:
        """Run the coroutine `make(*args)` on the event loop and wait for its result, once
        every group handed over was applied (groups.py G4): a compaction at the primary's
        cut, a bootstrap or a head frame never runs beside a group's apply."""
        assert self._loop is not None
        with _decided():
            if self._handoff is not None:
                self._handoff.drain(timeout)
            future = asyncio.run_coroutine_threadsafe(make(*args), self._loop)
            return future.result(timeout=timeout)

    def _handoff_pending(self) -> bool:
        """Whether a group handed over may not be durable yet (the loop's `unsynced` is
        read only once no group is in hand, when no apply runs that could change it)."""
        assert self._handoff is not None
        return self._handoff.in_hand() > 0 or self._tenant.pipeline.unsynced is not None

    def _hand(self, frames: list[bytes], full: bool) -> None:
        """Rule 3: hand a group to the loop (groups.py G4); a group not full is waited for
        until it and every group before it is durable."""
        assert self._handoff is not None
        with _decided():
            self._handoff.hand(frames, full, self._stop, 120)

    def _settle(self) -> None:
        """Wait until the last group applied is durable (the stream ended), so the next
        connection resumes at our head. A failure is logged; one that left the store
        read-only until a restart (a failed fsync: commit.py rule 4) stops following here
        (rule 4), where connecting again would say `following` for as long as the primary
        is quiet. Anything else the next apply reports."""
        try:
            if self._handoff is not None:
                self._handoff.drain(120)  # no group of this connection left to apply
            if self._tenant.pipeline.unsynced is None:
                return
            self._call_on_loop(self._tenant.apply, [], False)
        except Exception as exc:  # noqa: BLE001 - never hidden behind the stream's own error
            log.warning(
                "following %s: the last frames applied did not become durable: %s", self.endpoint.http_base, exc
            )
            self._tenant.pipeline.unsynced = None
            if self.store.health().state is WriteState.FAILED:
                raise StopFollowing(str(exc)) from exc

    # -- bootstrap (rule 2; its steps are bootstrap.py's) ------------------------------------

    def _bootstrap(self) -> None:
        """Rule 7's guard, then fetch and check the primary's snapshot here (a thread, or the
        start-up), then install it: on the event loop when one runs, since the store lives
        there."""
        primary_head = self._upstream.snapshot().offset  # fresh, for the guard below
        if self.store.head_offset > primary_head and not self.rebootstrap:
            raise _Diverged(
                f"the primary holds offsets up to {primary_head}, this replica up to "
                f"{self.store.head_offset}; bootstrapping again would discard the rows after "
                f"{primary_head}"
            )
        self.status.state = "bootstrapping"
        image, history = self._upstream.image()
        if self._loop is None:
            self._tenant.install(image, history)
        else:
            self._call_on_loop(self._install_on_loop, image, history)

    async def _install_on_loop(self, image: SnapshotImage, history: History | None) -> None:
        self._tenant.install(image, history)


@contextlib.contextmanager
def _decided() -> Iterator[None]:
    """What the loop refused, as the reading thread's decision: a frame of the primary's
    next epoch is rule 9's cut; a frame that does not fit stops following (rule 4)."""
    try:
        yield
    except EpochChanged as exc:
        raise _NewEpoch(str(exc)) from None
    except StreamError as exc:
        raise StopFollowing(str(exc)) from None
