"""The power-loss run of one seed (tests/storage/test_storage_powerloss*.py): a store writes,
compacts and restarts on top of the simulated file layer (powerloss_fs.py) until the power
goes at an operation the seed picks; the disk is then opened with the real file layer and
checked (the test module's docstring lists the checks). A run is one thread of control
(the fsync and compaction "threads" run as loop callbacks, `LoopSyncer` and
`LoopExecutor`), so a seed performs the same operations every time.

The default seeds are split over two test files so that the suite's two workers
(`--dist loadfile`) share them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import random
import shutil
from collections.abc import Callable
from typing import Any

from dbsvc.errors import PayloadTooLarge, Referenced
from dbsvc.runtime import Query
from dbsvc.storage import files, fsyncthread
from dbsvc.storage.events import record_limit
from dbsvc.storage.logfile import LogScan
from dbsvc.storage.tenants import create_tenant
from support.powerloss_fs import PowerLoss, PowerLossFiles
from support.storage import open_store as _open_store
from support.storage import post, user

DEFAULT_SEEDS = 250  # the default run's; the slow run (SLOW_SEEDS) covers them and 9,750 more
SLOW_SEEDS = 10_000
# Seeds between two releases of the permanent generation (`release_frozen`): each release
# costs the next open a collection of the whole process (recovery.py collects before it
# freezes), ~0.3 s in a late test worker of 3M objects: once a seed, that was 48 + 31 s of the
# default run's two files (7.8 + 6.9 s before 874dc34). The cyclic garbage of 50 seeds' stores
# waits frozen meanwhile (~1 MB a seed: 10 GB at 10,000 seeds when never released).
RELEASE_EVERY = 50
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


class LoopSyncer:
    """The commit queue's fsync runner for this run (`fsyncthread.use`): each fsync runs on
    the loop at its next turn instead of in the fsync thread, so the seed fixes its place
    among the other tasks' operations."""

    def __init__(self, fsync: Callable[[], None]) -> None:
        self.fsync = fsync

    def start(self, loop: asyncio.AbstractEventLoop, done: fsyncthread.Done) -> None:
        def run() -> None:
            try:
                self.fsync()
            except BaseException as exc:  # noqa: BLE001 - handed to the committer
                done(exc)
            else:
                done(None)

        loop.call_soon(run)

    def close(self) -> None:
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


def open_store(tenant: str, **options: Any) -> Any:
    """A store of these runs: support.storage's, its heap's collapse after a compaction off
    (SERVICE_HUGE_PAGES=off). Here every thread step runs on the loop (`LoopExecutor`), so
    the collapse would too, each piece followed by its pacer's pause (at least
    heap.COLLAPSE_GAP, 0.1 s) on the loop: ~1 s a compacting seed, minutes a file. The
    collapse writes no file, so power lost around it has nothing to lose; the collapse
    itself is tested in tests/storage/test_storage_collapse_*.py."""
    store = _open_store(tenant, **options)
    store.compactor.huge_pages = False
    return store


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


def check_log(path: str, limit: int | None = None) -> None:
    with open(path, "rb") as f:
        scan = LogScan(path, f.read())
    for _offset, payload in scan.records():
        assert limit is None or len(payload) <= limit, f"{path}: frame {_offset} of {len(payload)} bytes"
    assert scan.damage is None, f"{path}: damage after recovery: {scan.damage}"


def run_seed(seed: int, base: str) -> None:
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

    async def main() -> None:
        asyncio.get_running_loop().set_default_executor(LoopExecutor())
        with files.use(sim), fsyncthread.use(LoopSyncer):
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
        check_log(os.path.join(crashed, "log"), LIMIT)
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


def _seeds(first: int, end: int) -> list[int]:
    """Seeds first..end-1, or only DBSVC_POWERLOSS_SEED when it is set and among them."""
    chosen = os.environ.get("DBSVC_POWERLOSS_SEED")
    if chosen is not None:
        return [int(chosen)] if first <= int(chosen) < end else []
    return list(range(first, end))


def run_seeds(first: int, end: int, scratch: str) -> None:
    """`run_seed` of seeds first..end-1 in a scratch directory, a failure naming its seed."""
    for seed in _seeds(first, end):
        try:
            run_seed(seed, scratch)
        except Exception as exc:
            raise AssertionError(
                f"seed {seed} failed; replay it alone with DBSVC_POWERLOSS_SEED={seed}: {exc!r}"
            ) from exc
        release_frozen(seed)
    gc.unfreeze()  # the last seeds' garbage too, before the next test opens a store


def release_frozen(seed: int) -> None:
    """After every RELEASE_EVERY-th seed, the seeds' stores out of the permanent generation.

    Each open froze what the process held (recovery.py), a store still referenced by the next
    open with it; the seeds' stores are garbage now, and the next open collects them once they
    are unfrozen (never: 10 GB at 10,000 seeds; after every seed: a whole-process collection a
    seed, the default run's costliest item)."""
    if seed % RELEASE_EVERY == RELEASE_EVERY - 1:
        gc.unfreeze()
