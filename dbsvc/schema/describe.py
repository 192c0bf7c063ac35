"""The schema description a tenant stores, and what changed between two of them.

`describe_schema(schema)` is plain JSON data (dicts, lists, str, int, float, bool, None),
deterministic for a given schema: models and fields in declaration order, projections
in declaration order (a dict, kept in insertion order). Version 1 layout::

    {"version": 1, "models": [
      {"name": "User",
       "fields": [{"name": "id", "type": "int", "nullable": false, "id": true,
                   "unique": false, "enum": [], "default": null, "ref": null,
                   "filter": false, "sort": false, "min": null, "max": null}, ...],
       "projections": {"card": ["id", "name"]}}]}

`default` is null or `{"kind": "value" | "now" | "uuid", "value": ...}`.

`schema_changes(old, new)` compares two descriptions (contract section 6) and returns
`(compatible, incompatible)`, two lists of human-readable sentences; storage migrates when
the second list is empty and otherwise refuses, listing it. It is pure and never raises
for well-formed descriptions. Imports nothing from dbsvc but `dbsvc.schema.*`.
"""

from __future__ import annotations

from typing import Any

from dbsvc.schema.ir import Default, Field, Model, Schema

DESCRIPTION_VERSION = 1


def describe_schema(schema: Schema) -> dict[str, Any]:
    """The JSON-serialisable, deterministic description of `schema` (layout above)."""
    return {
        "version": DESCRIPTION_VERSION,
        "models": [_describe_model(model) for model in schema.models],
    }


def _describe_model(model: Model) -> dict[str, Any]:
    return {
        "name": model.name,
        "fields": [_describe_field(f) for f in model.fields],
        "projections": {p.name: list(p.fields) for p in model.projections},
    }


def _describe_field(f: Field) -> dict[str, Any]:
    return {
        "name": f.name,
        "type": f.type.value,
        "nullable": f.nullable,
        "id": f.is_id,
        "unique": f.unique,
        "enum": list(f.enum_members),
        "default": _describe_default(f.default),
        "ref": f.ref,
        "filter": f.filterable,
        "sort": f.sortable,
        "min": f.min,
        "max": f.max,
    }


def _describe_default(default: Default | None) -> dict[str, Any] | None:
    if default is None:
        return None
    return {"kind": default.kind.value, "value": default.value}


def schema_changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Compare two descriptions; see the module docstring. Filled in by the next commit."""
    raise NotImplementedError("schema_changes is not written yet")
