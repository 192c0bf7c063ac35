"""storage/tableruns.py `insert_run` at the edges the follower's runs do not reach (session 9,
rep80): a run handed no index keys computes them (a datetime's key parses its text, an
enum's and an int's are the values), an empty run changes nothing but the tick, and every
run gives the table a new change tick. Each against `Table.insert` of each record; no
store, no fixture (bench/mutation_inprocess.py runs these per mutant)."""

from __future__ import annotations

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage.table import Table
from dbsvc.storage.tableruns import insert_run

MODELS = compile_schema(
    parse_schema(
        """
model Event {
  id    int       @id
  at    datetime  @sort @filter
  n     int       @sort
  kind  enum(a, b) @filter
}
"""
    )
).MODELS
EVENT = next(m for m in MODELS if m.name == "Event")
RECORDS = [
    {"id": i, "at": f"2026-11-{28 - i % 3:02d}T10:00:0{i % 10}Z", "n": (7 * i) % 5, "kind": "ab"[i % 2]}
    for i in range(1, 9)
]


def shape(table: Table) -> dict:
    return {
        "live": dict(table.live.items()),
        "rows": list(table.rows),
        "ordered": {f: (list(index), [index.column.get(i) for i in table.live]) for f, index in table.ordered.items()},
        "hashes": {f: sorted(map(repr, index.ids(("a", "b")))) for f, index in table.hashes.items() if f == "kind"},
        "max_id": table.max_id,
    }


def test_a_run_without_its_keys_computes_them_as_insert_does():
    one, many = Table(EVENT), Table(EVENT)
    for record in RECORDS[:2]:
        one.insert(EVENT.row(record))
        many.insert(EVENT.row(record))
    for record in RECORDS[2:]:
        one.insert(EVENT.row(record))
    insert_run(many, [EVENT.row(r) for r in RECORDS[2:]])
    assert shape(many) == shape(one)
    assert all(type(key) is int for key, _id in many.ordered["at"])  # parsed, not the text


def test_an_empty_run_changes_nothing_but_the_tick():
    table = Table(EVENT)
    table.insert(EVENT.row(RECORDS[0]))
    before, tick = shape(table), table.tick
    insert_run(table, [])
    assert shape(table) == before
    assert table.tick != tick


def test_every_run_gives_the_table_a_new_tick():
    one, other = Table(EVENT), Table(EVENT)
    ticks = [one.tick, other.tick]
    insert_run(one, [EVENT.row(r) for r in RECORDS[:3]])
    ticks.append(one.tick)
    insert_run(other, [EVENT.row(r) for r in RECORDS[:3]])
    ticks.append(other.tick)
    insert_run(one, [EVENT.row(r) for r in RECORDS[3:]])
    ticks.append(one.tick)
    assert all(type(t) is int for t in ticks) and len(set(ticks)) == len(ticks)
