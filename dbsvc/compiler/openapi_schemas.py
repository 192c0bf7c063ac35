"""JSON Schemas of the OpenAPI document: fields, records, bodies, projections, problems.

Split from `openapi.py` (which assembles paths and operations) so each stays small. Pure:
imports only the schema IR, the error codes and the stdlib.
"""

from __future__ import annotations

from typing import Any

from dbsvc import errors as _errors
from dbsvc.schema.ir import DefaultKind, Field, FieldType, Model

MAX_LIMIT = 1000  # mirrors dbsvc.runtime; the compiler layer must not import runtime

# Every RequestError the service answers, in the order docs/guide/errors.md lists the codes.
_ERROR_CLASSES: tuple[type[_errors.RequestError], ...] = (
    _errors.BadRequest,
    _errors.BadQuery,
    _errors.NotFound,
    _errors.MethodNotAllowed,
    _errors.UniqueViolation,
    _errors.ForeignKeyViolation,
    _errors.Referenced,
    _errors.ConstraintViolation,
    _errors.Unauthorized,
    _errors.Forbidden,
    _errors.PayloadTooLarge,
    _errors.UnsupportedMediaType,
    _errors.ReplicationDisabled,
    _errors.OffsetGone,
    _errors.OffsetOutOfRange,
    _errors.PreconditionFailed,
    _errors.Unavailable,
    _errors.InternalError,
    _errors.ReadOnlyReplica,
    _errors.UpgradeRequired,
)
ERROR_CODES: tuple[str, ...] = tuple(dict.fromkeys(cls.code for cls in _ERROR_CLASSES))


def ref(name: str, kind: str = "schemas") -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


# ---------------------------------------------------------------- field and record schemas

_SCALARS: dict[FieldType, dict[str, Any]] = {
    # The validators and id parsers refuse values outside int64 (422 / 400); say so in bounds
    # a generator honours, not only in the `format` hint.
    FieldType.INT: {"type": "integer", "format": "int64", "minimum": -(2**63), "maximum": 2**63 - 1},
    FieldType.FLOAT: {"type": "number"},
    FieldType.STR: {"type": "string"},
    FieldType.BOOL: {"type": "boolean"},
    FieldType.JSON: {},
    FieldType.DATETIME: {"type": "string", "format": "date-time"},
    FieldType.DATE: {"type": "string", "format": "date"},
    FieldType.UUID: {"type": "string", "format": "uuid"},
}
# @min/@max bound values of numbers and lengths of strings.
_BOUNDS: dict[FieldType, tuple[str, str]] = {
    FieldType.INT: ("minimum", "maximum"),
    FieldType.FLOAT: ("minimum", "maximum"),
    FieldType.STR: ("minLength", "maxLength"),
}


def scalar_schema(f: Field) -> dict[str, Any]:
    """The JSON Schema of a field's non-null values, without bounds or defaults."""
    if f.type is FieldType.ENUM:
        return {"type": "string", "enum": list(f.enum_members)}
    return dict(_SCALARS[f.type])


def nullable(s: dict[str, Any]) -> dict[str, Any]:
    """Allow null: `type: [x, "null"]`, and null among the members of an enum."""
    s = dict(s)
    if "type" in s:
        s["type"] = [s["type"], "null"]
    if "enum" in s:
        s["enum"] = [*s["enum"], None]
    return s


def field_schema(f: Field, *, with_default: bool) -> dict[str, Any]:
    if f.type is FieldType.JSON:
        s: dict[str, Any] = {} if f.nullable else {"not": {"type": "null"}}
    else:
        s = scalar_schema(f)
        if f.nullable:
            s = nullable(s)
    if f.type in _BOUNDS:
        low, high = _BOUNDS[f.type]
        as_type = int if f.type is FieldType.STR else (lambda v: v)
        if f.min is not None:
            s[low] = as_type(f.min)
        if f.max is not None:
            s[high] = as_type(f.max)
    notes = field_notes(f)
    if with_default and f.type is FieldType.INT:
        # JSON Schema counts 3.0 as an integer; the body validators check the JSON type exactly.
        notes.append("a JSON integer, written without a fraction or exponent (`3.0` is 422)")
    if with_default and f.default is not None:
        if f.default.kind is DefaultKind.VALUE:
            s["default"] = f.default.value
        elif f.default.kind is DefaultKind.NOW:
            notes.append("defaults to the current instant (UTC)")
        else:
            notes.append("defaults to a new random uuid")
    if notes:
        s["description"] = "; ".join(notes) + "."
    return s


def field_notes(f: Field) -> list[str]:
    notes: list[str] = []
    if f.is_id:
        notes.append("primary key" + (", assigned when omitted" if not f.required else ""))
    if f.type is FieldType.JSON:
        notes.append("any JSON value" + ("" if f.nullable else " except null"))
    if f.type is FieldType.DATETIME:
        notes.append("RFC 3339; stored and returned in UTC with `Z`")
    if f.type is FieldType.UUID:
        notes.append("any letter case accepted, returned in lower case")
    if f.unique:
        notes.append("unique")
    if f.ref:
        notes.append(f"references `{f.ref}` by its id")
    if f.token_default:
        claim = ".".join(f.token_default)
        missing = "null" if f.nullable else "403 `forbidden`"
        notes.append(
            f"set from the token's claim `{claim}` on create (`@default(token.{claim})`): omit it or send the "
            f"same value, another is 403 `forbidden`; a token without the claim gives {missing}"
        )
    return notes


def object_schema(properties: dict[str, Any], required: list[str], description: str) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "object", "description": description, "properties": properties}
    if required:
        s["required"] = required
    s["additionalProperties"] = False
    return s


def add_model_schemas(schemas: dict[str, Any], model: Model) -> None:
    name = model.name
    stored = {f.name: field_schema(f, with_default=False) for f in model.fields}
    body = {f.name: field_schema(f, with_default=True) for f in model.fields}
    create_required = [f.name for f in model.fields if f.required and not f.token_default]
    replace_required = [f.name for f in model.fields if f.required and not f.is_id]
    id_name = model.id_field.name
    schemas[name] = object_schema(
        stored, [f.name for f in model.fields], f"A stored `{name}` record; fields in declaration order."
    )
    schemas[f"{name}.Create"] = object_schema(
        body,
        create_required,
        f"Body of POST /api/{model.kebab}. Unknown fields, a missing required field and an "
        "explicit null for a non-nullable field are 422; an integer is accepted for a float.",
    )
    schemas[f"{name}.Replace"] = object_schema(
        body,
        replace_required,
        f"Body of PUT /api/{model.kebab}/{{id}}: the whole record. Omitted nullable fields become "
        "null, omitted fields with a default take it; the id comes from the path, and a body "
        "id that differs from it is 422.",
    )
    schemas[f"{name}.Patch"] = object_schema(
        body,
        [],
        f"Body of PATCH /api/{model.kebab}/{{id}}: the top-level fields to change (a json field is replaced whole).",
    )
    for p in model.projections:
        props = {fname: stored[fname] for fname in p.fields}
        schemas[f"{name}.projection.{p.name}"] = object_schema(
            props, list(p.fields), f"Projection `{p.name}` of `{name}`."
        )
    schemas[f"{name}.Page"] = {
        "type": "object",
        "description": f"One page of `{name}` records (projected when `projection` is given).",
        "properties": {
            "data": {"type": "array", "items": record_or_projection(model, expanded=True)},
            "total": {"type": "integer", "minimum": 0, "description": "Matches before pagination."},
            "limit": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_LIMIT,
                "description": "Page size applied (after clamping).",
            },
            "offset": {"type": "integer", "minimum": 0, "description": "Offset applied."},
        },
        "required": ["data", "total", "limit", "offset"],
        "additionalProperties": False,
    }
    schemas[f"{name}.Created"] = object_schema(
        {"id": stored[id_name]}, ["id"], f"Answer of POST /api/{model.kebab}: the id of the created record."
    )


def _plain_names(model: Model) -> list[str]:
    """The schemas a record of `model` may take without `_expand`: whole, or projected."""
    return [model.name] + [f"{model.name}.projection.{p.name}" for p in model.projections]


def record_or_projection(model: Model, expanded: bool = False) -> dict[str, Any]:
    """A record of `model`: whole or projected and, with `expanded` (a get or a list answers
    it; a feed never does) for a model with `@ref` fields, each of those with `_expand`
    (`add_expand_schemas`)."""
    names = _plain_names(model)
    if expanded and any(f.ref for f in model.fields):
        names += [f"{n}.Expanded" for n in names]
    return ref(names[0]) if len(names) == 1 else {"anyOf": [ref(n) for n in names]}


def add_expand_schemas(schemas: dict[str, Any], models: tuple[Model, ...], model: Model) -> None:
    """`<Model>._expand` (one optional entry per `@ref` field: the referenced record, whole or
    projected, never expanded itself) and a `.Expanded` twin of each plain record schema,
    the same properties plus `_expand`, last (dbsvc/expand.py). After `add_model_schemas`."""
    refs = [f for f in model.fields if f.ref]
    if not refs:
        return
    by_name = {m.name: m for m in models}
    entries: dict[str, Any] = {}
    for f in refs:
        names = _plain_names(by_name[str(f.ref)])
        entry = ref(names[0]) if len(names) == 1 else {"anyOf": [ref(n) for n in names]}
        entries[f.name] = {**entry, "description": f"The `{f.ref}` record `{f.name}` points to."}
    schemas[f"{model.name}._expand"] = object_schema(
        entries,
        [],
        "The records the `@ref` fields named by `expand` point to, in the order asked. An entry is "
        "absent when its reference is null or names a record the token may not read.",
    )
    for name in _plain_names(model):
        plain = schemas[name]
        schemas[f"{name}.Expanded"] = {
            **plain,
            "description": f"{plain['description']} With `_expand` (`expand=`).",
            "properties": {**plain["properties"], "_expand": ref(f"{model.name}._expand")},
            "required": [*plain.get("required", []), "_expand"],
        }


# ---------------------------------------------------------------- parameters


def problem_schemas() -> dict[str, Any]:
    return {
        "Problem": {
            "type": "object",
            "description": "RFC 9457 problem details; `code` is the stable machine-readable reason.",
            "properties": {
                "type": {"type": "string", "default": "about:blank"},
                "title": {"type": "string"},
                "status": {"type": "integer", "minimum": 400, "maximum": 599},
                "code": {"type": "string", "enum": list(ERROR_CODES)},
                "detail": {"type": "string"},
                "request_id": {"type": "string", "description": "Same as `X-Request-Id`."},
                "errors": {"type": "array", "items": ref("FieldError"), "description": "422 only: every violation."},
                # RFC 9457 §3.2 extension members some errors add.
                "field": {
                    "type": "string",
                    "description": "409 `unique_violation` and "
                    "`foreign_key_violation`: the field whose value conflicts.",
                },
                "count": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "409 `referenced`: how many child records still reference the record.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "413: the limit passed (SERVICE_MAX_BODY or the record size, in bytes; "
                    "a batch's ops, in ops).",
                },
                "head": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "400 `offset_out_of_range`: the current head offset.",
                },
                "op": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "`POST /batch`: the index of the op that refused the batch.",
                },
                "oldest": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "410 `offset_gone`: the oldest offset still usable as `after`.",
                },
            },
            "required": ["type", "title", "status", "code", "detail", "request_id"],
        },
        "FieldError": {
            "type": "object",
            "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            "required": ["field", "message"],
            "additionalProperties": False,
        },
    }


# ---------------------------------------------------------------- paths
