"""Builders of `expand=`: embedded references on a get and a list (issue 34 item 4).

`expand=FIELD[:PROJECTION][,FIELD[:PROJECTION]...]` names `@ref` fields of the model whose
referenced records a read embeds under `_expand` (dbsvc/expand.py does the embedding;
docs/guide/queries.md, "Embedded references"; docs/decisions.md, "expand"). Generated per
model `m` with at least one `@ref` field:

- `parse_expand_m(text)`: the parameter's text -> `((field, projection or None), ...)` in the
  order asked. One straight-line branch per `@ref` field; a projection is checked against
  the referenced model's declared projections. Refused with `BadQuery`: a field that is not
  a `@ref` field (the detail lists the ones there are), an unknown projection (the detail
  lists the referenced model's), a field named twice, an empty part (`expand=` or `a,,b`).

A model without `@ref` fields gets no parser: its list and get parsers refuse `expand` with
a detail saying so (`expand_branch`). The hooks in queries.py are the branch (`expand_branch`),
the parser state (`EXPAND`, starting as None) and the Query's `expand` argument
(`expand_result`); `expand_params` is what OpenAPI lists (openapi_parts.py).

At most one level: the embedded records are never expanded themselves, so there is no
syntax for a path (`a.b`) and a `.` in a part is an unknown field like any other.

Imports the schema IR, sibling helpers and the stdlib.
"""

from __future__ import annotations

import ast

from dbsvc.compiler.naming import field_list, origin, per_model
from dbsvc.compiler.nodes import (
    Stmts,
    and_,
    assign,
    call,
    concat,
    const,
    eq,
    expr,
    for_,
    function,
    if_,
    if_chain,
    in_,
    is_not_none,
    name,
    not_in,
    raise_,
    return_,
    str_set,
    tuple_,
)
from dbsvc.schema.ir import Field, Model, Schema

EXPAND = "_dbsvc_expand"  # the list and get parsers' state variable
_TEXT, _PART, _FIELD, _COLON, _PROJECTION = "text", "_dbsvc_part", "_dbsvc_field", "_dbsvc_colon", "_dbsvc_projection"
_OUT, _SEEN = "_dbsvc_out", "_dbsvc_seen"


def ref_fields(model: Model) -> list[Field]:
    return [f for f in model.fields if f.ref]


def _referenced(schema: Schema, field: Field) -> Model:
    for model in schema.models:
        if model.name == field.ref:
            return model
    raise AssertionError(f"@ref({field.ref}) names no model; the checker must refuse it")


def expand_params(schema: Schema, model: Model) -> list[str]:
    """Every value one part of `expand` may take: `f` and `f:projection` per `@ref` field."""
    out: list[str] = []
    for field in ref_fields(model):
        out.append(field.name)
        out += [f"{field.name}:{p.name}" for p in _referenced(schema, field).projections]
    return out


def _unpack(targets: tuple[str, ...], value: ast.expr) -> ast.Assign:
    """`a, b, c = value`."""
    store = ast.Tuple(elts=[ast.Name(id=t, ctx=ast.Store()) for t in targets], ctx=ast.Store())
    return ast.Assign(targets=[store], value=value, lineno=0)


def _bad(*parts: ast.expr) -> ast.Raise:
    return raise_(call("BadQuery", concat(*parts)))


def _method(variable: str, method: str, *args: ast.expr) -> ast.expr:
    return call(ast.Attribute(value=name(variable), attr=method, ctx=ast.Load()), *args)


def _field_branch(schema: Schema, model: Model, field: Field) -> tuple[ast.expr, Stmts]:
    """`f` or `f:projection`: the projection must be one the referenced model declares."""
    parent = _referenced(schema, field)
    names = [p.name for p in parent.projections]
    listing = f"projections of {parent.name}: {', '.join(names)}" if names else f"{parent.name} declares no projections"
    unknown = _bad(
        const("unknown projection "),
        call("repr", name(_PROJECTION)),
        const(" in expand "),
        call("repr", name(_PART)),
        const(f"; {field.name} references {parent.name}, {listing}"),
    )
    test = and_(name(_COLON), not_in(name(_PROJECTION), str_set(names))) if names else name(_COLON)
    return eq(name(_FIELD), const(field.name)), [if_(test, [unknown])]


def build_parse_expand(schema: Schema, model: Model) -> ast.FunctionDef:
    refs = [f.name for f in ref_fields(model)]
    refused = _bad(
        const("cannot expand "),
        call("repr", name(_FIELD)),
        const(f"; @ref fields of {model.name}: {field_list(refs)} (each once, as field or field:projection)"),
    )
    twice = _bad(const("expand names "), call("repr", name(_FIELD)), const(" twice in "), call("repr", name(_TEXT)))
    chosen = ast.IfExp(test=name(_COLON), body=name(_PROJECTION), orelse=const(None))
    loop: Stmts = [
        _unpack((_FIELD, _COLON, _PROJECTION), _method(_PART, "partition", const(":"))),
        *if_chain([_field_branch(schema, model, f) for f in ref_fields(model)], [refused]),
        if_(in_(name(_FIELD), name(_SEEN)), [twice]),
        expr(_method(_SEEN, "append", name(_FIELD))),
        expr(_method(_OUT, "append", tuple_([name(_FIELD), chosen]))),
    ]
    body: Stmts = [
        assign(_OUT, ast.List(elts=[], ctx=ast.Load())),
        assign(_SEEN, ast.List(elts=[], ctx=ast.Load())),
        for_(_PART, _method(_TEXT, "split", const(",")), loop),
        return_(call("tuple", name(_OUT))),
    ]
    doc = (
        origin(schema, model.line, model.name)
        + "\n\n`expand=f[:projection],...` -> ((field, projection or None), ...); raises BadQuery."
    )
    return function(per_model("parse_expand", model), [_TEXT], doc, body)


def build_expand(schema: Schema, model: Model) -> Stmts:
    """The model's expand parser, or nothing for a model without `@ref` fields."""
    return [build_parse_expand(schema, model)] if ref_fields(model) else []


def expand_branch(model: Model) -> tuple[ast.expr, Stmts]:
    """The `expand` branch of a list or get parser: given once, parsed by `parse_expand_m`;
    on a model without `@ref` fields, a refusal saying there is nothing to expand."""
    test = eq(name("_dbsvc_name"), const("expand"))
    if not ref_fields(model):
        detail = f": {model.name} has no @ref fields (expand embeds the record a @ref field points to)"
        return test, [_bad(const("cannot expand "), call("repr", name("_dbsvc_value")), const(detail))]
    once = raise_(call("BadQuery", const("'expand' given more than once")))
    return test, [
        if_(is_not_none(name(EXPAND)), [once]),
        assign(EXPAND, call(per_model("parse_expand", model), name("_dbsvc_value"))),
    ]


def expand_result() -> ast.expr:
    """The Query's `expand`: the parsed pairs, or () when not asked."""
    return ast.IfExp(test=is_not_none(name(EXPAND)), body=name(EXPAND), orelse=tuple_([]))


def expand_allowed(model: Model) -> list[str]:
    """`expand` in a parser's list of allowed parameters, where the model has `@ref` fields."""
    return ["expand"] if ref_fields(model) else []
