"""The message side of the AsyncAPI document: component schemas and messages of the events.

`asyncapi.py` assembles the document; this module builds what flows on its channels: the
stored record and its projections (as the OpenAPI document has them), the row events
`<Model>.Insert`, `.Update`, `.Delete` and `.Link` of the change feed, and the live-query
deltas `<Model>.LiveInit`, `.LiveAdded`, `.LiveUpdated`, `.LiveRemoved` with their union
`<Model>.LiveDelta`, each with a compact wire sample in its description.

Invariants (asyncapi.py's hold here too): pure, reading only the IR, the JSON-Schema builders
of `openapi_schemas.py` and the stdlib; deterministic (declaration order); `put` refuses a
component built twice, so two builders can never silently overwrite one another.
"""

from __future__ import annotations

from typing import Any

from dbsvc.compiler.openapi_schemas import add_model_schemas, object_schema, record_or_projection, ref, scalar_schema
from dbsvc.schema.ir import Field, FieldType, Model, Schema

JSON = "application/json"

OFFSET = {
    "type": "integer",
    "minimum": 1,
    "description": "Global offset of the row event (1, 2, ...; gap-free, never reused).",
}
WATERMARK = {
    "type": "integer",
    "minimum": 0,
    "description": "The model's watermark (row count of the epoch) after this row.",
}
BATCH = {
    "type": "object",
    "description": "Only on a frame of a batch of two or more rows (`POST /batch`): the offsets of "
    "the batch's first and last rows, and `end` on the last frame this socket gets from the batch "
    "(apply the batch's frames then: consistent again as of `last`).",
    "properties": {
        "first": {"type": "integer", "minimum": 1},
        "last": {"type": "integer", "minimum": 1},
        "end": {"const": True},
    },
    "required": ["first", "last"],
    "additionalProperties": False,
}


def put(mapping: dict[str, Any], key: str, value: Any) -> None:
    assert key not in mapping, f"asyncapi component {key!r} built twice"
    mapping[key] = value


def add_record_schemas(schemas: dict[str, Any], model: Model) -> None:
    """The stored record and its projections, exactly as the OpenAPI document has them."""
    rest: dict[str, Any] = {}
    add_model_schemas(rest, model)
    put(schemas, model.name, rest[model.name])
    for p in model.projections:
        key = f"{model.name}.projection.{p.name}"
        put(schemas, key, rest[key])


def _const(value: str, description: str | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "string", "const": value}
    if description:
        s["description"] = description
    return s


def _id(model: Model, description: str) -> dict[str, Any]:
    return {**scalar_schema(model.id_field), "description": description}


def _record(model: Model, description: str) -> dict[str, Any]:
    return {**record_or_projection(model), "description": description}


_PROJECTED = " With `projection`, only that projection's fields."


def _event_schema(model: Model, kind: str) -> dict[str, Any]:
    props: dict[str, Any] = {
        "kind": _const(kind),
        "model": _const(model.name),
        "offset": OFFSET,
        "watermark": WATERMARK,
        "id": _id(model, f"The `{model.id_field.name}` of the `{model.name}` record."),
    }
    if kind == "delete":
        props["record"] = _record(model, "The last record, as it was before the delete." + _PROJECTED)
    elif kind == "update":
        props["record"] = _record(model, "The record after the update." + _PROJECTED)
        props["previous"] = _record(model, "The record before the update." + _PROJECTED)
    else:
        props["record"] = _record(model, "The new record." + _PROJECTED)
    verb = {"insert": "POST", "update": "PUT or PATCH", "delete": "DELETE"}[kind]
    required = list(props)
    props["batch"] = BATCH
    return object_schema(props, required, f"A `{model.name}` {kind} ({verb}, or an op of `POST /batch`).")


def link_sources(schema: Schema, model: Model) -> list[tuple[Model, Field]]:
    """Every (child model, field) whose `@ref` names `model`, in declaration order."""
    return [(child, f) for child in schema.models for f in child.fields if f.ref == model.name]


def _link_schema(model: Model, sources: list[tuple[Model, Field]]) -> dict[str, Any]:
    variants = []
    for child, f in sources:
        props = {
            "kind": _const("link"),
            "model": _const(model.name),
            "id": _id(model, f"The `{model.id_field.name}` of the parent `{model.name}`."),
            "child_model": _const(child.name),
            "child_id": _id(child, f"The `{child.id_field.name}` of the `{child.name}` record."),
            "field": _const(f.name),
            "linked": {
                "type": "boolean",
                "description": "true: the child now references the "
                "parent (insert, ref change); false: it no longer does (ref change, delete).",
            },
            "offset": {**OFFSET, "description": "Offset of the row event that caused the link."},
        }
        required = list(props)
        props["batch"] = BATCH
        variants.append(
            object_schema(props, required, f"`{child.name}.{f.name}` started or stopped referencing a `{model.name}`.")
        )
    return {
        "description": f"A child record started or stopped referencing a `{model.name}`. "
        "Links are derived from row events, never stored or replicated; they carry no "
        "watermark.",
        "oneOf": variants,
    }


def message(
    name: str, title: str, payload: dict[str, Any], description: str, content_type: str = JSON
) -> dict[str, Any]:
    return {"name": name, "title": title, "contentType": content_type, "description": description, "payload": payload}


def add_event_components(schemas: dict[str, Any], messages: dict[str, Any], schema: Schema, model: Model) -> None:
    name = model.name
    for kind in ("insert", "update", "delete"):
        key = f"{name}.{kind.capitalize()}"
        put(schemas, key, _event_schema(model, kind))
        put(
            messages,
            key,
            message(
                f"{name}{kind.capitalize()}",
                f"{name} {kind}",
                ref(key),
                f"One text frame, compact JSON: `{_event_example(model, kind)}`.",
            ),
        )
    sources = link_sources(schema, model)
    if sources:
        key = f"{name}.Link"
        pairs = ", ".join(f"`{child.name}.{f.name}`" for child, f in sources)
        put(schemas, key, _link_schema(model, sources))
        put(
            messages,
            key,
            message(
                f"{name}Link",
                f"{name} link",
                ref(key),
                f"One text frame, compact JSON: a {pairs} started or stopped referencing the "
                f"`{name}` `id`: `{_link_example(model, *sources[0])}`. Its offset is that of the "
                "row event that caused it (an insert, a ref change or a delete of the child).",
            ),
        )


# Example ids of each key type, for the wire samples in the descriptions.
_EXAMPLE_IDS: dict[FieldType, tuple[str, str]] = {
    FieldType.INT: ("7", "9"),
    FieldType.STR: ('"k7"', '"k9"'),
    FieldType.UUID: ('"0b6e2c1e-7f3a-4c55-9d2e-6a1b8c0d4e07"', '"5d0f9a2b-1c3e-4f6a-8b7c-9d0e1f2a3b09"'),
}


def _event_example(model: Model, kind: str) -> str:
    text = (
        f'{{"kind":"{kind}","model":"{model.name}","offset":41,"watermark":12,'
        f'"id":{_EXAMPLE_IDS[model.id_field.type][0]},"record":{{...}}'
    )
    return text + (',"previous":{...}}' if kind == "update" else "}")


def _link_example(model: Model, child: Model, f: Field) -> str:
    return (
        f'{{"kind":"link","model":"{model.name}","id":{_EXAMPLE_IDS[model.id_field.type][0]},'
        f'"child_model":"{child.name}","child_id":{_EXAMPLE_IDS[child.id_field.type][1]},'
        f'"field":"{f.name}","linked":true,"offset":41}}'
    )


_LIVE = ("Init", "Added", "Updated", "Removed")


def _live_schema(model: Model, kind: str) -> dict[str, Any]:
    props: dict[str, Any] = {"type": _const(kind), "model": _const(model.name)}
    if kind == "Init":
        props["records"] = {
            "type": "array",
            "items": record_or_projection(model),
            "description": "A slice of the result set, in id order: the "
            "records of every `Init` of one socket together are the result set." + _PROJECTED,
        }
        props["watermark"] = {**WATERMARK, "description": "The model's watermark the result set was read at."}
        props["offset"] = {
            "type": "integer",
            "minimum": 0,
            "description": "The global offset "
            "the result set was read at (0 before any event); later deltas are "
            "after it. The same in every slice.",
        }
        props["complete"] = {
            "type": "boolean",
            "description": "True on the last slice: the "
            "initial result set is complete and deltas follow (RethinkDB's "
            "`state: ready`, Firestore's target-current).",
        }
        return object_schema(
            props,
            list(props),
            f"First frames of a `{model.name}` live query "
            "(not sent when resumed with `after`): the result set in slices of "
            "at most about 64 KiB of records each, the last one `complete`.",
        )
    props["offset"] = OFFSET
    props["watermark"] = WATERMARK
    if kind == "Removed":
        props["id"] = _id(model, "The id of the record that left the result set.")
        what = "a record left the result set (deleted, or changed to stop matching)"
    else:
        props["record"] = _record(model, "The record as it is now." + _PROJECTED)
        what = (
            "a record entered the result set (inserted, or changed to match)"
            if kind == "Added"
            else "a record inside the result set changed and still matches"
        )
    required = list(props)
    props["batch"] = BATCH
    return object_schema(props, required, f"`{model.name}` live delta: {what}.")


def add_live_components(schemas: dict[str, Any], messages: dict[str, Any], model: Model) -> None:
    name = model.name
    for kind in _LIVE:
        put(schemas, f"{name}.Live{kind}", _live_schema(model, kind))
    put(
        schemas,
        f"{name}.LiveDelta",
        {
            "description": f"One frame of a `{name}` live query, told apart by `type`.",
            "oneOf": [ref(f"{name}.Live{kind}") for kind in _LIVE],
        },
    )
    put(
        messages,
        f"{name}.LiveDelta",
        message(
            f"{name}LiveDelta",
            f"{name} live delta",
            ref(f"{name}.LiveDelta"),
            "One text frame, compact JSON: first the result set in one or more slices "
            f'`{{"type":"Init","model":"{name}","records":[...],"watermark":12,"offset":41,"complete":false}}`, '
            'the last one `"complete":true`, then '
            f'`{{"type":"Added","model":"{name}","offset":42,"watermark":13,"record":{{...}}}}`, '
            "`Updated` (`record`) and `Removed` (`id` instead of `record`) as records enter, "
            "change inside, or leave the result set.",
        ),
    )
