"""A committed group is told to a group subscriber once (storage/changes.py rule 4): a
replica's group of frames, a single write (a group of one), never a group whose fsync
failed; event subscribers still get each event with the head at it; the waits of
workers/forward.py `AppliedOffsets` end when the group holding their offset is published.
Real stores, real files."""

from __future__ import annotations

import asyncio

import pytest

from dbsvc.errors import Unavailable
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.files import FaultPlan
from dbsvc.storage.tenants import create_tenant
from dbsvc.workers.forward import AppliedOffsets
from support.storage import open_store, run, user


def _inserts(first: int, count: int) -> list[bytes]:
    """Plain inserts of users `first`.. at offsets and watermarks `first`.. (one model)."""
    return [
        ChangeEvent(EventKind.INSERT, "User", n, n, n, user(n, age=n % 90, joined="2024-02-03T04:05:06Z")).frame()
        for n in range(first, first + count)
    ]


def _replica(tmp_path, sync: str = "off"):
    return open_store(create_tenant(str(tmp_path / "replica"), "t"), sync=sync, replication=True)


def test_a_replicated_group_is_told_once_after_each_event_is(tmp_path):
    store = _replica(tmp_path, sync="full")
    frames = _inserts(1, 300)
    told: list[tuple[str, list[int], int]] = []
    try:
        store.subscribe(lambda event, frame: told.append(("event", [event.offset], store.head_offset)))
        store.subscribe_groups(
            lambda events, fs: (
                told.append(("group", [e.offset for e in events], store.head_offset))
                if list(fs) == frames
                else told.append(("wrong frames", [], 0))
            )
        )

        async def main() -> None:
            await store.apply_replicated_frames(frames)

        run(main())
    finally:
        store.close()
    assert told[:-1] == [("event", [n], n) for n in range(1, 301)]
    assert told[-1] == ("group", list(range(1, 301)), 300)


def test_a_single_write_is_a_group_of_one(tmp_path):
    store = open_store(create_tenant(str(tmp_path / "primary"), "t"), sync="full")
    groups: list[list[int]] = []
    try:
        store.subscribe_groups(lambda events, frames: groups.append([e.offset for e in events]))

        async def main() -> None:
            for n in (1, 2):
                await store.insert("User", user(n))

        run(main())
    finally:
        store.close()
    assert groups == [[1], [2]]


def test_a_group_whose_fsync_fails_is_never_told(tmp_path):
    store = _replica(tmp_path, sync="full")
    groups: list[int] = []
    try:
        store.subscribe_groups(lambda events, frames: groups.append(len(events)))

        async def main() -> None:
            await store.apply_replicated_frames(_inserts(1, 100))
            store.commit_queue.writer.faults = FaultPlan("fsync:1:EIO")
            with pytest.raises(Unavailable):
                await store.apply_replicated_frames(_inserts(101, 50))

        run(main())
    finally:
        store.close()
    assert groups == [100]


def test_an_applied_offset_wait_ends_with_the_group_that_holds_it(tmp_path):
    store = _replica(tmp_path)
    try:

        async def main() -> tuple[bool, bool, bool, int]:
            applied = AppliedOffsets(store)
            inside, past = applied.wait(150), applied.wait(301)
            assert inside is not None and past is not None
            await store.apply_replicated_frames(_inserts(1, 300))
            await asyncio.sleep(0)
            state = (inside.done(), past.done(), applied.wait(300) is None, applied.waiting)
            applied.close()
            return state

        assert run(main()) == (True, False, True, 1)
    finally:
        store.close()


def test_a_wait_for_a_groups_last_offset_ends_with_it(tmp_path):
    store = _replica(tmp_path)
    try:

        async def main() -> tuple[bool, int]:
            applied = AppliedOffsets(store)
            last = applied.wait(300)
            assert last is not None
            await store.apply_replicated_frames(_inserts(1, 300))
            done = last.done()
            applied.close()
            return done, applied.waiting

        assert run(main()) == (True, 0)
    finally:
        store.close()


def test_a_group_subscriber_that_raises_keeps_none_from_the_group(tmp_path, caplog):
    store = _replica(tmp_path)
    groups: list[int] = []
    try:

        def broken(events, frames):
            raise RuntimeError("a subscriber's bug")

        store.subscribe_groups(broken)
        store.subscribe_groups(lambda events, frames: groups.append(events[-1].offset))

        async def main() -> None:
            await store.apply_replicated_frames(_inserts(1, 20))
            await store.apply_replicated_frames(_inserts(21, 20))

        run(main())
    finally:
        store.close()
    assert groups == [20, 40]
    assert "group subscriber" in caplog.text


@pytest.mark.parametrize("event_subscriber", [False, True])
def test_a_primarys_group_fills_its_ring(tmp_path, event_subscriber):
    """Without replication `events_after` serves the ring: a group published at once
    (a `POST /batch`, here a replicated group on a store without replication) is in it,
    with event subscribers or without."""
    store = open_store(create_tenant(str(tmp_path / "ring"), "t"), sync="off", replication=False)
    try:
        store.subscribe_groups(lambda events, frames: None)
        if event_subscriber:
            store.subscribe(lambda event, frame: None)

        async def main() -> None:
            await store.apply_replicated_frames(_inserts(1, 30))

        run(main())
        assert [e.offset for e in store.events_after(25)] == [26, 27, 28, 29, 30]
    finally:
        store.close()


def test_an_offline_batch_is_told_to_a_group_subscriber(tmp_path):
    store = open_store(create_tenant(str(tmp_path / "batch"), "t"), sync="off")
    groups: list[tuple[list[int], int, bool]] = []
    try:
        store.subscribe_groups(
            lambda events, frames: groups.append(
                ([e.offset for e in events], store.head_offset, [f for f in frames] == [e.frame() for e in events])
            )
        )
        store.insert_batch([("User", user(n)) for n in (1, 2, 3)])
    finally:
        store.close()
    assert groups == [([1, 2, 3], 3, True)]


def test_the_broker_with_no_socket_moves_its_head_a_group_at_a_time(tmp_path):
    from dbsvc.realtime.broker import Broker
    from support.storage import BLOG

    store = _replica(tmp_path)
    try:
        broker = Broker(store, {m.name: m for m in BLOG.MODELS}, 16)
        broker.attach(lambda callback: None)

        async def main() -> None:
            await store.apply_replicated_frames(_inserts(1, 40))

        run(main())
        assert broker.head == 40
    finally:
        store.close()
