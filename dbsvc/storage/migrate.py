"""Schema evolution: the tenant keeps the description it was last opened with.

Layout::

    <tenant>/schema.json     `describe_schema` output (dbsvc.schema.describe), written
                             atomically (tmp, fsync, rename, fsync dir) at first open and
                             after every accepted migration

On open the stored description is compared with the one being served using
`dbsvc.schema.describe.schema_changes` (docs/guide/schema.md#changing-a-schema):

- equal: nothing to do;
- incompatible reasons: `IncompatibleSchema(reasons)` listing every one, before anything
  is written (a read-only open refuses the same way);
- compatible: records read from disk are reshaped to the new field list (added fields
  filled: nullable -> None, else the default: a value, `now` or a new uuid), and if any model
  that holds records changed its field list, the store compacts right after loading so the
  filled values are written once (a `now` or `uuid` default must not change on every
  restart). Then the new description replaces the stored one.

Crash rules: the description is replaced only after that compaction is durable, so a crash
in between repeats the migration on the next open, which finds the records already reshaped
by the new snapshot and only compacts once more.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dbsvc.errors import CorruptLog, IncompatibleSchema
from dbsvc.runtime import CompiledModel, new_uuid, now
from dbsvc.storage.files import write_atomic
from dbsvc.strictjson import strict_loads

SCHEMA_NAME = "schema.json"


@dataclass(slots=True)
class MigrationPlan:
    stored: dict | None  # the description found on disk
    changes: list[str] = field(default_factory=list)
    reshaped: set[str] = field(default_factory=set)  # models whose field list changed

    @property
    def write_description(self) -> bool:
        return self.stored is None or bool(self.changes) or bool(self.reshaped)


def read_description(directory: str) -> dict | None:
    path = os.path.join(directory, SCHEMA_NAME)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        return strict_loads(data)  # no NaN, no 1e400 (dbsvc/strictjson.py)
    except ValueError as exc:
        raise CorruptLog(path, 0, f"stored schema is not JSON: {exc}") from None


def write_description(directory: str, description: dict) -> None:
    text = json.dumps(description, indent=1, ensure_ascii=False).encode("utf-8")
    write_atomic(os.path.join(directory, SCHEMA_NAME), text)


def plan_migration(directory: str, description: dict) -> MigrationPlan:
    """Compare the stored description with `description`; raise if incompatible."""
    stored = read_description(directory)
    if stored is None or stored == description:
        return MigrationPlan(stored)
    from dbsvc.schema.describe import schema_changes

    compatible, incompatible = schema_changes(stored, description)
    if incompatible:
        raise IncompatibleSchema(incompatible)
    old_fields = {m["name"]: [f["name"] for f in m["fields"]] for m in stored["models"]}
    reshaped = {
        m["name"]
        for m in description["models"]
        if m["name"] in old_fields and old_fields[m["name"]] != [f["name"] for f in m["fields"]]
    }
    return MigrationPlan(stored, compatible or ["description changed"], reshaped)


def _filler(desc: dict | None) -> Callable[[], Any]:
    default = (desc or {}).get("default")
    if default is None:
        return lambda: None
    kind = default["kind"]
    if kind == "now":
        return now
    if kind == "uuid":
        return new_uuid
    value = default["value"]
    return lambda: value


def make_fixup(model: CompiledModel, description: dict) -> Callable[[dict], dict]:
    """record (any older field list) -> record in `model.fields` order, added fields filled."""
    descs: dict[str, dict] = {}
    for m in description.get("models", ()):
        if m["name"] == model.name:
            descs = {f["name"]: f for f in m["fields"]}
    fields = model.fields
    fillers = {f: _filler(descs.get(f)) for f in fields}

    def fixup(record: dict) -> dict:
        if tuple(record) == fields:
            return record
        return {f: record[f] if f in record else fillers[f]() for f in fields}

    return fixup
