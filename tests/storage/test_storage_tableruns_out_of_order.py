"""storage/tableruns.py `insert_run` given int ids out of order (a follower's run of
records inserted on the primary under ids it chose, not the next ones in turn): the result
is `Table.insert` of each record, the table's highest id included, whether the highest
id of the run comes first, last or in the middle, and below or above those held.

Why: every earlier run's ids ascend (tableruns.py then reads the last one), so the branch
for int ids out of order was never asked; its highest id made None or read without the
table's own (`insert_run` 137-141, docs/mutation.md session 23) crashed or kept a wrong
`max_id` unseen. No store, no fixture."""

from __future__ import annotations

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage.table import Table
from dbsvc.storage.tableruns import insert_run

MODELS = compile_schema(
    parse_schema(
        """
model Event {
  id    int       @id
  n     int       @sort
  kind  enum(a, b) @filter
}
"""
    )
).MODELS
EVENT = next(m for m in MODELS if m.name == "Event")


def record(i: int) -> dict:
    return {"id": i, "n": (7 * i) % 5, "kind": "ab"[i % 2]}


def shape(table: Table) -> dict:
    return {
        "live": dict(table.live.items()),
        "rows": list(table.rows),
        "n": list(table.ordered["n"]),
        "kind": sorted(map(repr, table.hashes["kind"].ids(("a", "b")))),
        "max_id": table.max_id,
    }


@pytest.mark.parametrize(
    "held, run",
    [
        ([1, 2], [9, 4, 6]),  # the highest first
        ([1, 2], [4, 9, 6]),  # in the middle
        ([1, 2], [6, 4, 9]),  # last, but not ascending
        ([1, 20], [9, 4, 6]),  # all below the highest held
        ([], [3, 1, 2]),  # an empty table
    ],
)
def test_a_run_of_int_ids_out_of_order_is_insert_of_each(held, run):
    one, many = Table(EVENT), Table(EVENT)
    for i in held:
        one.insert(EVENT.row(record(i)))
        many.insert(EVENT.row(record(i)))
    for i in run:
        one.insert(EVENT.row(record(i)))
    insert_run(many, [EVENT.row(record(i)) for i in run])
    assert shape(many) == shape(one)
    assert many.max_id == max(held + run)
