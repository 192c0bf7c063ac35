"""What a replica checks a replicated record of one table's model for, and what it has learned.

    fit = RecordFit(model)     # made with its table (table.py `Table.fit`), dropped with it
    fit.keyed                  # ((field, position, key function, int64?), ...): the keys that can fail
    fit.shapes                 # value types of records the model's replace validator accepted

followrun.py rule 4 reads it: a record of value types new to its model passes the model's
replace validator once (`check_fit`), and its types are added to `shapes`; a run of
records whose types are all in `shapes` skips the validator and is taken whole (its
record texts kept as they are, when spelled as this store spells them: `Table.kept_texts`).

Invariants:

1. `shapes` is learned state and belongs to ONE table of ONE store: two stores in one
   process (tests, bench/mutation_pytest.py, which re-runs tests in one process) share
   compiled models (the compiler's cache), and a process-wide cache keyed by model let one
   store's runs count as known to the next, so `Store.stats()["kept_texts"]` of a store
   depended on what ran before it (docs/decisions.md, "A replica's learned value types
   belong to its table").
2. A type set only ever grows, and only after the validator accepted a record of it: a
   wrong or missing entry costs one validator run (the general path), never a bad row.
3. `keyed` is a function of the model alone, computed once a table.

Imports nothing from storage; the runtime's `CompiledModel` and `identity` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dbsvc.runtime import CompiledModel, identity


class RecordFit:
    """The index keys that can fail for a value of the right type (a key function that
    parses, a key kept in an array of int64), and the value types of the records the
    model's replace validator accepted (`shapes`, invariant 1)."""

    __slots__ = ("keyed", "shapes")

    def __init__(self, model: CompiledModel) -> None:
        self.shapes: set[tuple[type, ...]] = set()
        at = {name: position for position, name in enumerate(model.fields)}
        self.keyed: tuple[tuple[str, int, Callable[[Any], Any], bool], ...] = tuple(
            (name, at[name], key, model.key_arrays.get(name) == "q")
            for name, key in model.keys.items()
            if key is not identity or model.key_arrays.get(name) == "q"
        )
