"""A read replica's decisions gone through in process (tests/replica/test_follower_*.py): a
`Follower` on a real store in a temporary directory, its reading thread and an event loop of its
own (`Replica`), and a primary played from a script through the follower's `primary=` seam
(dbsvc/replica/primary.py: `ScriptedPrimary`), with the frames and answers a blog primary sends.
No server: the end-to-end cases are in test_replica_follow.py and test_replica_history.py; these
reach the branches a real primary only takes by chance.

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

from dbsvc.errors import HandshakeRefused, WebSocketClientError
from dbsvc.replica.consumer import parse_endpoint
from dbsvc.replica.follower import Follower
from dbsvc.replica.status import ReplicaStatus
from dbsvc.runtime import Query
from dbsvc.schema.describe import schema_fingerprint
from dbsvc.storage import Store
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.history import Fork, History
from dbsvc.storage.snapshot import ModelImage, SnapshotImage, encode_snapshot
from support.storage import BLOG, user

FINGERPRINT = schema_fingerprint(BLOG.DESCRIPTION)
OTHER = "f" * 64  # another schema's fingerprint
URL = "http://127.0.0.1:9"
EPOCH_A, EPOCH_B = "a" * 32, "b" * 32
H1, H2, H3 = "1" * 32, "2" * 32, "3" * 32


def deadline_seconds() -> float:
    """How long `wait` waits. Under mutation (bench/mutation.py) a killed mutant often shows
    as a wait that never ends, so a shorter bound keeps the run to minutes; the normal waits
    take well under 1 s. Read at each wait, not at import: the in-process runner sets
    MUTANT_UNDER_TEST after this module is imported (wt-mpo18 saw 20 s waits under it)."""
    return 5.0 if "MUTANT_UNDER_TEST" in os.environ else 20.0


# -- what a blog primary sends -------------------------------------------------------------


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

    def close(self) -> None:
        """Nothing is kept between asks of a script."""

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
        deadline = time.monotonic() + deadline_seconds()
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


def restored_behind(epoch: str = EPOCH_A, hist: str = H1) -> ScriptedPrimary:
    """A primary at offset 3 of epoch A that streams frames 1-3, then is restored to offset 1
    (of `epoch`, history `hist`) and drops the stream: behind the replica that followed it."""
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    def restored_to_one() -> Exception:
        primary.answer = body(epoch, 1, hist=history(hist))
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), insert(3), None, restored_to_one]]
    return primary
