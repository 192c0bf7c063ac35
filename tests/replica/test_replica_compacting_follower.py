"""A follower's own online compaction while it applies a primary's frames (storage/follow.py
`_Group.apply` and `flush`, online.py `TableCut.note_write`): its snapshot is its state at
the cut whatever the frames applied during the snapshot thread do (an update, a delete, a
delete then an insert of the same id, a run of new inserts), and a reopen is its live state.

Two real stores in one process, and a file layer holding the follower's snapshot thread at
its first write into snapshot.new (before any row of the image is read)."""

from __future__ import annotations

import asyncio
import os

from dbsvc.storage import files
from dbsvc.storage.snapshotreader import decode_snapshot
from dbsvc.storage.tenants import create_tenant
from support.storage import HeldSnapshot, open_store, user


def test_frames_applied_during_a_followers_snapshot_leave_its_image_at_the_cut(tmp_path):
    primary = open_store(create_tenant(str(tmp_path / "p"), "t"), replication=True)
    follower = open_store(create_tenant(str(tmp_path / "f"), "t"), replication=True, compact_bytes=1 << 40)
    frames: list[bytes] = []
    primary.subscribe(lambda _event, frame: frames.append(frame))
    layer = HeldSnapshot()

    async def main() -> tuple[dict, int, dict]:
        for i in range(1, 41):
            await primary.insert("User", user(i))
        await follower.apply_replicated_frames(frames)
        at_cut = {i: follower.get("User", i)[0] for i in range(1, 41)}
        head = follower.head_offset
        task = follower.compact_now()
        await asyncio.to_thread(layer.reached.wait, 60)
        sent = len(frames)
        await primary.replace("User", 7, user(7, name="after the cut"))
        await primary.delete("User", 8)
        await primary.delete("User", 9)
        await primary.insert("User", user(9, name="back again"))
        for i in range(100, 110):
            await primary.insert("User", user(i))
        await follower.apply_replicated_frames(frames[sent : sent + 4])  # one frame at a time
        await follower.apply_replicated_frames(frames[sent + 4 :])  # a run of inserts
        layer.release.set()
        await task
        return at_cut, head, {i: follower.get("User", i)[0] for i in (*range(1, 41), *range(100, 110))}

    try:
        with files.use(layer):
            at_cut, head, live = asyncio.run(main())
        assert follower.compactions == 1
    finally:
        layer.release.set()
        primary.close()
        follower.close()
    image = decode_snapshot("snapshot", open(os.path.join(tmp_path, "f", "t", "snapshot"), "rb").read())
    assert image.head_offset == head
    users = next(m for m in image.models if m.name == "User")
    assert {row[users.fields.index("id")]: dict(zip(users.fields, row)) for row in users.rows} == at_cut
    again = open_store(str(tmp_path / "f" / "t"), replication=True)
    try:
        assert {i: again.get("User", i)[0] for i in (*range(1, 41), *range(100, 110))} == live
        assert live[8] is None and live[9]["name"] == "back again" and live[7]["name"] == "after the cut"
    finally:
        again.close()


def test_a_followers_group_that_takes_its_log_past_compact_bytes_starts_its_compaction(tmp_path):
    """follow.py `_Group.submit`: after a group's write, a log past `compact_bytes` asks the
    compactor's size rule (compactor.py `after_write`); a log under it does not compact."""
    primary = open_store(create_tenant(str(tmp_path / "p"), "t"), replication=True)
    follower = open_store(create_tenant(str(tmp_path / "f"), "t"), replication=True, compact_bytes=4096)
    frames: list[bytes] = []
    primary.subscribe(lambda _event, frame: frames.append(frame))

    async def main() -> tuple[str, str]:
        for i in range(1, 41):
            await primary.insert("User", user(i))
        first = follower.epoch
        under = 0
        while sum(map(len, frames[: under + 1])) < 4096 - 64:  # the log's header included
            under += 1
        await follower.apply_replicated_frames(frames[:under])
        idle = follower.compactor.task
        written = follower.apply_replicated_frames(frames[under:])
        started = follower.compactor.task  # by the group's submit, before its write is durable
        await written
        assert idle is None and started is not None
        await started
        return first, follower.epoch

    try:
        first, epoch = asyncio.run(main())
        assert follower.compactions == 1 and epoch != first
        assert [follower.get("User", i)[0]["id"] for i in (1, 40)] == [1, 40]
    finally:
        primary.close()
        follower.close()
