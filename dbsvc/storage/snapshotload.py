"""A snapshot's records into a tenant's empty tables: the open's step 4, its first half (recovery.py).

`install_snapshot(tables, parts, path, migrating, head)` takes the models `read_snapshot`
found (snapshotreader.py) and loads each into its table (`Table.load_base`) by one of the
two ways snapshotreader.py describes ("Two ways to read a model"):

- from the keys: a format 2-4 model of the table's fields, whose keys lines hold every
  index key the table needs: the row texts are kept as the stored records (format 4), or
  made the records' objects by a cut of each array (formats 2-3, rows.py `row_object`),
  and the index columns come from the keys lines, no row parsed (`_from_keys`);
- from the rows: format 1, a migrating model, or keys that do not fit the table: the rows
  parsed a window at a time, brought to the current fields where the model migrates
  (`_from_rows`).

Either way the index columns are filled a window or a block at a time (`_KeyColumns`), so
what a window parsed goes before the next is read, and the ids are checked strictly
ascending as they come (`_IdOrder`): `Table.load_base` builds its indexes on that order
without sorting. Whatever the file holds that the tables cannot take is CorruptLog at the
model's position, before anything is truncated or written.

Imports nothing of the open's other steps (recovery.py, logreplay.py).
"""

from __future__ import annotations

import json
import operator
from array import array
from collections.abc import Callable, Mapping, Sequence
from itertools import chain, pairwise, starmap
from typing import Any

from dbsvc import runtime
from dbsvc.errors import CorruptLog
from dbsvc.storage.rows import Stored, layout, pack, pack_many, row_object
from dbsvc.storage.snapshotreader import ModelPart, model_blocks, model_versions, model_windows
from dbsvc.storage.table import Table


def install_snapshot(
    tables: dict[str, Table], parts: list[ModelPart], path: str, migrating: set[str], head: int
) -> None:
    """Each model's records into its empty table: from the snapshot's key columns when they
    fit the table, its rows parsed otherwise (snapshotreader.py, "Two ways to read a model");
    their versions from its versions lines (`head` for a file without: versions.py)."""
    for m in parts:
        table = tables.get(m.name)
        if table is None:
            raise CorruptLog(path, 0, f"snapshot holds model {m.name!r}, which the schema does not declare")
        model = table.model
        if model.id_field not in m.fields:
            raise CorruptLog(path, 0, f"snapshot rows of {m.name} have no {model.id_field!r} field")
        as_stored = m.fields == list(model.fields) and m.name not in migrating
        try:
            if as_stored and m.keys is not None and set(table.key_fields) <= set(m.keys):
                stored, columns = _from_keys(table, m, path)
            else:
                stored, columns = _from_rows(table, m, path, as_stored)
            table.load_base(stored, columns.columns, m.max_id, model_versions(path, m, head))
        except ValueError as exc:  # a row the word index parsed that is no record (words.py `_values`)
            raise CorruptLog(path, m.position, f"snapshot rows of {m.name} are not all records ({exc})") from None
        except (TypeError, OverflowError) as exc:
            # A value no index can take: a list where a key goes; a float, or an int past
            # 64 bits, where an int key goes (its sublists are arrays, indexes.py OrderedIndex).
            raise CorruptLog(
                path, m.position, f"snapshot rows of {m.name} hold a value its indexes cannot take ({exc})"
            ) from None


def _from_keys(table: Table, m: ModelPart, path: str) -> tuple[list[Stored], _KeyColumns]:
    """A format 2-4 model's stored records as the file's row texts (format 4) or their
    objects (formats 2-3: `_objects`), and its index columns from its keys lines: no row
    parsed but the reader's sample."""
    stored: list[Stored] = []
    columns = _KeyColumns(table)
    order = _IdOrder(m, path)
    id_field, at = table.id_field, table.positions
    for texts, keyed in model_blocks(path, m):
        order.check(keyed[id_field])
        stored.extend(texts if m.objects else _objects(table, m, path, texts))
        columns.add({at[f]: keyed[f] for f in table.key_fields})
        del texts, keyed
    return stored, columns


def _from_rows(table: Table, m: ModelPart, path: str, as_stored: bool) -> tuple[list[Stored], _KeyColumns]:
    """A model's stored records and index columns from its rows, parsed a window at a time:
    format 1, or keys that do not fit the table. Its texts are kept as the stored records
    where they are the records as the table stores them (format 4), else its parsed rows
    are packed a window at a time; only the index keys of its parsed rows are kept, so the
    rows go before the next window is parsed and it reuses their memory (snapshotreader.py,
    "Windows")."""
    model = table.model
    stored: list[Stored] = []
    columns = _KeyColumns(table)
    order = _IdOrder(m, path)
    id_at = operator.itemgetter(m.fields.index(model.id_field))
    names, fixup, row, fields = m.fields, table.fixup, model.row, model.fields
    for rows, texts in model_windows(path, m):
        _check_shape(rows, m, path)
        order.check(list(map(id_at, rows)))
        if not as_stored:
            assert fixup is not None
            rows = [row(fixup(dict(zip(names, values)))) for values in rows]
            texts = None
        stored.extend(texts if texts is not None and m.objects else pack_many(fields, rows))
        columns.add(list(zip(*rows)))
        del rows, texts
    return stored, columns


def _objects(table: Table, m: ModelPart, path: str, texts: list[bytes]) -> list[Stored]:
    """The stored records of a block of array rows (formats 2-3), each the model's layout
    filled with its values' texts (rows.py `row_object`); a row the cut cannot take (a lone
    surrogate's bytes) parsed and packed. CorruptLog for a row that does not parse."""
    fields = table.model.fields
    shape, count = layout(fields).encode("utf-8"), len(fields)
    out = [row_object(shape, count, text) for text in texts]
    for i in [i for i, made in enumerate(out) if made is None]:
        try:
            values = json.loads(texts[i].decode("utf-8", "surrogatepass"))
        except ValueError as exc:
            raise CorruptLog(path, m.position, f"snapshot row of {m.name} is not JSON ({exc})") from None
        out[i] = pack(fields, values)
    return out  # type: ignore[return-value]


class _KeyColumns:
    """The index key columns `Table.load_base` takes (`Table.columns`), filled a window
    or a block at a time: each field's keys (`CompiledModel.keys`; enum members as the model's own
    strings), and the number keys of an array-keyed sort field (`key_arrays`) written into
    an array as they come, so the window's key objects go with the window. Made at the
    end, 1,000,000 float keys in a list of their own would be freed after the index took
    them into arrays, but the pages they filled, shared with the ids that stay, would not
    (32 bytes of RSS a record). A null key among number keys turns that column into a
    list (an array holds no None)."""

    __slots__ = ("columns", "plan")

    def __init__(self, table: Table) -> None:
        model = table.model
        self.columns: dict[int, Any] = {}
        self.plan: list[tuple[int, Callable[[Any], Any] | None, Mapping[Any, Any] | None]] = []
        for position in table.columns:
            f = model.fields[position]
            typecode = model.key_arrays.get(f, "")
            self.columns[position] = array(typecode) if typecode else []
            key = model.keys[f]
            members = model.shared_values.get(position)
            self.plan.append((position, None if key is runtime.identity else key, members))

    def add(self, fields: Sequence[Sequence[Any]] | Mapping[int, Sequence[Any]]) -> None:
        """Take a window's keys from its values by field position: a window's rows
        transposed (`zip(*rows)`, one C-level pass), or a block's key columns."""
        for position, key, members in self.plan:
            keys: Any = fields[position] if fields else ()
            if key is not None:
                keys = list(map(key, keys))
            if members is not None:
                keys = _shared_members(keys, members)
            column = self.columns[position]
            if type(column) is array and None in keys:
                column = self.columns[position] = list(column)
            column.extend(keys)


def _shared_members(column: list[Any], members: Mapping[Any, Any]) -> list[Any]:
    """An enum field's column with each member as the model's own string, as `row_m`
    holds it (runtime.shared): its index keys are then a few objects, not one a record."""
    try:
        return list(map(members.get, column, column))
    except TypeError:  # an unhashable value, unchecked data: kept as it is
        return [runtime.shared(members, value) for value in column]


def _check_shape(rows: list, m: ModelPart, path: str) -> None:
    """A snapshot's parsed rows each hold one value per field of its header."""
    width = len(m.fields)
    if set(map(type, rows)) - {list} or set(map(len, rows)) - {width}:
        raise CorruptLog(path, m.position, f"snapshot rows of {m.name} are not lists of its {width} fields")


class _IdOrder:
    """A snapshot's rows are in strictly ascending id order (snapshot.py), which
    `Table.load_base` builds its indexes on without sorting: a file that breaks the rule
    (damage the CRC cannot see, another writer) is refused, never half indexed. Checked
    on each window's or block's ids in turn."""

    __slots__ = ("last", "m", "path")

    def __init__(self, m: ModelPart, path: str) -> None:
        self.m, self.path = m, path
        self.last: list[Any] = []  # the previous window's last id, once there is one

    def check(self, ids: list[Any] | range) -> None:
        if type(ids) is range:  # a block of ids without gaps (snapshot.py `_column`)
            ids = ids[:: max(len(ids) - 1, 1)]  # its first and last ids, or its one id
        try:
            ascending = all(starmap(operator.lt, pairwise(chain(self.last, ids))))
        except TypeError:  # ids of types that do not compare
            ascending = False
        if not ascending:
            raise CorruptLog(
                self.path, self.m.position, f"snapshot rows of {self.m.name} are not in strictly ascending id order"
            )
        if ids:
            self.last = [ids[-1]]
