"""Builders of the read side: id and query-string parsers, index keys, the matcher.

Generated per model `m` (docs/guide/queries.md, decisions in docs/decisions.md):

- `parse_id_m(segment)`: path segment -> id. An int key parses ASCII digits (a fast path
  for the common case, `_dbsvc_rt.parse_int_id` for signs and errors); a uuid key is
  lower-cased; a str key is normalized to NFC, and `.` and `..` are refused (path
  segments, never ids). Anything else is `BadRequest` naming the segment.
- `filter_m__f(text)` per `@filter` field: query text -> index key (the form of
  `keys[f]`), raising `BadQuery`. Typed: `3`, `3.0` and `3e0` are one float key; an int
  field takes integral spellings; a datetime becomes microseconds since the epoch, so every
  offset of one instant is one key; `true`/`false` only; on a nullable field `null` -> None;
  str text is normalized to NFC, the form str values are stored in.
- `parse_sort_m(text)`: `a,-b` -> (("a", False), ("b", True)); only `@sort` fields, each once.
- `parse_list_query_m(pairs)`, `parse_get_query_m(pairs)`, `parse_feed_query_m(pairs)`:
  a list of (name, value) pairs -> `Query`. An empty list returns the shared
  `_dbsvc_rt.DEFAULT_QUERY` at once (the hot path of single reads). A repeated filter field
  ORs its keys; more than `_dbsvc_rt.MAX_FILTER_VALUES` filter values in all are refused
  (`_dbsvc_rt.filter_sets`); a repeated `sort`/`limit`/`offset`/`projection`/`as_of`/`after`
  is refused.
  `limit=0` is allowed and pages no records (`total` still counts every match); a larger
  limit is clamped to `MAX_LIMIT`.
- `parse_expand_m(text)` for a model with `@ref` fields, and the `expand` branch of the
  list and get parsers: compiler/expand.py.
- `key_m__f(value)` for float and datetime fields (every other key is the value itself);
  `match_m(record, filters, ranges=(), nulls=())`: straight-line, one `if` per filterable
  field, then the operators' loops (compiler/operators.py `operator_tests`); for a model with
  `@search` fields, a last `search=()` argument tested first (compiler/search.py);
  `passes_m(row, filters)` the filter test on a stored row.
- `parse_feed_query_m` takes the list's operators and `search` too (not `cursor`), and
  refuses `sort`, `limit`, `offset` and `cursor`: a feed has no pages.

Every `BadQuery` detail names the offending parameter or value with `repr` and lists what
would have been accepted. Imports only the schema IR, sibling helpers and the stdlib.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from dbsvc.compiler.expand import EXPAND, build_expand, expand_allowed, expand_branch, expand_result
from dbsvc.compiler.naming import DOT_SEGMENTS, DOT_SEGMENTS_WHY, RT, expected, field_list, origin, per_field, per_model
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
    gt,
    if_,
    if_chain,
    in_,
    is_none,
    is_not_none,
    item,
    name,
    not_,
    not_in,
    or_,
    raise_,
    return_,
    str_set,
    subscript,
    tuple_,
)
from dbsvc.compiler.operators import (
    MATCH_PARAMS,
    allowed_operators,
    build_bounds,
    build_decode_cursor,
    feed_paging_refusal,
    key_from_text,
    operator_branches,
    operator_finish,
    operator_refusal,
    operator_result,
    operator_state,
    operator_tests,
)
from dbsvc.compiler.search import build_search, search_branch, search_clause, search_params, search_result, search_state
from dbsvc.schema.ir import Field, FieldType, Model, Schema

_PAIRS = "pairs"
_NAME = "_dbsvc_name"
_VALUE = "_dbsvc_value"
_TEXT = "text"

# Fields whose stored value is not already its own index key.
KEYED_TYPES = frozenset({FieldType.FLOAT, FieldType.DATETIME})


def _bad_query(*parts: ast.expr) -> ast.Raise:
    return raise_(call("BadQuery", concat(*parts)))


def _quoted(variable: str) -> ast.expr:
    return call("repr", name(variable))


def _allowed(names: list[str] | tuple[str, ...]) -> ast.expr:
    """A membership target: a set display, or an empty tuple when nothing is allowed."""
    return str_set(names) if names else tuple_([])


# ---------------------------------------------------------------------------------------
# Ids, filter values, keys
# ---------------------------------------------------------------------------------------


def build_parse_id(schema: Schema, model: Model) -> ast.FunctionDef:
    field = model.id_field
    segment = name("segment")
    parsed = "_dbsvc_id"
    doc = origin(schema, field.line, f"{model.name}.{field.name}") + "\n\nPath segment -> id value; raises BadRequest."

    def refuse(reason: str) -> ast.Raise:
        return raise_(call("BadRequest", concat(const("invalid id "), call("repr", segment), const(f": {reason}"))))

    def bad(kind: str) -> ast.Raise:
        return refuse(f"{model.name} ids are {kind}")

    if field.type is FieldType.STR:
        body: Stmts = [
            if_(in_(segment, tuple_([const(s) for s in DOT_SEGMENTS])), [refuse(DOT_SEGMENTS_WHY)]),
            return_(call(f"{RT}.nfc", segment)),
        ]
    elif field.type is FieldType.INT:
        fast = and_(
            call(ast.Attribute(value=segment, attr="isdigit", ctx=ast.Load())),
            call(ast.Attribute(value=segment, attr="isascii", ctx=ast.Load())),
            compare_len(segment, 19),
        )
        body = [
            if_(fast, [return_(call("int", segment))]),
            assign(parsed, call(f"{RT}.parse_int_id", segment)),
            if_(is_none(name(parsed)), [bad("signed 64-bit integers")]),
            return_(name(parsed)),
        ]
    else:
        assert field.type is FieldType.UUID, field.type
        body = [
            assign(parsed, call(f"{RT}.parse_uuid", segment)),
            if_(is_none(name(parsed)), [bad('UUIDs such as "123e4567-e89b-12d3-a456-426614174000"')]),
            return_(name(parsed)),
        ]
    return function(per_model("parse_id", model), ["segment"], doc, body)


def compare_len(value: ast.expr, limit: int) -> ast.expr:
    """`len(value) < limit`."""
    return ast.Compare(left=call("len", value), ops=[ast.Lt()], comparators=[const(limit)])


def build_filter(schema: Schema, model: Model, field: Field) -> ast.FunctionDef:
    """`filter_m__f(text)`: one filter value -> index key, or BadQuery."""
    text = name(_TEXT)
    key = "_dbsvc_key"
    wanted = expected(field) + (" or null" if field.nullable else "")
    bad = _bad_query(const("invalid value "), _quoted(_TEXT), const(f" for filter {field.name!r}: expected {wanted}"))
    body: Stmts = []
    if field.nullable:
        body.append(if_(eq(text, const("null")), [return_(const(None))]))
    body += key_from_text(field, text, key, bad)
    doc = origin(schema, field.line, f"{model.name}.{field.name}") + "\n\nFilter text -> index key; raises BadQuery."
    return function(per_field("filter", model, field), [_TEXT], doc, body)


def key_function(model: Model, field: Field) -> ast.expr:
    """The expression naming the index key function of a field. A datetime's is the
    runtime's `datetime_key` itself (it takes None too): one Python call a key, not two,
    and one a replica recognises to key a whole column at once (storage/followrun.py)."""
    if field.type is FieldType.DATETIME:
        return name(f"{RT}.datetime_key")
    if field.type in KEYED_TYPES:
        return name(per_field("key", model, field))
    return name(f"{RT}.identity")


def build_key(schema: Schema, model: Model, field: Field) -> ast.FunctionDef:
    """`key_m__f(value)` for a float (-> float) or datetime (-> microseconds) field."""
    value = name("value")
    if field.type is FieldType.FLOAT:
        result: ast.expr = call("float", value)
    else:
        assert field.type is FieldType.DATETIME, field.type
        result = call(f"{RT}.datetime_key", value)
    body = [if_(is_none(value), [return_(const(None))]), return_(result)]
    doc = origin(schema, field.line, f"{model.name}.{field.name}") + "\n\nStored value -> index key."
    return function(per_field("key", model, field), ["value"], doc, body)


def keyed_fields(model: Model) -> list[Field]:
    """Fields that get an index key: id, unique, filter, sort and ref fields."""
    return [f for f in model.fields if f.is_id or f.unique or f.filterable or f.sortable or f.ref]


def build_match(schema: Schema, model: Model, stored_row: bool = False) -> ast.FunctionDef:
    """`match_m(record, filters, ranges=(), nulls=())`: True when the record passes every
    filter and, for a feed, every operator (`Query.ranges`, `Query.nulls`: compiler/
    operators.py `operator_tests`). With `stored_row`, `passes_m(row, filters)`: the filter
    test on the storage's form of a record, its values in declaration order (a tuple), read
    by position (storage serves operators from its indexes). (Not `match_row_m`: the
    `match` of a model named `RowM` would take that name.)"""
    keys = "_dbsvc_keys"
    subject = "row" if stored_row else "record"
    params = ["filters"] if stored_row else ["filters", *MATCH_PARAMS]
    nothing = and_(*[not_(name(p)) for p in params]) if len(params) > 1 else not_(name("filters"))
    body: Stmts = [if_(nothing, [return_(const(True))])]
    for position, field in enumerate(model.fields):
        if not field.filterable:
            continue
        stored: ast.expr = item(subject, position if stored_row else field.name)
        if field.type is FieldType.DATETIME:
            stored = call(per_field("key", model, field), stored)
        body += [
            assign(keys, call(ast.Attribute(value=name("filters"), attr="get", ctx=ast.Load()), const(field.name))),
            if_(and_(is_not_none(name(keys)), not_in(stored, name(keys))), [return_(const(False))]),
        ]
    if not stored_row:
        body += operator_tests(model)
    body.append(return_(const(True)))
    what = "every filter (OR within a field, AND across)" + ("" if stored_row else " and every operator")
    doc = origin(schema, model.line, model.name) + f"\n\nTrue when `{subject}` passes {what}."
    matcher = function(per_model("passes" if stored_row else "match", model), [subject, *params], doc, body)
    matcher.args.defaults = [tuple_([]) for _ in params[1:]]
    search_clause(model, matcher, stored_row)  # text search's `search=()` (compiler/search.py)
    return matcher


# ---------------------------------------------------------------------------------------
# Query strings
# ---------------------------------------------------------------------------------------


def build_parse_sort(schema: Schema, model: Model) -> ast.FunctionDef:
    part, field, desc, out = "_dbsvc_part", "_dbsvc_field", "_dbsvc_descending", "_dbsvc_keys"
    sortable = [f.name for f in model.fields if f.sortable]
    loop: Stmts = [
        if_(
            call(ast.Attribute(value=name(part), attr="startswith", ctx=ast.Load()), const("-")),
            [assign(field, subscript(name(part), ast.Slice(lower=const(1)))), assign(desc, const(True))],
            [assign(field, name(part)), assign(desc, const(False))],
        ),
        if_(
            not_in(name(field), _allowed(sortable)),
            [
                _bad_query(
                    const("cannot sort by "),
                    _quoted(part),
                    const(f"; sortable fields of {model.name}: {field_list(sortable)} (prefix - for descending)"),
                )
            ],
        ),
        if_(
            or_(
                in_(tuple_([name(field), const(False)]), name(out)), in_(tuple_([name(field), const(True)]), name(out))
            ),
            [_bad_query(const("sort field "), _quoted(field), const(" given twice in "), _quoted(_TEXT))],
        ),
        expr(call(ast.Attribute(value=name(out), attr="append", ctx=ast.Load()), tuple_([name(field), name(desc)]))),
    ]
    split = call(ast.Attribute(value=name(_TEXT), attr="split", ctx=ast.Load()), const(","))
    body: Stmts = [
        assign(out, ast.List(elts=[], ctx=ast.Load())),
        for_(part, split, loop),
        return_(call("tuple", name(out))),
    ]
    doc = origin(schema, model.line, model.name) + "\n\n`sort=a,-b` -> (('a', False), ('b', True)); raises BadQuery."
    return function(per_model("parse_sort", model), [_TEXT], doc, body)


def _once(variable: str, param: str) -> ast.If:
    return if_(is_not_none(name(variable)), [raise_(call("BadQuery", const(f"{param!r} given more than once")))])


def _count(variable: str, param: str, what: str) -> Stmts:
    """A non-negative integer parameter (`limit`, `offset`, `as_of`, `after`)."""
    return [
        _once(variable, param),
        assign(variable, call(f"{RT}.parse_count", name(_VALUE))),
        if_(is_none(name(variable)), [_bad_query(const(f"{param!r} must be {what}, got "), _quoted(_VALUE))]),
    ]


def _projection_branch(model: Model) -> tuple[ast.expr, Stmts]:
    names = [p.name for p in model.projections]
    listing = f"projections of {model.name}: {', '.join(names)}" if names else f"{model.name} declares no projections"
    return eq(name(_NAME), const("projection")), [
        _once("_dbsvc_projection", "projection"),
        if_(
            not_in(name(_VALUE), _allowed(names)),
            [_bad_query(const("unknown projection "), _quoted(_VALUE), const(f"; {listing}"))],
        ),
        assign("_dbsvc_projection", name(_VALUE)),
    ]


def _filter_sets() -> ast.expr:
    """`_dbsvc_rt.filter_sets(_dbsvc_filters)`: the collected lists -> frozensets, capped."""
    return call(f"{RT}.filter_sets", name("_dbsvc_filters"))


def _filter_branches(model: Model) -> list[tuple[ast.expr, Stmts]]:
    """One branch per @filter field, then one refusing the other fields by name. Values
    are appended to one list per field (linear in the number of values; a set rebuilt per
    value was quadratic) and become frozensets once, after the loop."""
    filters = "_dbsvc_filters"
    filterable = [f.name for f in model.fields if f.filterable]
    branches: list[tuple[ast.expr, Stmts]] = []
    for field in model.fields:
        if not field.filterable:
            continue
        keys = call(
            ast.Attribute(value=name(filters), attr="setdefault", ctx=ast.Load()),
            const(field.name),
            ast.List(elts=[], ctx=ast.Load()),
        )
        added = call(
            ast.Attribute(value=keys, attr="append", ctx=ast.Load()),
            call(per_field("filter", model, field), name(_VALUE)),
        )
        branches.append((eq(name(_NAME), const(field.name)), [expr(added)]))
    others = [f.name for f in model.fields if not f.filterable]
    if others:
        branches.append(
            (
                in_(name(_NAME), str_set(others)),
                [
                    _bad_query(
                        const("cannot filter on "),
                        _quoted(_NAME),
                        const(f" (not marked @filter); filterable fields of {model.name}: {field_list(filterable)}"),
                    )
                ],
            )
        )
    return branches


def _parser(
    schema: Schema,
    model: Model,
    action: str,
    doc: str,
    branches: list[tuple[ast.expr, Stmts]],
    allowed: str,
    state: Mapping[str, ast.expr],
    finish: Stmts,
    result: Mapping[str, ast.expr],
) -> ast.FunctionDef:
    """The common shape: fast path, state variables, one loop over pairs, then a Query."""
    unknown = [_bad_query(const("unknown query parameter "), _quoted(_NAME), const(f"; allowed: {allowed}"))]
    body: Stmts = [if_(not_(name(_PAIRS)), [return_(name(f"{RT}.DEFAULT_QUERY"))])]
    body += [assign(var, value) for var, value in state.items()]
    body.append(for_((_NAME, _VALUE), name(_PAIRS), if_chain(branches, unknown)))
    body += finish
    body.append(return_(call("Query", **result)))
    return function(per_model(action, model), [_PAIRS], origin(schema, model.line, model.name) + doc, body)


def _allowed_text(model: Model, params: list[str], with_filters: bool) -> str:
    filterable = [f.name for f in model.fields if f.filterable]
    head = f"filters on {', '.join(filterable)}; " if with_filters and filterable else ""
    return head + ", ".join(params)


def build_parse_list_query(schema: Schema, model: Model) -> ast.FunctionDef:
    none = const(None)
    branches = _filter_branches(model)
    branches.append(
        (
            eq(name(_NAME), const("sort")),
            [_once("_dbsvc_sort", "sort"), assign("_dbsvc_sort", call(per_model("parse_sort", model), name(_VALUE)))],
        )
    )
    branches.append((eq(name(_NAME), const("limit")), _count("_dbsvc_limit", "limit", "a non-negative integer")))
    branches.append((eq(name(_NAME), const("offset")), _count("_dbsvc_offset", "offset", "a non-negative integer")))
    branches.append(_projection_branch(model))
    branches.append(
        (eq(name(_NAME), const("as_of")), _count("_dbsvc_as_of", "as_of", "a non-negative integer watermark"))
    )
    branches.append(expand_branch(model))
    branches += operator_branches(model)
    branches += search_branch(model)
    operators = allowed_operators(model)
    params = ["sort", "limit", "offset", "cursor", "projection", "as_of", *expand_allowed(model), *search_params(model)]
    allowed = _allowed_text(model, params, True)
    if operators:
        allowed = f"{allowed}; operators {operators}"
    branches.append(operator_refusal(model, allowed))
    finish: Stmts = operator_finish(model, "_dbsvc_sort", "_dbsvc_offset")
    finish += [
        if_(is_none(name("_dbsvc_sort")), [assign("_dbsvc_sort", tuple_([]))]),
        if_(
            is_none(name("_dbsvc_limit")),
            [assign("_dbsvc_limit", name(f"{RT}.DEFAULT_LIMIT"))],
            [if_(gt(name("_dbsvc_limit"), name(f"{RT}.MAX_LIMIT")), [assign("_dbsvc_limit", name(f"{RT}.MAX_LIMIT"))])],
        ),
        if_(is_none(name("_dbsvc_offset")), [assign("_dbsvc_offset", const(0))]),
    ]
    state = {
        "_dbsvc_filters": ast.Dict(keys=[], values=[]),
        "_dbsvc_sort": none,
        "_dbsvc_limit": const(None),
        "_dbsvc_offset": const(None),
        "_dbsvc_projection": const(None),
        "_dbsvc_as_of": const(None),
        EXPAND: const(None),
        **operator_state(),
        **search_state(model),
    }
    result = {
        "filters": _filter_sets(),
        "sort": name("_dbsvc_sort"),
        "limit": name("_dbsvc_limit"),
        "offset": name("_dbsvc_offset"),
        "projection": name("_dbsvc_projection"),
        "as_of": name("_dbsvc_as_of"),
        "expand": expand_result(),
        **operator_result(),
        **search_result(model),
    }
    doc = (
        "\n\nList query string -> Query; raises BadQuery. `limit` defaults to DEFAULT_LIMIT and is"
        "\nclamped to MAX_LIMIT; `limit=0` is allowed and pages no records (total still counts)."
        "\nOperators (`f__gte`, `f__prefix`, `f__null`) and `cursor`: compiler/operators.py."
    )
    return _parser(schema, model, "parse_list_query", doc, branches, allowed, state, finish, result)


def build_parse_get_query(schema: Schema, model: Model) -> ast.FunctionDef:
    branches = [
        _projection_branch(model),
        (eq(name(_NAME), const("as_of")), _count("_dbsvc_as_of", "as_of", "a non-negative integer watermark")),
        expand_branch(model),
    ]
    state = {"_dbsvc_projection": const(None), "_dbsvc_as_of": const(None), EXPAND: const(None)}
    result = {"projection": name("_dbsvc_projection"), "as_of": name("_dbsvc_as_of"), "expand": expand_result()}
    allowed = ", ".join(["projection", "as_of", *expand_allowed(model)])
    doc = "\n\nSingle-read query string (projection, as_of, expand) -> Query; raises BadQuery."
    return _parser(schema, model, "parse_get_query", doc, branches, allowed, state, [], result)


def build_parse_feed_query(schema: Schema, model: Model) -> ast.FunctionDef:
    """The feed parser: filters, the list's operators (no `cursor`), projection, after.
    `sort`, `limit`, `offset` and `cursor` are refused with the reason."""
    branches = _filter_branches(model)
    branches.append(_projection_branch(model))
    branches.append((eq(name(_NAME), const("after")), _count("_dbsvc_after", "after", "a non-negative integer offset")))
    branches += operator_branches(model, cursor=False)
    branches += search_branch(model)
    allowed = _allowed_text(model, ["projection", "after", *search_params(model)], True)
    operators = allowed_operators(model)
    if operators:
        allowed = f"{allowed}; operators {operators}"
    branches.append(feed_paging_refusal(allowed))
    branches.append(operator_refusal(model, allowed))
    state = {
        "_dbsvc_filters": ast.Dict(keys=[], values=[]),
        "_dbsvc_projection": const(None),
        "_dbsvc_after": const(None),
        **operator_state(cursor=False),
        **search_state(model),
    }
    result = {
        "filters": _filter_sets(),
        "projection": name("_dbsvc_projection"),
        "after": name("_dbsvc_after"),
        **operator_result(cursor=False),
        **search_result(model),
    }
    doc = (
        "\n\nFeed query string (/subscribe, /live-query: filters, operators, search, projection, after)"
        " -> Query;\nraises BadQuery. A feed has no pages: sort, limit, offset and cursor are refused."
    )
    return _parser(schema, model, "parse_feed_query", doc, branches, allowed, state, [], result)


def build_queries(schema: Schema, model: Model) -> Stmts:
    """Every read-side function of one model, helpers before their callers."""
    out: Stmts = [build_parse_id(schema, model)]
    out += [build_key(schema, model, f) for f in keyed_fields(model) if f.type in KEYED_TYPES]
    out += [build_filter(schema, model, f) for f in model.fields if f.filterable]
    out += build_bounds(schema, model)
    out += build_expand(schema, model)
    out += build_search(schema, model) + build_search(schema, model, stored_row=True)
    out.append(build_match(schema, model))
    out.append(build_match(schema, model, stored_row=True))
    out.append(build_parse_sort(schema, model))
    out += build_decode_cursor(schema, model)
    out.append(build_parse_list_query(schema, model))
    out.append(build_parse_get_query(schema, model))
    out.append(build_parse_feed_query(schema, model))
    return out
