"""Simulated power loss (tests/support/powerloss_fs.py) during `dbsvc backup`
(dbsvc/datatools/backup.py), which writes through storage's file seam.

A seed takes a backup of one of a few tenants (plain, compacted, with a torn log tail) into
an empty directory watched by the simulator, losing power at a random operation of it, then
writes what the disk holds into a fresh directory. Every seed checks:

- the tenant is intact: not a byte of it changed (a backup only reads it);
- the backup is either refused as incomplete (no manifest: `BadBackup`), or it passes every
  check of `verify_backup` and restores to exactly the tenant's records at the manifest's
  head offset (the tenant is quiescent here, so that is all of its records).

200 seeds run by default, 5,000 with `-m slow`; one replays alone with
`DBSVC_POWERLOSS_SEED=1234 python -m pytest tests/datatools/test_datatools_powerloss.py`.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil

import pytest

from dbsvc.datatools.backup import restore_backup, take_backup, verify_backup
from dbsvc.errors import BadBackup
from dbsvc.runtime import Query
from dbsvc.storage import files
from dbsvc.storage.compact import compact_directory
from dbsvc.storage.lock import WriterLock
from dbsvc.storage.migrate import read_description
from dbsvc.storage.tenants import create_tenant
from support.powerloss_fs import PowerLoss, PowerLossFiles
from support.storage import BLOG, open_store, post, user
from support.tree import dir_image

DEFAULT_SEEDS = 200
SLOW_SEEDS = 5_000
# Operations of a whole backup: 3 per data file (create, write, fsync; schema, snapshot, log
# and history), 5 for the manifest (create, write, fsync, rename, directory fsync), 1 for the
# parent's fsync: 18; a crash point past the end lets some seeds finish.
OPERATIONS = 21


def records(directory: str) -> tuple[int, dict[str, dict]]:
    """(head offset, every model's records by id) of the tenant at `directory`."""
    store = open_store(directory, readonly=True)
    try:
        return store.head_offset, {
            m.name: {r["id"]: r for r in store.list_records(m.name, Query(limit=1 << 40))[0]} for m in BLOG.MODELS
        }
    finally:
        store.close()


def _write_some(directory: str, users: int, posts: int) -> None:
    store = open_store(directory)

    async def go() -> None:
        for i in range(1, users + 1):
            await store.insert("User", user(i, profile={"i": i}))
        for i in range(1, posts + 1):
            await store.insert("BlogPost", post(i, author=1 + i % users))
        await store.delete("BlogPost", 2)

    asyncio.run(go())
    store.close()


def _compact(directory: str) -> None:
    lock = WriterLock.acquire(directory)
    try:
        compact_directory(directory, read_description(directory), retain_bytes=1 << 20)
    finally:
        lock.release()


@pytest.fixture(scope="module")
def tenants(tmp_path_factory) -> list[tuple[str, tuple[int, dict]]]:
    """Three tenants and their (head, records): plain; compacted, then written to (a snapshot
    and a log); plain with half a frame appended (an append in flight, cut by the backup)."""
    data = str(tmp_path_factory.mktemp("data"))
    plain = create_tenant(data, "plain")
    _write_some(plain, 20, 30)
    compacted = create_tenant(data, "compacted")
    _write_some(compacted, 15, 20)
    _compact(compacted)
    store = open_store(compacted)
    asyncio.run(store.insert("User", user(900)))
    store.close()
    torn = create_tenant(data, "torn")
    _write_some(torn, 10, 10)
    with open(os.path.join(torn, "log"), "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x7b\x00\x00")
    for directory in (plain, compacted, torn):
        os.unlink(os.path.join(directory, "LOCK"))  # a backup must not even create it
    return [(directory, records(directory)) for directory in (plain, compacted, torn)]


def run_seed(seed: int, base: str, tenants: list[tuple[str, tuple[int, dict]]]) -> None:
    rng = random.Random(seed)
    tenant, (head, expected) = rng.choice(tenants)
    before = dir_image(tenant)
    dest = os.path.join(base, f"backup{seed}")
    os.makedirs(dest)
    sim = PowerLossFiles(dest, crash_at=rng.randint(1, OPERATIONS))
    with files.use(sim):
        try:
            take_backup(tenant, dest, "t")
        except PowerLoss:
            pass
    sim.power_off()
    sim.close_all()
    disk = os.path.join(base, f"disk{seed}")
    sim.materialise(disk, rng)
    where = f"seed {seed} ({os.path.basename(tenant)}, power lost at operation {sim.operations})"

    assert dir_image(tenant) == before, f"{where}: the backup changed the tenant"
    try:
        manifest, _contents = verify_backup(disk)
    except BadBackup as exc:
        assert "manifest.json is missing" in str(exc), f"{where}: {exc}"
    else:
        assert manifest["head_offset"] == head, where
        data = os.path.join(base, f"restored{seed}")
        restore_backup(disk, data, "copy")
        assert records(os.path.join(data, "copy")) == (head, expected), f"{where}: the restored records differ"
        shutil.rmtree(data)
    shutil.rmtree(dest)
    shutil.rmtree(disk)


def _seeds(count: int) -> list[int]:
    chosen = os.environ.get("DBSVC_POWERLOSS_SEED")
    return [int(chosen)] if chosen else list(range(count))


def _run_seeds(count: int, base: str, tenants: list[tuple[str, tuple[int, dict]]]) -> None:
    for seed in _seeds(count):
        try:
            run_seed(seed, base, tenants)
        except Exception as exc:
            raise AssertionError(
                f"seed {seed} failed; replay it alone with DBSVC_POWERLOSS_SEED={seed}: {exc!r}"
            ) from exc


def test_backup_power_loss_seeds(tmp_path, tenants):
    _run_seeds(DEFAULT_SEEDS, str(tmp_path), tenants)


@pytest.mark.slow
def test_backup_power_loss_seeds_slow(tmp_path, tenants):
    _run_seeds(SLOW_SEEDS, str(tmp_path), tenants)


def test_every_operation_of_a_backup_is_a_crash_point(tmp_path, tenants):
    """The seeds reach every operation: a whole backup takes fewer than OPERATIONS."""
    tenant, _records = tenants[1]  # the most files: schema, snapshot, log
    dest = str(tmp_path / "backup")
    os.makedirs(dest)
    sim = PowerLossFiles(dest, crash_at=None)
    with files.use(sim):
        take_backup(tenant, dest, "t")
    assert 0 < sim.operations < OPERATIONS
    assert sim.durable("manifest.json") is not None  # the commit point is durable
