"""A run's writes (writes.py rule 7) arriving while an online compaction's snapshot thread
reads the cut: each write held in the run notes the record it replaces before it applies
(`TableCut.note_write`, online.py), so the snapshot is the state at the cut, the new log
holds every write after it, and each write keeps the offset it was given.

test_storage_online.py holds the same for writes handed over one by one; the run's branch
of `WritePath.submit` notes its writes on a line of its own (docs/mutation.md, session 15,
wt-mpo5)."""

from __future__ import annotations

import asyncio

from dbsvc.storage import files
from support.storage import HeldSnapshot, check_indexes, run, snapshot_users, user

RECORDS = 2100  # past one block of the image's rows (online.CHUNK, 2,048)


def test_a_run_of_writes_during_the_snapshot_thread_stays_out_of_the_image_and_keeps_its_offsets(tenant, stores):
    """Replaces, a delete, a re-insert of the deleted id and new inserts, all in one run
    while the snapshot thread is held: the image is the state at the cut, every write is
    acknowledged with the next offset in order, and the reopened store (snapshot + new log)
    is the live state with each record's version the offset of its last write."""
    layer = HeldSnapshot()
    s = stores(tenant, compact_bytes=1 << 40)
    acks: list[tuple[str, int, object]] = []

    def told(what: str, offset: int):
        return lambda error: acks.append((what, offset, error))

    async def go():
        durable = asyncio.get_running_loop().create_future()
        s.begin_run()
        s.insert_run_then(
            "User", [user(i) for i in range(1, RECORDS + 1)], [lambda e: None] * (RECORDS - 1) + [durable.set_result]
        )
        s.end_run()
        assert await durable is None
        at_cut = {i: s.get("User", i)[0] for i in range(1, RECORDS + 1)}
        head = s.head_offset
        task = s.compact_now()
        assert await asyncio.to_thread(layer.reached.wait, 60)
        offsets: dict[str, int] = {}
        s.begin_run()
        s.replace_then("User", 7, user(7, name="replaced in a run"), told("replace 7", head + 1))
        offsets["replace 7"] = s.applied_offset
        s.delete_then("User", 8, told("delete 8", head + 2))
        offsets["delete 8"] = s.applied_offset
        outcomes = s.insert_run_then(
            "User",
            [user(8, name="back in the run"), user(RECORDS + 1)],
            [told("insert 8", head + 3), told("insert new", head + 4)],
        )
        offsets["insert 8"], offsets["insert new"] = (offset for _record, offset in outcomes)
        for i in range(100, RECORDS, 10):  # in both blocks of the image
            s.replace_then("User", i, user(i, name=f"r{i}"), told(f"replace {i}", s.applied_offset + 1))
        s.end_run()
        layer.release.set()
        await task
        return at_cut, head, offsets, {i: s.get_versioned("User", i) for i in range(1, RECORDS + 2)}

    with files.use(layer):
        at_cut, head, offsets, live = run(go())
    assert s.compactions == 1
    assert offsets == {"replace 7": head + 1, "delete 8": head + 2, "insert 8": head + 3, "insert new": head + 4}
    assert [(offset, error) for _what, offset, error in acks] == [(head + n, None) for n in range(1, len(acks) + 1)]
    assert s.head_offset == head + len(acks)
    s.close()

    image_head, image = snapshot_users(tenant)
    assert image_head == head
    assert image == at_cut  # 7 as it was, 8 the first one, no record past RECORDS

    s = stores(tenant)
    assert s.head_offset == head + len(acks)
    again = {i: s.get_versioned("User", i) for i in range(1, RECORDS + 2)}
    assert again == live
    assert live[7][0]["name"] == "replaced in a run" and live[7][2] == head + 1
    assert live[8][0]["name"] == "back in the run" and live[8][2] == head + 3
    assert live[RECORDS + 1][2] == head + 4
    assert live[150][0]["name"] == "r150" and live[1][0] == at_cut[1]
    check_indexes(s)
