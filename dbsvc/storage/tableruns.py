"""A table's runs: a follower's run of inserts put into one `Table` at once.

    insert_run(table, batch, keys)   # Table.insert of each record in turn, the indexes together

A read replica applies a primary's frames in groups (follow.py rule 5), mostly plain
inserts of new ids into one model; follow.py's group hands such a run here once it is
checked (followrun.py), and each of the table's indexes takes the run's entries together
(runs.py) instead of one `add` a record and an index.

Rules:

1. The result is what `Table.insert` of each record in turn leaves, for every reader: the
   live map, the rows and their `prior`, the primary key, every index (unique, hash,
   ordered with its key column, refs' counts, words, the buckets lists asked for), the
   max id; one new `tick` for the whole run (no reader sees a run half in: it is applied
   in one turn of the loop). Versions are the caller's (`Versions.set_run`), as `stamp`
   is after `insert`.
2. The caller checked every record (followrun.py): nothing here fails half way.

This module is table.py's own job split out (table.py is the table's state and its one-row
writes): it walks the table's index plan (`Table.index_plan`, built by `Table._plan`). Plain data, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any

from dbsvc.runtime import identity
from dbsvc.storage.idmap import IdMap
from dbsvc.storage.rows import Stored, Values, pack_many
from dbsvc.storage.runs import add_hash_run, add_ordered_run, add_sorted_run, ints_ascending
from dbsvc.storage.table import TICKS, Table


def insert_run(
    table: Table,
    batch: list[Values],
    keys: Mapping[int, Sequence[Any]] | None = None,
    columns: Sequence[Sequence[Any]] | None = None,
    stored: list[Stored] | None = None,
) -> None:
    """`table.insert` of each record in turn, with the same result (rule 1), each index's
    entries added together (runs.py). `keys`: position -> the column's index keys, and
    `columns`: the batch's values a field at a time, computed by the caller already
    (followrun.py's check); `stored`: each record's stored form, checked by the caller to
    be what `pack_many` would make of `batch` (followrun.py rule 6), else None."""
    columns = columns or list(zip(*batch)) or [()] * len(table.model.fields)
    ids = list(columns[table.id_position])
    # Whether the ids are ints in strictly ascending order (a follower's new rows), found once here
    # for every index rather than by each index again (runs.py: two C-level passes each).
    ascending = ints_ascending(ids)
    if stored is None:
        records = pack_many(table.model.fields, batch)
    else:
        records = stored
        table.kept_texts += len(stored)
    table.tick = next(TICKS)
    if isinstance(table.live, IdMap):
        table.live.extend_run(ids, records, ascending)
    else:
        table.live.update(zip(ids, records))
    table.rows.extend(zip(ids, records, repeat(None)))
    table.prior.frombytes(bytes(8 * len(records)))
    add_sorted_run(table.pk, ids, ascending)
    given = keys or {}

    def made(pos: int, kf: Callable[[Any], Any]) -> Sequence[Any]:
        column = columns[pos]
        return given.get(pos) or (column if kf is identity else list(map(kf, column)))

    plan_unique, plan_hash, plan_ordered, plan_refs = table.index_plan
    for _f, pos, kf, index in plan_unique:
        if None in columns[pos]:
            index.update((k, i) for v, k, i in zip(columns[pos], made(pos, kf), ids) if v is not None)
        else:
            index.update(zip(made(pos, kf), ids))
    for pos, kf, hindex in plan_hash:
        add_hash_run(hindex, made(pos, kf), ids, ascending)
    for pos, kf, sindex in plan_ordered:
        add_ordered_run(sindex, made(pos, kf), ids, ascending)
    for pos, counts in plan_refs:
        for v in columns[pos]:
            if v is not None:
                counts[v] = counts.get(v, 0) + 1
    if table.words is not None:
        for id_, r in zip(ids, batch):
            table.words.add(id_, r)
    if table.buckets.plan:
        for id_, r in zip(ids, batch):
            table.buckets.add(id_, r)
    if ascending:
        top = ids[-1]
    elif set(map(type, ids)) == {int}:
        top = max(ids, default=table.max_id)
    else:  # str or uuid ids (or ids of mixed types): only ints count
        top = max((i for i in ids if type(i) is int), default=table.max_id)
    table.max_id = max(table.max_id, top)
