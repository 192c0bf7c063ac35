"""Sans-IO harness for the realtime tests: a real store and compiled schema, a channel that
records what a session sends, and a scheduler the test runs by hand."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dbsvc.rules import MISSING, NOTHING, ModelRules, Scope, claim
from dbsvc.storage import Store
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.tenants import create_tenant
from support.blog import BLOG


class Recorder:
    """A `Channel` that keeps every frame and close; `writable` is set by the test."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.writes: list[bytes] = []  # what send_frames wrote, one item a call
        self.closed: tuple[int, str] | None = None
        self.open = True

    @property
    def writable(self) -> bool:
        return self.open and self.closed is None

    def send_frame(self, frame: bytes) -> None:
        assert self.closed is None, "frame sent after close"
        self.frames.append(frame)

    def send_frames(self, data: bytes, count: int) -> None:
        """A batch: kept as one write in `writes`, split into its frames in `frames`."""
        assert self.closed is None, "frames sent after close"
        self.writes.append(data)
        if count == 1:
            self.frames.append(data)
            return
        split = split_frames(data)
        assert len(split) == count, (len(split), count)
        self.frames.extend(split)

    def send_text(self, text: str) -> None:
        raise AssertionError("feeds send shared frames only")

    def send_bytes(self, data: bytes) -> None:
        raise AssertionError("feeds send shared frames only")

    def close(self, code: int = 1000, reason: str = "") -> None:
        if self.closed is None:
            self.closed = (code, reason)


def split_frames(data: bytes) -> list[bytes]:
    """Server frames (unmasked) cut from a byte string, each with its header."""
    frames, i = [], 0
    while i < len(data):
        n, head = data[i + 1] & 0x7F, 2
        if n == 126:
            n, head = int.from_bytes(data[i + 2 : i + 4], "big"), 4
        elif n == 127:
            n, head = int.from_bytes(data[i + 2 : i + 10], "big"), 10
        frames.append(data[i : i + head + n])
        i += head + n
    return frames


class Scheduler:
    """`schedule(callback)` as the broker sees it; the test calls `run()` for a turn."""

    def __init__(self) -> None:
        self.pending: list = []

    def __call__(self, callback) -> None:
        self.pending.append(callback)

    def step(self) -> int:
        """One turn of the loop: the callbacks pending now (those they schedule wait)."""
        batch, self.pending = self.pending, []
        for callback in batch:
            callback()
        return len(batch)

    def run(self) -> int:
        ran = 0
        while self.pending:
            batch, self.pending = self.pending, []
            for callback in batch:
                callback()
                ran += 1
        return ran


def open_blog_store(tmp_path, **kw) -> Store:
    directory = create_tenant(str(tmp_path / "data"), "t")
    kw.setdefault("sync", "off")
    return Store.open(directory, BLOG.MODELS, BLOG.DESCRIPTION, **kw)


def run(coroutine):
    return asyncio.run(coroutine)


def replica_frame(offset: int, size: int) -> bytes:
    """A log frame whose `/replicate` message is exactly `size` bytes (16 bytes of frame
    header; a message header of 10 bytes from 65,536 bytes on, else 4)."""
    head = 10 if size - 4 >= 65536 else 4
    return encode_frame(offset, b"x" * (size - head - 16))


def owner_rules(model, field: str, claim_name: str) -> ModelRules:
    """`@allow(read, record.<field> == token.<claim_name>)`, as compiled rules build it."""
    key = model.keys[field]

    def scope(claims) -> Scope:
        value = claim(claims, (claim_name,))
        if value is MISSING:
            return NOTHING
        return Scope(field=field, keys=frozenset({key(value)}), key=key)

    return ModelRules(
        list=scope,
        subscribe=scope,
        get=lambda record, claims: record[field] == claim(claims, (claim_name,)),
        create=lambda record, claims: True,
        update=lambda before, after, claims: True,
        delete=lambda record, claims: True,
        text={"subscribe": f"record.{field} == token.{claim_name}"},
    )
