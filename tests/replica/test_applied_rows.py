"""A follower's notes of the rows it applied (storage/follow.py rule 6, `AppliedRows`): kept a
group at a time, read as one `Applied` row each (offset, model, max id before it, position
in the log), oldest first, at least the last RECENT_ROWS of them; and what a store's group
notes there, through `Store.apply_replicated_frames`."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from dbsvc.storage.follow import RECENT_ROWS, AppliedRows
from dbsvc.storage.logfile import HEADER_SIZE
from dbsvc.storage.tenants import create_tenant
from support.storage import open_store, user

USERS, POSTS = SimpleNamespace(name="User"), SimpleNamespace(name="BlogPost")


def test_applied_rows_are_read_a_row_at_a_time_in_the_order_added():
    rows = AppliedRows()
    rows.add([(USERS, 0, 1), (USERS, 1, 2)], [40, 90, 150])
    rows.add([(POSTS, 0, 3)], [150, 200])
    assert list(rows) == [(1, "User", 0, 40), (2, "User", 1, 90), (3, "BlogPost", 0, 150)]


def test_applied_rows_keep_at_least_the_last_recent_rows_and_drop_older_groups():
    rows = AppliedRows()
    size = RECENT_ROWS // 4
    for group in range(6):
        first = 1 + group * size
        rows.add([(USERS, top, first + top) for top in range(size)], list(range(size + 1)))
    offsets = [row[0] for row in rows]
    assert offsets == list(range(1 + 2 * size, 1 + 6 * size))  # the last four groups: RECENT_ROWS rows
    rows.add([(USERS, 0, 1 + 6 * size)], [0, 1])
    assert [row[0] for row in rows][0] == 1 + 2 * size  # three groups after it hold fewer: kept
    rows.clear()
    assert list(rows) == []


def test_a_group_applied_is_noted_a_row_each_with_its_position_in_the_log(tmp_path):
    primary = open_store(create_tenant(str(tmp_path / "p"), "t"), replication=True)
    follower = open_store(create_tenant(str(tmp_path / "f"), "t"), replication=True)
    frames: list[bytes] = []
    primary.subscribe(lambda _event, frame: frames.append(frame))

    async def main() -> None:
        for i in range(1, 6):
            await primary.insert("User", user(i))
        await follower.apply_replicated_frames(frames[:3])
        await follower.apply_replicated_frames(frames[3:])

    try:
        asyncio.run(main())
        starts = [HEADER_SIZE]
        for frame in frames[:-1]:
            starts.append(starts[-1] + len(frame))
        assert list(follower.applied_rows) == [(i, "User", i - 1, starts[i - 1]) for i in range(1, 6)]
    finally:
        primary.close()
        follower.close()


def test_applied_rows_keep_exactly_the_last_recent_rows_at_a_groups_edge():
    rows = AppliedRows()
    rows.add([(USERS, 0, 1)], [0, 1])
    rows.add([(USERS, top, 2 + top) for top in range(RECENT_ROWS - 1)], list(range(RECENT_ROWS)))
    assert [row[0] for row in rows][:2] == [1, 2]  # RECENT_ROWS rows in all: the first group stays
    rows.add([(USERS, 0, 1 + RECENT_ROWS)], [0, 1])
    assert [row[0] for row in rows][0] == 2  # the groups after it hold RECENT_ROWS: it goes


def test_applied_rows_cleared_count_their_rows_afresh():
    rows = AppliedRows()
    rows.add([(USERS, 0, 9)], [0, 1])
    rows.clear()  # a compaction's switch (store.py `install_epoch`)
    assert list(rows) == []
    rows.add([(USERS, 0, 1)], [0, 1])
    rows.add([(USERS, top, 2 + top) for top in range(RECENT_ROWS - 1)], list(range(RECENT_ROWS)))
    assert [row[0] for row in rows][:2] == [1, 2]


def test_a_followers_groups_keep_the_primarys_checkpoints_and_reads_from_the_middle(tmp_path):
    """Groups of 300 frames put offsets 1024 and 2048 mid-group: the follower's checkpoints
    (recovery.CHECKPOINT_EVERY: an offset and its byte position, where a replay read seeks)
    are the primary's, and so are its frames from any offset."""
    primary = open_store(create_tenant(str(tmp_path / "p"), "t"), replication=True)
    follower = open_store(create_tenant(str(tmp_path / "f"), "t"), replication=True)
    frames: list[bytes] = []
    primary.subscribe(lambda _event, frame: frames.append(frame))

    async def main() -> None:
        for i in range(1, 2101):
            await primary.insert("User", user(i))
        for at in range(0, len(frames), 300):
            await follower.apply_replicated_frames(frames[at : at + 300])

    try:
        asyncio.run(main())
        assert follower.epoch_state.checkpoints == primary.epoch_state.checkpoints
        assert [offset for offset, _position in follower.epoch_state.checkpoints] == [1024, 2048]
        for after in (0, 1000, 1023, 1024, 1030, 2047, 2050):
            assert list(follower.frames_after(after)) == list(primary.frames_after(after)), after
    finally:
        primary.close()
        follower.close()
