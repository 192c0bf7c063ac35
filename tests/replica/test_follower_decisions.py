"""A read replica's decisions (dbsvc/replica/follower.py, rules 1-8), each gone through in
process: a `Follower` on a real store in a temporary directory, its reading thread and an
event loop of its own, and a primary played from a script through the follower's `primary=`
seam (dbsvc/replica/primary.py). No server: the end-to-end cases are in
test_replica_follow.py and test_replica_history.py; these reach the branches a real
primary only takes by chance (a new epoch met mid-stream, the wait for a batch to be durable
before reading on, the fingerprint and history checks on every connection, each refusal).

Every wait is a poll with a deadline; a scripted stream with nothing left to send waits on
an event that the teardown sets, so no test sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from dbsvc.errors import ConfigError, CorruptLog, HandshakeRefused, StreamError, WebSocketClientError
from dbsvc.replica import groups
from dbsvc.replica.consumer import parse_endpoint
from dbsvc.replica.follower import Follower, next_wait
from dbsvc.replica.status import ReplicaStatus
from dbsvc.runtime import Query
from dbsvc.schema.describe import schema_fingerprint
from dbsvc.storage import Store, files
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.history import Fork, History
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.snapshot import ModelImage, SnapshotImage, encode_snapshot
from support.storage import BLOG

FINGERPRINT = schema_fingerprint(BLOG.DESCRIPTION)
OTHER = "f" * 64  # another schema's fingerprint
URL = "http://127.0.0.1:9"
EPOCH_A, EPOCH_B = "a" * 32, "b" * 32
H1, H2, H3 = "1" * 32, "2" * 32, "3" * 32
# Under mutmut (bench/mutation.py) a killed mutant often shows as a wait that never ends:
# a shorter deadline there keeps the run to minutes; the normal waits take well under 1 s.
DEADLINE = 5.0 if "MUTANT_UNDER_TEST" in os.environ else 20.0

# -- what a blog primary sends -------------------------------------------------------------


def user(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "email": f"u{i}@x.io",
        "name": f"user {i}",
        "age": None,
        "role": "reader",
        "joined": "2026-01-01T00:00:00Z",
        "profile": None,
    }


def insert(offset: int, watermark: int | None = None, uid: int | None = None, **over: Any) -> bytes:
    """The frame of a User insert at `offset` (its watermark: `offset` unless given)."""
    uid = offset if uid is None else uid
    record = dict(user(uid), **over)
    return ChangeEvent(
        EventKind.INSERT, "User", offset, offset if watermark is None else watermark, uid, record
    ).frame()


def update(offset: int, uid: int, **over: Any) -> bytes:
    """The frame of an update of User `uid` at `offset` (watermark `offset`)."""
    record = dict(user(uid), **over)
    return ChangeEvent(EventKind.UPDATE, "User", offset, offset, uid, record, user(uid)).frame()


def history(id: str, *forks: tuple[str, int]) -> dict[str, Any]:
    return History(id, tuple(Fork(parent, at) for parent, at in forks)).to_json()


def body(epoch: str, offset: int, *, fingerprint: str = FINGERPRINT, hist: dict | None = None) -> dict[str, Any]:
    """What the primary's GET /snapshot answers."""
    return {"epoch": epoch, "offset": offset, "fingerprint": fingerprint, "history": hist, "replication": True}


def epoch_stream(
    epoch: str,
    offset: int,
    users: range = range(0),
    *,
    fingerprint: str = FINGERPRINT,
    hist: dict | None = None,
    header_offset: int | None = None,
) -> list:
    """The messages of /replicate/snapshot: header, the snapshot file, end."""
    models = []
    for model in BLOG.MODELS:
        rows = [list(user(i).values()) for i in users] if model.name == "User" else []
        models.append(ModelImage(model.name, list(model.fields), rows, max(users, default=0)))
    data = b"".join(encode_snapshot(SnapshotImage(epoch, offset, models)))
    header = {
        "type": "snapshot",
        "format": 1,
        "epoch": epoch,
        "offset": offset if header_offset is None else header_offset,
        "fingerprint": fingerprint,
        "history": hist,
    }
    end = {"type": "end", "bytes": len(data), "crc32": zlib.crc32(data)}
    return [json.dumps(header), data, json.dumps(end)]


def refused(status: int, code: str = "refused", detail: str = "no") -> HandshakeRefused:
    problem = {"type": "about:blank", "status": status, "code": code, "detail": detail}
    return HandshakeRefused(status, [("content-type", "application/problem+json")], json.dumps(problem).encode())


# -- the primary, from a script --------------------------------------------------------------


class Script:
    """One open stream: each receive takes the next step (bytes or str: a message; None: a
    receive that timed out; an exception: raised, the connection ended; a callable: called
    then, its result taken as the step). With no step left it waits for `idle` up to the
    timeout, as a quiet primary does, and says None."""

    def __init__(self, steps: list, idle: threading.Event) -> None:
        self.steps = list(steps)
        self.idle = idle

    def __enter__(self) -> Script:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.steps.clear()

    def receive(self, timeout: float | None = None) -> bytes | str | None:
        if not self.steps:
            self.idle.wait(timeout)
            return None
        step = self.steps.pop(0)
        if callable(step):
            step = step()
        if isinstance(step, BaseException):
            raise step
        return step

    def receive_many(self, limit: int, max_bytes: int, timeout: float | None = None) -> list:
        """ws/client.py C7 over the steps: an exception after the first message is put back
        for the next call."""
        batch: list = []
        message = self.receive(timeout)
        while message is not None:
            batch.append(message)
            if len(batch) >= limit or sum(map(len, batch)) >= max_bytes or not self.steps:
                break
            try:
                message = self.receive(0)
            except Exception as exc:  # noqa: BLE001 - any step's exception: the stream's end
                self.steps.insert(0, exc)
                break
        return batch


class ScriptedPrimary:
    """The follower's `Primary`: `answer` is GET /snapshot's body (or an exception to raise),
    `streams` one script per /replicate connection in order (or an exception the handshake
    raises), `epochs` the same for /replicate/snapshot. Records what was asked."""

    def __init__(self, answer: Any, streams: list | None = None, epochs: list | None = None) -> None:
        self.answer = answer
        self.streams = list(streams or [])
        self.epochs = list(epochs or [])
        self.afters: list[int] = []
        self.epochs_asked = 0
        self.snapshots_asked = 0
        self.idle = threading.Event()

    def snapshot(self) -> Any:
        self.snapshots_asked += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return json.loads(json.dumps(self.answer))

    def replicate(self, after: int) -> Script:
        self.afters.append(after)
        return self._open(self.streams)

    def epoch_snapshot(self) -> Script:
        self.epochs_asked += 1
        return self._open(self.epochs)

    def _open(self, scripts: list) -> Script:
        script = scripts.pop(0) if scripts else []
        if isinstance(script, BaseException):
            raise script
        return Script(script, self.idle)


# -- the replica -------------------------------------------------------------------------------


class Replica:
    """A Follower over a real store in `directory`, its loop in a thread of its own."""

    def __init__(
        self,
        directory: str,
        primary: ScriptedPrimary | None,
        max_payload: int | None = None,
        url: str = URL,
        sync: str = "full",
        **options: Any,
    ) -> None:
        self.primary = primary
        self.directory = directory
        self.sync = sync
        self.limits = {} if max_payload is None else {"max_payload": max_payload}
        self.locks: list[Any] = []  # the writer lock each open of the store was handed
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.follower = Follower(parse_endpoint(url), directory, self.open, FINGERPRINT, primary=primary, **options)

    def open(self, lock: Any) -> Store:
        self.locks.append(lock)
        return Store.open(
            self.directory,
            BLOG.MODELS,
            BLOG.DESCRIPTION,
            replication=True,
            lock=lock,
            sync=self.sync,
            compact_bytes=1 << 62,
            **self.limits,
        )

    @property
    def store(self) -> Store:
        return self.follower.store

    @property
    def status(self) -> ReplicaStatus:
        return self.follower.status

    def start(self) -> Replica:
        self.follower.prepare()
        self.follower.start(self.loop)
        return self

    def wait(self, what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE
        while not done():
            assert time.monotonic() < deadline, f"never {what}: {self.status}"
            time.sleep(0.01)

    def on_loop(self, make: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return make()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def user_ids(self) -> list[int]:
        return self.on_loop(lambda: [u["id"] for u in self.store.list_records("User", Query())[0]])

    def close(self) -> None:
        if self.primary is not None:
            self.primary.idle.set()
        self.follower.stop()
        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self.store.aclose(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def following(primary: ScriptedPrimary, replica: Callable[..., Replica], head: int, **options: Any) -> Replica:
    """A replica bootstrapped (epoch A, history H1) and following up to `head`."""
    node = replica(primary, **options).start()
    node.wait(f"following at {head}", lambda: node.store.head_offset == head and node.status.state == "following")
    return node


# -- rule 9: a new epoch met in the middle of a stream: compact at the primary's cut ------------


def test_a_new_epoch_met_mid_stream_compacts_at_the_primarys_cut_and_follows_on(replica, caplog):
    caplog.set_level("INFO", logger="dbsvc.replica")
    primary = ScriptedPrimary(body(EPOCH_A, 4, hist=history(H1)))

    def compacted() -> bytes:
        # The primary compacted at offset 4: epoch B's snapshot holds the 3 users, so its
        # User watermark is 3 where ours (3 inserts and an update) is 4.
        primary.answer = body(EPOCH_B, 5, hist=history(H1))
        return insert(5, watermark=4)

    primary.streams = [[insert(1), insert(2), insert(3), update(4, 1), compacted], [insert(5, watermark=4)]]
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        epoch_stream(EPOCH_B, 4, range(1, 4), hist=history(H1)),
    ]
    node = replica(primary).start()
    node.wait("at offset 5 in epoch B", lambda: node.store.head_offset == 5 and node.store.epoch == EPOCH_B)
    node.wait("following", lambda: node.status.state == "following")
    assert primary.afters == [0, 4]
    # No snapshot fetched for epoch B: its cut is read from the header of
    # /replicate/snapshot, which is closed then.
    assert primary.epochs_asked == 2
    assert (node.status.bootstraps, node.status.compactions) == (1, 1)
    assert node.store.epoch_state.log_base == 4 and node.store.watermarks()["User"] == 4
    assert node.user_ids() == [1, 2, 3, 5]
    assert node.status.error is None
    assert ("INFO", f"compacted at the primary's cut: epoch {EPOCH_B} from offset 4 ({URL})") in [
        (r.levelname, r.getMessage()) for r in caplog.records
    ]


def test_a_new_epoch_seen_by_the_poll_of_snapshot_mid_stream_compacts_at_its_cut(replica, caplog):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)))

    def compacted() -> None:  # the primary compacts while the stream is quiet
        primary.answer = body(EPOCH_B, 2, hist=history(H1))
        return None

    primary.streams = [[insert(1), insert(2), None, compacted]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1)), epoch_stream(EPOCH_B, 2, hist=history(H1))]
    node = replica(primary, poll_seconds=0.0).start()
    node.wait("compacted into epoch B", lambda: node.store.epoch == EPOCH_B and node.status.compactions == 1)
    assert (node.status.bootstraps, node.status.state) == (1, "following")
    assert primary.afters == [0] and primary.epochs_asked == 2  # the stream goes on
    assert node.user_ids() == [1, 2]


def test_a_replica_restarted_behind_the_cut_follows_its_old_epoch_to_the_cut_then_compacts(replica, tmp_path):
    first = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), [[insert(1), insert(2)]])
    first.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = following(first, replica, 2)
    node.close()
    # Meanwhile the primary updated user 1 and inserted user 3, and compacted at 4 (3
    # users: User watermark 3 in epoch B); it keeps rows 3 and 4 (log.retained). Row 5 is
    # the first of epoch B.
    primary = ScriptedPrimary(body(EPOCH_B, 5, hist=history(H1)), epochs=[epoch_stream(EPOCH_B, 4, hist=history(H1))])
    primary.streams = [[insert(2), update(3, 1), insert(4, uid=3), insert(5, watermark=4, uid=4)]]
    primary.streams.append([insert(5, watermark=4, uid=4)])
    again = replica(primary, directory="replica").start()
    again.wait("at 5 in epoch B", lambda: again.store.head_offset == 5 and again.store.epoch == EPOCH_B)
    assert (again.status.bootstraps, again.status.compactions, primary.epochs_asked) == (0, 1, 1)
    assert primary.afters == [1, 4]
    assert again.user_ids() == [1, 2, 3, 4]
    assert again.store.watermarks()["User"] == 4 and again.store.epoch_state.log_base == 4


def test_a_cut_behind_rows_applied_before_a_restart_bootstraps(replica):
    first = ScriptedPrimary(body(EPOCH_A, 4, hist=history(H1)), [[insert(n) for n in range(1, 5)]])
    first.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = following(first, replica, 4)
    node.close()
    # The primary compacted at 2: rows 3 and 4 were applied here before the restart, and
    # what they replaced is no longer known, so the cut cannot be made here.
    primary = ScriptedPrimary(body(EPOCH_B, 4, hist=history(H1)))
    primary.epochs = [
        epoch_stream(EPOCH_B, 2, hist=history(H1)),
        epoch_stream(EPOCH_B, 4, range(1, 5), hist=history(H1)),
    ]
    again = replica(primary, directory="replica").start()
    again.wait("in epoch B", lambda: again.store.epoch == EPOCH_B and again.status.state == "following")
    assert (again.status.bootstraps, again.status.compactions) == (1, 0)
    assert again.user_ids() == [1, 2, 3, 4]


# -- rule 3: groups of frames, the next read while the last is written, never more ---------------


def test_a_group_is_read_while_the_one_before_is_written_and_no_third_before_it_is_durable(
    replica, tmp_path, monkeypatch
):
    # The first group's fsync is held (DBSVC_FAULT HOLD, storage/files.py) until the gate
    # file exists: meanwhile the reading thread reads and applies the second group, but
    # asks for no frame of a third: at most two groups are ever unacknowledged.
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:1:HOLD={gate}")
    seen: dict[int, tuple[int, int]] = {}
    group = groups.BATCH
    last = 2 * group + 100
    primary = ScriptedPrimary(body(EPOCH_A, last, hist=history(H1)))
    node: Replica | None = None

    def at(offset: int) -> Callable[[], bytes]:
        def step() -> bytes:
            assert node is not None
            seen[offset] = (node.store.head_offset, node.store.applied_offset)
            return insert(offset)

        return step

    primary.streams = [[at(n) for n in range(1, last + 1)]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary)
    try:
        node.start()
        node.wait("the first group's fsync held", lambda: (tmp_path / "gate.held").exists())
        node.wait("the second group applied", lambda: node.store.applied_offset == 2 * group)
        deadline = time.monotonic() + 0.3  # a reader that does not wait asks for the third at once
        while 2 * group + 1 not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert 2 * group + 1 not in seen
        assert node.store.head_offset == 0
    finally:
        gate.touch()  # a failed check must not leave the fsync held (the store's close waits for it)
    node.wait(f"at {last}", lambda: node.store.head_offset == last)
    # A group's frames are read before any of it is applied; the second group is read while
    # the first is applied but not durable; the third once the first is durable.
    assert seen[1] == (0, 0)
    assert seen[group] == (0, 0)
    assert seen[group + 1] == (0, group)
    assert seen[2 * group] == (0, group)
    head, applied = seen[2 * group + 1]
    assert head >= group and applied == 2 * group
    assert node.store.stats()["fsyncs"] <= 4  # a group is one fsync (storage/follow.py rule 5)


def test_the_frames_of_a_group_are_one_write_call_under_either_sync(replica, monkeypatch):
    # storage/follow.py rule 5: a group of frames is handed to the log with one write call,
    # also under SERVICE_SYNC=off, where a write call per frame cost most of the apply.
    writes: list[int] = []

    class Counting(files.FileOps):
        def write(self, fd: int, data: bytes | memoryview) -> int:  # type: ignore[override]
            writes.append(len(data))
            return super().write(fd, data)

    primary = ScriptedPrimary(body(EPOCH_A, 300, hist=history(H1)))
    primary.streams = [[insert(n) for n in range(1, 301)]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    with files.use(Counting()):
        node = following(primary, replica, 300, sync="off")
    assert node.on_loop(lambda: node.store.live_counts()["User"]) == 300
    frames = sum(len(insert(n)) for n in range(1, 301))
    assert sum(writes) >= frames
    assert len([size for size in writes if size < 1000]) < 10  # not one write call per frame


# -- rule 1: the fingerprint, at start and on every connection ----------------------------------


def fingerprint_message(theirs: str) -> str:
    return (
        f"the primary's schema fingerprint {theirs!r} differs from this replica's "
        f"{FINGERPRINT!r}: serve the same schema on both"
    )


def test_a_fingerprint_mismatch_at_start_refuses_the_start(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 0, fingerprint=OTHER))
    node = replica(primary)
    with pytest.raises(ConfigError) as info:
        node.follower.prepare()
    assert str(info.value) == fingerprint_message(OTHER)
    assert primary.epochs_asked == 0


def test_a_primary_unreachable_at_start_is_checked_when_it_comes_up_and_a_mismatch_stops(replica):
    primary = ScriptedPrimary(OSError("connection refused"))
    node = replica(primary)
    node.follower.prepare()  # does not refuse the start
    assert node.status.error == "the primary is not reachable: connection refused"
    assert node.status.synced is False
    assert node.status.waiting_for() == (
        f"the first bootstrap from its primary {URL} (starting: the primary is not reachable: connection refused)"
    )
    primary.answer = body(EPOCH_A, 0, fingerprint=OTHER)  # it comes up serving another schema
    node.follower.start(node.loop)
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == fingerprint_message(OTHER)
    assert primary.afters == [] and primary.epochs_asked == 0


def test_the_fingerprint_is_checked_again_on_a_reconnection_and_a_mismatch_stops(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)))

    def restarted_with_another_schema() -> Exception:
        primary.answer = body(EPOCH_A, 2, fingerprint=OTHER, hist=history(H1))
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), None, restarted_with_another_schema]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == fingerprint_message(OTHER)
    assert primary.afters == [0]  # never asked for the stream again
    assert node.store.head_offset == 2
    assert node.status.reconnects == 1


def test_a_bootstrap_snapshot_of_another_schema_is_not_installed(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 0), epochs=[epoch_stream(EPOCH_A, 0, fingerprint=OTHER)])
    node = replica(primary)
    with pytest.raises(ConfigError) as info:
        node.follower.prepare()
    assert str(info.value) == fingerprint_message(OTHER)
    assert node.store.epoch != EPOCH_A


# -- rule 7: histories, on every connection -------------------------------------------------------


def reconnected(primary: ScriptedPrimary, then: list) -> Callable[[], Exception]:
    """A step that drops the connection after `then` became the next connection's script."""

    def drop() -> Exception:
        primary.streams.insert(0, then)
        return WebSocketClientError("connection closed without a close frame")

    return drop


def test_a_reconnection_asks_for_the_head_frame_and_goes_on_after_it(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 4, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2), insert(3), None, reconnected(primary, [insert(3), insert(4)])]]
    node = replica(primary).start()
    node.wait("at 4", lambda: node.store.head_offset == 4)
    assert primary.afters == [0, 2]
    assert node.status.reconnects == 1
    assert node.status.bootstraps == 1
    assert node.user_ids() == [1, 2, 3, 4]


def test_a_head_frame_that_differs_on_reconnection_bootstraps_from_the_primary(replica, caplog):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    restored = [insert(3, name="restored")]  # the same offset, another row: a restore
    primary.streams = [[insert(1), insert(2), insert(3), None, reconnected(primary, restored)]]
    primary.epochs.append(epoch_stream(EPOCH_A, 3, range(1, 4), hist=history(H1)))  # the restored epoch
    node = replica(primary).start()
    node.wait("bootstrapped again", lambda: node.status.bootstraps == 2 and node.status.state == "following")
    assert primary.afters == [0, 2, 3]
    assert node.status.reconnects == 1
    assert node.store.head_offset == 3
    assert (
        "WARNING",
        f"following {URL}: the primary's frame at offset 3 differs from this replica's: the histories "
        "diverged (a restore or a rewrite on the primary); bootstrapping again",
    ) in [(r.levelname, r.getMessage()) for r in caplog.records]


def test_a_head_frame_not_sent_in_time_is_a_reconnection(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2), insert(3), None, reconnected(primary, [None])], [insert(3)]]
    node = replica(primary).start()
    node.wait("two reconnections", lambda: node.status.reconnects == 2)
    assert node.status.error == "the primary did not send its frame 3 within 10 s"
    node.wait("following", lambda: node.status.state == "following")
    assert primary.afters == [0, 2, 2]
    assert node.status.bootstraps == 1


def test_a_primary_behind_the_replica_leaves_it_diverged_with_its_rows(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    def restored_to_one() -> Exception:
        primary.answer = body(EPOCH_A, 1, hist=history(H1))
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), insert(3), None, restored_to_one]]
    node = replica(primary).start()
    node.wait("diverged", lambda: node.status.state == "diverged")
    assert node.status.error == (
        "the primary holds offsets up to 1, this replica up to 3; bootstrapping again would discard the rows after 1"
    )
    assert primary.epochs_asked == 1 and primary.afters == [0]
    assert node.user_ids() == [1, 2, 3]
    assert node.status.synced is True


def test_rebootstrap_lets_a_replica_ahead_of_its_primary_copy_it(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    def restored_to_one() -> Exception:
        primary.answer = body(EPOCH_B, 1, hist=history(H2))
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), insert(3), None, restored_to_one]]
    primary.epochs.append(epoch_stream(EPOCH_B, 1, range(1, 2), hist=history(H2)))
    node = replica(primary, rebootstrap=True).start()
    node.wait("in epoch B", lambda: node.store.epoch == EPOCH_B and node.status.state == "following")
    assert node.user_ids() == [1]
    assert node.store.history == History(H2, ())


@pytest.mark.parametrize(
    "theirs, kept",
    [
        (None, History(H1, ())),  # a primary older than histories: the head frame alone judges
        (history(H1), History(H1, ())),
        (history(H2, (H1, 3)), History(H2, (Fork(H1, 3),))),  # forked at our head: adopted
        (history(H2, (H1, 5)), History(H2, (Fork(H1, 5),))),  # forked after it
    ],
    ids=["none", "same", "forked-at-head", "forked-after-head"],
)
def test_a_primary_history_that_continues_ours_is_adopted_after_the_head_frame(replica, theirs, kept):
    primary = ScriptedPrimary(body(EPOCH_A, 4, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    def new_history() -> Exception:
        primary.answer = body(EPOCH_A, 4, hist=theirs)
        primary.streams.insert(0, [insert(3), insert(4)])
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), insert(3), None, new_history]]
    node = replica(primary).start()
    node.wait("at 4", lambda: node.store.head_offset == 4)
    assert node.store.history == kept
    assert primary.afters == [0, 2]
    assert node.status.bootstraps == 1


def test_a_primary_history_forked_before_our_head_bootstraps_again(replica, caplog):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    def imported_at_two() -> Exception:  # an import rewrote the primary after offset 2
        primary.answer = body(EPOCH_A, 3, hist=history(H2, (H1, 2)))
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), insert(3), None, imported_at_two]]
    primary.epochs.append(epoch_stream(EPOCH_A, 3, range(1, 4), hist=history(H2, (H1, 2))))
    installed: list[History | None] = []  # the history of each store the bootstraps hand on
    node = replica(primary, on_store=lambda store: installed.append(store.history)).start()
    node.wait("bootstrapped again", lambda: node.status.bootstraps == 2 and node.status.state == "following")
    assert installed == [History(H1, ()), History(H2, (Fork(H1, 2),))]  # adopted with the snapshot
    assert node.store.history == History(H2, (Fork(H1, 2),))
    assert primary.afters == [0, 3]  # no head frame asked for: the history alone refused it
    assert (
        "WARNING",
        f"following {URL}: the primary is in history {H2}, which does not continue this replica's history "
        f"{H1} at offset 3 (a restore or an import on the primary); bootstrapping again",
    ) in [(r.levelname, r.getMessage()) for r in caplog.records]


# -- rule 4: refusals, reconnections, definitive answers ----------------------------------------


@pytest.mark.parametrize(
    "status, code, why",
    [
        (410, "offset_gone", "the primary no longer holds the rows after 0"),
        (400, "offset_out_of_range", "the primary's head is behind this replica's 0"),
    ],
)
def test_a_refusal_that_says_our_rows_are_gone_bootstraps_again(replica, caplog, status, code, why):
    primary = ScriptedPrimary(body(EPOCH_A, 0, hist=history(H1)))
    primary.streams = [refused(status, code), []]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1)), epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("following", lambda: node.status.state == "following")
    assert node.status.bootstraps == 2
    assert node.status.reconnects == 0
    assert primary.afters == [0, 0]
    assert ("WARNING", f"following {URL}: {why}; bootstrapping again") in [
        (r.levelname, r.getMessage()) for r in caplog.records
    ]


@pytest.mark.parametrize("status", [500, 503, 408, 425, 429])
def test_a_busy_or_failing_primary_is_retried(replica, status):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)))
    primary.streams = [refused(status, "unavailable"), [insert(1)]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("one reconnection", lambda: node.status.reconnects == 1)
    assert node.status.error in (f"the primary answered {status}", None)
    node.wait("at 1", lambda: node.store.head_offset == 1 and node.status.state == "following")
    assert node.status.error is None
    assert node.status.bootstraps == 1
    assert primary.afters == [0, 0]


@pytest.mark.parametrize(
    "status, code",
    [(401, "unauthorized"), (403, "forbidden"), (404, "replication_disabled"), (400, "bad_query"), (499, "other")],
)
def test_a_definitive_refusal_stops_following_and_the_replica_keeps_serving(replica, status, code):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)))
    primary.streams = [refused(status, code, "go away")]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == (
        f"the primary refused /replicate: the server refused the WebSocket handshake: HTTP {status} {code}: go away"
    )
    assert node.status.reconnects == 0
    assert primary.afters == [0]
    assert node.status.synced is True  # bootstrapped: it serves the primary's epoch


def test_a_failed_bootstrap_is_retried_and_a_refused_one_stops(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 0, hist=history(H1)))
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        WebSocketClientError("cannot connect to 127.0.0.1:9: refused"),
        refused(401, "unauthorized", "no token"),
    ]
    primary.streams = [refused(410, "offset_gone"), refused(410, "offset_gone")]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.reconnects == 1  # the failed bootstrap
    assert node.status.error == (
        "the primary refused /replicate/snapshot: the server refused the WebSocket handshake: "
        "HTTP 401 unauthorized: no token"
    )
    assert primary.epochs_asked == 3 and node.status.bootstraps == 1


def test_a_dropped_connection_is_retried_after_the_rows_kept(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [
        [insert(1), None, WebSocketClientError("connection lost: reset")],
        [insert(1), insert(2), insert(3)],
    ]
    node = replica(primary).start()
    node.wait("at 3", lambda: node.store.head_offset == 3 and node.status.state == "following")
    assert primary.afters == [0, 0]  # head 1: its frame asked for again (after=0), then 2 and 3
    assert node.status.reconnects == 1
    assert node.status.error is None
    assert node.user_ids() == [1, 2, 3]


# -- rule 3: what is applied ---------------------------------------------------------------------


def test_a_bad_frame_stops_following_after_applying_the_good_frames_before_it(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 4, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2), insert(4)]]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == "bad frame at offset 4: offset gap: expected 3, offsets 3 are missing"
    assert node.store.head_offset == 2
    assert node.user_ids() == [1, 2]


def test_a_frame_over_this_stores_payload_limit_is_refused_before_it_is_applied(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    big = insert(2, name="x" * 5000)
    primary.streams = [[insert(1), big]]
    node = replica(primary, max_payload=4096).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    size = len(big) - 16
    assert node.status.error == (
        f"bad frame at offset 2: record too large: a frame payload of {size} bytes, over the limit of 4096 "
        "(a log holding it would not reopen); nothing of it is kept"
    )
    assert node.store.head_offset == 1


def test_a_frame_that_does_not_fit_the_store_stops_following(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    ghost = encode_frame(2, insert(2)[16:].replace(b'"model":"User"', b'"model":"Ghost"'))
    primary.streams = [[insert(1), None, ghost]]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == "replication frame at offset 2: unknown model 'Ghost'"
    assert node.store.head_offset == 1


# -- rule 5: lag ------------------------------------------------------------------------------------


def test_lag_counts_the_primarys_head_and_a_quiet_stream_is_caught_up(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 5, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    node: Replica | None = None
    reports: list[dict] = []

    def behind() -> None:  # frames 3-5 not sent yet: 3 behind
        assert node is not None
        reports.append(node.status.report(node.store.head_offset))
        return None

    primary.streams = [[insert(1), insert(2), None, behind, insert(3), insert(4), insert(5)]]
    node = replica(primary)
    node.start()
    node.wait("caught up", lambda: node.store.head_offset == 5 and node.status.caught_up_at is not None)
    assert reports[0]["primary_offset"] == 5 and reports[0]["lag_offsets"] == 3
    assert reports[0]["state"] == "following"
    report = node.status.report(5)
    assert (report["primary_offset"], report["lag_offsets"], report["lag_seconds"]) == (5, 0, 0.0)


def test_the_poll_of_snapshot_raises_the_primarys_head_while_streaming(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    def written_on() -> None:
        primary.answer = body(EPOCH_A, 9, hist=history(H1))

    primary.streams = [[insert(1), None, written_on]]
    node = replica(primary, poll_seconds=0.0).start()
    node.wait("the head of 9", lambda: node.status.primary_offset == 9)
    assert node.status.report(1)["lag_offsets"] == 8
    # caught up at 1 until the poll saw 9: the seconds behind count from then
    node.wait("seconds behind", lambda: node.status.report(1)["lag_seconds"] > 0)
    assert node.status.report(1)["lag_seconds"] < DEADLINE


# -- rules 1, 2 and 8 at start ----------------------------------------------------------------------


def test_a_replica_already_in_the_primarys_epoch_starts_without_a_bootstrap(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1)]]
    first = following(primary, replica, 1)
    first.close()
    again = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), streams=[[insert(1), insert(2), insert(3)]])
    node = replica(again)
    assert node.status.synced is True  # a row: it followed before (rule 8)
    node.start()
    node.wait("at 3", lambda: node.store.head_offset == 3)
    assert again.epochs_asked == 0
    assert again.afters == [0]
    assert node.status.bootstraps == 0


def test_an_empty_replica_whose_bootstrap_fails_at_start_starts_unready(replica, caplog):
    primary = ScriptedPrimary(body(EPOCH_A, 0), epochs=[[json.dumps({"type": "snapshot"}), None]])
    node = replica(primary)
    node.follower.prepare()
    assert ("WARNING", f"bootstrap from {URL} failed (the snapshot stream stalled); retrying while serving") in [
        (r.levelname, r.getMessage()) for r in caplog.records
    ]
    assert node.status.synced is False
    assert node.status.bootstraps == 0
    assert node.store.head_offset == 0


@pytest.mark.parametrize(
    "answer, error",
    [
        (OSError("connection refused"), "the primary is not reachable: connection refused"),
        (ValueError("Expecting value"), "the primary is not reachable: Expecting value"),
        ([1, 2], "the primary is not reachable: the primary's /snapshot is not an object"),
    ],
    ids=["refused", "not-json", "not-an-object"],
)
def test_a_primary_unreachable_at_start_does_not_stop_the_start(replica, answer, error):
    primary = ScriptedPrimary(answer)
    node = replica(primary)
    node.follower.prepare()
    assert node.status.error == error
    assert node.status.state == "starting"
    assert primary.epochs_asked == 0


@pytest.mark.parametrize(
    "stream, message",
    [
        (
            epoch_stream(EPOCH_A, 0, header_offset=5),
            "cannot follow http://127.0.0.1:9: the snapshot's own header disagrees with the stream's header",
        ),
        (
            [json.dumps(dict(json.loads(epoch_stream(EPOCH_A, 0)[0]), epoch=EPOCH_B))] + epoch_stream(EPOCH_A, 0)[1:],
            "cannot follow http://127.0.0.1:9: the snapshot's own header disagrees with the stream's header",
        ),
        (
            refused(403, "forbidden", "not a replicator"),
            "cannot follow http://127.0.0.1:9: the primary refused /replicate/snapshot: the server refused the "
            "WebSocket handshake: HTTP 403 forbidden: not a replicator",
        ),
    ],
    ids=["offset", "epoch", "refused"],
)
def test_a_bootstrap_the_primary_refuses_or_contradicts_refuses_the_start(replica, stream, message):
    primary = ScriptedPrimary(body(EPOCH_A, 0), epochs=[stream])
    node = replica(primary)
    with pytest.raises(ConfigError) as info:
        node.follower.prepare()
    assert str(info.value) == message
    assert node.store.epoch != EPOCH_A


DAMAGED = "the snapshot arrived damaged (size or crc32)"


def end_with(**fields: Any) -> str:
    """The end message of epoch A's snapshot at offset 5, with `fields` changed."""
    return json.dumps(dict(json.loads(epoch_stream(EPOCH_A, 5)[2]), **fields))


def without_offset(header: str) -> str:
    return json.dumps({k: v for k, v in json.loads(header).items() if k != "offset"})


@pytest.mark.parametrize(
    "stream, message",
    [
        (epoch_stream(EPOCH_A, 5)[:2] + [end_with(bytes=1)], f"replication frame at offset 5: {DAMAGED}"),
        (
            epoch_stream(EPOCH_A, 5)[:2] + [end_with(crc32=zlib.crc32(b"other"))],
            f"replication frame at offset 5: {DAMAGED}",
        ),
        (epoch_stream(EPOCH_A, 5)[:2] + [end_with(type="stop")], f"replication frame at offset 5: {DAMAGED}"),
        (epoch_stream(EPOCH_A, 5)[:2] + [json.dumps({"type": "stop"})], f"replication frame at offset 5: {DAMAGED}"),
        (
            [without_offset(epoch_stream(EPOCH_A, 5)[0]), epoch_stream(EPOCH_A, 5)[1], end_with(bytes=1)],
            f"replication frame at offset 0: {DAMAGED}",
        ),
        (
            epoch_stream(EPOCH_A, 5)[1:],
            "replication frame at offset 0: the snapshot stream did not start with its header",
        ),
    ],
    ids=["size", "crc", "type", "not-end", "header-without-offset", "no-header"],
)
def test_a_damaged_bootstrap_snapshot_is_never_installed(replica, stream, message):
    primary = ScriptedPrimary(body(EPOCH_A, 5), epochs=[stream])
    node = replica(primary)
    with pytest.raises(StreamError) as info:
        node.follower.prepare()
    assert str(info.value) == message
    assert node.store.epoch != EPOCH_A


def test_a_snapshot_in_several_messages_is_joined_whole(replica):
    header, data, end = epoch_stream(EPOCH_A, 3, range(1, 4))
    primary = ScriptedPrimary(body(EPOCH_A, 3), epochs=[[header, data[:40], data[40:], end]])
    node = replica(primary)
    node.follower.prepare()
    assert node.store.epoch == EPOCH_A and node.store.head_offset == 3
    assert node.status.bootstraps == 1


def test_a_replica_ahead_of_a_primary_in_another_epoch_diverges_at_start(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2), insert(3)]]
    following(primary, replica, 3).close()
    smaller = ScriptedPrimary(body(EPOCH_B, "3", hist=history(H2)))  # a head that is no offset counts as 0
    node = replica(smaller)
    node.follower.prepare()
    assert node.status.state == "diverged"
    assert node.status.error == (
        "the primary holds offsets up to 0, this replica up to 3; bootstrapping again would discard the rows after 0"
    )
    assert smaller.epochs_asked == 0
    asked = smaller.snapshots_asked
    node.follower.start(node.loop)  # a diverged replica's thread does not follow
    node.wait("the thread gone", lambda: not [t for t in threading.enumerate() if t.name == "dbsvc-follower"])
    assert smaller.snapshots_asked == asked and smaller.afters == []


def test_stop_ends_the_reading_thread(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1)]]
    node = following(primary, replica, 1)
    threads = [t for t in threading.enumerate() if t.name == "dbsvc-follower"]
    assert len(threads) == 1 and threads[0].daemon  # named for a debugger; never holds the process open
    node.follower.stop()  # the stream is quiet: the thread is inside a receive of 0.5 s
    assert not [t for t in threading.enumerate() if t.name == "dbsvc-follower"]


# -- rule 4's backoff, and the status (status.py) ------------------------------------------------


@pytest.mark.parametrize(
    "delay, draw, expected",
    [
        (0.2, 0.0, (0.1, 0.4)),
        (0.2, 0.5, (0.2, 0.4)),
        (1.0, 0.75, (1.25, 2.0)),
        (6.0, 0.0, (3.0, 10.0)),
        (10.0, 0.5, (10.0, 10.0)),
    ],
)
def test_backoff_jitters_the_delay_and_doubles_it_up_to_ten_seconds(delay, draw, expected):
    assert next_wait(delay, draw) == expected


def test_the_status_reports_its_fields_in_order():
    status = ReplicaStatus(
        "http://p:1", state="following", primary_offset=7, bootstraps=2, compactions=4, reconnects=3, error="e"
    )
    assert list(status.report(7).items()) == [
        ("primary", "http://p:1"),
        ("state", "following"),
        ("primary_offset", 7),
        ("lag_offsets", 0),
        ("lag_seconds", 0.0),
        ("bootstraps", 2),
        ("compactions", 4),
        ("reconnects", 3),
        ("error", "e"),
    ]
    assert status.report(9)["primary_offset"] == 9  # our own head when it is past the primary's


def test_lag_seconds_count_from_when_the_replica_was_last_caught_up():
    status = ReplicaStatus("http://p:1", primary_offset=10, caught_up_at=time.monotonic() - 30.2506)
    report = status.report(4)
    assert report["lag_offsets"] == 6
    assert 30.25 <= report["lag_seconds"] < 60.0
    assert report["lag_seconds"] == round(report["lag_seconds"], 3)  # milliseconds
    assert ReplicaStatus("http://p:1", primary_offset=10).report(4)["lag_seconds"] == 0.0  # never caught up


def test_readiness_waits_for_the_first_bootstrap():
    status = ReplicaStatus("http://p:1")
    assert status.waiting_for() == "the first bootstrap from its primary http://p:1 (starting)"
    status.state, status.error = "reconnecting", "refused"
    assert status.waiting_for() == "the first bootstrap from its primary http://p:1 (reconnecting: refused)"
    assert list(status.health().items()) == [
        ("primary", "http://p:1"),
        ("state", "reconnecting"),
        ("ready", False),
        ("waiting_for", "the first bootstrap from its primary http://p:1 (reconnecting: refused)"),
        ("detail", "refused"),
    ]
    status.synced = True
    assert status.waiting_for() is None
    assert status.health()["ready"] is True


# -- what the log says (rules 4 and 7: the operator reads why) ---------------------------------


def test_the_log_says_why_following_stopped_or_diverged(replica, caplog):
    caplog.set_level("INFO", logger="dbsvc.replica")
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    def restored_to_one() -> Exception:
        primary.answer = body(EPOCH_A, 1, hist=history(H1))
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), insert(3), None, restored_to_one]]
    node = replica(primary).start()
    node.wait("diverged and logged", lambda: any(r.levelname == "ERROR" for r in caplog.records))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "dbsvc.replica"]
    assert ("INFO", f"following {URL}: connection closed without a close frame; reconnecting") in lines
    assert (
        "WARNING",
        f"following {URL}: the primary's head is offset 1, behind this replica's 3; bootstrapping again",
    ) in lines
    assert lines[-1] == (
        "ERROR",
        f"stopped following {URL}: the primary holds offsets up to 1, this replica up to 3; bootstrapping "
        "again would discard the rows after 1. This replica keeps serving its 3 rows but no longer follows. "
        "To discard them and copy the primary, restart it with --rebootstrap (or SERVICE_FOLLOW_REBOOTSTRAP=1), "
        "or drop its tenant (dbsvc tenant drop) and start it again; to keep them, back this tenant up first "
        "(dbsvc backup)",
    )


def test_the_log_says_why_following_stopped(replica, caplog):
    caplog.set_level("INFO", logger="dbsvc.replica")
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [refused(401, "unauthorized", "bad token")]
    node = replica(primary).start()
    node.wait("stopped and logged", lambda: any(r.levelname == "ERROR" for r in caplog.records))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "dbsvc.replica"]
    assert lines[0] == ("INFO", f"bootstrapped from {URL}: epoch {EPOCH_A} at offset 0")
    assert lines[-1] == (
        "ERROR",
        f"stopped following {URL}: the primary refused /replicate: the server refused the WebSocket "
        "handshake: HTTP 401 unauthorized: bad token",
    )


def test_a_primary_that_stays_down_keeps_the_replica_reconnecting(replica, caplog):
    caplog.set_level("WARNING", logger="dbsvc.replica")
    primary = ScriptedPrimary(OSError("connection refused"))
    node = replica(primary)
    node.follower.prepare()
    node.follower.start(node.loop)
    node.wait("three reconnections", lambda: node.status.reconnects >= 3)
    assert node.status.state == "reconnecting"
    assert node.status.error == "connection refused"
    assert node.status.synced is False
    assert ("WARNING", f"primary {URL} not reachable yet (connection refused); following starts when it is") in [
        (r.levelname, r.getMessage()) for r in caplog.records
    ]


# -- primary.py: the primary over HTTP and WebSocket --------------------------------------------


def test_the_http_primary_asks_snapshot_without_a_token_and_the_streams_with_it():
    from websockets.sync.server import serve

    from dbsvc.replica.primary import HttpPrimary

    seen: list[tuple[str, str | None]] = []

    def http(connection, request):
        seen.append((request.path, request.headers.get("Authorization")))
        if request.path == "/db/snapshot":
            return connection.respond(200, json.dumps({"offset": 7, "epoch": EPOCH_A}))
        if request.path == "/gone/snapshot":
            return connection.respond(404, "no such path")
        return None

    def handle(connection) -> None:
        connection.send(b"frame" if connection.request.path.startswith("/db/replicate?") else "header")

    with serve(handle, "127.0.0.1", 0, process_request=http) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.socket.getsockname()[1]
        primary = HttpPrimary(parse_endpoint(f"http://127.0.0.1:{port}/db"), "tok")
        assert primary.snapshot() == {"offset": 7, "epoch": EPOCH_A}
        with primary.replicate(7) as stream:
            assert stream.receive(5) == b"frame"
        with primary.epoch_snapshot() as stream:
            assert stream.receive(5) == "header"
        with pytest.raises(OSError):
            HttpPrimary(parse_endpoint(f"http://127.0.0.1:{port}/gone")).snapshot()
        with HttpPrimary(parse_endpoint(f"ws://127.0.0.1:{port}/db")).replicate(0) as stream:
            assert stream.receive(5) == b"frame"
        server.shutdown()
    assert seen == [
        ("/db/snapshot", None),
        ("/db/replicate?after=7", "Bearer tok"),
        ("/db/replicate/snapshot", "Bearer tok"),
        ("/gone/snapshot", None),
        ("/db/replicate?after=0", None),
    ]


# -- a store that fails under the replica ------------------------------------------------------------


def test_a_replica_whose_store_fails_says_it_stopped_following(replica, monkeypatch, caplog):
    # The first fsync of the replica's log fails: the store is fail-stop (commit.py) and
    # refuses every later write, so following cannot go on; /metrics must say so rather than
    # show "following" with a reading thread that is gone.
    monkeypatch.setenv("DBSVC_FAULT", "fsync:1:EIO")
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1)], [insert(1)], [insert(1)]]
    node = replica(primary).start()
    # the follower's thread sets the state, then the error, then logs: wait for all three
    node.wait("stopped", lambda: node.status.state == "stopped" and node.status.error is not None)
    assert node.status.error == (
        "write not stored: the store is read-only after an I/O error on the log ([Errno 5] Input/output error "
        "(injected by DBSVC_FAULT fsync:1)): nothing written since can be trusted; fix the disk, then restart the server"
    )
    # the state is set before the line is logged, on the follower's thread: wait for both
    node.wait(
        "the stop logged",
        lambda: any(
            r.levelname == "ERROR" and r.getMessage().startswith(f"stopped following {URL}: ") for r in caplog.records
        ),
    )


def test_a_snapshot_without_an_offset_counts_as_offset_0(replica):
    empty = {"epoch": EPOCH_A, "fingerprint": FINGERPRINT, "history": history(H1)}  # no "offset"
    primary = ScriptedPrimary(empty, epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    node = replica(primary, poll_seconds=0.0).start()
    node.wait("three polls while following", lambda: primary.snapshots_asked >= 6)
    assert node.status.state == "following"
    assert node.status.primary_offset == 0
    assert node.status.report(0)["lag_offsets"] == 0


def test_a_replica_without_a_history_record_adopts_the_primarys_once_the_head_frame_passed(replica, tmp_path):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2)]]
    following(primary, replica, 2).close()
    (tmp_path / "replica" / "history").unlink()  # a tenant written before histories
    again = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H2, (H1, 2))), streams=[[insert(2), insert(3)]])
    node = replica(again)
    assert node.store.history is None
    node.start()
    node.wait("at 3", lambda: node.store.head_offset == 3)
    assert node.store.history == History(H2, (Fork(H1, 2),))
    assert again.afters == [1] and again.epochs_asked == 0


def test_an_empty_replica_adopts_any_history_of_its_primary(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 0, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    node = replica(primary)

    def another_history() -> Exception:  # unrelated to H1, but the replica holds no row of H1
        primary.answer = body(EPOCH_A, 0, hist=history(H3))
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[None, another_history], []]
    node.start()
    node.wait("in H3", lambda: node.store.history == History(H3, ()))
    assert node.status.bootstraps == 1
    assert primary.afters == [0, 0]


def test_a_bootstrap_keeps_the_writer_lock_and_hands_the_new_store_on(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1)]]
    handed: list[Store] = []
    node = following(primary, replica, 1, on_store=handed.append)
    assert node.locks[0] is None  # the first open takes the lock
    assert len(node.locks) == 2 and node.locks[1] is not None  # the bootstrap's reopen is handed it
    assert handed == [node.store]


def test_the_state_is_bootstrapping_while_the_snapshot_is_fetched(replica):
    node: Replica | None = None
    states: list[str] = []
    header, data, end = epoch_stream(EPOCH_A, 0, hist=history(H1))

    def first() -> str:
        assert node is not None
        states.append(node.status.state)
        return header

    primary = ScriptedPrimary(body(EPOCH_A, 0, hist=history(H1)), epochs=[[first, data, end]])
    node = replica(primary)
    node.start()
    node.wait("following", lambda: node.status.state == "following")
    assert states == ["bootstrapping"]


def test_a_snapshot_whose_lines_do_not_verify_names_where_it_came_from(replica):
    header, data, _ = epoch_stream(EPOCH_A, 0)
    damaged = b"00000000" + data[8:]  # the first line's CRC
    end = json.dumps({"type": "end", "bytes": len(damaged), "crc32": zlib.crc32(damaged)})
    primary = ScriptedPrimary(body(EPOCH_A, 0), epochs=[[header, damaged, end]])
    node = replica(primary)
    with pytest.raises(CorruptLog) as info:
        node.follower.prepare()
    assert info.value.path == f"{URL}/replicate/snapshot"
    assert node.store.epoch != EPOCH_A


def test_a_failure_after_a_bootstrap_mid_run_is_retried(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)))
    primary.streams = [refused(410, "offset_gone"), refused(503, "unavailable"), [insert(1)]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1)), epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("at 1", lambda: node.store.head_offset == 1 and node.status.state == "following")
    assert (node.status.bootstraps, node.status.reconnects) == (2, 1)
    assert primary.afters == [0, 0, 0]


def test_the_primarys_head_is_polled_between_batches_while_frames_keep_coming(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    node: Replica | None = None
    seen: list[int] = []

    def written_on() -> bytes:
        primary.answer = body(EPOCH_A, 9, hist=history(H1))
        return insert(1)

    def record() -> bytes:
        assert node is not None
        seen.append(node.status.primary_offset)
        return insert(3)

    primary.streams = [[written_on, None, insert(2), None, record]]  # never a quiet turn
    node = replica(primary, poll_seconds=0.0)
    node.start()
    node.wait("at 3", lambda: node.store.head_offset == 3)
    assert seen == [9]


def test_a_follower_without_a_primary_given_reaches_its_endpoint_over_http_with_its_token(replica):
    from websockets.sync.server import serve

    answer: dict[str, Any] = {}
    asked: list[tuple[str, str | None]] = []
    done = threading.Event()

    def http(connection, request):
        asked.append((request.path, request.headers.get("Authorization")))
        if request.path == "/snapshot":
            return connection.respond(200, json.dumps(answer))
        return None

    def handle(connection) -> None:
        done.wait(10)

    with serve(handle, "127.0.0.1", 0, process_request=http) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.socket.getsockname()[1]
        node = replica(None, url=f"http://127.0.0.1:{port}", token="tok")  # the default primary
        answer.update(body(node.store.epoch, 0, fingerprint=OTHER))
        try:
            with pytest.raises(ConfigError):  # it asked the endpoint's /snapshot
                node.follower.prepare()
            answer.update(fingerprint=FINGERPRINT)
            node.follower.start(node.loop)
            node.wait("the stream asked", lambda: ("/replicate?after=0", "Bearer tok") in asked)
        finally:
            done.set()
            node.close()
            server.shutdown()
    assert asked[0] == ("/snapshot", None)


@pytest.mark.parametrize("offset, expected", [(7, 7), (None, 0)], ids=["offset", "no-offset"])
def test_start_up_reports_the_primarys_head(replica, offset, expected):
    primary = ScriptedPrimary(None)
    node = replica(primary)
    answer = body(node.store.epoch, 0)
    if offset is None:
        del answer["offset"]
    else:
        answer["offset"] = offset
    primary.answer = answer
    assert node.status.synced is False  # empty
    node.follower.prepare()  # already in the primary's epoch: nothing fetched
    assert primary.epochs_asked == 0
    assert node.status.synced is True
    assert node.status.primary_offset == expected
    assert node.status.report(0)["lag_offsets"] == expected


def test_a_primary_that_names_no_head_is_taken_as_empty_by_a_replica_with_rows(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1)]]
    following(primary, replica, 1).close()
    headless = {"epoch": EPOCH_A, "fingerprint": FINGERPRINT, "history": history(H1)}
    node = replica(ScriptedPrimary(headless)).start()
    node.wait("diverged", lambda: node.status.state == "diverged")
    assert node.user_ids() == [1]
