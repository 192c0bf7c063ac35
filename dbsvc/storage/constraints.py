"""A write's constraints, checked before it touches anything (store.py rule 1).

    checks = Constraints(tables)
    record, id_, apply             = checks.insert(table, record)
    previous, record, apply        = checks.replace(table, id_, record)
    previous, apply                = checks.delete(table, id_)
    record, id_, values            = checks.check_insert(table, record)          # no `apply`:
    current, previous, record, values = checks.check_replace(table, id_, record) # writes.py's own

Each method raises the write's refusal, or returns what the store commits: the record as
stored (an automatic id filled in), the record it replaces, and `apply`, the in-memory
change the committer runs once the frame is held (commit.py):

- insert: `ConstraintViolation` for a missing non-int id or no automatic id left,
  `UniqueViolation` for a used id or a @unique value, `ForeignKeyViolation` for a @ref
  matching no parent (a @ref to the record's own id, given or automatic, matches itself);
- replace: `NotFound`, then the @unique and @ref checks (a @ref left unchanged is not
  checked again: its parent may not be deleted while it is referenced);
- delete: `NotFound`, `Referenced` with the number of children and their models (a
  record's @ref to itself is not a child: it goes with the record).

Invariants: nothing here changes a table; the messages are the interface's
(docs/guide, tests/storage). Imports errors, runtime and table.py; never store.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dbsvc.errors import ConstraintViolation, ForeignKeyViolation, NotFound, Referenced, UniqueViolation
from dbsvc.runtime import INT64_MAX
from dbsvc.storage.rows import Stored, Values
from dbsvc.storage.table import Table

Apply = Callable[[], object]


class Constraints:
    """The checks of one store's writes (module docstring)."""

    def __init__(self, tables: Mapping[str, Table]) -> None:
        self._tables = tables
        # parent model -> (child table, @ref field) for every @ref to it: who a delete asks.
        self._referrers: dict[str, list[tuple[Table, str]]] = {name: [] for name in tables}
        for table in tables.values():
            for f, parent in table.model.refs:
                self._referrers[parent].append((table, f))

    def insert(self, table: Table, record: dict[str, Any]) -> tuple[dict[str, Any], Any, Apply]:
        record, id_, values = self.check_insert(table, record)
        stored = record

        def apply() -> None:
            table.prime(id_, table.insert(values), stored)

        return record, id_, apply

    def check_insert(self, table: Table, record: dict[str, Any]) -> tuple[dict[str, Any], Any, Values]:
        """`insert`'s checks alone: the record as stored, its id and its values (`m.row`),
        for a writer that builds its own `apply` (writes.py packs the values itself)."""
        m = table.model
        id_ = record.get(m.id_field)
        if id_ is None:
            if m.id_type != "int":
                raise ConstraintViolation([{"field": m.id_field, "message": "is required"}])
            if table.max_id >= INT64_MAX:
                # Ids are signed 64-bit (docs/guide/schema.md#types); one past the top would be stored
                # but could never be parsed back from a path.
                raise ConstraintViolation(
                    [
                        {
                            "field": m.id_field,
                            "message": f"no automatic id is left: the largest id ever used is {table.max_id}; "
                            "give an unused id explicitly",
                        }
                    ]
                )
            record = dict(record)
            record[m.id_field] = id_ = table.max_id + 1  # past every id ever used: never live
        elif id_ in table.live:
            raise UniqueViolation(f"{m.id_field} {id_!r} is already used by {m.kebab} {id_!r}", field=m.id_field)
        values = m.row(record)
        if table.unique:  # (no call for a model without @unique fields: most of them)
            self._check_unique(table, values, record)
        if m.refs:
            self._check_refs(table, record, None, id_)
        return record, id_, values

    def replace(self, table: Table, id_: Any, record: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], Apply]:
        current, previous, record, values = self.check_replace(table, id_, record)
        stored, m = record, table.model

        def apply() -> None:
            table.prime(id_, table.replace(current, values, m.row(previous)), stored)

        return previous, record, apply

    def check_replace(
        self, table: Table, id_: Any, record: dict[str, Any]
    ) -> tuple[Stored, dict[str, Any], dict[str, Any], Values]:
        """`replace`'s checks alone: the live record's stored form and its dict, the new
        record (its id the path's) and its values (`check_insert` says why)."""
        m = table.model
        current = table.live.get(id_)
        if current is None:
            raise NotFound(f"{m.name} {id_!r} does not exist")
        previous = table.shown(id_, current)
        if record.get(m.id_field) != id_:
            record = dict(record)
            record[m.id_field] = id_
        values = m.row(record)
        if table.unique:
            self._check_unique(table, values, record)
        if m.refs:
            self._check_refs(table, record, previous)
        return current, previous, record, values

    def delete(self, table: Table, id_: Any) -> tuple[dict[str, Any], Apply]:
        current = table.live.get(id_)
        if current is None:
            raise NotFound(f"{table.model.name} {id_!r} does not exist")
        previous = table.shown(id_, current)
        referrers = self._referrers[table.name]
        # A record's reference to itself goes with it (as in PostgreSQL): only others count.
        counts = [
            (child, child.refs[f].get(id_, 0) - (child is table and previous[f] == id_)) for child, f in referrers
        ]
        children = sum(count for _child, count in counts)
        if children:
            names = sorted({child.name for child, count in counts if count})
            raise Referenced(
                f"{table.model.kebab} {id_!r} is referenced by {children} record(s) of {', '.join(names)}",
                count=children,
            )
        return previous, lambda: table.delete(id_, current)

    def _check_refs(
        self, table: Table, record: dict[str, Any], previous: dict[str, Any] | None, new_id: Any = None
    ) -> None:
        """Every @ref names a live parent, or is null, or is unchanged by a replace, or is an
        insert's reference to itself (`new_id`, the id it is stored under: as in PostgreSQL,
        the record exists once the write is in)."""
        for f, parent in table.model.refs:
            value = record[f]
            if value is None or (previous is not None and previous[f] == value):
                continue
            if parent == table.name and value == new_id:
                continue
            if value not in self._tables[parent].live:
                raise ForeignKeyViolation(
                    f"{f} {value!r} does not match any {self._tables[parent].model.kebab}", field=f
                )

    def _check_unique(self, table: Table, values: Values, record: dict[str, Any]) -> None:
        clash = table.unique_clash(values)
        if clash is not None:
            f, other = clash
            raise UniqueViolation(f"{f} {record[f]!r} is already used by {table.model.kebab} {other!r}", field=f)
