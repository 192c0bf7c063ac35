"""storage/commit.py's `submit`, `_acknowledge` and `_fail_pending` where mutation testing
found them unpinned (docs/mutation.md, "... (session 10, wt-mcm)"):

- A batch (`Store.begin_batch`: one `submit_group` entry holding several frames) is counted
  one commit per write in `commits` and in the group-commit histogram, and every one of
  its events is published with the frame the log holds, after which the queue still takes
  writes. A publish that stopped after the group's first event, or counted the group as
  one write, survived.
- A batch whose write call finds no room is rolled back whole, last write first (the
  table's largest id goes back to what it was before the batch), counted a failure per
  write, and once there is room the same batch gets the same offsets and ids.
- Under `sync="off"` a write whose own write call fails is never applied, and a write told
  by a completion callback hears `Unavailable` from it (`submit`'s failure branch); a write
  checked before the committer has failed a write that found no room is refused, with no
  probe for room due yet (loghealth.py `_retry_at` starts as None).
"""

from __future__ import annotations

import asyncio

import pytest

from dbsvc.errors import Unavailable
from dbsvc.storage import loghealth
from dbsvc.storage.loghealth import BATCH_BOUNDS
from dbsvc.storage.logwriter import WriteState
from support.storage import open_store, run, user


def test_a_batch_is_counted_a_commit_a_write_and_published_whole(tenant):
    s = open_store(tenant)
    try:
        seen: list[tuple[int, bytes]] = []
        s.subscribe(lambda event, frame: seen.append((event.offset, frame)))
        before = s.stats()

        async def go() -> None:
            batch = s.begin_batch(3)
            for i in (1, 2, 3):
                batch.insert("User", user(i))
            await batch.commit()

        run(go())
        after = s.stats()
        assert after["commits"] - before["commits"] == 3
        grew = [b - a for a, b in zip(before["batch_sizes"][1], after["batch_sizes"][1], strict=True)]
        assert grew == [1 if bound == 4 else 0 for bound in (*BATCH_BOUNDS, None)]
        assert [offset for offset, _ in seen] == [1, 2, 3]
        assert [frame for _, frame in seen] == list(s.frames_after(0))
        assert s.health().state is WriteState.OK
        assert run(s.insert("User", user(4)))["id"] == 4
        assert [offset for offset, _ in seen] == [1, 2, 3, 4]
    finally:
        s.close()


def test_a_batch_that_finds_no_room_is_rolled_back_whole_and_counted_a_failure_a_write(tenant, monkeypatch):
    monkeypatch.setattr(loghealth, "RETRY_INTERVAL", 0)
    monkeypatch.setenv("DBSVC_FAULT", "write:2:ENOSPC")  # write call 2: the batch's
    s = open_store(tenant)
    try:
        run(s.insert("User", user(1)))
        before = s.stats()

        async def batch_of_three() -> list[int]:
            batch = s.begin_batch(3)
            ids = [batch.insert("User", user(None, email=f"b{k}@x"))["id"] for k in range(3)]
            await batch.commit()
            return ids

        with pytest.raises(Unavailable, match="no space"):
            run(batch_of_three())
        assert s.stats()["failed_writes"] - before["failed_writes"] == 3
        assert s.head_offset == 1 and s.watermarks()["User"] == 1
        assert [s.get("User", i)[0] for i in (2, 3, 4)] == [None, None, None]
        assert s.health(retry=True).state is WriteState.OK
        assert run(batch_of_three()) == [2, 3, 4]
        assert s.head_offset == 4
    finally:
        s.close()


def test_a_callback_write_whose_write_call_fails_under_sync_off_hears_unavailable(tenant, monkeypatch):
    monkeypatch.setenv("DBSVC_FAULT", "write:2:EIO")  # sync off: write call n is write n
    s = open_store(tenant, sync="off")
    heard: list[tuple[int, BaseException | None]] = []
    try:

        async def go() -> None:
            settled = asyncio.get_running_loop().create_future()

            def done_for(i: int):
                def done(error: BaseException | None) -> None:
                    heard.append((i, error))
                    if len(heard) == 2:
                        settled.set_result(None)

                return done

            s.insert_then("User", user(1), done_for(1))
            s.insert_then("User", user(2), done_for(2))
            await asyncio.wait_for(settled, 10)

        run(go())
        assert [i for i, _ in heard] == [1, 2] and heard[0][1] is None
        assert isinstance(heard[1][1], Unavailable)
        assert s.get("User", 1)[0] == user(1) and s.get("User", 2)[0] is None
        assert s.head_offset == 1 and s.stats()["failed_writes"] == 1
        assert s.health().state is WriteState.FAILED
    finally:
        s.close()


def test_a_write_checked_before_the_committer_fails_a_write_that_found_no_room_is_refused(tenant, monkeypatch):
    # Under sync off, a write whose own write call finds no space records the failure and
    # leaves its rollback to the committer's next turn; a write checked in between (the same
    # turn) is refused with `Unavailable`, before any probe for room is due.
    monkeypatch.setenv("DBSVC_FAULT", "write:1:ENOSPC")  # sync off: write call n is write n
    s = open_store(tenant, sync="off")
    heard: list[BaseException | None] = []
    try:

        async def go() -> None:
            s.insert_then("User", user(1), heard.append)
            with pytest.raises(Unavailable, match="no space for the log"):
                s.insert_then("User", user(2), heard.append)
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        run(go())
        assert len(heard) == 1 and isinstance(heard[0], Unavailable)
        assert s.get("User", 1)[0] is None and s.get("User", 2)[0] is None
        assert s.health().state is WriteState.REFUSING
    finally:
        s.close()


def test_each_commit_adds_one_to_its_size_in_the_group_commit_histogram(tenant):
    # loghealth.py `CommitStats.count_batch`: a count per size that grows, where a single
    # batch's delta (above) reads the same from a count that is set to 1 (docs/mutation.md,
    # "... session 12, wt-mpo2")
    s = open_store(tenant)
    try:
        for i in (1, 2, 3):
            assert run(s.insert("User", user(i)))["id"] == i  # one commit of one write each
        bounds, counts = s.stats()["batch_sizes"]
        assert counts == [3 if bound == 1 else 0 for bound in (*bounds, None)]
    finally:
        s.close()


def test_a_write_whose_probe_still_finds_no_room_is_refused_before_it_is_tried(tenant, monkeypatch):
    # loghealth.py `_room_again`: a probe due that finds no room answers False, so the write
    # is refused there and never reaches the log (docs/mutation.md, "... session 12, wt-mpo2")
    monkeypatch.setattr(loghealth, "RETRY_INTERVAL", 0)
    monkeypatch.setenv("DBSVC_FAULT", "write:3-4:ENOSPC")  # write call 3 fails; the probe is 4
    s = open_store(tenant)
    try:
        run(s.insert("User", user(1)))
        run(s.insert("User", user(2)))
        with pytest.raises(Unavailable, match="no space"):
            run(s.insert("User", user(3)))  # write call 3
        failed = s.stats()["failed_writes"]
        with pytest.raises(Unavailable, match="no space"):
            run(s.insert("User", user(3)))  # write call 4, the probe: still no room
        assert s.stats()["failed_writes"] == failed and s.head_offset == 2
        assert run(s.insert("User", user(3)))["id"] == 3  # the probe (5) finds room; 6 stores it
        assert s.head_offset == 3
    finally:
        s.close()
