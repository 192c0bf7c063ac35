"""What several harnesses share: the generated modules of the demo schemas, a valid record
of every model, and the one check every refusal passes (it renders as problem+json)."""

from __future__ import annotations

import functools
import types
from pathlib import Path
from typing import Any

from dbsvc.compiler import compile_schema
from dbsvc.errors import RequestError
from dbsvc.http.problem import problem_response
from dbsvc.runtime import CompiledModel
from dbsvc.schema import load_schema

ROOT = Path(__file__).resolve().parents[1]

# Between them the two demo schemas use every field type (int, float, str, bool, json,
# datetime, date, uuid, enum), nullable and not, each id type (int, str, uuid) and refs.
SCHEMAS = ("blog", "inventory")

ITEM_ID = "6f1d3c1e-2b7a-4c35-9d0e-0a1b2c3d4e5f"

# A valid create body of every model, with its id: the `current` record a patch merges into.
VALID: dict[str, dict[str, Any]] = {
    "User": {"id": 1, "email": "a@b.c", "name": "A"},
    "BlogPost": {"id": 1, "author_id": 1, "title": "t", "body": "b", "score": 1.5},
    "Comment": {"id": 1, "post_id": 1, "author_id": 1, "body": "c"},
    "Warehouse": {"code": "ab", "city": "x", "opened": "2024-01-01"},
    "Item": {"id": ITEM_ID, "sku": "abc", "warehouse": "ab", "unit_price": 1.0},
    "StockMove": {"id": 1, "item": ITEM_ID, "delta": 1},
}


@functools.lru_cache(maxsize=None)
def generated(name: str) -> types.ModuleType:
    """The generated module of `schemas/<name>.dbs`, compiled once per process."""
    return compile_schema(load_schema(str(ROOT / "schemas" / f"{name}.dbs")))


def generated_modules() -> tuple[types.ModuleType, ...]:
    return tuple(generated(name) for name in SCHEMAS)


def all_models() -> tuple[CompiledModel, ...]:
    return tuple(model for module in generated_modules() for model in module.MODELS)


@functools.lru_cache(maxsize=None)
def current_record(model_name: str) -> dict[str, Any]:
    """A stored-form record of `model_name` (validated by its own generated code)."""
    model = next(m for m in all_models() if m.name == model_name)
    return model.validate_create(dict(VALID[model_name]))


def render(exc: RequestError) -> bytes:
    """The problem+json body the client would get for `exc`: a refusal that cannot even be
    rendered is a finding (the protocol layer would answer 500, or fail)."""
    return problem_response(exc, "fuzz").body


def pick(data: bytes, choices: tuple[Any, ...]) -> Any:
    """The choice the first byte selects (the fuzzer mutates it like any other byte)."""
    return choices[data[0] % len(choices)]
