"""Simulated power loss (tests/support/powerloss_fs.py) during `dbsvc replicate --out FILE`
(dbsvc/replica/consumer.py), whose FILE is opened, appended to, fsynced and cut through
storage's file seam.

The primary is a real tenant's log; its frames reach the consumer through a stand-in for the
WebSocket client (no socket: `open_websocket` is replaced), with pauses at random, on which
the consumer fsyncs (rule 2), and a SIGTERM once every frame is delivered (rule 5). A seed
loses power at a random operation of the run, writes what the disk holds into a fresh
directory, and checks:

- FILE holds a gap-free prefix of the primary's frames, byte for byte, and at least what
  every fsync covered; anything after that prefix is a torn tail (the consumer's own scan
  finds no damage before it);
- a new run resumes from FILE (it asks for `after` = FILE's last offset, or 0 without
  one) and ends with FILE exactly the primary's frames.

200 seeds run by default, 5,000 with `-m slow`; one replays alone with
`DBSVC_POWERLOSS_SEED=1234 python -m pytest tests/replica/test_replica_powerloss.py`.
"""

from __future__ import annotations

import asyncio
import gc
import io
import os
import random
import shutil
import signal
import urllib.parse
from typing import Any

import pytest

from dbsvc.replica import consumer, sinks
from dbsvc.replica.answers import PrimarySnapshot
from dbsvc.replica.consumer import replicate
from dbsvc.replica.sinks import read_file_history, scan_frames
from dbsvc.storage import files
from dbsvc.storage.history import History, encode_history
from dbsvc.storage.logfile import HEADER_SIZE, FrameWalk
from dbsvc.storage.tenants import create_tenant
from support.powerloss_fs import PowerLoss, PowerLossFiles
from support.powerloss_run import release_frozen
from support.storage import open_store, post, user

DEFAULT_SEEDS = 200
SLOW_SEEDS = 5_000
FRAMES = 60
OUT = "replica"
HISTORY = History("9c2f" * 8)


class FakeStream:
    """The WebSocket client's takes over a list of frames: the frames after `after`, a few
    at a time, with a pause (no frame) now and then, and SIGTERM once they are all delivered."""

    def __init__(self, frames: list[bytes], after: int, rng: random.Random) -> None:
        self.pending = frames[after:]
        self.rng = rng

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def receive_many(self, limit: int, max_bytes: int, timeout: float) -> list[bytes]:
        """What the client has ready (ws/client.py C7, consumer.py rule 8): a pause, or
        one to eight frames at once."""
        if self.rng.random() < 0.2:
            return []  # the stream pauses: the consumer fsyncs
        if not self.pending:
            signal.raise_signal(signal.SIGTERM)  # rule 5: finish, fsync, status 0
            return []
        count = min(limit, self.rng.randint(1, 8))
        taken, self.pending = self.pending[:count], self.pending[count:]
        return taken


class Primary:
    """The frames of a tenant's log, served by `FakeStream`s; remembers each run's `after`."""

    def __init__(self, frames: list[bytes], rng: random.Random) -> None:
        self.frames = frames
        self.rng = rng
        self.afters: list[int] = []

    def get_snapshot(self, _endpoint: Any, _timeout: float) -> tuple[int, PrimarySnapshot | None]:
        """The primary's `GET /snapshot`, as read: its head and history (FILE.history is
        written through the seam too, consumer.py rule 7)."""
        return 200, PrimarySnapshot("e" * 32, len(self.frames), "f" * 64, HISTORY)

    def open_websocket(self, url: str, **_kw: Any) -> FakeStream:
        after = int(urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["after"][0])
        self.afters.append(after)
        return FakeStream(self.frames, after, self.rng)


@pytest.fixture(scope="module")
def primary_frames(tmp_path_factory) -> list[bytes]:
    """The whole frames 1..FRAMES of a real tenant's log, of varied sizes."""
    tenant = create_tenant(str(tmp_path_factory.mktemp("primary")), "t")
    store = open_store(tenant)
    rng = random.Random(7)

    async def go() -> None:
        for i in range(1, FRAMES // 2 + 1):
            await store.insert("User", user(i, profile={"n": "x" * rng.randrange(900)}))
            await store.insert("BlogPost", post(i, author=i, body="b" * rng.randrange(1500)))

    asyncio.run(go())
    store.close()
    with open(os.path.join(tenant, "log"), "rb") as f:
        data = f.read()
    frames = [frame for _offset, frame in FrameWalk(data, HEADER_SIZE, len(data))]
    assert len(frames) == FRAMES
    return frames


def _run(primary: Primary, out: str) -> None:
    status = replicate("http://127.0.0.1:9", out=out, stderr=io.StringIO())
    assert status == 0


def run_seed(seed: int, base: str, frames: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    primary = Primary(frames, rng)
    monkeypatch.setattr(consumer, "open_websocket", primary.open_websocket)
    monkeypatch.setattr(consumer, "get_snapshot", primary.get_snapshot)
    # A small write buffer makes several writes between two fsyncs (torn and lost appends).
    monkeypatch.setattr(sinks, "WRITE_BUFFER", rng.choice([700, 3000, 1 << 20]))
    live = os.path.join(base, f"live{seed}")
    os.makedirs(live)
    sim = PowerLossFiles(live, crash_at=rng.randint(1, 60))
    with files.use(sim):
        try:
            _run(primary, os.path.join(live, OUT))
        except PowerLoss:
            pass
    sim.power_off()
    sim.close_all()
    durable = sim.durable(OUT) or b""
    disk = os.path.join(base, f"disk{seed}")
    image = sim.materialise(disk, rng).get(OUT)
    where = f"seed {seed} (power lost at operation {sim.operations})"

    whole = b"".join(frames)
    if image is None:
        assert durable == b"", f"{where}: FILE is gone, yet an fsync covered {len(durable)} bytes"
        last = 0
    else:
        end, scanned, _reason = scan_frames(OUT, image)
        last = scanned or 0
        assert image[:end] == b"".join(frames[:last]), f"{where}: FILE is not a prefix of the primary's frames"
        assert image[:end].startswith(durable), f"{where}: FILE lost bytes an fsync covered"

    primary.afters.clear()
    _run(primary, os.path.join(disk, OUT))
    # It asks for its own last frame again first, to check it is the primary's (consumer.py rule 7).
    checked = max(last - 1, 0)
    assert primary.afters[0] == checked, f"{where}: resumed after {primary.afters[0]}, FILE ends at {last}"
    with open(os.path.join(disk, OUT), "rb") as f:
        assert f.read() == whole, f"{where}: FILE after the resumed run is not the primary's frames"
    assert read_file_history(os.path.join(disk, OUT)) == HISTORY, f"{where}: FILE.history is not the primary's"
    shutil.rmtree(live)
    shutil.rmtree(disk)


def _seeds(count: int) -> list[int]:
    chosen = os.environ.get("DBSVC_POWERLOSS_SEED")
    return [int(chosen)] if chosen else list(range(count))


def _run_seeds(count: int, base: str, frames: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in _seeds(count):
        try:
            run_seed(seed, base, frames, monkeypatch)
        except Exception as exc:
            raise AssertionError(
                f"seed {seed} failed; replay it alone with DBSVC_POWERLOSS_SEED={seed}: {exc!r}"
            ) from exc
        release_frozen(seed)  # the seeds' stores out of the permanent generation, now and then
    gc.unfreeze()


def test_replica_file_power_loss_seeds(tmp_path, primary_frames, monkeypatch):
    _run_seeds(DEFAULT_SEEDS, str(tmp_path), primary_frames, monkeypatch)


@pytest.mark.slow
def test_replica_file_power_loss_seeds_slow(tmp_path, primary_frames, monkeypatch):
    _run_seeds(SLOW_SEEDS, str(tmp_path), primary_frames, monkeypatch)


def test_a_whole_run_fsyncs_every_frame_through_the_seam(tmp_path, primary_frames, monkeypatch):
    """Without a power loss the simulator sees the run make every frame durable."""
    primary = Primary(primary_frames, random.Random(1))
    monkeypatch.setattr(consumer, "open_websocket", primary.open_websocket)
    monkeypatch.setattr(consumer, "get_snapshot", primary.get_snapshot)
    sim = PowerLossFiles(str(tmp_path), crash_at=None)
    with files.use(sim):
        _run(primary, str(tmp_path / OUT))
    assert sim.durable(OUT) == b"".join(primary_frames)
    assert sim.durable(OUT + ".history") == encode_history(HISTORY)
