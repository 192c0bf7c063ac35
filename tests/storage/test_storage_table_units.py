"""One model's in-memory state (storage/table.py) at its decisions, on a `Table` held in memory,
no store and no fixture: every index (primary key, unique, hash, ordered and its key column,
references, words, versions) against the records after inserts, replaces and deletes, after
`undo_last` of each kind of row (restored exactly), a bulk `insert_many` against one insert at a
time, `load_base` against the same inserts; `get_as_of` and `state_as_of` at every watermark,
below the snapshot's rows too; the dicts `shown` hands out again and the ones it never keeps.
bench/mutation_inprocess.py runs these per mutant (docs/mutation.md)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage.rows import pack, unpack
from dbsvc.storage.shown import SHOWN, SHOWN_BYTES
from dbsvc.storage.table import Table
from support.storage import check_indexes

SCHEMA = """
model Doc {
  id     int    @id
  email  str?   @unique @filter
  n      int?   @filter @sort
  s      str?   @sort
  tag    str    @filter
  parent int?   @ref(Doc)
  w      str?   @search
}
"""
DOC = compile_schema(parse_schema(SCHEMA, "table.dbs")).BY_NAME["Doc"]
KEY = compile_schema(
    parse_schema(
        """
model Key {
  id  str   @id
  a   str?  @unique
  b   str?  @unique
}
""",
        "keys.dbs",
    )
).BY_NAME["Key"]
FIELDS = ("email", "n", "s", "tag", "parent", "w")


def doc(id_: int, rng: random.Random) -> dict:
    return {
        "id": id_,
        "email": rng.choice([None, f"e{id_}@x"]),
        "n": rng.choice([None, 1, 2, 3]),
        "s": rng.choice([None, "a", "b", "ab"]),
        "tag": rng.choice(["x", "y"]),
        "parent": rng.choice([None, 1, 2]),
        "w": rng.choice([None, "hello world", "word"]),
    }


def state(table: Table) -> tuple:
    """Everything a table holds that a write or its undo changes, comparable."""
    columns = {
        f: (dict((i, ix.column.get(i)) for i in table.live), set(ix.column.nulls)) for f, ix in table.ordered.items()
    }
    return (
        {i: table.live[i] for i in table.live},
        list(table.pk),
        {f: dict(ix) for f, ix in table.unique.items()},
        {f: list(ix) for f, ix in table.ordered.items()},
        columns,
        {f: dict(c) for f, c in table.refs.items()},
        {w: table.words.match((w,)) for w in ("hello", "wor", "word")},
        {i: table.versions.get(i) for i in table.live},
        table.max_id,
        table.watermark,
    )


def check(table: Table) -> None:
    check_indexes(SimpleNamespace(tables={"Doc": table}))
    records = table.records
    for f, index in table.ordered.items():
        assert len(index.column) == len(table.live)
        for i, r in records.items():
            assert index.column.get(i) == r[f], (f, i)
    for word, test in (("hello", lambda t: "hello" in t), ("wor", lambda t: "wor" in t)):
        assert table.words.match((word,)) == {i for i, r in records.items() if r["w"] and test(r["w"])}


def filled(count: int, seed: int) -> tuple[Table, dict[int, dict]]:
    rng = random.Random(seed)
    table, records = Table(DOC), {}
    for i in range(1, count + 1):
        records[i] = doc(i, rng)
        table.insert(DOC.row(records[i]))
        table.stamp(100 + i)
    return table, records


def test_writes_keep_every_index_and_each_undo_restores_exactly():
    rng = random.Random(4)
    table, records = filled(30, 4)
    check(table)
    for step in range(60):
        before = state(table)
        choice = rng.random()
        if choice < 0.4:
            id_ = rng.choice(sorted(records))
            new = doc(id_, rng)
            stored = table.replace(table.live[id_], DOC.row(new), DOC.row(records[id_]) if step % 2 else None)
            assert stored == pack(DOC.fields, DOC.row(new))
            records[id_] = new
        elif choice < 0.7 and len(records) > 3:
            id_ = rng.choice(sorted(records))
            table.delete(id_, table.live[id_])
            del records[id_]
        else:
            id_ = table.max_id + 1
            records[id_] = doc(id_, rng)
            assert table.insert(DOC.row(records[id_])) == pack(DOC.fields, DOC.row(records[id_]))
        table.stamp(1000 + step)
        check(table)
        if step % 3 == 0:  # undone: the state before, exactly, then done again
            last = table.rows[-1]
            table.undo_last(before[8])
            assert state(table) == before, step
            id_, record, previous = last
            if previous is None:
                table.insert(unpack(record))
            elif record is None:
                table.delete(id_, previous)
            else:
                table.replace(previous, unpack(record))
            table.stamp(1000 + step)
            check(table)
    assert table.max_id >= max(records)


def test_an_undone_insert_gives_its_id_back_and_an_undone_write_its_version():
    table, records = filled(3, 1)
    assert table.versions.get(2) == 102 and table.max_id == 3
    table.insert(DOC.row({**records[1], "id": 9, "email": None}))
    table.stamp(200)
    table.undo_last(3)
    assert table.max_id == 3 and 9 not in table.live and table.versions.get(9) == 0
    table.replace(table.live[2], DOC.row({**records[2], "n": 3}))
    table.stamp(300)
    assert table.versions.get(2) == 300
    table.undo_last(3)
    assert table.versions.get(2) == 102 and table.records[2] == records[2]
    table.delete(2, table.live[2])
    assert table.versions.get(2) == 0
    table.undo_last(3)
    assert table.versions.get(2) == 102 and table.records[2] == records[2]
    fresh = Table(DOC)  # a record never stamped: its undone replace leaves it without a version
    fresh.insert(DOC.row(records[1]))
    fresh.replace(fresh.live[1], DOC.row({**records[1], "n": None}))
    fresh.stamp(50)
    fresh.undo_last(1)
    assert fresh.versions.get(1) == 0 and fresh.records[1] == records[1]


@pytest.mark.parametrize("before, count", [(0, 40), (10, 40), (40, 5)])
def test_insert_many_is_one_insert_at_a_time(before, count):
    rng = random.Random(before + count)
    batch = [doc(i, rng) for i in range(1, before + count + 1)]
    one, many = Table(DOC), Table(DOC)
    for r in batch:
        one.insert(DOC.row(r))
    for r in batch[:before]:
        many.insert(DOC.row(r))
    many.insert_many([DOC.row(r) for r in batch[before:]])
    assert state(many) == state(one)
    assert many.rows == one.rows and list(many.prior) == list(one.prior)
    check(many)
    many.insert(DOC.row({**batch[0], "id": 999, "email": None}))  # the rebuilt plan is the one writes use
    check(many)


def test_load_base_is_the_same_inserts_and_keeps_the_largest_id():
    rng = random.Random(8)
    rows = [doc(i, rng) for i in (2, 3, 5, 8, 9)]
    inserted = Table(DOC)
    for r in rows:
        inserted.insert(DOC.row(r))
    base = Table(DOC)
    values = [DOC.row(r) for r in rows]
    columns = {p: [None if v[p] is None else DOC.keys[DOC.fields[p]](v[p]) for v in values] for p in base.columns}
    assert base.key_fields == ["id", "email", "n", "s", "tag", "parent"]  # every indexed or counted field
    base.load_base([pack(DOC.fields, v) for v in values], columns, 4, [11, 12, 13, 14, 15])
    assert state(base)[:7] == state(inserted)[:7]
    assert base.max_id == 9 and base.base_ids == [2, 3, 5, 8, 9] and base.watermark == 5
    assert [base.versions.get(i) for i in (2, 3, 5, 8, 9)] == [11, 12, 13, 14, 15]
    check(base)
    higher = Table(DOC)
    higher.load_base([pack(DOC.fields, v) for v in values], columns, 50)
    assert higher.max_id == 50 and higher.versions.get(2) == 0
    base.insert(DOC.row({**rows[0], "id": 10, "email": None}))
    check(base)


def test_the_past_at_every_watermark_below_and_after_the_snapshot():
    rng = random.Random(5)
    rows = [doc(i, rng) for i in (1, 2, 4, 6)]
    table = Table(DOC)
    values = [DOC.row(r) for r in rows]
    columns = {p: [None if v[p] is None else DOC.keys[DOC.fields[p]](v[p]) for v in values] for p in table.columns}
    table.load_base([pack(DOC.fields, v) for v in values], columns, 6, [1, 2, 3, 4])
    history = [{}]  # the state after each row: the snapshot's rows are the first n records by id
    for n in range(1, 5):
        history.append({r["id"]: pack(DOC.fields, DOC.row(r)) for r in rows[:n]})
    current = dict(history[-1])
    versions = {1: 1, 2: 2, 4: 3, 6: 4}
    version_history = [dict(versions) for _ in history]
    for step in range(12):
        choice = rng.random()
        if choice < 0.4 and current:
            id_ = rng.choice(sorted(current))
            new = pack(DOC.fields, DOC.row({**doc(id_, rng), "email": None}))
            table.replace(table.live[id_], unpack(new))
            current[id_] = new
        elif choice < 0.7 and len(current) > 1:
            id_ = rng.choice(sorted(current))
            table.delete(id_, table.live[id_])
            del current[id_]
        else:
            id_ = table.max_id + 1
            new = pack(DOC.fields, DOC.row({**doc(id_, rng), "email": None}))
            table.insert(unpack(new))
            current[id_] = new
        table.stamp(10 + step)
        versions = {i: v for i, v in versions.items() if i in current}
        if id_ in current:
            versions[id_] = 10 + step
        history.append(dict(current))
        version_history.append(dict(versions))
    assert table.watermark == len(history) - 1
    for n, want in enumerate(history):
        assert table.state_as_of(n) == want, n
        for id_ in range(0, table.max_id + 2):
            stored, version = table.get_as_of(id_, n)
            assert stored == want.get(id_), (n, id_)
            assert version == (version_history[n].get(id_, 0) if id_ in want else 0), (n, id_)


def test_unique_clash_names_the_field_and_the_other_id_never_its_own():
    table = Table(DOC)
    table.insert(DOC.row({"id": 1, "email": "a@x", "n": 1, "s": None, "tag": "x", "parent": None, "w": None}))
    mine = DOC.row({"id": 1, "email": "a@x", "n": 2, "s": None, "tag": "x", "parent": None, "w": None})
    assert table.unique_clash(mine) is None
    other = DOC.row({"id": 2, "email": "a@x", "n": 2, "s": None, "tag": "x", "parent": None, "w": None})
    assert table.unique_clash(other) == ("email", 1)
    none = DOC.row({"id": 3, "email": None, "n": 2, "s": None, "tag": "x", "parent": None, "w": None})
    assert table.unique_clash(none) is None


def test_a_table_of_string_ids_keeps_its_largest_int_id_and_checks_every_unique_field():
    table = Table(KEY)
    table.insert(KEY.row({"id": "k1", "a": "x", "b": "y"}))
    assert table.max_id == 0 and table.records["k1"] == {"id": "k1", "a": "x", "b": "y"}
    # a null in the first @unique field does not stop the check of the next one
    assert table.unique_clash(KEY.row({"id": "k2", "a": None, "b": "y"})) == ("b", "k1")
    assert table.unique_clash(KEY.row({"id": "k2", "a": None, "b": None})) is None


def test_stamp_inserts_gives_each_of_the_last_rows_its_offset():
    rng = random.Random(6)
    table = Table(DOC)
    table.insert(DOC.row(doc(1, rng)))
    table.stamp(7)
    table.insert_many([DOC.row(doc(i, rng)) for i in (2, 3, 4)])
    table.stamp_inserts([20, 30, 40])
    assert [table.versions.get(i) for i in (1, 2, 3, 4)] == [7, 20, 30, 40]


def test_shown_remembers_the_last_dicts_handed_out_and_forgets_the_oldest():
    table, _records = filled(1, 9)
    stored = table.live[1]
    kept = [table.shown(i, stored) for i in range(SHOWN)]
    assert len(table.shown_ids) == SHOWN and table.shown(0, stored) is kept[0]  # a hit moves nothing
    table.shown(SHOWN, stored)  # one more, read once: kept from its second read, and 0 goes
    assert SHOWN not in table.shown_ids
    table.shown(SHOWN, stored)
    assert len(table.shown_ids) == SHOWN and 0 not in table.shown_ids and SHOWN in table.shown_ids
    assert table.shown(1, stored) is kept[1] and table.shown(0, stored) is not kept[0]


def test_shown_hands_the_same_dict_for_the_same_stored_record_and_never_keeps_a_large_one():
    table, records = filled(3, 2)
    first = table.shown(1, table.live[1])
    assert first == records[1] and table.shown(1, table.live[1]) is first
    assert table.shown_all([1, 2]) == [records[1], records[2]] and table.shown_all([1])[0] is first
    assert list(table.shown_ids) == [1, 2]
    table.replace(table.live[1], DOC.row({**records[1], "n": 3}))
    (newer,) = table.shown_all([1])  # the entry kept is for the old stored record: not handed out
    assert newer is not first and newer["n"] == 3 and table.shown(1, table.live[1]) is newer
    big = {**records[2], "w": "x" * SHOWN_BYTES}
    stored = table.replace(table.live[2], DOC.row(big))
    assert len(stored) > SHOWN_BYTES
    got = table.shown(2, stored)
    assert got == big and table.shown(2, stored) is not got and 2 not in table.shown_ids
    edge = {**records[3], "w": ""}
    edge["w"] = "x" * (SHOWN_BYTES - len(pack(DOC.fields, DOC.row(edge))))
    edge_stored = table.replace(table.live[3], DOC.row(edge))
    assert len(edge_stored) == SHOWN_BYTES
    kept = table.shown(3, edge_stored)
    assert table.shown(3, edge_stored) is kept and 3 in table.shown_ids
    given = dict(records[1])
    stored = table.replace(table.live[1], DOC.row(given))
    table.prime(1, stored, given)
    assert table.shown(1, stored) is given and list(table.shown_ids) == [3, 1]
    table.delete(1, stored)
    assert 1 not in table.shown_ids


def test_records_read_the_live_state_as_dicts():
    table, records = filled(4, 3)
    table.delete(2, table.live[2])
    view = table.records
    assert len(view) == 3 and list(view) == [1, 3, 4] and 2 not in view and 3 in view
    assert view[3] == records[3] and dict(view) == {i: records[i] for i in (1, 3, 4)}


def test_a_new_table_is_named_after_its_model_and_holds_nothing():
    table = Table(DOC)
    assert (table.name, table.id_field, table.id_position) == ("Doc", "id", 0)
    assert table.max_id == 0 and table.fixup is None and table.watermark == 0
    assert len(table.live) == 0 and list(table.pk) == [] and table.rows == [] and list(table.prior) == []
    assert Table(KEY).words is None and table.words is not None


def test_a_reference_moved_to_a_parent_with_no_children_yet_counts_one():
    table = Table(DOC)
    rng = random.Random(1)
    first = {**doc(1, rng), "parent": None}
    table.insert(DOC.row(first))
    table.replace(table.live[1], DOC.row({**first, "parent": 7}))
    assert table.refs == {"parent": {7: 1}}
    table.replace(table.live[1], DOC.row({**first, "parent": 8}))
    assert table.refs == {"parent": {8: 1}}


def test_each_write_drops_the_kept_set_of_every_key_it_touches_of_a_filter_and_sort_field():
    """`n` is @filter and @sort: its filter (an OrderedFilter) keeps sets for walks
    (`keeper`), and each write of the table drops the sets of the keys an id leaves and
    joins, in the ordered index's own step (Table._plan), so the next walk sees the write."""
    table, _records = filled(40, 5)
    n_filter = table.hashes["n"]

    def holders(key: object) -> set[int]:
        keep = n_filter.keeper(key)
        return {i for i in table.live if keep(i)}

    def values(id_: int, **changed: object) -> tuple:
        return DOC.row(dict(table.records[id_], **changed))

    def expect() -> None:
        for key in (None, 1, 2, 3):
            assert holders(key) == {i for i, r in table.records.items() if r["n"] == key}, key

    expect()  # a set kept for every key
    one = next(i for i, r in table.records.items() if r["n"] == 1)
    table.replace(table.live[one], values(one, n=2))  # leaves 1, joins 2
    assert {1, 2}.isdisjoint(n_filter.kept_sets) and 3 in n_filter.kept_sets
    expect()
    table.replace(table.live[one], values(one, n=None))  # leaves 2 for null
    assert {2, None}.isdisjoint(n_filter.kept_sets)
    expect()
    table.replace(table.live[one], values(one, tag="z"))  # n unchanged: every set kept
    assert set(n_filter.kept_sets) == {None, 1, 2, 3}
    table.insert(values(one, id=41, email=None, n=3))  # joins 3
    assert 3 not in n_filter.kept_sets and 1 in n_filter.kept_sets
    expect()
    table.delete(41, table.live[41])  # leaves 3
    assert 3 not in n_filter.kept_sets
    expect()
    table.undo_last(41)  # the delete undone: joins 3 again
    assert 3 not in n_filter.kept_sets
    expect()
