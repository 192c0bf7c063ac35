"""A table's bulk loads (storage/table.py `load_base`, `insert_many`, tableruns.py `insert_run`) at their
edges, on a `Table` held in memory, no store and no fixture: a snapshot of string ids (its
@unique fields indexed though no other index names them, its largest int id left at 0), a
snapshot whose @unique and @ref columns hold no null, a filter of string ids, a bulk insert of string ids, a bulk
insert below a larger id used before, and a load into a table that is not empty (refused).
Each is compared with the same records inserted one at a time. bench/mutation_inprocess.py
runs these per mutant (docs/mutation.md)."""

from __future__ import annotations

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage.rows import pack
from dbsvc.storage.table import Table
from dbsvc.storage.tableruns import insert_run

MODELS = compile_schema(
    parse_schema(
        """
model Key {
  id  str   @id
  a   str?  @unique
  b   str?  @unique
}

model Tag {
  id  str   @id
  tag str   @filter
}

model Doc {
  id     int    @id
  email  str?   @unique @filter
  n      int?   @filter @sort
  tag    str    @filter
  parent int?   @ref(Doc)
  s      str?   @sort
  w      str?   @search
}
""",
        "bulk.dbs",
    )
).BY_NAME
KEY, DOC, TAG = MODELS["Key"], MODELS["Doc"], MODELS["Tag"]


def columns_of(table: Table, values: list[tuple]) -> dict[int, list]:
    model = table.model
    return {p: [None if v[p] is None else model.keys[model.fields[p]](v[p]) for v in values] for p in table.columns}


def loaded(model, records: list[dict], max_id: int = 0) -> Table:
    table = Table(model)
    values = [model.row(r) for r in records]
    table.load_base([pack(model.fields, v) for v in values], columns_of(table, values), max_id)
    return table


def inserted(model, records: list[dict]) -> Table:
    table = Table(model)
    for r in records:
        table.insert(model.row(r))
    return table


def indexes(table: Table) -> tuple:
    return (
        dict(table.live.items()),
        list(table.pk),
        {f: dict(ix) for f, ix in table.unique.items()},
        {f: list(ix) for f, ix in table.ordered.items()},
        {f: dict(c) for f, c in table.refs.items()},
        {f: {k: sorted(ix.ids([k])) for k in keys} for f, ix, keys in buckets(table)},
        {f: ({i: ix.column.get(i) for i in table.live}, set(ix.column.nulls)) for f, ix in table.ordered.items()},
        None if table.words is None else {w: table.words.match((w,)) for w in ("hel", "wor", "x")},
        table.max_id,
        table.watermark,
    )


def buckets(table: Table):
    for f, ix in table.hashes.items():
        keys = {table.keys[f](r[f]) for r in table.records.values()}
        yield f, ix, keys


KEYS = [{"id": "k1", "a": "x", "b": "p"}, {"id": "k2", "a": "y", "b": None}, {"id": "k3", "a": "z", "b": "q"}]
DOCS = [
    {"id": 2, "email": "a@x", "n": 1, "tag": "x", "parent": 3, "s": "b", "w": "hello world"},
    {"id": 3, "email": "b@x", "n": None, "tag": "y", "parent": 2, "s": None, "w": None},
    {"id": 7, "email": "c@x", "n": 1, "tag": "x", "parent": 2, "s": "a", "w": "help"},
]


def test_a_snapshot_of_string_ids_indexes_its_unique_fields_and_keeps_no_int_id():
    table = loaded(KEY, KEYS)
    assert indexes(table) == indexes(inserted(KEY, KEYS))
    assert table.unique == {"a": {"x": "k1", "y": "k2", "z": "k3"}, "b": {"p": "k1", "q": "k3"}}
    assert table.max_id == 0 and table.records["k2"] == KEYS[1]
    assert table.unique_clash(KEY.row({"id": "k9", "a": "y", "b": None})) == ("a", "k2")
    table.insert(KEY.row({"id": "k0", "a": "w", "b": "r"}))  # a write after the load
    assert list(table.pk) == ["k0", "k1", "k2", "k3"] and table.records["k0"]["a"] == "w"


def test_a_snapshot_whose_unique_and_reference_columns_hold_no_null():
    table = loaded(DOC, DOCS, max_id=5)
    assert indexes(table) == indexes(inserted(DOC, DOCS))
    assert table.unique == {"email": {"a@x": 2, "b@x": 3, "c@x": 7}}
    assert table.refs == {"parent": {2: 2, 3: 1}} and table.max_id == 7
    assert sorted(table.hashes["tag"].ids(["x"])) == [2, 7] and list(table.hashes["email"].ids(["b@x"])) == [3]


def test_a_load_into_a_table_with_rows_or_records_is_refused():
    table = inserted(DOC, DOCS[:1])
    with pytest.raises(AssertionError, match="^load_base fills an empty table$"):
        table.load_base([], {p: [] for p in table.columns}, 0)
    table.delete(2, table.live[2])  # no record left, but a row
    with pytest.raises(AssertionError, match="^load_base fills an empty table$"):
        table.load_base([], {p: [] for p in table.columns}, 0)


def test_a_bulk_insert_of_string_ids_is_the_inserts_one_at_a_time():
    table = Table(KEY)
    table.insert_many([KEY.row(r) for r in KEYS])
    assert indexes(table) == indexes(inserted(KEY, KEYS)) and table.max_id == 0


def test_a_bulk_insert_below_a_larger_id_used_before_keeps_the_larger():
    table = inserted(DOC, [{**DOCS[0], "id": 50}])
    table.delete(50, table.live[50])
    assert table.max_id == 50
    table.insert_many([DOC.row(r) for r in DOCS])  # the table is empty: rebuilt in bulk
    assert table.max_id == 50 and list(table.pk) == [2, 3, 7]
    table.insert_many([DOC.row({**DOCS[0], "id": 60, "email": None, "w": None})])  # one, onto three: one insert
    assert table.max_id == 60 and list(table.pk) == [2, 3, 7, 60]
    assert table.refs == {"parent": {2: 2, 3: 2}}


@pytest.mark.parametrize("before", [0, 1, 3])
def test_a_run_of_inserts_is_the_inserts_one_at_a_time(before):
    more = [
        {"id": 8, "email": None, "n": 0, "tag": "y", "parent": None, "s": "c", "w": "word x"},
        {"id": 9, "email": "d@x", "n": None, "tag": "x", "parent": 7, "s": None, "w": None},
        {"id": 12, "email": "e@x", "n": 1, "tag": "x", "parent": 2, "s": "a", "w": "hello"},
    ]
    records = DOCS + more
    one = inserted(DOC, records)
    run = inserted(DOC, records[:before])
    insert_run(run, [DOC.row(r) for r in records[before:]])
    assert indexes(run) == indexes(one)
    assert run.rows == one.rows and list(run.prior) == list(one.prior) and run.max_id == 12
    assert run.unique == {"email": {"a@x": 2, "b@x": 3, "c@x": 7, "d@x": 9, "e@x": 12}}
    assert run.refs == {"parent": {3: 1, 2: 3, 7: 1}} and run.words.match(("wor",)) == {2, 8}
    run.insert(DOC.row({**more[0], "id": 13}))  # a write after the run
    assert list(run.pk) == [2, 3, 7, 8, 9, 12, 13] and run.max_id == 13


def test_a_run_of_string_ids_or_below_the_largest_id_keeps_the_largest():
    keys = Table(KEY)
    insert_run(keys, [KEY.row(r) for r in KEYS])
    assert indexes(keys) == indexes(inserted(KEY, KEYS)) and keys.max_id == 0
    table = inserted(DOC, [{**DOCS[0], "id": 50, "email": None}])
    table.delete(50, table.live[50])
    insert_run(table, [DOC.row(r) for r in DOCS])
    assert table.max_id == 50 and list(table.pk) == [2, 3, 7]


def test_a_filter_of_a_table_of_string_ids():
    tags = [{"id": f"k{i}", "tag": "xy"[i % 2]} for i in range(5)]
    for table in (inserted(TAG, tags), loaded(TAG, tags)):
        assert sorted(table.hashes["tag"].ids(["x"])) == ["k0", "k2", "k4"]
        table.insert(TAG.row({"id": "k9", "tag": "y"}))
        assert sorted(table.hashes["tag"].ids(["y"])) == ["k1", "k3", "k9"] and table.max_id == 0
