"""Random writes on a storage `Table`, some undone at once, beside the records the table
must then hold: the loop of the tests that show a kept structure (bucket orders, pair
counts, prefix orders, kept searches) stays exact under writes and `undo_last`."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from dbsvc.storage.rows import unpack
from dbsvc.storage.table import Table


def undo_last(table: Table, model: Any, records: dict[int, dict]) -> None:
    """Undo the table's last row (a refused write's undo) and put `records` back as they were before it."""
    id_, _now, previous = table.rows[-1]
    table.undo_last(table.max_id)
    if previous is None:
        del records[id_]
    else:
        records[id_] = model.decode(unpack(previous))


def churn(
    table: Table,
    model: Any,
    records: dict[int, dict],
    rng: random.Random,
    make: Callable[[int], dict],
    fields: tuple[str, ...],
    check: Callable[[Table, dict[int, dict]], None],
    *,
    first_id: int,
    steps: int = 300,
) -> None:
    """`steps` writes: an insert of `make(next id)` (3 in 10), a replace of 1 to all of
    `fields` by `make(id)`'s values (5 in 10), a delete (2 in 10); every 7th step's write
    undone at once; `check(table, records)` every 50 steps and at the end."""
    next_id = first_id
    for step in range(steps):
        kind = rng.random()
        if kind < 0.3:
            records[next_id] = make(next_id)
            table.insert(model.row(records[next_id]))
            next_id += 1
        elif kind < 0.8:  # between buckets or prefixes, between keys, to null and back
            id_ = rng.choice(list(records))
            fresh = make(id_)
            changed = dict(records[id_], **{f: fresh[f] for f in rng.sample(fields, rng.randint(1, len(fields)))})
            table.replace(table.live[id_], model.row(changed))
            records[id_] = changed
        else:
            id_ = rng.choice(list(records))
            table.delete(id_, table.live[id_])
            del records[id_]
        if step % 7 == 0:
            undo_last(table, model, records)
        if step % 50 == 0:
            check(table, records)
    check(table, records)
