"""Online compaction's edges that mutation testing found untested (session 17, wt-mpo7:
online.py `catch_up`, compactor.py `_compact_steps`): in process, on a real tenant directory,
so `bench/mutation_pytest.py` sees every call."""

from __future__ import annotations

import asyncio

from dbsvc.storage import online
from support.storage import HoldAfterSnapshot, open_store, run, user


def test_more_frames_past_the_cut_than_a_pacers_step_are_copied_and_kept(tenant):
    """The thread step that copies the frames written past the cut pauses every
    `online.PACE_FRAMES` frames (its `Pacer` checks for a closed store there): with more
    frames than that behind the cut, the pause runs inside the copy and the compaction ends
    with every one of them."""
    hold = HoldAfterSnapshot()
    s = open_store(tenant)
    s.compactor.faults = hold
    past = online.PACE_FRAMES + 6

    async def go():
        for i in range(1, 21):
            await s.insert("User", user(i))
        task = s.compact_now()
        assert await asyncio.to_thread(hold.reached.wait, 60), "the compaction never wrote its snapshot"
        for n in range(past):
            await s.replace("User", 1 + n % 20, user(1 + n % 20, name=f"past the cut {n}"))
        hold.release.set()
        await task

    try:
        run(go())
        assert s.compactions == 1
        live = dict(s.tables["User"].records)
        assert [int.from_bytes(f[:8], "big") for f in s.frames_after(20)] == list(range(21, 21 + past))
    finally:
        s.close()
    s = open_store(tenant)
    try:
        assert dict(s.tables["User"].records) == live
        assert live[1 + (past - 1) % 20]["name"] == f"past the cut {past - 1}"
    finally:
        s.close()
