"""Simulated power loss (tests/support/powerloss_fs.py): a store writes, compacts and restarts on top of a
file layer that remembers what each fsync made durable; at a random operation the power
goes; the disk's state is written to a fresh directory and opened with the real file layer.

Every seed checks:

- the store opens (no `CorruptLog`): damage is only ever a cut tail;
- it holds exactly the state after some offset h: every acknowledged write (h >= the
  highest acknowledged offset), and of the unacknowledged ones at most a prefix (h <= the
  last offset written), never part of a write (nothing half-visible) and never part of a
  batch (`POST /batch`'s store side: one in seven writes is a batch of 2 to 6 ops, and h is
  never inside one);
- its log, read again after the open, has clean CRCs from its header to its end;
- a write after the restart gets offset h + 1 and is there after another open.

The stores run with a small frame limit (`max_payload=LIMIT`), and some records are near
the record limit, a few over it (issue 30 item 2): those are refused with
`PayloadTooLarge` and never written, and no frame on the disk is over the limit.

500 seeds run by default, 10,000 with `-m slow`. A failing seed replays alone:
`DBSVC_POWERLOSS_SEED=1234 python -m pytest tests/storage/test_storage_powerloss.py -k seed`.
A run is one thread of control (the fsync and compaction "threads" run as loop callbacks,
`LoopExecutor`), so a seed performs the same operations every time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import pytest

from dbsvc.errors import CorruptLog, PayloadTooLarge, Referenced
from dbsvc.runtime import Query
from dbsvc.storage import commit, files
from dbsvc.storage.events import record_limit
from dbsvc.storage.logfile import FRAME, FRAME_HEADER_SIZE, HEADER_SIZE, LogScan
from dbsvc.storage.tenants import create_tenant
from support.powerloss_fs import PowerLoss, PowerLossFiles
from support.storage import open_store, post, user

DEFAULT_SEEDS = 500
SLOW_SEEDS = 10_000
MODELS = ("User", "BlogPost")
ALL = Query(limit=10**9)
LIMIT = 16384  # the stores' max_payload
RECORD = record_limit(LIMIT)  # their largest record


class LoopExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each call on the event loop at its next turn instead of in a thread, so other
    tasks still run between a compaction's steps, but in an order fixed by the seed. (A
    ThreadPoolExecutor only because asyncio's `set_default_executor` accepts nothing else.)"""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
                future.set_exception(exc)
            else:
                future.set_result(result)

        asyncio.get_running_loop().call_soon(run)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


class Workload:
    """Random acknowledged writes against one store, remembering every write's offset."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.state: dict[str, dict[int, dict]] = {m: {} for m in MODELS}
        self.writes: list[tuple[int, str, int, dict | None]] = []  # offset, model, id, record
        self.batches: list[tuple[int, int]] = []  # (first, last) offsets of each batch
        self.acked = 0

    def _acknowledge(self, offset: int) -> Callable[[asyncio.Future], None]:
        def done(future: asyncio.Future) -> None:
            if not future.cancelled() and future.exception() is None:
                self.acked = max(self.acked, offset)

        return done

    def profile(self) -> dict:
        """Mostly small; one in ten near the record limit (a few bytes under or over)."""
        rng = self.rng
        if rng.random() < 0.1:
            return {"n": "x" * (RECORD - 140 + rng.randrange(-60, 30))}
        return {"n": "x" * rng.randrange(400)}

    def write_one(self, store: Any) -> asyncio.Future | None:
        rng, users = self.rng, self.state["User"]
        roll = rng.random()
        if roll < 0.15:
            return self.write_batch(store)
        try:
            return self._write_one(store, rng, users, roll)
        except PayloadTooLarge:
            return None  # refused before anything changed: not a write

    def write_batch(self, store: Any) -> asyncio.Future | None:
        """A batch of 2 to 6 ops (storage/batchwrite.py), each free to use what an earlier
        one made; a refused op (a referenced user, a record over the limit) drops it whole."""
        rng = self.rng
        state = {m: dict(records) for m, records in self.state.items()}
        rows: list[tuple[str, int, dict | None]] = []
        batch = store.begin_batch()
        try:
            for _op in range(rng.randint(2, 6)):
                roll, users = rng.random(), state["User"]
                if roll < 0.35 or not users:
                    rec = batch.insert("User", user(None, email=f"e{rng.randrange(10**9)}@x", profile=self.profile()))
                    model, id_ = "User", rec["id"]
                elif roll < 0.6:
                    id_ = rng.choice(sorted(users))
                    _prev, rec = batch.replace("User", id_, dict(users[id_], name=f"b{rng.randrange(999)}"))
                    model = "User"
                elif roll < 0.85:
                    rec = batch.insert("BlogPost", post(None, author=rng.choice(sorted(users))))
                    model, id_ = "BlogPost", rec["id"]
                else:
                    model = rng.choice(MODELS)
                    if not state[model]:
                        continue
                    id_ = rng.choice(sorted(state[model]))
                    batch.delete(model, id_)
                    rec = None
                if rec is None:
                    del state[model][id_]
                else:
                    state[model][id_] = rec
                rows.append((model, id_, rec))
        except (PayloadTooLarge, Referenced):
            batch.abort()
            return None
        durable = batch.commit()
        if not rows:
            return None
        last = store.applied_offset
        first = last - len(rows) + 1
        for offset, (model, id_, rec) in enumerate(rows, first):
            self.writes.append((offset, model, id_, rec))
        self.state = state
        self.batches.append((first, last))
        durable.add_done_callback(self._acknowledge(last))
        return durable

    def _write_one(self, store: Any, rng: random.Random, users: dict, roll: float) -> asyncio.Future | None:
        if roll < 0.35 or not users:
            rec, durable = store.apply_insert(
                "User", user(None, email=f"e{rng.randrange(10**9)}@x", profile=self.profile())
            )
            model, id_ = "User", rec["id"]
        elif roll < 0.6:
            id_ = rng.choice(sorted(users))
            _prev, rec, durable = store.apply_replace(
                "User", id_, dict(users[id_], name=f"n{rng.randrange(999)}", profile=self.profile())
            )
            model = "User"
        elif roll < 0.85:
            rec, durable = store.apply_insert(
                "BlogPost", post(None, author=rng.choice(sorted(users)), body="b" * rng.randrange(1500))
            )
            model, id_ = "BlogPost", rec["id"]
        else:
            model = rng.choice(MODELS)
            if not self.state[model]:
                return None
            id_ = rng.choice(sorted(self.state[model]))
            try:
                _prev, durable = store.apply_delete(model, id_)
            except Referenced:
                return None
            rec = None
        offset = store.applied_offset
        if rec is None:
            del self.state[model][id_]
        else:
            self.state[model][id_] = rec
        self.writes.append((offset, model, id_, rec))
        durable.add_done_callback(self._acknowledge(offset))
        return durable

    def state_at(self, head: int) -> dict[str, dict[int, dict]]:
        state: dict[str, dict[int, dict]] = {m: {} for m in MODELS}
        for offset, model, id_, rec in self.writes:
            if offset > head:
                break
            if rec is None:
                del state[model][id_]
            else:
                state[model][id_] = rec
        return state


def _records(store: Any) -> dict[str, dict[int, dict]]:
    return {m: {r["id"]: r for r in store.list_records(m, ALL)[0]} for m in MODELS}


async def _settle() -> None:
    """Let a running compaction finish, or unwind once the power is off (its steps are loop
    callbacks, so a few turns do it). One still waiting for a switch that the dead committer
    will never run is cancelled: in a real power loss nothing runs any more either."""
    for _turn in range(200):
        tasks = [t for t in asyncio.all_tasks() if t.get_name() == "dbsvc-compaction" and not t.done()]
        if not tasks:
            return
        await asyncio.sleep(0)
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks)


async def _client(store: Any, sim: PowerLossFiles, work: Workload, rounds: int) -> None:
    """One writer: a few writes at a time, each batch awaited before the next, or (half the
    time) not awaited at all, so that writes are queued whenever a switch or fsync comes."""
    for _round in range(rounds):
        if sim.crashed:  # nothing runs once the power is gone
            return
        futures = [f for f in (work.write_one(store) for _ in range(work.rng.randint(1, 4))) if f is not None]
        if work.rng.random() < 0.5:
            await asyncio.sleep(0)
            continue
        # A committer or compaction that lost power ends its task; nothing raises here.
        while futures and not sim.crashed:
            _done, futures = await asyncio.wait(futures, timeout=0.01)
        if sim.crashed:
            return


async def _closed(store: Any, sim: PowerLossFiles) -> bool:
    """`aclose()` the store (it waits for queued writes and a compaction); False if the power
    went meanwhile (a committer that lost power never finishes what `aclose` waits for)."""
    closing = asyncio.ensure_future(store.aclose())
    while not closing.done() and not sim.crashed:
        await asyncio.wait({closing}, timeout=0.01)
    if not closing.done():
        closing.cancel()
        await asyncio.wait({closing})
        return False
    closing.result()
    return True


async def _run(tenant: str, sim: PowerLossFiles, work: Workload, options: dict) -> None:
    """Phases of concurrent writers (so writes queue up behind fsyncs and compactions),
    with a clean restart between phases, until the power goes or the work is done."""
    rng = work.rng
    store = None
    try:
        store = open_store(tenant, **options)
        for _phase in range(rng.randint(1, 3)):
            clients = [_client(store, sim, work, rng.randint(2, 10)) for _ in range(rng.randint(1, 4))]
            await asyncio.gather(*clients)
            if sim.crashed or not await _closed(store, sim):
                break
            store = open_store(tenant, **options)
        await _settle()
    except PowerLoss:
        pass
    sim.power_off()
    await _settle()
    if store is not None:
        try:
            store.close()
        except PowerLoss:
            pass


def _check_log(path: str, limit: int | None = None) -> None:
    with open(path, "rb") as f:
        scan = LogScan(path, f.read())
    for _offset, payload in scan.records():
        assert limit is None or len(payload) <= limit, f"{path}: frame {_offset} of {len(payload)} bytes"
    assert scan.damage is None, f"{path}: damage after recovery: {scan.damage}"


def run_seed(seed: int, base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    tenant = create_tenant(os.path.join(base, f"live{seed}"), "t")
    options = {
        "sync": "full",
        "compact_bytes": rng.choice([3000, 8000, 1 << 20]),
        "retain_bytes": rng.choice([0, 0, 6000]),
        "max_payload": LIMIT,
    }
    sim = PowerLossFiles(tenant, crash_at=rng.randint(1, 400))
    work = Workload(rng)
    monkeypatch.setattr(commit, "ThreadPoolExecutor", LoopExecutor)

    async def main() -> None:
        asyncio.get_running_loop().set_default_executor(LoopExecutor())
        with files.use(sim):
            await _run(tenant, sim, work, options)

    asyncio.run(main())
    sim.close_all()
    crashed = os.path.join(base, f"disk{seed}", "t")
    sim.materialise(crashed, rng)
    shutil.rmtree(os.path.dirname(tenant))

    where = f"seed {seed} (power lost at operation {sim.operations}, acked up to {work.acked})"
    store = open_store(crashed, **options)
    try:
        head = store.head_offset
        last = work.writes[-1][0] if work.writes else 0
        assert work.acked <= head <= last or head == work.acked == 0, f"{where}: head {head}, last written {last}"
        inside = [(f, l) for f, l in work.batches if f <= head < l]
        assert not inside, f"{where}: head {head} is inside the batch {inside[0]}"
        assert _records(store) == work.state_at(head), f"{where}: state at head {head} differs"
        _check_log(os.path.join(crashed, "log"), LIMIT)
        after = asyncio.run(store.insert("User", user(None, email="after@x")))
        assert store.head_offset == head + 1, where
    finally:
        store.close()
    reopened = open_store(crashed, **options)
    try:
        assert reopened.get("User", after["id"])[0] == after, where
        assert reopened.head_offset == head + 1, where
    finally:
        reopened.close()
    shutil.rmtree(os.path.dirname(crashed))


def _seeds(count: int) -> list[int]:
    chosen = os.environ.get("DBSVC_POWERLOSS_SEED")
    return [int(chosen)] if chosen else list(range(count))


@pytest.fixture
def scratch(tmp_path):
    """A directory in memory when there is one: the check phase's real fsyncs (open, the
    write after the restart) cost nothing there, and durability is the simulator's job."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(prefix="dbsvc-powerloss-", dir="/dev/shm")
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield str(tmp_path)


def _run_seeds(count: int, scratch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in _seeds(count):
        try:
            run_seed(seed, scratch, monkeypatch)
        except Exception as exc:
            raise AssertionError(
                f"seed {seed} failed; replay it alone with DBSVC_POWERLOSS_SEED={seed}: {exc!r}"
            ) from exc


def test_power_loss_seeds(scratch, monkeypatch):
    _run_seeds(DEFAULT_SEEDS, scratch, monkeypatch)


@pytest.mark.slow
def test_power_loss_seeds_slow(scratch, monkeypatch):
    _run_seeds(SLOW_SEEDS, scratch, monkeypatch)


# -- the simulator itself, and the log rule it made necessary --------------------------------


def _images(tmp_path, sim: PowerLossFiles, seeds: int = 64) -> list[dict[str, bytes]]:
    out = []
    for seed in range(seeds):
        out.append(sim.materialise(str(tmp_path / f"image{seed}"), random.Random(seed)))
    return out


def test_simulator_keeps_what_fsync_covered_and_loses_some_of_the_rest(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    sim = PowerLossFiles(str(root), crash_at=None)
    fd = sim.open(str(root / "f"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sim.write(fd, b"a" * 700)
    sim.fsync(fd)
    sim.fsync_dir(str(root))
    sim.write(fd, b"b" * 1200)  # never fsynced
    sim.write(fd, b"c" * 300)
    sim.close(fd)
    sim.power_off()
    with pytest.raises(PowerLoss):
        sim.fsync_dir(str(root))  # nothing runs once the power is off
    seen = {image["f"] for image in _images(tmp_path, sim)}
    assert all(f.startswith(b"a" * 700) for f in seen)
    assert b"a" * 700 in seen  # nothing after the fsync
    assert b"a" * 700 + b"b" * 1200 + b"c" * 300 in seen  # all of it
    assert b"a" * 700 + bytes(1200) + b"c" * 300 in seen  # a subset: a hole of zeros
    torn = [f for f in seen if 700 < len(f) < 1900 and set(f[700:]) == {ord("b")}]
    assert torn and all(len(f) % 512 == 0 for f in torn)  # torn at a sector boundary


def test_simulator_forgets_unsynced_directory_changes_in_order(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    sim = PowerLossFiles(str(root), crash_at=None)
    for name in ("x.new", "y.new"):
        fd = sim.open(str(root / name), os.O_WRONLY | os.O_CREAT, 0o644)
        sim.write(fd, name.encode())
        sim.fsync(fd)
        sim.close(fd)
    sim.rename(str(root / "x.new"), str(root / "x"))
    sim.power_off()
    seen = {tuple(sorted(image)) for image in _images(tmp_path, sim)}
    # a prefix of (create x.new, create y.new, rename x.new -> x): never y.new without x.new
    assert seen == {(), ("x.new",), ("x.new", "y.new"), ("x", "y.new")}


def test_simulator_loses_power_at_the_chosen_operation(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    sim = PowerLossFiles(str(root), crash_at=3)
    fd = sim.open(str(root / "f"), os.O_WRONLY | os.O_CREAT, 0o644)  # operation 1
    sim.write(fd, b"one")  # operation 2
    with pytest.raises(PowerLoss):
        sim.fsync(fd)  # operation 3: not done
    sim.close_all()
    assert all(image.get("f", b"") in (b"", b"one") for image in _images(tmp_path, sim))


def _log_of_users(tenant: str, count: int) -> tuple[str, bytes, list[int]]:
    s = open_store(tenant)
    for i in range(1, count + 1):
        asyncio.run(s.insert("User", user(i)))
    s.close()
    path = os.path.join(tenant, "log")
    with open(path, "rb") as f:
        data = f.read()
    ends, pos = [], HEADER_SIZE
    while pos < len(data):
        _offset, _crc, length = FRAME.unpack_from(data, pos)
        pos += FRAME_HEADER_SIZE + length
        ends.append(pos)
    return path, data, ends


def test_an_unsynced_append_lost_before_a_later_one_is_cut_like_a_torn_tail(tenant):
    # Frames 1-3 acknowledged; frame 4 never reached the disk (zeros), frame 5 did.
    path, data, ends = _log_of_users(tenant, 5)
    with open(path, "wb") as f:
        f.write(data[: ends[2]] + bytes(ends[3] - ends[2]) + data[ends[3] :])
    s = open_store(tenant)
    try:
        assert s.head_offset == 3 and s.recovered_tail.position == ends[2]
        assert sorted(r["id"] for r in s.list_records("User", ALL)[0]) == [1, 2, 3]
        assert asyncio.run(s.insert("User", user(9)))["id"] == 9 and s.head_offset == 4
    finally:
        s.close()
    _check_log(path)


def test_a_torn_append_before_a_later_whole_one_is_cut_like_a_torn_tail(tenant):
    path, data, ends = _log_of_users(tenant, 5)
    keep = ends[2] + 20  # frame 4's header and a few payload bytes
    with open(path, "wb") as f:
        f.write(data[:keep] + bytes(ends[3] - keep) + data[ends[3] :])
    s = open_store(tenant)
    try:
        assert s.head_offset == 3 and s.recovered_tail.position == ends[2]
    finally:
        s.close()


def test_damage_ending_in_a_payload_byte_before_a_good_frame_still_refuses(tenant):
    # The same place damaged by a disk, not a crash: frame 4's bytes changed, its end intact.
    path, data, ends = _log_of_users(tenant, 5)
    broken = bytearray(data)
    broken[ends[2] + 20] ^= 0xFF
    with open(path, "wb") as f:
        f.write(bytes(broken))
    with pytest.raises(CorruptLog) as info:
        open_store(tenant)
    assert info.value.offset == ends[2]
    with open(path, "rb") as f:
        assert f.read() == bytes(broken)  # nothing was truncated
