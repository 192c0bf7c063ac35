"""The bulk constructors of the in-memory indexes and `Table.load_base` build exactly
what one insert at a time builds: same order, same ties, same nulls."""

from __future__ import annotations

import random
from array import array

import pytest

from dbsvc.storage import indexes
from dbsvc.storage.hashes import HashIndex, OrderedFilter, UniqueFilter
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.rows import unpack
from dbsvc.storage.sortedlist import LOAD, SortedIndex
from dbsvc.storage.table import Table
from support.storage import BLOG, load_values, post, user


def _shape(index: OrderedIndex) -> dict:
    """Everything a query can read off an ordered index."""
    n = len(index)
    return {
        "pairs": list(index),
        "len": n,
        "ascending": list(index.ids_ascending()),
        "descending": list(index.pairs_descending()),
        "nulls": list(index.nulls_ascending()),
        "slices": [index.ids_slice(a, b) for a, b in ((0, 3), (1, n), (n - 2, n + 5), (LOAD - 1, LOAD + 2))],
    }


def _incremental(keys: list, ids: list) -> OrderedIndex:
    index = OrderedIndex()
    for key, id_ in zip(keys, ids):
        index.add(key, id_)
    return index


@pytest.mark.parametrize("seed", range(6))
def test_ordered_from_columns_matches_inserts_with_ties_and_nulls(seed):
    rnd = random.Random(seed)
    n = rnd.choice([0, 1, 7, LOAD * 3 + 5])
    ids = sorted(rnd.sample(range(1, 10 * n + 10), n))
    distinct = rnd.choice([1, 3, 50, 10**6])
    keys = [None if rnd.random() < 0.2 else float(rnd.randrange(distinct)) / 2 for _ in ids]
    built = OrderedIndex.from_columns(keys, ids)
    assert _shape(built) == _shape(_incremental(keys, ids))
    assert _shape(built) == _shape(OrderedIndex(zip(keys, ids)))


def test_ordered_from_columns_keeps_ids_ascending_inside_a_run_of_equal_keys():
    ids = list(range(1, 2 * LOAD + 10))
    keys = ["b" if i % 3 else "a" for i in ids]
    built = OrderedIndex.from_columns(keys, ids)
    assert list(built) == sorted(zip(keys, ids))
    assert list(built.ids_ascending()) == [i for i in ids if keys[i - 1] == "a"] + [
        i for i in ids if keys[i - 1] == "b"
    ]


def test_ordered_from_columns_takes_updates_afterwards():
    ids = list(range(1, 3 * LOAD))
    keys = [i % 17 for i in ids]
    built, plain = OrderedIndex.from_columns(keys, ids), _incremental(keys, ids)
    for index in (built, plain):
        index.remove(5, 5)
        index.add(None, 5)
        index.add(3, 10**6)
        index.remove(keys[-1], ids[-1])
    assert _shape(built) == _shape(plain)
    with pytest.raises(KeyError):
        built.remove(99, 1)


def test_sorted_from_sorted_is_the_sorted_constructor():
    items = list(range(0, 5 * LOAD + 3, 2))
    built, plain = SortedIndex.from_sorted(list(items)), SortedIndex(reversed(items))
    assert list(built) == list(plain) == items and len(built) == len(plain)
    assert built.slice(LOAD - 2, LOAD + 2) == items[LOAD - 2 : LOAD + 2]
    built.add(7)
    built.remove(0)
    assert list(built) == sorted([*items[1:], 7]) and 7 in built and 0 not in built
    assert list(SortedIndex.from_sorted([])) == []


@pytest.mark.parametrize("distinct", [1, 2, 4, 5, 300])
def test_hash_from_columns_matches_adds(distinct):
    rnd = random.Random(distinct)
    ids = list(range(1, 2000))
    keys = [None if rnd.random() < 0.1 else rnd.randrange(distinct) for _ in ids]
    plain = HashIndex()
    for key, id_ in zip(keys, ids):
        plain.add(key, id_)
    built = HashIndex.from_columns(keys, ids)
    assert _sets(built) == _sets(plain)
    built.remove(keys[0], ids[0])
    built.add("new", 0)
    assert built.count(["new"]) == 1 and not built.has([keys[0]], ids[0])


def _sets(index: HashIndex | UniqueFilter) -> dict:
    """key -> set of ids; a UniqueFilter's keys are its unique map's, each with its one id."""
    if isinstance(index, UniqueFilter):
        return {**{key: {id_} for key, id_ in index.unique.items()}, **_sets(index.nulls)}
    return {key: set(ids) for key, ids in index.buckets.items()}


def _fill(table: Table, records: list[tuple]) -> dict:
    for record in records:
        table.insert(record)
    return _table_shape(table)


def _table_shape(table: Table) -> dict:
    return {
        "records": dict(table.records),
        "pk": list(table.pk),
        "unique": {f: dict(i) for f, i in table.unique.items()},
        "hashes": {f: _sets(h) for f, h in table.hashes.items()},
        "ordered": {f: _shape(o) for f, o in table.ordered.items()},
        "refs": {f: dict(c) for f, c in table.refs.items()},
        "max_id": table.max_id,
    }


def test_load_base_builds_what_inserts_build():
    rnd = random.Random(3)
    users = [
        user(i, name=f"n{rnd.randrange(5)}", age=rnd.choice([None, 20, 30]), email=f"u{i}@x")
        for i in range(1, 3 * LOAD)
    ]
    posts = [
        post(i, author=rnd.randrange(1, 9), score=rnd.choice([0.5, 1.0, 2.25]), published=rnd.random() < 0.5)
        for i in range(1, 2 * LOAD)
    ]
    for model, records in ((BLOG.BY_NAME["User"], users), (BLOG.BY_NAME["BlogPost"], posts)):
        stored = [model.row(r) for r in records]
        loaded = Table(model)
        load_values(loaded, stored)
        filled = Table(model)
        want = _fill(filled, stored)
        assert _table_shape(loaded) == want
        assert {f: type(h) for f, h in loaded.hashes.items()} == {f: type(h) for f, h in filled.hashes.items()}
        assert want["records"] == {r["id"]: r for r in records}
        assert loaded.base_ids == [r["id"] for r in records] and loaded.rows == []
        for f, typecode in model.key_arrays.items():  # number keys in arrays, built or added
            for table in (loaded, filled):
                assert {(type(sub), sub.typecode) for sub in table.ordered[f].key_sublists} == {(array, typecode)}


@pytest.mark.parametrize("seed, typecode", [(0, ""), (1, ""), (2, ""), (3, ""), (4, "q"), (5, "q"), (6, "d"), (7, "d")])
def test_ordered_updates_keep_key_then_id_order_through_splits_and_merges(seed, typecode):
    """Random adds and removes against a plain sorted list: sublists split past 2 * LOAD
    and vanish when emptied, and every read stays the model's; with a typecode, every
    sublist of keys stays an array of it through splits and new sublists."""
    rnd = random.Random(seed)
    index = OrderedIndex.from_columns([1] * LOAD, list(range(LOAD)), typecode)
    model = [(1, i) for i in range(LOAD)]
    nulls: list[int] = []
    for step in range(6 * LOAD):
        if model and rnd.random() < 0.35:
            key, id_ = model.pop(rnd.randrange(len(model)))
            index.remove(key, id_)
        elif nulls and rnd.random() < 0.05:
            index.remove(None, nulls.pop(rnd.randrange(len(nulls))))
        else:
            key = None if rnd.random() < 0.05 else rnd.choice([0, 1, 1, 2, rnd.randrange(100)])
            id_ = LOAD + step
            index.add(key, id_)
            if key is None:
                nulls.append(id_)
            else:
                model.append((key, id_))
        if step % 500 == 0 or step == 6 * LOAD - 1:
            model.sort()
            nulls.sort()
            assert list(index) == model + [(None, i) for i in nulls]
            assert list(index.pairs_descending()) == model[::-1]
            assert index.ids_slice(3, 3 + LOAD) == ([i for _k, i in model] + nulls)[3 : 3 + LOAD]
            assert len(index) == len(model) + len(nulls)
            assert {type(sub) for sub in index.key_sublists} <= ({array} if typecode else {list})
            assert all(sub.typecode == typecode for sub in index.key_sublists if typecode)


@pytest.mark.parametrize("seed", range(4))
def test_ordered_updates_place_any_id_inside_runs_that_span_sublists(seed):
    """Ids in any order, few keys: a run of one key spans several sublists, so an update
    has to pick among sublists that end on its key by their last ids (an id below, between
    or above theirs), and removing an entry that is not there, next to ones that are, is a
    KeyError that changes nothing. The index grows by more than half its size, so sublists
    split too, and the last key and id of each sublist (what updates bisect) stay exact."""
    rnd = random.Random(seed)
    ids = rnd.sample(range(1, 20 * LOAD), 2 * LOAD)
    keys = [rnd.choice("abc") for _ in ids]
    model = sorted(zip(keys, ids))
    order = sorted(range(len(ids)), key=ids.__getitem__)
    index = OrderedIndex.from_columns([keys[i] for i in order], [ids[i] for i in order])
    taken = set(ids)
    spare = [i for i in range(1, 30 * LOAD) if i not in taken]  # a third above every id so far
    rnd.shuffle(spare)
    steps = 6 * LOAD
    for step in range(steps):
        roll = rnd.random()
        if roll < 0.25 and model:
            key, id_ = model.pop(rnd.randrange(len(model)))
            index.remove(key, id_)
            spare.append(id_)
        elif roll < 0.35 and model:
            key, id_ = rnd.choice(model)
            with pytest.raises(KeyError):
                index.remove("b" if key != "b" else "c", id_)  # the id is there, under another key
            with pytest.raises(KeyError):
                index.remove(key, spare[-1])  # the key is there, not with this id
        else:
            entry = (rnd.choice("abc"), spare.pop())
            index.add(*entry)
            model.append(entry)
        if step % 64 == 0 or step == steps - 1:
            model.sort()
            assert list(index) == model
            assert list(index.pairs_descending()) == model[::-1]
            assert len(index) == len(model)
            assert index.last_keys == [sub[-1] for sub in index.key_sublists]
            assert index.last_ids == [sub[-1] for sub in index.id_sublists]
            for key, run in index.runs():
                assert run == [i for k, i in model if k == key]
    assert len(index.key_sublists) > 2


def test_hash_from_runs_is_the_hash_of_the_same_column():
    """Runs of one key spanning several sublists are one bucket, nulls the None bucket."""
    ids = list(range(1, 4 * LOAD))
    keys = [None if i % 11 == 0 else (i * 7) % 5 for i in ids]
    from_runs = HashIndex.from_runs(OrderedIndex.from_columns(keys, ids).runs())
    assert from_runs.buckets == HashIndex.from_columns(keys, ids).buckets  # the same lists
    assert HashIndex.from_runs(OrderedIndex().runs()).buckets == {}


@pytest.mark.parametrize("seed", range(3))
def test_replace_moves_only_changed_keys_and_undo_restores_exactly(seed):
    """`Table.replace` touches only the indexes whose key changed (a PATCH of one field):
    after random replaces of one, several or no fields, nulls and unique values included,
    every index equals that of a table filled afresh with the same records, and undoing
    the replaces restores the first state exactly."""
    rnd = random.Random(seed)
    model = BLOG.BY_NAME["User"]
    table = Table(model)
    records = [user(i, name=f"n{i % 7}", age=rnd.choice([None, 20, 30]), email=f"u{i}@x") for i in range(1, 300)]
    load_values(table, [model.row(r) for r in records])
    first = _table_shape(table)
    for step in range(400):
        i = rnd.randrange(1, 300)
        current = dict(table.records[i])
        change = rnd.choice(
            [
                {},
                {"age": rnd.choice([None, 20, 31])},
                {"name": f"n{rnd.randrange(9)}"},
                {"email": f"moved{step}@x", "role": "admin"},
                {"age": current["age"]},
            ]
        )
        table.replace(table.live[i], model.row({**current, **change}))
    fresh = _fill(Table(model), list(map(unpack, table.live.values())))
    assert {k: v for k, v in _table_shape(table).items() if k != "max_id"} == {
        k: v for k, v in fresh.items() if k != "max_id"
    }
    for _ in range(400):
        table.undo_last(table.max_id)
    assert _table_shape(table) == first


def test_replace_of_an_unindexed_field_keeps_every_index_as_it_was():
    model = BLOG.BY_NAME["BlogPost"]
    table = Table(model)
    load_values(table, [model.row(post(i, author=i % 3 + 1, score=float(i % 4))) for i in range(1, 50)])
    before = _table_shape(table)
    table.replace(table.live[7], model.row(post(7, author=7 % 3 + 1, score=3.0, body="a new body")))
    after = _table_shape(table)
    assert after.pop("records")[7]["body"] == "a new body"
    before.pop("records")
    assert after == before


@pytest.mark.parametrize("seed", range(3))
def test_shared_sublists_never_change_while_the_index_does(seed):
    """`SortedIndex.share` (online compaction's cut): the sublists handed out keep the
    entries of that moment through adds, removes, splits and emptied sublists, while the
    index itself follows every change; after `unshare` sublists change in place again."""
    rnd = random.Random(seed)
    entries = sorted(rnd.sample(range(100_000), 5 * LOAD))
    index = SortedIndex.from_sorted(list(entries))
    shared = index.share()
    frozen = [list(sub) for sub in shared]
    live = list(entries)
    for _ in range(6 * LOAD):
        if live and rnd.random() < 0.5:
            gone = live.pop(rnd.randrange(len(live)))
            index.remove(gone)
        else:
            new = rnd.randrange(-10, 100_010)
            index.add(new)
            live.append(new)
        live.sort()
    assert [list(sub) for sub in shared] == frozen
    assert [x for sub in shared for x in sub] == entries
    assert list(index) == live and len(index) == len(live)
    index.unshare()
    first = index.sublists[0]
    index.add(first[0])
    assert index.sublists[0] is first and list(index) == sorted(live + [first[0]])


@pytest.mark.parametrize("seed, typecode", [(0, ""), (1, "q"), (2, "")])
def test_ordered_filter_answers_as_a_hash_index_of_the_same_entries(seed, typecode):
    """A field both filtered and sorted is filtered through its sort index's runs: count,
    ids, has and a walk's keeper agree with a HashIndex of the same entries, for runs that
    span sublists, nulls, absent keys, and after adds and removes (a kept set for a walk
    is dropped when its key changes)."""
    rnd = random.Random(seed)
    keys = [None if rnd.random() < 0.05 else rnd.choice([1, 2, 2, 2, rnd.randrange(50)]) for _ in range(4 * LOAD)]
    ids = list(range(1, len(keys) + 1))
    ordered = OrderedIndex.from_columns(keys, ids, typecode)
    flt, hashed = OrderedFilter(ordered), HashIndex.from_columns(keys, ids)
    live = dict(zip(ids, keys))

    def agree() -> None:
        for probe in ([1], [2], [None], [1, 7], [99], [2, None]):
            assert flt.count(probe) == hashed.count(probe)
            assert flt.ids(probe) == hashed.ids(probe)
            for i in rnd.sample(ids, 40):
                assert flt.has(probe, i) == hashed.has(probe, i)
        for key in (2, None, 99):
            keep = flt.keeper(key)
            assert {i for i in ids if keep(i)} == {i for i, k in live.items() if k == key}

    agree()
    for step in range(3 * LOAD):
        if rnd.random() < 0.5:
            i = rnd.choice(ids)
            key = live.pop(i)
            ordered.remove(key, i), flt.remove(key, i), hashed.remove(key, i)
            ids.remove(i)
        else:
            i, key = 10 * LOAD + step, rnd.choice([2, None, 3])
            ordered.add(key, i), flt.add(key, i), hashed.add(key, i)
            ids.append(i)
            live[i] = key
        if step % 300 == 0:
            agree()
    agree()


@pytest.mark.parametrize("first", [0, 1, 7, indexes.SHIFT_MAX, indexes.SHIFT_MAX + 1, -3])
@pytest.mark.parametrize("typecode", ["", "d"])
def test_ordered_from_columns_sorts_a_run_of_ids_itself_and_agrees(first, typecode):
    """Ids without a gap starting at most SHIFT_MAX are sorted themselves (their keys
    behind placeholders); past it, or below 0, positions are: either way the index is the
    one the inserts make, ties in id order, nulls apart."""
    rnd = random.Random(first)
    ids = list(range(first, first + 3 * LOAD + 5))
    keys = [None if rnd.random() < 0.2 else float(rnd.randrange(40)) for _ in ids]
    if typecode:  # an array holds no null
        keys = array(typecode, [k or 0.0 for k in keys])
    built = OrderedIndex.from_columns(keys, ids, typecode)
    assert _shape(built) == _shape(OrderedIndex(zip(keys, ids), typecode))
    assert list(built) == sorted(p for p in zip(keys, ids) if p[0] is not None) + [
        (None, i) for k, i in zip(keys, ids) if k is None
    ]
