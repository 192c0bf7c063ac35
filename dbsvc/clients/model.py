"""The client model: what a generated client needs to know of a schema, language-neutral.

`client_schema(schema) -> ClientSchema` reads the compiler's IR (dbsvc/schema/ir.py) once
and answers, per model, the questions every emitter asks: the record's fields and their
kinds, which fields a create must carry, the filters, sorts and operators a list takes
(`compiler.operators.operator_params`, the list parser's own table), `search`, the
projections, the `@ref` fields `expand` takes, and the problem codes the server answers
with (dbsvc/errors.py's RequestError classes). python.py emits Python from it; a
TypeScript emitter reads the same model (docs/architecture.md, "clients").

Rules:

1. Pure: IR in, frozen dataclasses out; no I/O, no text of any language. Names a language
   must change (a keyword, a clash with the client's own names) are the emitter's business,
   except the type names, decided here once (given the names the emitter reserves) so every
   language names them alike.
2. Order is the schema's: models, fields and projections in declaration order, operators
   in the list parser's order, problems in errors.py's order (each code once), so the
   emitted text depends on the schema alone and two runs give the same bytes.
3. The fingerprint is `schema_fingerprint(describe_schema(schema))`, the one a server
   reports in `/snapshot` and `--version`: a client can check it is talking to its schema.

Imports errors, schema and the compiler's operator table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from dbsvc import errors
from dbsvc.compiler.operators import operator_params
from dbsvc.schema.describe import describe_schema, schema_fingerprint
from dbsvc.schema.ir import Field, FieldType, Model, Schema

TYPE_SUFFIXES = ("", "Create", "Replace", "Patch", "Query", "FeedQuery", "Sort", "Expand", "Api", "Reads", "Id")


@dataclass(frozen=True, slots=True)
class ClientField:
    """One field as a client sees it. `kind` is the schema type's name (`int`, `enum`, ...);
    `on_create`: "required", "optional" (a default, nullable, or filled from the token)
    or "auto" (an int id the server assigns: a create may still give one)."""

    name: str
    kind: str
    nullable: bool
    members: tuple[str, ...]
    on_create: str
    is_id: bool
    filterable: bool
    sortable: bool
    searchable: bool
    ref: str | None


@dataclass(frozen=True, slots=True)
class ClientOperator:
    """One `field__op` parameter a list and a feed take: `key` is the parameter."""

    key: str
    field: ClientField
    op: str  # gt, gte, lt, lte, prefix, null


@dataclass(frozen=True, slots=True)
class ClientProjection:
    name: str
    type_name: str  # `UserCard` for User's `card`
    fields: tuple[ClientField, ...]


@dataclass(frozen=True, slots=True)
class ClientExpand:
    """An `expand=` choice: the `@ref` field alone, or `field:projection` of its target."""

    field: str
    target: str  # the referenced model's name
    projections: tuple[str, ...]  # the target's projection names

    @property
    def choices(self) -> tuple[str, ...]:
        return (self.field, *(f"{self.field}:{p}" for p in self.projections))


@dataclass(frozen=True, slots=True)
class ClientModel:
    name: str  # the declared name: the wire's `model`
    type_name: str  # the record type's name (the declared one unless it clashes)
    kebab: str  # the route segment
    fields: tuple[ClientField, ...]
    id_field: ClientField
    projections: tuple[ClientProjection, ...]
    filters: tuple[ClientField, ...]
    sorts: tuple[ClientField, ...]
    operators: tuple[ClientOperator, ...]
    searchable: bool
    expands: tuple[ClientExpand, ...]
    line: int

    def type(self, suffix: str) -> str:
        """`UserCreate`, `UserQuery`, ...: the name of one of the model's types."""
        return f"{self.type_name}{suffix}"


@dataclass(frozen=True, slots=True)
class Problem:
    """A problem code the server answers with, its status (the first class's) and a
    class name for it (`unique_violation` -> `UniqueViolationError`)."""

    code: str
    status: int
    class_name: str


@dataclass(frozen=True, slots=True)
class ClientSchema:
    source: str  # the schema file's name, as the header shows it
    fingerprint: str
    models: tuple[ClientModel, ...]
    problems: tuple[Problem, ...]


def client_schema(schema: Schema, reserved: frozenset[str] = frozenset()) -> ClientSchema:
    """The client model of `schema` (module docstring). `reserved`: the names the client
    defines besides the schema's (its emitter knows them); a model whose types would be
    named like one, or like another model, is given the type name `<Name>Record` (its
    route and wire name stay)."""
    fingerprint = schema_fingerprint(describe_schema(schema))
    models = tuple(_client_model(schema, model, reserved) for model in schema.models)
    return ClientSchema(os.path.basename(schema.path) or "<schema>", fingerprint, models, problems())


def problems() -> tuple[Problem, ...]:
    """Every code of errors.RequestError's subclasses, in the order errors.py declares them."""
    found: dict[str, Problem] = {}
    todo: list[type[errors.RequestError]] = [errors.RequestError]
    while todo:
        cls = todo.pop(0)
        todo.extend(cls.__subclasses__())
        if cls.code and cls.code not in found:
            name = "".join(part.capitalize() for part in cls.code.split("_")) + "Error"
            found[cls.code] = Problem(cls.code, cls.status, name)
    return tuple(found.values())


def _type_name(model: Model, taken: frozenset[str]) -> str:
    """The model's type name: its own, unless one of the names made from it (its types,
    its projections') is taken (reserved, or another model's name): then `<Name>Record`."""
    made = [f"{model.name}{suffix}" for suffix in TYPE_SUFFIXES]
    made += [_projection_type(model.name, p.name) for p in model.projections]
    return f"{model.name}Record" if any(name in taken for name in made) else model.name


def _projection_type(type_name: str, projection: str) -> str:
    """`UserCard` for User's `card`; `UserCreateProjection` for a projection named `create`,
    which would be the model's own create type."""
    name = f"{type_name}{_camel(projection)}"
    return f"{name}Projection" if name in {f"{type_name}{suffix}" for suffix in TYPE_SUFFIXES} else name


def _client_field(field: Field) -> ClientField:
    if field.is_id and field.type is FieldType.INT:
        on_create = "auto"
    elif field.required and field.token_default is None:
        on_create = "required"
    else:
        on_create = "optional"
    return ClientField(
        name=field.name,
        kind=field.type.value,
        nullable=field.nullable,
        members=field.enum_members,
        on_create=on_create,
        is_id=field.is_id,
        filterable=field.filterable,
        sortable=field.sortable,
        searchable=field.searchable,
        ref=field.ref,
    )


def _client_model(schema: Schema, model: Model, reserved: frozenset[str]) -> ClientModel:
    fields = tuple(_client_field(f) for f in model.fields)
    by_name = {f.name: f for f in fields}
    others = frozenset(m.name for m in schema.models if m.name != model.name)
    type_name = _type_name(model, reserved | others)
    projections = tuple(
        ClientProjection(p.name, _projection_type(type_name, p.name), tuple(by_name[n] for n in p.fields))
        for p in model.projections
    )
    expands = []
    for f in fields:
        target = schema.model(f.ref) if f.ref else None
        if target is not None:
            expands.append(ClientExpand(f.name, target.name, tuple(p.name for p in target.projections)))
    return ClientModel(
        name=model.name,
        type_name=type_name,
        kebab=model.kebab,
        fields=fields,
        id_field=by_name[model.id_field.name],
        projections=projections,
        filters=tuple(f for f in fields if f.filterable),
        sorts=tuple(f for f in fields if f.sortable),
        operators=tuple(ClientOperator(key, by_name[f.name], op) for key, f, op in operator_params(model)),
        searchable=any(f.searchable for f in fields),
        expands=tuple(expands),
        line=model.line,
    )


def _camel(name: str) -> str:
    """`card` -> `Card`, `short_list` -> `ShortList`."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)
