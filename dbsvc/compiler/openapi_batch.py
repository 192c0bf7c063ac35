"""The OpenAPI description of `POST /batch` (dbsvc/batchops.py; docs/guide/rest.md#batches-post-batch).

    path_item, schemas = batch_path(schema)

The request is `{"ops": [...]}`: each op one of `<Model>.BatchOp`, a `oneOf` of the
model's four op kinds, each holding the model's own body schema (`<Model>.Create`,
`.Replace`, `.Patch`) as the single routes do, so a client generator types every op. An
`id`, and a `@ref` field's value, may also be `{"$op": i}` (`BatchOpRef`), the id of the
record an earlier op of the batch wrote; the body schemas do not admit that object in a
`@ref` field, so the description says so rather than every body schema growing a variant.

Pure: imports the schema IR and the sibling OpenAPI parts, nothing else of dbsvc.
"""

from __future__ import annotations

from typing import Any

from dbsvc.compiler.openapi_parts import ENTITY_TAGS, JSON, errors_for, json_response
from dbsvc.compiler.openapi_schemas import ref, scalar_schema
from dbsvc.routes import BATCH_PATH
from dbsvc.schema.ir import Model, Schema

MAX_OPS = 1000  # dbsvc/batchops.py MAX_OPS, the documented limit


def batch_path(schema: Schema) -> tuple[dict[str, Any], dict[str, Any]]:
    """The path item of `/batch` and the component schemas it names."""
    schemas: dict[str, Any] = {
        "BatchOpRef": {
            "type": "object",
            "description": "The id of the record the earlier op `$op` (its index) wrote.",
            "properties": {"$op": {"type": "integer", "minimum": 0}},
            "required": ["$op"],
            "additionalProperties": False,
        },
        "BatchResult": {
            "type": "object",
            "description": "One op's result: the status its single route answers, the record's id, "
            "for update and patch the stored record, and except for a delete its `etag` (the "
            "offset of the op's row, quoted as an ETag header is).",
            "properties": {
                "status": {"type": "integer", "enum": [200, 201, 204]},
                "id": {},
                "etag": {"type": "string"},
                "record": {"type": "object"},
            },
            "required": ["status", "id"],
        },
        "BatchResponse": {
            "type": "object",
            "properties": {
                "results": {"type": "array", "items": ref("BatchResult")},
                "first": {"type": "integer", "minimum": 1, "description": "Offset of the batch's first row."},
                "last": {"type": "integer", "minimum": 1, "description": "Offset of its last row (`Dbsvc-Offset`)."},
            },
            "required": ["results", "first", "last"],
        },
        "Batch": {
            "type": "object",
            "properties": {
                "ops": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_OPS,
                    "items": {"oneOf": [ref(f"{m.name}.BatchOp") for m in schema.models]},
                }
            },
            "required": ["ops"],
            "additionalProperties": False,
        },
    }
    for model in schema.models:
        schemas[f"{model.name}.BatchOp"] = _model_ops(model)
    operation = {
        "tags": ["batch"],
        "operationId": "batch",
        "summary": "Several creates, replaces, merges and deletes, all or nothing",
        "description": "Each op is checked as its single route checks it, against the state the "
        "earlier ops leave; the first that fails refuses the whole batch with the problem it would "
        "get alone, plus `op` (its index). Nothing of a refused batch is stored. At most "
        f"{MAX_OPS} ops (400 beyond). An update, patch or delete may carry `if_match`, the "
        "If-Match header's value for its record (412 `precondition_failed` when it does not hold).",
        "requestBody": {"required": True, "content": {JSON: {"schema": ref("Batch")}}},
        "responses": {
            "200": json_response("Every op applied, durably.", ref("BatchResponse"), "Dbsvc-Offset"),
            **errors_for(400, 401, 403, 404, 405, 409, 412, 413, 415, 422, 503),
        },
    }
    return {BATCH_PATH: {"post": operation}}, schemas


def _model_ops(model: Model) -> dict[str, Any]:
    name = model.name
    names = {"type": "string", "enum": [model.kebab, name] if model.kebab != name else [name]}
    id_ = {"oneOf": [scalar_schema(model.id_field), ref("BatchOpRef")]}
    note = "A `@ref` field may hold `{\"$op\": i}`: the id the earlier op i wrote."

    def op(kind: str, record: str | None, with_id: bool) -> dict[str, Any]:
        properties: dict[str, Any] = {"op": {"const": kind}, "model": names}
        required = ["op", "model"]
        if with_id:
            properties["id"] = id_
            required.append("id")
            properties["if_match"] = {
                "type": "string",
                "pattern": ENTITY_TAGS,  # the If-Match header's own
                "description": "If-Match for this op's record: `*` or entity tags such as `\"12\"` (the ETag a "
                "read gave), checked against the state the earlier ops leave.",
            }
        if record is not None:
            properties["record"] = {**ref(f"{name}.{record}"), "description": note}
            required.append("record")
        return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}

    return {
        "description": f"An op on {name}.",
        "oneOf": [
            op("create", "Create", False),
            op("update", "Replace", True),
            op("patch", "Patch", True),
            op("delete", None, True),
        ],
    }
