"""A follower's group is one entry of the commit queue (storage/commit.py `submit_group`),
and two of that entry's paths are checked here on a real store fed real frames:

- a failed write or fsync takes the group's rows back in REVERSE order (`_fail_pending`):
  an insert then an update of the same record, an update then a delete, in one group. The
  table pops its own rows last first whatever the order, but the offset the follower
  expects next and the model's max id are each undo's "before": undone first to last, the
  store would be left expecting the group's LAST offset and holding its last max id, and
  the primary's resend of the same group would be refused as out of sequence;
- an online compaction whose switch finds a group still queued renumbers every event of
  it into the new epoch (`map_pending_events`): the watermarks a subscriber is handed are
  the ones `as_of` reads by after the switch."""

from __future__ import annotations

import asyncio
import os

import pytest

from dbsvc.errors import Unavailable
from dbsvc.runtime import Query
from dbsvc.storage import loghealth
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.files import FaultPlan
from dbsvc.storage.tenants import create_tenant
from support.storage import HoldAfterSnapshot, open_store, run, user


class Frames:
    """Frames as a primary writes them: offsets across models, a watermark per model."""

    def __init__(self) -> None:
        self.offset = 0
        self.watermarks: dict[str, int] = {}
        self.live: dict[int, dict] = {}

    def _frame(self, kind: EventKind, id_: int, record: dict, previous: dict | None) -> bytes:
        self.offset += 1
        watermark = self.watermarks["User"] = self.watermarks.get("User", 0) + 1
        return ChangeEvent(kind, "User", self.offset, watermark, id_, record, previous).frame()

    def insert(self, id_: int, **over) -> bytes:
        record = self.live[id_] = user(id_, **over)
        return self._frame(EventKind.INSERT, id_, record, None)

    def update(self, id_: int, **over) -> bytes:
        previous = self.live[id_]
        record = self.live[id_] = dict(previous, **over)
        return self._frame(EventKind.UPDATE, id_, record, previous)

    def delete(self, id_: int) -> bytes:
        record = self.live.pop(id_)
        return self._frame(EventKind.DELETE, id_, record, None)


def _state(store) -> dict:
    users = store.list_records("User", Query(limit=1000))[0]
    return {
        "head": store.head_offset,
        "applied": store.applied_offset,
        "max id": store.table("User").max_id,
        "users": [(r, store.get_versioned("User", r["id"])[2]) for r in users],
        "by age": [r["id"] for r in store.list_records("User", Query(limit=1000, sort=(("age", False),)))[0]],
        "as_of 2": store.list_records("User", Query(limit=1000, as_of=2))[0],
    }


def _failing_group(feed: Frames) -> list[bytes]:
    """Offsets 4-8: an insert of 10 then an update of it, an update of 2 then its delete,
    an insert of 11 (the max id rises twice inside the group)."""
    return [
        feed.insert(10, age=30),
        feed.update(10, name="renamed", age=31),
        feed.update(2, age=77),
        feed.delete(2),
        feed.insert(11, age=5),
    ]


@pytest.mark.parametrize("fault", ["fsync:1:EIO", "write:1:ENOSPC"])
def test_a_failed_group_is_undone_last_row_first_and_its_resend_is_taken(tmp_path, monkeypatch, fault):
    """fsync EIO: the store turns read-only, its memory exactly the rows before the group.
    Write ENOSPC: refused until there is room, then the primary's resend of the very same
    group (it never got an ack) must be taken, from the group's first offset."""
    monkeypatch.setattr(loghealth, "RETRY_INTERVAL", 0.0)  # a probe for room at the next write
    tenant = create_tenant(str(tmp_path / "replica"), "t")
    feed = Frames()
    good = [feed.insert(1, age=40), feed.insert(2, age=20), feed.insert(3, age=60)]
    bad = _failing_group(feed)
    store = open_store(tenant, sync="full", replication=True)
    seen: list[tuple[int, int]] = []
    try:
        store.subscribe(lambda event, frame: seen.append((event.offset, event.watermark)))

        async def main() -> dict:
            await store.apply_replicated_frames(good)
            before = _state(store)
            store.commit_queue.writer.faults = FaultPlan(fault)
            with pytest.raises(Unavailable):
                await store.apply_replicated_frames(bad)
            assert _state(store) == before
            assert store.get_versioned("User", 10)[0] is None
            if fault.startswith("write"):
                await store.apply_replicated_frames(bad)  # the resend, from offset 4
            return before

        before = run(main())
        if fault.startswith("fsync"):
            assert seen == [(1, 1), (2, 2), (3, 3)]
        else:
            assert seen == [(n, n) for n in range(1, 9)]
            now = _state(store)
            assert now["applied"] == now["head"] == 8 and now["max id"] == 11
            assert [r["id"] for r, _v in now["users"]] == [1, 3, 10, 11]
            assert store.get_versioned("User", 10)[0] == feed.live[10]
    finally:
        store.close()
    again = open_store(tenant, sync="full", replication=True)
    try:
        if fault.startswith("fsync"):
            assert _state(again) == before
        else:
            assert {r["id"]: r for r in again.list_records("User", Query(limit=1000))[0]} == feed.live
    finally:
        again.close()


EPOCH = "2e" * 16  # the primary's new epoch id (16 bytes, hex)


async def _until(what: str, ready, seconds: float = 30.0) -> None:
    """Poll `ready()` on the loop until it holds, for at most `seconds`."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not ready():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.005)


def test_a_group_queued_at_a_compactions_switch_is_published_with_the_new_epochs_watermarks(tmp_path):
    """Ten inserts and three deletes before the cut (offset 13): live 7, watermark 13, so
    the new epoch counts User's rows 6 lower. Past the cut one row is committed while its
    fsync is held, then a group of five rows is queued behind it; the compaction's switch
    runs after that fsync, with the group still queued, so its events must leave renumbered."""
    tenant = create_tenant(str(tmp_path / "replica"), "t")
    gate = str(tmp_path / "fsync-gate")
    feed = Frames()
    before_cut = [feed.insert(i, age=i) for i in range(1, 11)] + [feed.delete(2), feed.delete(5), feed.delete(9)]
    first = [feed.update(1, name="past the cut")]  # offset 14, its fsync held
    group = [  # offsets 15-19, queued at the switch
        feed.insert(20, age=99),
        feed.update(20, name="twenty", age=98),
        feed.update(3, age=33),
        feed.delete(4),
        feed.insert(21, age=1),
    ]
    delta = 7 - 13
    hold = HoldAfterSnapshot()
    store = open_store(tenant, sync="full", replication=True)
    store.compactor.faults = hold
    seen: list[ChangeEvent] = []
    frames: list[bytes] = []
    try:
        store.subscribe(lambda event, frame: (seen.append(event), frames.append(frame)))

        async def main() -> None:
            await store.apply_replicated_frames(before_cut)
            task = store.compact_at(EPOCH, 13)
            assert await asyncio.to_thread(hold.reached.wait, 60), "the compaction never wrote its snapshot"
            queue = store.commit_queue
            queue.writer.faults = FaultPlan(f"fsync:1:HOLD={gate}")
            one = store.apply_replicated_frames(first)
            await _until("the fsync of offset 14 held", lambda: os.path.exists(gate + ".held"))
            rest = store.apply_replicated_frames(group)
            assert queue.pending == 2  # offset 14's entry and the group's
            hold.release.set()
            await _until("the switch requested", lambda: queue.switch_requested)
            assert queue.pending == 2
            open(gate, "w").close()  # the fsync returns: 14 acknowledged, then the switch
            await one
            await rest
            await task

        run(main())
        assert store.compactions == 1 and store.epoch_state.id == EPOCH
        published = [(e.offset, e.watermark) for e in seen]
        # 14 went out before the switch, in the old epoch; the group after it, renumbered.
        assert published == [(n, n) for n in range(1, 15)] + [(n, n + delta) for n in range(15, 20)]
        for event, frame in zip(seen[14:], frames[14:]):
            assert frame == event.frame()  # the frame handed out is the renumbered one
        # Each renumbered watermark is the one `as_of` reads the row at, in the new epoch.
        for event in seen[14:]:
            at = {r["id"]: r for r in store.list_records("User", Query(limit=1000, as_of=event.watermark))[0]}
            then = {r["id"]: r for r in store.list_records("User", Query(limit=1000, as_of=event.watermark - 1))[0]}
            if event.kind is EventKind.DELETE:
                assert event.id not in at and then[event.id] == event.record
            else:
                assert at[event.id] == event.record and then.get(event.id) == event.previous
        assert list(store.frames_after(14)) == frames[14:]
    finally:
        hold.release.set()  # a failed assert must not leave the compaction or the fsync held
        open(gate, "w").close()
        store.close()
