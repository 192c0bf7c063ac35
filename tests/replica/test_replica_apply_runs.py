"""A follower applies a group's inserts as runs (storage/follow.py rules 5 and 7): the
indexes take a run's entries together (runs.py `add_sorted_run`, `add_ordered_run`,
`KeyColumn.set_many`, `Table.insert_run`) with the result of one insert at a time, and a
record is checked by its value types and its index keys once its model's validator has
accepted records of those types.

Units on the index structures (random entries against one `add` at a time), then real
stores in temporary directories: a mix of inserts, updates and deletes applied in groups
leaves the state the same frames applied one by one leave, offsets, watermarks, versions
and `as_of` answers included."""

from __future__ import annotations

import asyncio
import json
import random
from array import array

import pytest

from dbsvc.errors import StreamError
from dbsvc.runtime import Query
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.keycolumns import KeyColumn
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.runs import add_ordered_run, add_sorted_run
from dbsvc.storage.sortedlist import LOAD, SortedIndex
from dbsvc.storage.tenants import create_tenant
from support.storage import open_store, post, user


def _ordered_shape(index: OrderedIndex) -> dict:
    """Everything a query can read off an ordered index (its entries in order, its nulls,
    slices, counts and its id -> key column), and its layout's invariants checked: where
    the sublists split depends on the order entries came in, what they hold does not."""
    keys, ids = index.key_sublists, index.id_sublists
    assert all(0 < len(k) == len(i) <= 2 * LOAD for k, i in zip(keys, ids))
    assert (list(index.last_keys), list(index.last_ids)) == ([k[-1] for k in keys], [i[-1] for i in ids])
    held = [i for sub in ids for i in sub] + list(index.nulls)
    n = len(index)
    return {
        "pairs": list(index),
        "len": n,
        "descending": list(index.pairs_descending()),
        "nulls": list(index.nulls_ascending()),
        "slices": [index.ids_slice(a, b) for a, b in ((0, 3), (1, n), (n - 2, n + 5), (LOAD - 1, LOAD + 2))],
        "column": sorted((i, index.column.get(i)) for i in held),
        "column_len": len(index.column),
        "counted": index.count_span((0, 0), index.end),
        "typed": {type(k) for k in keys},
    }


@pytest.mark.parametrize("typecode", ["", "d", "q"])
@pytest.mark.parametrize("seed", range(8))
def test_an_ordered_run_is_add_one_at_a_time(seed, typecode):
    rnd = random.Random(seed)
    start = rnd.choice([0, 3, 2 * LOAD + 7])
    distinct = rnd.choice([1, 4, 100, 10**6])
    make = (lambda: float(rnd.randrange(distinct))) if typecode == "d" else (lambda: rnd.randrange(distinct))
    ids = list(range(1, start + 1))
    keys = [None if rnd.random() < 0.1 else make() for _ in ids]
    one, many = OrderedIndex(typecode=typecode), OrderedIndex(typecode=typecode)
    for key, id_ in zip(keys, ids):
        one.add(key, id_)
        many.add(key, id_)
    one.count_span((0, 0), one.end)  # the sublist counts exist, so both keep them
    many.count_span((0, 0), many.end)
    for _round in range(3):
        size = rnd.choice([2, 5, 512, 3 * LOAD])
        if rnd.random() < 0.5:  # new ids after the last: a follower's inserts
            new_ids = list(range(ids[-1] + 1 if ids else 1, (ids[-1] + 1 if ids else 1) + size))
        else:  # anywhere, in any order
            new_ids = rnd.sample(range(10**6, 2 * 10**6), size)
        if rnd.random() < 0.4:  # ascending keys, past every key held half the time: appended
            past = distinct * (_round + 1) if rnd.random() < 0.5 else 0
            new_keys = sorted(make() + past for _ in new_ids)
        else:
            new_keys = [None if rnd.random() < 0.1 else make() for _ in new_ids]
        for key, id_ in zip(new_keys, new_ids):
            one.add(key, id_)
        add_ordered_run(many, new_keys, new_ids)
        ids += new_ids
        assert _ordered_shape(many) == _ordered_shape(one)
    if typecode:
        assert all(type(k) is array for k in many.key_sublists)


@pytest.mark.parametrize("seed", range(6))
def test_a_sorted_run_is_add_one_at_a_time_and_leaves_shared_sublists_alone(seed):
    rnd = random.Random(seed)
    entries = sorted(rnd.sample(range(10**6), rnd.choice([0, 10, 3 * LOAD])))
    one, many = SortedIndex(entries), SortedIndex(entries)
    handed = many.share()
    frozen = [list(sub) for sub in handed]
    top = entries[-1] if entries else 0
    for batch in (
        list(range(top + 1, top + 1 + rnd.choice([1, 7, 5 * LOAD]))),  # ascending past the end
        rnd.sample(range(2 * 10**6, 3 * 10**6), 40),  # anywhere
        [top + 10**7, top + 10**7 - 1],  # past the end, not ascending
    ):
        for entry in batch:
            one.add(entry)
        add_sorted_run(many, batch)
        assert many.sublists == one.sublists and len(many) == len(one)
        assert all(len(sub) <= 2 * LOAD for sub in many.sublists)
    assert [list(sub) for sub in handed] == frozen  # what was handed out never changed
    many.unshare()


@pytest.mark.parametrize("typecode", ["", "q"])
@pytest.mark.parametrize(
    "case", ["from the end", "with a gap", "far ids", "not in order", "with nulls", "str ids", "bool ids"]
)
def test_key_column_set_many_is_set_one_at_a_time(case, typecode):
    one, many = KeyColumn(typecode), KeyColumn(typecode)
    for id_ in range(5):
        one.set(id_, id_ * 10)
        many.set(id_, id_ * 10)
    ids: list = {
        "from the end": list(range(5, 600)),
        "with a gap": list(range(7, 40)),
        "far ids": [10**9, 10**9 + 1],
        "not in order": [6, 5, 7],
        "with nulls": list(range(5, 50)),
        "str ids": ["a", "b"],
        "bool ids": [True, 6],
    }[case]
    if case == "bool ids":
        one, many = KeyColumn(typecode), KeyColumn(typecode)
    keys = [None if case == "with nulls" and n % 3 == 0 else n for n in range(len(ids))]
    for id_, key in zip(ids, keys):
        one.set(id_, key)
    many.set_many(ids, keys)
    assert (list(many.slots), many.far, many.nulls, len(many)) == (list(one.slots), one.far, one.nulls, len(one))
    assert type(many.slots) is type(one.slots)


# -- real stores -----------------------------------------------------------------------------


def _frames(seed: int, count: int) -> list[bytes]:
    """`count` frames of a primary's log: inserts, updates and deletes of users and posts,
    with runs of inserts broken by updates and deletes of rows of the same run."""
    rnd = random.Random(seed)
    live: dict[str, dict[int, dict]] = {"User": {}, "BlogPost": {}}
    watermarks = {"User": 0, "BlogPost": 0}
    frames = []
    next_id = {"User": 1, "BlogPost": 1}
    for offset in range(1, count + 1):
        model = "User" if rnd.random() < 0.6 or not live["User"] else "BlogPost"
        rows = live[model]
        roll = rnd.random()
        previous = None
        if roll < 0.7 or not rows:
            kind, id_ = EventKind.INSERT, next_id[model]
            next_id[model] += 1
            record = (
                user(id_, age=rnd.choice([None, 3, 40]), name=rnd.choice(["ann", "bob", f"u{id_}"]))
                if model == "User"
                else post(id_, author=rnd.choice(list(live["User"])), score=float(rnd.randrange(5)))
            )
            rows[id_] = record
        elif roll < 0.88:
            kind, id_ = EventKind.UPDATE, rnd.choice(list(rows))
            previous = rows[id_]
            change = {"age": rnd.randrange(100)} if model == "User" else {"score": rnd.random()}
            record = rows[id_] = dict(previous, **change)
        else:
            kind, id_ = EventKind.DELETE, rnd.choice(list(rows))
            record = rows.pop(id_)
        watermarks[model] += 1
        event = ChangeEvent(kind, model, offset, watermarks[model], id_, record, previous)
        frames.append(event.frame())
    return frames


def _state(store) -> dict:
    """What a client can read of a store: records, versions, offsets, watermarks, as_of."""
    out: dict = {"head": store.head_offset, "watermarks": store.watermarks(), "counts": store.live_counts()}
    for name in ("User", "BlogPost"):
        records = store.list_records(name, Query(limit=1000))[0]
        out[name] = [(r, store.get_versioned(name, r["id"])[2]) for r in records]
        for sort in ("age", "-name", "joined") if name == "User" else ("score", "-title"):
            field = sort.lstrip("-")
            query = Query(limit=1000, sort=((field, sort.startswith("-")),))
            out[f"{name} by {sort}"] = [r["id"] for r in store.list_records(name, query)[0]]
        for n in (0, 5, 17):
            out[f"{name} as_of {n}"] = store.list_records(name, Query(limit=1000, as_of=n))[0]
    return out


@pytest.mark.parametrize("seed", range(4))
def test_groups_leave_what_one_frame_at_a_time_leaves(tmp_path, seed):
    frames = _frames(seed, 700)
    rnd = random.Random(seed)
    one = open_store(create_tenant(str(tmp_path / "one"), "t"), sync="off", replication=True)
    grouped = open_store(create_tenant(str(tmp_path / "grouped"), "t"), sync="off", replication=True)

    async def main():
        for frame in frames:
            await one.apply_replicated(frame)
        at = 0
        while at < len(frames):
            size = rnd.choice([1, 3, 64, 512])
            await grouped.apply_replicated_frames(frames[at : at + size])
            at += size

    try:
        asyncio.run(main())
        assert _state(grouped) == _state(one)
    finally:
        one.close()
        grouped.close()
    again = open_store(str(tmp_path / "grouped" / "t"), sync="off", replication=True)
    try:
        reference = open_store(str(tmp_path / "one" / "t"), sync="off", replication=True)
        try:
            assert _state(again) == _state(reference)
        finally:
            reference.close()
    finally:
        again.close()


def _insert(offset: int, record: dict, watermark: int | None = None) -> bytes:
    event = {
        "kind": "insert",
        "model": "User",
        "offset": offset,
        "watermark": offset if watermark is None else watermark,
        "id": record["id"],
        "record": record,
    }
    return encode_frame(offset, json.dumps(event, separators=(",", ":")).encode())


@pytest.fixture
def store(tmp_path):
    opened = open_store(create_tenant(str(tmp_path / "replica"), "t"), sync="off", replication=True)
    yield opened
    opened.close()


def _apply(store, frames: list[bytes]) -> None:
    async def main():
        await store.apply_replicated_frames(frames)

    asyncio.run(main())


def _users(store) -> list[dict]:
    return store.list_records("User", Query(limit=100))[0]


def test_an_insert_of_an_id_inserted_earlier_in_the_same_group_stops_there(store):
    frames = [_insert(1, user(1)), _insert(2, user(2)), _insert(3, user(1, email="x@y.z")), _insert(4, user(4))]

    async def main():
        with pytest.raises(StreamError, match="insert of User 1, which exists here"):
            store.apply_replicated_frames(frames)
        while store.head_offset < 2:
            await asyncio.sleep(0.001)

    asyncio.run(main())
    assert [u["id"] for u in _users(store)] == [1, 2] and store.applied_offset == 2


def test_a_primary_constraint_is_trusted_once_the_value_types_are_known(store):
    # The primary's validator accepted what it logged (the fingerprint says it is ours),
    # so a replica applies a record of known value types as its own replay of the log
    # would: an age over the schema's @max(150) is the primary's to refuse, not ours.
    _apply(store, [_insert(1, user(1, age=30))])
    _apply(store, [_insert(2, user(2, age=200))])
    assert [u["age"] for u in _users(store)] == [30, 200]


@pytest.mark.parametrize(
    "record",
    [
        user(2, age=2**63),  # known types (int), a key out of the int64 key column's range
        user(2, joined="2026-13-01T00:00:00Z"),  # known types (str), a datetime key that fails
        user(2, joined="yesterday"),
        user(2, age=3.5),  # new types: the validator refuses a float age
        user(2, role=["reader"]),  # new types: a list where an enum is
    ],
    ids=["int64-overflow", "datetime-month-13", "datetime-word", "float-age", "list-role"],
)
def test_a_record_that_would_fail_in_the_indexes_is_refused_whole(store, record):
    _apply(store, [_insert(1, user(1, age=30))])
    before = (_users(store), store.head_offset, store.watermarks())
    with pytest.raises(StreamError, match="does not fit the schema"):
        _apply(store, [_insert(2, record)])
    assert (_users(store), store.head_offset, store.watermarks()) == before


@pytest.mark.parametrize("payload", [b'{"kind":"insert","age":NaN}', b' {"kind":"insert"}', b'{"a":1} x'])
def test_a_payload_that_is_not_the_primary_s_compact_json_is_refused(store, payload):
    with pytest.raises(StreamError, match="payload is not JSON"):
        _apply(store, [encode_frame(1, payload)])
    assert store.head_offset == 0
