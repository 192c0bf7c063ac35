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
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from dbsvc.errors import ConfigError, HandshakeRefused, WebSocketClientError
from dbsvc.replica.consumer import parse_endpoint
from dbsvc.replica.follower import Follower, next_wait
from dbsvc.replica.status import ReplicaStatus
from dbsvc.runtime import Query
from dbsvc.schema.describe import schema_fingerprint
from dbsvc.storage import Store
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
DEADLINE = 20.0

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
    return ChangeEvent(EventKind.INSERT, "User", offset, offset if watermark is None else watermark, uid, record).frame()


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

    def __init__(self, directory: str, primary: ScriptedPrimary, **options: Any) -> None:
        self.primary = primary
        self.directory = directory
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.follower = Follower(parse_endpoint(URL), directory, self.open, FINGERPRINT, primary=primary, **options)

    def open(self, lock: Any) -> Store:
        return Store.open(
            self.directory, BLOG.MODELS, BLOG.DESCRIPTION, replication=True, lock=lock, compact_bytes=1 << 62
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
        self.primary.idle.set()
        self.follower.stop()
        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self.store.aclose(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def replica(tmp_path):
    """Factory: replica(primary, **Follower options) -> Replica, closed after the test."""
    made: list[Replica] = []

    def make(primary: ScriptedPrimary, directory: str = "replica", **options: Any) -> Replica:
        (tmp_path / directory).mkdir()
        node = Replica(str(tmp_path / directory), primary, **options)
        made.append(node)
        return node

    yield make
    for node in made:
        node.close()


def following(primary: ScriptedPrimary, replica: Callable[..., Replica], head: int, **options: Any) -> Replica:
    """A replica bootstrapped (epoch A, history H1) and following up to `head`."""
    node = replica(primary, **options).start()
    node.wait(f"following at {head}", lambda: node.store.head_offset == head and node.status.state == "following")
    return node


# -- rule 2 and 3: a new epoch met in the middle of a stream ------------------------------------


def test_a_new_epoch_met_mid_stream_bootstraps_again_and_follows_on(replica):
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
    assert primary.afters == [0, 4]  # offset 4 is in epoch B's snapshot, not its log
    assert primary.epochs_asked == 2
    assert node.status.bootstraps == 2
    assert node.user_ids() == [1, 2, 3, 5]
    assert node.status.error is None


def test_a_new_epoch_seen_by_the_poll_of_snapshot_mid_stream_bootstraps_again(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)))

    def compacted() -> None:  # the primary compacts while the stream is quiet
        primary.answer = body(EPOCH_B, 2, hist=history(H1))
        return None

    primary.streams = [[insert(1), insert(2), None, compacted]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1)), epoch_stream(EPOCH_B, 2, range(1, 3), hist=history(H1))]
    node = replica(primary, poll_seconds=0.0).start()
    node.wait("in epoch B", lambda: node.store.epoch == EPOCH_B and node.status.state == "following")
    assert node.status.bootstraps == 2
    assert primary.afters == [0, 2]
    assert node.user_ids() == [1, 2]


# -- rule 3: a batch is durable before the stream is read on ------------------------------------


def test_each_batch_of_512_is_durable_before_the_next_frame_is_read(replica):
    seen: dict[int, tuple[int, int]] = {}
    primary = ScriptedPrimary(body(EPOCH_A, 600, hist=history(H1)))
    node: Replica | None = None

    def at(offset: int) -> Callable[[], bytes]:
        def step() -> bytes:
            assert node is not None
            seen[offset] = (node.store.head_offset, node.store.applied_offset)
            return insert(offset)

        return step

    primary.streams = [[at(n) for n in range(1, 601)]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary)
    node.start()
    node.wait("at 600", lambda: node.store.head_offset == 600)
    # The first frame of each batch is read only once the batch before it is durable (head ==
    # applied); inside a batch nothing is applied until the batch is whole.
    assert seen[1] == (0, 0)
    assert seen[512] == (0, 0)
    assert seen[513] == (512, 512)
    assert seen[600] == (512, 512)


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


def test_a_head_frame_that_differs_on_reconnection_bootstraps_from_the_primary(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    restored = [insert(3, name="restored")]  # the same offset, another row: a restore
    primary.streams = [[insert(1), insert(2), insert(3), None, reconnected(primary, restored)]]
    primary.epochs.append(epoch_stream(EPOCH_A, 3, range(1, 4), hist=history(H1)))  # the restored epoch
    node = replica(primary).start()
    node.wait("bootstrapped again", lambda: node.status.bootstraps == 2 and node.status.state == "following")
    assert primary.afters == [0, 2, 3]
    assert node.status.reconnects == 1
    assert node.store.head_offset == 3


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
        "the primary holds offsets up to 1, this replica up to 3; "
        "bootstrapping again would discard the rows after 1"
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


def test_a_primary_history_forked_before_our_head_bootstraps_again(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    def imported_at_two() -> Exception:
        primary.answer = body(EPOCH_B, 3, hist=history(H2, (H1, 2)))
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), insert(3), None, imported_at_two]]
    primary.epochs.append(epoch_stream(EPOCH_B, 3, range(1, 4), hist=history(H2, (H1, 2))))
    node = replica(primary).start()
    node.wait("in epoch B", lambda: node.store.epoch == EPOCH_B and node.status.state == "following")
    assert node.store.history == History(H2, (Fork(H1, 2),))
    assert primary.afters == [0, 3]  # the stream was not asked for in epoch A again
