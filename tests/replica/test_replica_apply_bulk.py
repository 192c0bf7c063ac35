"""A follower's run of inserts put into its table in bulk (storage/tableruns.py `insert_run`):
its records encoded with one call (rows.py `pack_many`), its new ids appended to the live
map at once (idmap.py `IdMap.extend_run`), and the index keys its check computed reused
(followrun.py `Run.keys`). Each must leave what the one-at-a-time path leaves, byte for
byte: units against `pack` and `IdMap.__setitem__`, then a table filled both ways. A
group is one entry of the commit queue (storage/commit.py `submit_group`): a failed
fsync rolls all of its rows back and publishes none of them."""

from __future__ import annotations

import random

import pytest

from dbsvc.errors import Unavailable
from dbsvc.runtime import Query, compact_json
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.files import FaultPlan
from dbsvc.storage.idmap import IdMap
from dbsvc.storage.rows import pack, pack_many
from dbsvc.storage.tableruns import insert_run
from dbsvc.storage.tenants import create_tenant
from support.storage import check_indexes, open_store, run, user

PACK_CASES = {
    "plain": [[1, "a", None, 2.5, True], [2, "b", 3, -0.0, False]],
    "a string holding the cut": [[1, "x],[y"], [2, "z"]],
    "nested lists": [[1, [2, [3]]], [4, [[5], [6]]]],
    "an object holding the cut": [[1, {"k": "],["}], [2, {}]],
    "a string holding the objects' cut": [[1, "x},{y"], [2, "z"]],
    "objects in a list holding the cut": [[1, [{"a": 1}, {"b": 2}]], [2, {"c": {}}]],
    "a string ending in a bracket": [[1, "a]"], [2, "[b"]],
    "control characters and non-ASCII": [[1, "\x00\n\t"], [2, "é ☃ \U0001f600"]],
    "a lone surrogate": [[1, "\ud800"], [2, "ok"]],
    "one record": [[1, "a"]],
    "none": [],
    "tuples": [(1, "a"), (2, "b"), (3, "c")],
}


@pytest.mark.parametrize("case", PACK_CASES)
def test_pack_many_is_pack_of_each_record(case):
    batch = PACK_CASES[case]
    fields = ("id", "a", "b", "c", "d")[: len(batch[0]) if batch else 0]
    made = pack_many(fields, batch)
    assert made == [pack(fields, values) for values in batch]
    assert made == [compact_json(dict(zip(fields, values))).encode("utf-8", "surrogatepass") for values in batch]


def test_pack_many_refuses_what_pack_refuses():
    with pytest.raises(ValueError):
        pack_many(("id", "x"), [[1, 1.0], [2, float("nan")]])


def _setitem_each(start: IdMap, ids: list, records: list) -> IdMap:
    for id_, record in zip(ids, records):
        start[id_] = record
    return start


def _shape(live: IdMap) -> tuple:
    return (sorted(live.items(), key=repr), len(live), list(live.slots), dict(live.far))


@pytest.mark.parametrize(
    "held, ids",
    [
        ([], [0, 1, 2]),
        ([0, 1, 2], [3, 4, 5]),
        ([0, 1, 2], [4, 5]),  # a gap
        ([0, 1, 2], [3, 5, 4]),  # out of order
        ([0, 1], [2, 2]),  # the same id twice
        ([0, 1, -5], [2, 3]),  # a far id held
        ([0, 1], [2, 10**9]),  # a far id among them
        ([0, 1], [True, 3]),  # equal to an int, not an int
        ([0, 1], [2.0, 3.0]),
    ],
)
def test_extend_run_is_setitem_of_each(held, ids):
    records = [f"r{n}".encode() for n in range(len(ids))]
    bulk = IdMap((id_, b"old") for id_ in held)
    one = IdMap((id_, b"old") for id_ in held)
    bulk.extend_run(list(ids), records)
    assert _shape(bulk) == _shape(_setitem_each(one, ids, records))


@pytest.mark.parametrize(
    "held, ids",
    [
        ([], [0, 1, 2]),
        ([0, 1, 2], [3, 4, 5]),
        ([0, 1, 2], [3]),
        ([0, 1, 2], [4, 5]),  # a gap at the start: the first is not the next id
        ([0, 1, 2], [3, 5, 6]),  # a gap inside: the last is not n + count - 1
        ([0, 1, 2], [1, 2, 3]),  # held ids again
        ([0, 1, -5], [3, 4]),  # a far id held
        ([0, 1], [2, 10**9]),  # a far id among them
    ],
)
def test_extend_run_told_the_ids_ascend_is_setitem_of_each(held, ids):
    # tableruns.py tells it the run's ids are ascending ints (found once a run); the first
    # and last then say whether they are the next ones, and anything else is setitem of each.
    records = [f"r{n}".encode() for n in range(len(ids))]
    bulk = IdMap((id_, b"old") for id_ in held)
    one = IdMap((id_, b"old") for id_ in held)
    bulk.extend_run(list(ids), records, True)
    assert _shape(bulk) == _shape(_setitem_each(one, ids, records))


@pytest.mark.parametrize("seed", range(3))
def test_insert_run_with_the_checks_keys_is_insert_of_each(tmp_path, seed):
    rnd = random.Random(seed)
    bulk = open_store(create_tenant(str(tmp_path / "bulk"), "t"), sync="off")
    one = open_store(create_tenant(str(tmp_path / "one"), "t"), sync="off")
    try:
        records = []
        for i in range(1, 400):
            over = {"age": rnd.choice([None, 0, 7, 150]), "name": rnd.choice(["a", "b],[c", "é", "z" * 5])}
            if rnd.random() < 0.3:
                over["joined"] = rnd.choice(["2020-01-01T00:00:00Z", "2021-06-30T12:34:56.5Z"])
            if rnd.random() < 0.2:
                over["profile"] = rnd.choice([None, [1, [2]], {"a": "],["}])
            records.append(user(i, **over))
        for table, keyed in ((bulk.table("User"), True), (one.table("User"), False)):
            model = table.model
            rows = [model.row(r) for r in records]
            at = model.fields.index("joined")
            keys = {at: [model.keys["joined"](row[at]) for row in rows]} if keyed else None
            for start in range(0, len(rows), 128):
                if keyed:
                    chunk = rows[start : start + 128]
                    insert_run(table, chunk, {at: keys[at][start : start + 128]})
                else:
                    for row in rows[start : start + 128]:
                        table.insert(row)
        a, b = bulk.table("User"), one.table("User")
        assert dict(a.live.items()) == dict(b.live.items())
        assert [(i, s) for i, s, _p in a.rows] == [(i, s) for i, s, _p in b.rows]
        for field in ("name", "age", "joined"):
            assert list(a.ordered[field]) == list(b.ordered[field])
        assert a.unique["email"] == b.unique["email"]
        assert a.max_id == b.max_id
        check_indexes(bulk)
    finally:
        bulk.close()
        one.close()


def _group_frames(first: int, count: int, live: dict[int, dict], watermark: int) -> list[bytes]:
    """`count` frames from offset `first`: new users, then updates and deletes of them."""
    frames = []
    for offset in range(first, first + count):
        watermark += 1
        previous = None
        if offset % 3 or not live:
            id_ = max(live, default=0) + 1
            kind, record = EventKind.INSERT, user(id_, age=offset % 7 or None, joined="2024-02-03T04:05:06Z")
            live[id_] = record
        elif offset % 2:
            id_ = min(live)
            kind, previous = EventKind.UPDATE, live[id_]
            record = live[id_] = dict(previous, name=f"n{offset}", age=offset % 150)
        else:
            id_ = max(live)
            kind, record = EventKind.DELETE, live.pop(id_)
        frames.append(ChangeEvent(kind, "User", offset, watermark, id_, record, previous).frame())
    return frames


def _seen(store) -> dict:
    users = store.list_records("User", Query(limit=1000))[0]
    by_age = store.list_records("User", Query(limit=1000, sort=(("age", False),)))[0]
    return {
        "head": store.head_offset,
        "watermarks": store.watermarks(),
        "users": [(r, store.get_versioned("User", r["id"])[2]) for r in users],
        "by age": [r["id"] for r in by_age],
        "as_of": store.list_records("User", Query(limit=1000, as_of=100))[0],
    }


def test_a_group_whose_fsync_fails_is_rolled_back_whole_and_published_never(tmp_path):
    tenant = create_tenant(str(tmp_path / "replica"), "t")
    store = open_store(tenant, sync="full", replication=True)
    live: dict[int, dict] = {}
    good = _group_frames(1, 300, live, 0)
    bad = _group_frames(301, 200, live, 300)
    seen: list[int] = []
    try:
        store.subscribe(lambda event, frame: seen.append(event.offset))

        async def main() -> dict:
            await store.apply_replicated_frames(good)
            state = _seen(store)
            store.commit_queue.writer.faults = FaultPlan("fsync:1:EIO")
            with pytest.raises(Unavailable):
                await store.apply_replicated_frames(bad)
            return state

        before = run(main())
        assert _seen(store) == before
        assert seen == list(range(1, 301))
        assert store.stats()["commits"] == 300
    finally:
        store.close()
    again = open_store(tenant, sync="full", replication=True)
    try:
        assert _seen(again) == before
    finally:
        again.close()
