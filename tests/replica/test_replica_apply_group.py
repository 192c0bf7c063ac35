"""A follower store applies a primary's frames in groups (storage/follow.py rules 2, 4
and 5): one write and one fsync a group, each payload decoded once, the frames before a
bad one committed and nothing after it, and a batch of `POST /batch` whole or not at all,
also when its rows arrive in two groups or its last row does not fit.

Real stores in temporary directories; the frames are built as a primary writes them
(`ChangeEvent.frame`), batch marks included."""

from __future__ import annotations

import asyncio

import pytest

from dbsvc.errors import StreamError
from dbsvc.runtime import Query
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.tenants import create_tenant
from support.storage import open_store, user


def insert(offset: int, uid: int | None = None, batch: tuple[int, int] | None = None) -> bytes:
    """The frame of a User insert at `offset` (watermark `offset`: User rows only)."""
    uid = offset if uid is None else uid
    record = user(uid)
    return ChangeEvent(EventKind.INSERT, "User", offset, offset, uid, record, None, batch).frame()


@pytest.fixture
def follower(tmp_path):
    """A fresh follower store (sync full, replication on), closed after the test."""
    opened = []

    def make():
        store = open_store(create_tenant(str(tmp_path / "replica"), "t"), replication=True)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def ids(store) -> list[int]:
    return [u["id"] for u in store.list_records("User", Query(limit=1000))[0]]


def test_a_group_is_one_fsync_and_its_rows_are_durable_together(follower, tmp_path):
    store = follower()

    async def main():
        await store.apply_replicated_frames([insert(n) for n in range(1, 201)])

    asyncio.run(main())
    assert store.head_offset == 200 and ids(store) == list(range(1, 201))
    assert store.stats()["fsyncs"] == 1
    store.close()
    again = open_store(str(tmp_path / "replica" / "t"), replication=True)
    try:
        assert again.head_offset == 200 and ids(again) == list(range(1, 201))
    finally:
        again.close()


def test_the_frames_before_a_bad_one_are_committed_and_none_after_it(follower):
    store = follower()
    frames = [insert(1), insert(2), insert(3, uid=1), insert(4)]  # 3 inserts user 1 again

    async def main():
        with pytest.raises(StreamError, match="insert of User 1, which exists here"):
            store.apply_replicated_frames(frames)
        while store.head_offset < 2:  # the committer makes 1 and 2 durable
            await asyncio.sleep(0.001)

    asyncio.run(main())
    assert (store.head_offset, store.applied_offset, ids(store)) == (2, 2, [1, 2])


def test_a_batch_whose_last_row_does_not_fit_leaves_none_of_its_rows(follower):
    # Rows 2-4 are one batch of the primary's; its row 4 inserts a user this store has.
    # Rows 2 and 3 were held for it, and must not be kept without it (rule 4).
    store = follower()
    batch = (2, 4)

    async def main():
        await store.apply_replicated(insert(1))
        await store.apply_replicated(insert(2, batch=batch))
        await store.apply_replicated(insert(3, batch=batch))
        with pytest.raises(StreamError, match="insert of User 1, which exists here"):
            store.apply_replicated(insert(4, uid=1, batch=batch))
        await asyncio.sleep(0)

    asyncio.run(main())
    assert (store.head_offset, store.applied_offset, ids(store)) == (1, 1, [1])
    assert store.table("User").watermark == 1


def test_a_batch_whose_rows_come_in_two_groups_is_applied_with_the_second(follower):
    store = follower()
    batch = (2, 5)
    seen: list[list[int]] = []

    async def main():
        await store.apply_replicated_frames([insert(1), insert(2, batch=batch), insert(3, batch=batch)])
        seen.append(ids(store))
        await store.apply_replicated_frames([insert(4, batch=batch), insert(5, batch=batch), insert(6)])
        seen.append(ids(store))

    asyncio.run(main())
    assert seen == [[1], [1, 2, 3, 4, 5, 6]]
    assert store.head_offset == 6
