"""A follower store compacts at its primary's cut (storage/compactor.py invariant 4,
`Store.compact_at`), also when rows the primary wrote between its cut and its switch
reached the follower in the old epoch: its snapshot is then the primary's, byte for byte,
and its epoch, offsets, watermarks, `as_of` reads and frames after the cut are the
primary's.

Two real stores in one process: a primary whose online compaction is held after its
snapshot (DBSVC_FAULT `compact:1:HOLD`) while inserts, updates and deletes go on, and a
follower fed every frame the primary publishes, in order, as a caught-up replica gets them."""

from __future__ import annotations

import asyncio
import os

import pytest

from dbsvc.errors import EpochChanged
from dbsvc.runtime import Query
from dbsvc.storage.compact import SNAPSHOT_NAME
from dbsvc.storage.tenants import create_tenant
from support.storage import open_store, post, user

WAIT = 20.0


async def until(what: str, done) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT
    while not done():
        assert asyncio.get_running_loop().time() < deadline, f"never {what}"
        await asyncio.sleep(0.005)


def state(store, model: str, as_of: int | None = None) -> tuple[list[dict], int]:
    records, _total, watermark = store.list_records(model, Query(limit=1000, as_of=as_of))
    return records, watermark


def same(primary, follower) -> None:
    assert (follower.epoch, follower.head_offset) == (primary.epoch, primary.head_offset)
    assert follower.watermarks() == primary.watermarks()
    assert follower.epoch_state.log_base == primary.epoch_state.log_base
    for model in ("User", "BlogPost"):
        for n in range(primary.table(model).watermark + 1):
            assert state(follower, model, n) == state(primary, model, n), (model, n)
    assert list(follower.frames_after(follower.epoch_state.log_base)) == list(
        primary.frames_after(primary.epoch_state.log_base)
    )
    with open(os.path.join(primary.directory, SNAPSHOT_NAME), "rb") as a:
        with open(os.path.join(follower.directory, SNAPSHOT_NAME), "rb") as b:
            assert a.read() == b.read()


@pytest.mark.parametrize("during", [0, 7])
def test_a_follower_compacted_at_the_primarys_cut_is_the_primary(tmp_path, monkeypatch, during):
    """`during`: rows the primary writes between its cut and its switch (0: the follower
    is exactly at the cut when it learns of it)."""
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"compact:1:HOLD={gate}")
    primary = open_store(create_tenant(str(tmp_path / "p"), "t"), replication=True)
    monkeypatch.delenv("DBSVC_FAULT")
    follower = open_store(create_tenant(str(tmp_path / "f"), "t"), replication=True, compact_bytes=1 << 62)
    frames: list[bytes] = []
    primary.subscribe(lambda _event, frame: frames.append(frame))

    async def main() -> None:
        for i in range(1, 31):
            await primary.insert("User", user(i))
        for i in range(1, 11):
            await primary.insert("BlogPost", post(i, author=i))
        for i in (3, 4, 5):
            await primary.replace("User", i, user(i, name=f"renamed {i}"))
        await primary.delete("User", 30)
        compaction = primary.compact_now()
        await until("the primary's snapshot written", lambda: (tmp_path / "gate.held").exists())
        head = primary.epoch_state.log_base  # still the old epoch's
        writes = [
            lambda: primary.insert("User", user(100)),
            lambda: primary.replace("User", 7, user(7, name="during")),
            lambda: primary.delete("BlogPost", 2),
            lambda: primary.delete("User", 29),
            lambda: primary.insert("User", user(29, name="again")),
            lambda: primary.replace("User", 100, user(100, name="changed")),
            lambda: primary.insert("BlogPost", post(11, author=100)),
        ]
        for write in writes[:during]:
            await write()
        gate.touch()
        await compaction
        assert primary.compactions == 1 and primary.epoch_state.log_base > head
        cut = primary.epoch_state.log_base
        for i in range(200, 205):
            await primary.insert("User", user(i))
        await primary.replace("User", 200, user(200, name="after"))

        # The follower, caught up: every frame as published, the old epoch's up to the switch.
        sent = iter(frames)
        for frame in sent:
            try:
                await follower.apply_replicated(frame)
            except EpochChanged:
                first = frame
                break
        assert follower.applied_offset == cut + during
        await follower.compact_at(primary.epoch, cut)
        assert (follower.epoch, follower.compactions) == (primary.epoch, 1)
        await follower.apply_replicated(first)
        for frame in sent:
            await follower.apply_replicated(frame)
        if during:  # rows applied before the switch name positions in the old log: never cut there
            with pytest.raises(ValueError, match=f"the rows after offset {cut + 1} are not all known here"):
                follower.compact_at("e" * 32, cut + 1)

    try:
        asyncio.run(main())
        same(primary, follower)
    finally:
        gate.touch()
        primary.close()
        follower.close()
    again = open_store(str(tmp_path / "f" / "t"), replication=True)
    try:
        assert (again.epoch, again.head_offset, again.watermarks()) == (
            follower.epoch,
            follower.head_offset,
            follower.watermarks(),
        )
    finally:
        again.close()


def test_a_cut_behind_rows_applied_before_a_restart_is_refused(tmp_path, stores):
    follower = stores(create_tenant(str(tmp_path / "f"), "t"), replication=True)
    primary = stores(create_tenant(str(tmp_path / "p"), "t"), replication=True)
    frames: list[bytes] = []
    primary.subscribe(lambda _event, frame: frames.append(frame))

    async def main() -> None:
        for i in range(1, 6):
            await primary.insert("User", user(i))
        for frame in frames:
            await follower.apply_replicated(frame)

    asyncio.run(main())
    follower.close()
    primary.close()
    again = stores(str(tmp_path / "f" / "t"), replication=True)

    async def compact() -> None:
        with pytest.raises(ValueError, match="the rows after offset 3 are not all known here"):
            again.compact_at("e" * 32, 3)
        with pytest.raises(ValueError, match="outside this epoch's rows"):
            again.compact_at("e" * 32, 6)

    try:
        asyncio.run(compact())
        assert again.epoch != "e" * 32 and again.compactions == 0
    finally:
        again.close()
