"""The order a list's sort gives, worked out by hand: the oracle of the tests that walk a
served list by its `Link`s."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def ids_in_sort_order(
    records: list[dict], sort: tuple[tuple[str, bool], ...], keys: Mapping[str, Callable[[Any], Any]]
) -> list[Any]:
    """The records' ids in the order `sort` gives (docs/guide/queries.md: a null after every
    value going up, before every value going down; the id breaks ties), compared by the
    model's index keys (`CompiledModel.keys`)."""
    ordered = sorted(records, key=lambda r: r["id"])
    for field, desc in reversed(sort):
        key = keys[field]
        present = sorted([r for r in ordered if r[field] is not None], key=lambda r: key(r[field]), reverse=desc)
        nulls = [r for r in ordered if r[field] is None]
        ordered = nulls + present if desc else present + nulls
    return [r["id"] for r in ordered]
