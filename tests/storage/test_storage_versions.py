"""Record versions (dbsvc/storage/versions.py): the log offset of each record's last write,
the ETag of the REST routes (issue 35 item 2). A version changes exactly when its record
does: never across a restart, an offline or online compaction, or a snapshot written
before versions were kept; a refused write puts it back; an `as_of` read gets the version
of the record it shows."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from dbsvc.storage import files, snapshot, snapshotreader
from dbsvc.storage.tenants import compact_tenant
from dbsvc.storage.versions import Versions
from support.storage import open_store, post, run, snapshot_in_format_2, user


def _versions(store, model: str = "User") -> dict:
    return {id_: store.version(model, id_) for id_ in store.tables[model].live}


def _fill(store) -> dict[int, int]:
    """Ten users and a post, some written again, some deleted: the offset of each live
    user's last write, as the writes answered it."""
    last: dict[int, int] = {}

    async def go():
        for i in range(1, 11):
            await store.insert("User", user(i))
            last[i] = store.applied_offset
        await store.insert("BlogPost", post(1, author=1))
        for i in (2, 5, 7):
            await store.replace("User", i, user(i, name=f"again {i}"))
            last[i] = store.applied_offset
        for i in (3, 8):
            await store.delete("User", i)
            del last[i]

    run(go())
    return last


def test_a_version_is_the_offset_of_the_records_last_write(tenant):
    s = open_store(tenant)
    try:
        last = _fill(s)
        assert _versions(s) == last
        assert s.version("User", 3) == 0 and s.version("User", 999) == 0  # deleted, never written
        assert s.get_versioned("User", 5) == (s.get("User", 5)[0], s.tables["User"].watermark, last[5])
        assert s.get_versioned("User", 3)[2] == 0
    finally:
        s.close()


def test_versions_survive_a_restart_and_an_offline_compaction(tenant, stores):
    s = stores(tenant)
    last = _fill(s)
    s.close()
    s = stores(tenant)
    assert _versions(s) == last  # replayed from the log
    s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    s = stores(tenant)
    try:
        assert _versions(s) == last  # read from the snapshot's versions lines
        run(s.replace("User", 4, user(4, name="after")))
        last[4] = s.applied_offset
        assert _versions(s) == last
    finally:
        s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))  # snapshot + log again
    s = stores(tenant)
    try:
        assert _versions(s) == last
    finally:
        s.close()


def test_versions_survive_an_online_compaction_with_writes_during_it(tenant, tmp_path):
    """Writes land after the cut, while the thread writes the snapshot (held before its
    first row by the fault seam, `rows:1:HOLD=<path>`): the snapshot keeps the versions at
    the cut (online.py `note_write`), the live state the new ones, and a reopen reads the
    snapshot and replays the writes."""
    gate = str(tmp_path / "gate")
    s = open_store(tenant)
    s.compactor.faults = files.FaultPlan(f"rows:1:HOLD={gate}")
    try:
        last = _fill(s)

        at_cut = dict(last)

        async def go():
            task = s.compact_now()
            deadline = time.monotonic() + 10
            while not os.path.exists(gate + ".held"):  # the cut taken, no row read yet
                assert time.monotonic() < deadline, "the snapshot thread never reached its first row"
                await asyncio.sleep(0.01)
            await s.replace("User", 1, user(1, name="during"))
            last[1] = s.applied_offset
            await s.delete("User", 2)
            del last[2]
            await s.insert("User", user(3))  # deleted before the cut, back after it
            last[3] = s.applied_offset
            Path(gate).touch()
            await task

        run(go())
        assert s.compactions == 1
        assert _versions(s) == last
    finally:
        Path(gate).touch()  # a failure above must not leave the thread held
        s.close()
    path = os.path.join(tenant, "snapshot")
    image = snapshotreader.decode_snapshot(path, open(path, "rb").read())
    users = next(m for m in image.models if m.name == "User")
    assert dict(zip((row[0] for row in users.rows), users.versions)) == at_cut  # as at the cut
    s = open_store(tenant)
    try:
        assert _versions(s) == last
    finally:
        s.close()


def test_a_snapshot_from_before_versions_gives_its_head_and_the_next_compaction_keeps_it(tenant, stores):
    s = stores(tenant)
    _fill(s)
    s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    path = os.path.join(tenant, "snapshot")
    snapshot_in_format_2(path)
    s = stores(tenant)
    head = s.head_offset  # the snapshot's: no row after it
    try:
        assert set(_versions(s).values()) == {head}
    finally:
        s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    assert json.loads(open(path, "rb").read().split(b"\n")[0][9:])["format"] == snapshot.FORMAT == 4
    s = stores(tenant)
    try:
        assert set(_versions(s).values()) == {head}  # unchanged: the records did not change
    finally:
        s.close()


def test_an_as_of_read_gets_the_version_of_the_record_it_shows(tenant):
    s = open_store(tenant)
    try:
        seen: list[tuple[int, dict, int]] = []  # (watermark, record, version) after each write of user 1

        async def go():
            for n, name in enumerate(("a", "b", "c"), 2):
                if name == "a":
                    await s.insert("User", user(1, name=name))
                else:
                    await s.replace("User", 1, user(1, name=name))
                await s.insert("User", user(n))  # another record's row between
                record, watermark, version = s.get_versioned("User", 1)
                seen.append((watermark, record, version))
            await s.delete("User", 1)

        run(go())
        for watermark, record, version in seen:
            assert s.get_versioned("User", 1, as_of=watermark) == (record, watermark, version)
        assert s.get_versioned("User", 1, as_of=0) == (None, 0, 0)
        assert s.get_versioned("User", 1)[2] == 0
    finally:
        s.close()


def test_an_as_of_read_below_a_snapshot_gets_the_snapshots_versions(tenant, stores):
    s = stores(tenant)
    last = _fill(s)
    s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    s = stores(tenant)
    try:
        run(s.replace("User", 1, user(1, name="new")))
        for n in range(1, len(last) + 1):
            record, _w, version = s.get_versioned("User", sorted(last)[n - 1], as_of=n)
            assert version == last[sorted(last)[n - 1]] and record is not None
    finally:
        s.close()


def test_a_refused_write_puts_the_version_back(tenant):
    """The commit queue's undo (a write whose frame failed, writes.py rule 2) restores the
    version with the record: an insert's goes, an update's and a delete's come back."""
    s = open_store(tenant)
    try:
        last = _fill(s)
        table = s.tables["User"]
        for write in (
            lambda: table.insert(table.model.row(user(70))),
            lambda: table.replace(table.live[4], table.model.row(user(4, name="x"))),
            lambda: table.delete(6, table.live[6]),
        ):
            write()
            table.stamp(10_000)
            table.undo_last(table.max_id)
            assert _versions(s) == last and len(table.prior) == len(table.rows)
    finally:
        s.close()


def test_a_batch_gives_each_record_its_own_rows_offset(tenant):
    s = open_store(tenant)
    try:
        first = s.applied_offset + 1
        s.insert_batch([("User", user(1)), ("User", user(2)), ("BlogPost", post(1, author=1)), ("User", user(3))])
        assert _versions(s) == {1: first, 2: first + 1, 3: first + 3}
        assert s.version("BlogPost", 1) == first + 2
    finally:
        s.close()


@pytest.mark.parametrize("ids", [[1, 2, 3], [1, 5, 9], [0], [-3, 4], [10**12], ["a", "b"], [2**40, 1]])
def test_the_versions_map_holds_any_ids(ids):
    ascending = sorted(ids, key=lambda i: (type(i) is str, i))
    built = Versions.from_ascending(ascending, list(range(1, len(ids) + 1)))
    filled = Versions()
    for n, id_ in enumerate(ascending, 1):
        filled.set(id_, n)
    for versions in (built, filled):
        assert [versions.get(i) for i in ascending] == list(range(1, len(ids) + 1))
        assert len(versions) == len(ids) and versions.get(12345) == 0 and versions.get("zz") == 0
        versions.set(ascending[0], 99)
        assert versions.get(ascending[0]) == 99
        assert versions.pop(ascending[0]) == 99 and versions.get(ascending[0]) == 0 and versions.pop(ascending[0]) == 0
        assert len(versions) == len(ids) - 1


def test_an_int_id_tables_versions_cost_8_bytes_a_record():
    versions = Versions.from_ascending(list(range(1, 100_001)), list(range(1, 100_001)))
    assert versions.nbytes() <= 8 * 100_002
