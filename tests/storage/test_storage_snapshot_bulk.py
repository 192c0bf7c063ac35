"""The snapshot step reads the image a chunk of ids at a time, each read one lookup mapped
over the chunk in C (online.py `TableCut.image_rows`, `Versions.get_many`), and blocks its
rows by slices (snapshot.py `_blocks`): no Python frame runs per record, so the thread's
holds on the GIL are C calls between its pauses, not 5 ms switch intervals of bytecode
(bench/README.md, wt-snap). What it reads is still the state at the cut, ids kept in the
live map's dict part (negative, far past the end) and ids written after the cut included."""

from __future__ import annotations

import asyncio
import os
import sys

from dbsvc.storage import files, online, snapshot
from dbsvc.storage.snapshotreader import decode_snapshot
from dbsvc.storage.versions import Versions
from support.storage import HeldSnapshot, open_store, run, user

FAR = (-5, -1, 10**12, 10**12 + 3)  # ids the live map and the versions keep in their dicts


def test_versions_get_many_answers_as_get_for_ids_in_the_array_the_dict_and_neither():
    versions = Versions()
    for id_, version in ((1, 11), (2, 12), (4, 14), (-3, 7), (10**9, 9)):
        versions.set(id_, version)
    asked = [-3, 1, 2, 3, 4, 10**9, 5, 10**6]
    assert versions.get_many(asked) == [7, 11, 12, 0, 14, 9, 0, 0] == [versions.get(i) for i in asked]
    assert versions.get_many([1, 2, 4]) == [11, 12, 14]  # all in the array: the mapped lookup
    assert versions.get_many([]) == []
    strs = Versions()
    strs.set("a", 3)
    assert strs.get_many(["a", "b"]) == [3, 0]


def test_the_image_is_the_cuts_for_far_ids_and_ids_written_after_the_cut(tenant):
    """Far ids sit among the chunk's ids; after the cut a near and a far id are replaced, a
    near and a far one deleted, one deleted and inserted again, a new far id inserted: the
    snapshot holds each record and version as they were at the cut."""
    layer = HeldSnapshot()
    s = open_store(tenant, compact_bytes=1 << 40)
    ids = [*FAR, *range(1, 3001)]

    async def go():
        for i in ids:
            await s.insert("User", user(i))
        await s.replace("User", 10**12, user(10**12, name="before the cut"))
        at_cut = {i: s.get("User", i)[0] for i in ids}
        versions = s.tables["User"].versions
        stamps = {i: versions.get(i) for i in ids}
        task = s.compact_now()
        await asyncio.to_thread(layer.reached.wait, 60)
        await s.replace("User", 7, user(7, name="after the cut"))
        await s.replace("User", -5, user(-5, name="after the cut"))
        await s.delete("User", 8)
        await s.delete("User", 10**12 + 3)
        await s.delete("User", 2500)
        await s.insert("User", user(2500, name="back again"))
        await s.insert("User", user(-9))
        layer.release.set()
        await task
        return at_cut, stamps

    with files.use(layer):
        at_cut, stamps = run(go())
    assert s.compactions == 1
    s.close()
    image = decode_snapshot("snapshot", open(os.path.join(tenant, "snapshot"), "rb").read())
    users = next(m for m in image.models if m.name == "User")
    at = users.fields.index("id")
    assert {row[at]: dict(zip(users.fields, row)) for row in users.rows} == at_cut
    assert users.versions is not None
    assert dict(zip((row[at] for row in users.rows), users.versions)) == stamps
    assert at_cut[7]["name"] == "user 7" and at_cut[10**12]["name"] == "before the cut"


def test_the_snapshot_step_runs_no_python_call_a_record(tenant, monkeypatch):
    """The Python calls the snapshot step makes (its pauses, a block's pieces and columns)
    grow with its blocks, not its records: under a profile hook, 6,144 users (three blocks)
    take fewer calls than one per eight records. Before this change each record took four
    (its `image_records` step, `Versions.get`, `IdMap.get`, the pairs' generator)."""
    monkeypatch.setattr(online, "PACE", 0.0)  # no sleeps: the count is the same, the test quicker
    s = open_store(tenant, sync="off")
    count = 3 * snapshot.BLOCK_ROWS

    async def fill():
        for i in range(1, count + 1):
            await s.insert("User", user(i))

    run(fill())
    tables = dict(s.tables)
    cut = online.take_cut(tables, s.applied_offset, 0)
    calls = 0

    def hook(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(hook)
    try:
        online.write_snapshot(tenant, cut, online.Progress(), files.NO_FAULTS)
    finally:
        sys.setprofile(None)
        online.end_cut(tables)
    image = decode_snapshot("snapshot.new", open(os.path.join(tenant, "snapshot.new"), "rb").read())
    online.discard(tenant)
    s.close()
    users = next(m for m in image.models if m.name == "User")
    assert len(users.rows) == count
    assert 0 < calls < count // 8, calls
