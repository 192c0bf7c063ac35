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

`default` is null or `{"kind": "value" | "now" | "uuid", "value": ...}`. A `@search` field
adds `"search": true`; the key is absent otherwise, so a description stored before text
search existed is unchanged (and read as `search` false).

`schema_fingerprint(description)` names a description in 16 hex digits.
`schema_changes(old, new)` compares two descriptions (docs/guide/schema.md#changing-a-schema) and returns
`(compatible, incompatible)`, two lists of human-readable sentences; storage migrates when
the second list is empty and otherwise refuses, listing it. It is pure and never raises
for well-formed descriptions. Imports nothing from dbsvc but `dbsvc.schema.*`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from dbsvc.schema.ir import Default, DefaultKind, Field, FieldType, Model, Projection, Schema

DESCRIPTION_VERSION = 1


def schema_fingerprint(description: dict[str, Any]) -> str:
    """A short, stable id of a description (sha256 of its canonical JSON, 16 hex digits):
    a read replica refuses a primary whose fingerprint differs from its own."""
    canonical = json.dumps(description, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()[:16]


def describe_schema(schema: Schema) -> dict[str, Any]:
    """The JSON-serialisable, deterministic description of `schema` (layout above)."""
    return {"version": DESCRIPTION_VERSION, "models": [_describe_model(model) for model in schema.models]}


def schema_from_description(description: dict[str, Any], path: str) -> Schema:
    """The schema a stored description describes (`describe_schema`'s inverse for every
    part it keeps: models, fields, projections), named `path`: what `dbsvc export` and
    `import` compile when no SCHEMA is given. Access rules, token defaults and the
    `[runtime]`/`[auth]` tables are not in a description, so they are absent (an offline
    tool reads and writes records without a token). `describe_schema` of the result is
    `description`, so the tenant opens with it unchanged."""
    models = []
    for model in description["models"]:
        fields = tuple(
            Field(
                name=f["name"],
                type=FieldType(f["type"]),
                nullable=f["nullable"],
                enum_members=tuple(f["enum"]),
                is_id=f["id"],
                unique=f["unique"],
                filterable=f["filter"],
                sortable=f["sort"],
                searchable=f.get("search", False),
                min=f["min"],
                max=f["max"],
                default=None
                if f["default"] is None
                else Default(DefaultKind(f["default"]["kind"]), f["default"]["value"]),
                ref=f["ref"],
            )
            for f in model["fields"]
        )
        projections = tuple(Projection(name, tuple(names)) for name, names in model["projections"].items())
        models.append(Model(model["name"], fields, projections))
    return Schema(path, tuple(models))


def _describe_model(model: Model) -> dict[str, Any]:
    return {
        "name": model.name,
        "fields": [_describe_field(f) for f in model.fields],
        "projections": {p.name: list(p.fields) for p in model.projections},
    }


def _describe_field(f: Field) -> dict[str, Any]:
    described = {
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
    if f.searchable:  # only when set: descriptions stored before `@search` stay as they were
        described["search"] = True
    return described


def _describe_default(default: Default | None) -> dict[str, Any] | None:
    if default is None:
        return None
    return {"kind": default.kind.value, "value": default.value}


def schema_changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Compare two descriptions: `(compatible changes, incompatible reasons)`.

    Compatible (storage migrates): an added model; an added field that is nullable or has a
    default; a field made nullable; changed `filter`, `sort`, `min`, `max` or `default`;
    `@unique` dropped; enum members added or reordered; a `@ref` dropped; fields reordered;
    projections added, removed or changed. New bounds apply to writes from then on; existing
    records are not re-validated.

    Incompatible (storage refuses and lists these): a removed model or field (its data would
    be lost); a changed type; an enum member removed; a field made non-nullable; an added
    required field; a different `@id` field; a `@ref` added or retargeted (existing rows
    were never checked against it); and `@unique` added to an existing field, because
    storage cannot yet verify that existing records are unique - it is refused with its own
    reason until storage can check it.

    Every sentence names the model, the field and the old and new values. Pure.
    """
    compatible: list[str] = []
    incompatible: list[str] = []
    if old.get("version") != new.get("version"):
        incompatible.append(f"description version changed from {old.get('version')!r} to {new.get('version')!r}")
        return compatible, incompatible
    old_models = {m["name"]: m for m in old["models"]}
    new_models = {m["name"]: m for m in new["models"]}
    for name in old_models:
        if name not in new_models:
            incompatible.append(f"model {name!r} was removed; its records would be lost")
    for name, model in new_models.items():
        if name not in old_models:
            compatible.append(f"model {name!r} was added")
            continue
        _compare_model(old_models[name], model, compatible, incompatible)
    return compatible, incompatible


def _compare_model(old: dict[str, Any], new: dict[str, Any], compatible: list[str], incompatible: list[str]) -> None:
    model = new["name"]
    old_fields = {f["name"]: f for f in old["fields"]}
    new_fields = {f["name"]: f for f in new["fields"]}
    old_id = next((f["name"] for f in old["fields"] if f["id"]), None)
    new_id = next((f["name"] for f in new["fields"] if f["id"]), None)
    if old_id != new_id:
        incompatible.append(f"model {model!r}: the @id field changed from {old_id!r} to {new_id!r}")
    for name in old_fields:
        if name not in new_fields:
            incompatible.append(f"field {name!r} of model {model!r} was removed; its values would be lost")
    for name, f in new_fields.items():
        if name in old_fields:
            _compare_field(model, old_fields[name], f, compatible, incompatible)
        elif f["nullable"] or f["default"] is not None:
            how = "nullable" if f["nullable"] else f"default {_show_default(f['default'])}"
            compatible.append(f"field {name!r} was added to model {model!r} ({how})")
        elif name != new_id:
            incompatible.append(
                f"field {name!r} was added to model {model!r} as required (not nullable, no default); "
                "existing records have no value for it"
            )
    kept_old = [n for n in old_fields if n in new_fields]
    kept_new = [n for n in new_fields if n in old_fields]
    if kept_old != kept_new:
        compatible.append(f"fields of model {model!r} were reordered from {kept_old!r} to {kept_new!r}")
    if old["projections"] != new["projections"]:
        compatible.append(
            f"projections of model {model!r} changed from {old['projections']!r} to {new['projections']!r}"
        )


def _compare_field(
    model: str, old: dict[str, Any], new: dict[str, Any], compatible: list[str], incompatible: list[str]
) -> None:
    where = f"field {new['name']!r} of model {model!r}"
    if old["type"] != new["type"]:
        incompatible.append(f"{where}: type changed from {old['type']!r} to {new['type']!r}")
        return
    if old["nullable"] and not new["nullable"]:
        incompatible.append(f"{where}: changed from nullable to non-nullable; existing records may hold null")
    elif new["nullable"] and not old["nullable"]:
        compatible.append(f"{where}: changed from non-nullable to nullable")
    removed = [m for m in old["enum"] if m not in new["enum"]]
    added = [m for m in new["enum"] if m not in old["enum"]]
    if removed:
        incompatible.append(
            f"{where}: enum members {removed!r} were removed (old {old['enum']!r}, new {new['enum']!r}); "
            "existing records may hold them"
        )
    elif added:
        compatible.append(f"{where}: enum members {added!r} were added (old {old['enum']!r}, new {new['enum']!r})")
    elif old["enum"] != new["enum"]:
        compatible.append(f"{where}: enum members reordered from {old['enum']!r} to {new['enum']!r}")
    if old["ref"] != new["ref"]:
        if new["ref"] is None:
            compatible.append(f"{where}: @ref({old['ref']}) was dropped")
        else:
            incompatible.append(
                f"{where}: @ref changed from {old['ref']!r} to {new['ref']!r}; "
                "existing values were never checked against the new target"
            )
    if not old["unique"] and new["unique"]:
        incompatible.append(
            f"adding @unique to existing field {new['name']!r} of model {model!r} is not supported "
            "(storage cannot yet verify that existing records are unique)"
        )
    elif old["unique"] and not new["unique"]:
        compatible.append(f"{where}: @unique was dropped")
    for key in ("filter", "sort", "min", "max"):
        if old[key] != new[key]:
            compatible.append(f"{where}: {key} changed from {old[key]!r} to {new[key]!r}")
    if old.get("search", False) != new.get("search", False):
        compatible.append(f"{where}: search changed from {old.get('search', False)!r} to {new.get('search', False)!r}")
    if old["default"] != new["default"]:
        compatible.append(
            f"{where}: default changed from {_show_default(old['default'])} to {_show_default(new['default'])}"
        )


def _show_default(default: dict[str, Any] | None) -> str:
    if default is None:
        return "none"
    if default["kind"] != "value":
        return str(default["kind"])
    return repr(default["value"])
