"""Builders of a list parser's operators: `field__op` parameters, `cursor`, their parsers.

The one place that knows which parameters a list accepts beyond the plain filters and
`sort`/`limit`/`offset`/`projection`/`as_of` (docs/decisions.md, "Query operators"):

- `operator_params(model)`: every `(parameter, field, operator)` the model declares:
  `f__gt`, `f__gte`, `f__lt`, `f__lte` on each `@sort` field, `f__prefix` on each `str @sort`
  field, `f__null` on each nullable `@filter` or `@sort` field. The generated parser's branches
  and the OpenAPI parameters (openapi_parts.py) are both made from it.
- `bound_m__f(text, param)` per `@sort` field: a bound's text -> the field's index key,
  typed like a filter value (`3` is the float key 3.0; a datetime in any offset is its
  microseconds; str text in NFC), never null; BadQuery names the parameter and what was expected.
- The parser's pieces (`operator_branches`, `operator_state`, `operator_finish`,
  `operator_result`, `operator_refusal`): bounds are collected as (field, op, key) and become
  `Query.ranges` through `_dbsvc_ops.ranges`; `__null` is given once per field; `cursor` is
  decoded after the loop against the parsed sort (`decode_cursor_m(text, sort)`, generated
  per model by `build_decode_cursor` over `_dbsvc_cursors.decode_cursor`, and
  `CompiledModel.decode_cursor`) and is refused beside `offset`. A `__` name the branches did not take is refused by
  `_dbsvc_ops.operator_problem`, which says what the field does take.
- Feeds (`/subscribe`, `/live-query`): the feed parser takes the same operator branches and
  refusal, without `cursor`; `feed_paging_refusal` refuses `sort`, `limit`, `offset` and
  `cursor` with the reason (a feed has no pages).
- The matcher (`operator_tests`): the part of `match_m(record, filters, ranges=(),
  nulls=())` that tests a record against `Query.ranges` and `Query.nulls`, what a feed runs
  on every event (realtime/feeds.py); storage serves the same conditions from its indexes.

Generated code calls `dbsvc.operators` as `_dbsvc_ops` and `dbsvc.cursors` as
`_dbsvc_cursors`. Imports the schema IR, sibling helpers and the stdlib.
"""

from __future__ import annotations

import ast

from dbsvc.compiler.naming import RT, expected, origin, per_field, per_model
from dbsvc.compiler.nodes import (
    Stmts,
    and_,
    assign,
    call,
    concat,
    const,
    dict_,
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
    literal,
    lt,
    name,
    not_,
    not_in,
    or_,
    raise_,
    return_,
    set_item,
    str_set,
    tuple_,
)
from dbsvc.schema.ir import Field, FieldType, Model, Schema

OPS = "_dbsvc_ops"  # the generated module's `import dbsvc.operators as _dbsvc_ops`
CURSORS = "_dbsvc_cursors"  # the generated module's `import dbsvc.cursors as _dbsvc_cursors`
RANGE_OPS = ("gt", "gte", "lt", "lte")
_BOUNDS, _NULLS, _CURSOR = "_dbsvc_bounds", "_dbsvc_nulls", "_dbsvc_cursor"
_NAME, _VALUE = "_dbsvc_name", "_dbsvc_value"

# The letter of a field's index key kind in a cursor (cursors.decode_cursor).
_KINDS = {FieldType.INT: "i", FieldType.DATETIME: "i", FieldType.FLOAT: "f", FieldType.BOOL: "b"}


def operator_params(model: Model) -> list[tuple[str, Field, str]]:
    """(parameter, field, operator) of every operator parameter the model declares."""
    out: list[tuple[str, Field, str]] = []
    for field in model.fields:
        if field.sortable:
            out += [(f"{field.name}__{op}", field, op) for op in RANGE_OPS]
            if field.type is FieldType.STR:
                out.append((f"{field.name}__prefix", field, "prefix"))
        if field.nullable and (field.sortable or field.filterable):
            out.append((f"{field.name}__null", field, "null"))
    return out


def allowed_operators(model: Model) -> str:
    """The operator parameters in words, for a 400 detail's list of what is allowed."""
    sortable = [f.name for f in model.fields if f.sortable]
    prefixes = [f.name for f in model.fields if f.sortable and f.type is FieldType.STR]
    nulls = [f.name for f in model.fields if f.nullable and (f.sortable or f.filterable)]
    parts = []
    if sortable:
        parts.append(f"__gt, __gte, __lt, __lte on {', '.join(sortable)}")
    if prefixes:
        parts.append(f"__prefix on {', '.join(prefixes)}")
    if nulls:
        parts.append(f"__null on {', '.join(nulls)}")
    return "; ".join(parts)


def key_from_text(field: Field, text: ast.expr, key: str, bad: ast.stmt) -> Stmts:
    """The statements that turn query text into `field`'s index key, or run `bad`: one
    parse per type, shared by filter values and range bounds, so a filter and a bound on
    the same field read a value alike (`score=3` and `score__gte=3` both match 3.0)."""
    kind = field.type
    if kind is FieldType.STR:
        return [return_(call(f"{RT}.nfc", text))]
    if kind is FieldType.BOOL:
        return [
            if_(eq(text, const("true")), [return_(const(True))]),
            if_(eq(text, const("false")), [return_(const(False))]),
            bad,
        ]
    if kind is FieldType.ENUM:
        return [if_(not_in(text, str_set(field.enum_members)), [bad]), return_(text)]
    parser = {
        FieldType.INT: "parse_int_text",
        FieldType.FLOAT: "parse_float_text",
        FieldType.DATETIME: "parse_datetime_key",
        FieldType.DATE: "parse_date",
        FieldType.UUID: "parse_uuid",
    }[kind]
    return [assign(key, call(f"{RT}.{parser}", text)), if_(is_none(name(key)), [bad]), return_(name(key))]


def build_bound(schema: Schema, model: Model, field: Field) -> ast.FunctionDef:
    """`bound_m__f(text, param)`: a range bound -> the field's index key, or BadQuery."""
    text, param, key = name("text"), name("param"), "_dbsvc_key"
    bad = raise_(
        call(
            "BadQuery",
            concat(
                const("invalid value "),
                call("repr", text),
                const(" for "),
                call("repr", param),
                const(f": expected {expected(field)}"),
            ),
        )
    )
    body = key_from_text(field, text, key, bad)
    doc = (
        origin(schema, field.line, f"{model.name}.{field.name}") + "\n\nRange bound text -> index key; raises BadQuery."
    )
    return function(per_field("bound", model, field), ["text", "param"], doc, body)


def build_bounds(schema: Schema, model: Model) -> Stmts:
    return [build_bound(schema, model, f) for f in model.fields if f.sortable]


def _method(variable: str, method: str, *args: ast.expr) -> ast.expr:
    return call(ast.Attribute(value=name(variable), attr=method, ctx=ast.Load()), *args)


def operator_branches(model: Model, cursor: bool = True) -> list[tuple[ast.expr, Stmts]]:
    """One branch per declared operator parameter, then (for a list) `cursor`."""
    branches: list[tuple[ast.expr, Stmts]] = []
    for param, field, op in operator_params(model):
        test = eq(name(_NAME), const(param))
        if op == "null":
            twice = raise_(call("BadQuery", const(f"{param!r} given more than once")))
            wanted = call(f"{OPS}.null_wanted", name(_VALUE), const(param))
            branches.append(
                (
                    test,
                    [if_(in_(const(field.name), name(_NULLS)), [twice]), set_item(_NULLS, const(field.name), wanted)],
                )
            )
            continue
        key = call(per_field("bound", model, field), name(_VALUE), const(param))
        branches.append((test, [expr(_method(_BOUNDS, "append", tuple_([const(field.name), const(op), key])))]))
    if not cursor:
        return branches
    once = raise_(call("BadQuery", const("'cursor' given more than once")))
    branches.append(
        (eq(name(_NAME), const("cursor")), [if_(is_not_none(name(_CURSOR)), [once]), assign(_CURSOR, name(_VALUE))])
    )
    return branches


def operator_state(cursor: bool = True) -> dict[str, ast.expr]:
    state: dict[str, ast.expr] = {_BOUNDS: ast.List(elts=[], ctx=ast.Load()), _NULLS: ast.Dict(keys=[], values=[])}
    if cursor:
        state[_CURSOR] = const(None)
    return state


def build_decode_cursor(schema: Schema, model: Model) -> Stmts:
    """`cursor_kinds_m = {field: kind, ...}` and `decode_cursor_m(text, sort)`: a cursor's
    text -> (sort keys, id) for a list of the model sorted by `sort`, or BadQuery
    (`_dbsvc_cursors.decode_cursor` with the model's key kinds). The kinds are a module
    constant built once, so a cursor page builds no dict and `decode_cursor` knows its reader's kinds
    by identity, not by comparing dicts (bench/README.md, wt-tidy8, session 23).
    The list parser calls it after its loop; the app's parsed lists call it alone for a
    cursor page of a list already parsed (parsedlists.py `ParsedQueries`)."""
    kinds_name = per_model("cursor_kinds", model)
    kinds = dict_([(const(f.name), const(_KINDS.get(f.type, "s"))) for f in model.fields if f.sortable])
    id_kind = _KINDS.get(model.id_field.type, "s")
    decoded = call(
        f"{CURSORS}.decode_cursor", name("text"), const(model.name), name("sort"), name(kinds_name), const(id_kind)
    )
    doc = (
        origin(schema, model.line, model.name)
        + "\n\nCursor text -> (sort keys, id) for a list sorted by `sort`; raises BadQuery."
    )
    return [
        assign(kinds_name, kinds),
        function(per_model("decode_cursor", model), ["text", "sort"], doc, [return_(decoded)]),
    ]


def operator_finish(model: Model, sort: str, offset: str) -> Stmts:
    """After the loop, before `sort` and `offset` take their defaults: the cursor decoded
    against the sort asked for (None: id order) by `decode_cursor_m`, and refused beside
    `offset`."""
    together = (
        "'cursor' and 'offset' cannot be combined: a cursor page starts right after the cursor's record; "
        "leave out offset"
    )
    sort_given = ast.IfExp(test=is_none(name(sort)), body=tuple_([]), orelse=name(sort))
    decoded = call(per_model("decode_cursor", model), name(_CURSOR), sort_given)
    return [
        if_(
            is_not_none(name(_CURSOR)),
            [if_(is_not_none(name(offset)), [raise_(call("BadQuery", const(together)))]), assign(_CURSOR, decoded)],
        )
    ]


def operator_result(cursor: bool = True) -> dict[str, ast.expr]:
    result: dict[str, ast.expr] = {
        "ranges": call(f"{OPS}.ranges", name(_BOUNDS)),
        "nulls": call("tuple", _method(_NULLS, "items")),
    }
    if cursor:
        result["cursor"] = name(_CURSOR)
    return result


FEED_REFUSED = ("sort", "limit", "offset", "cursor")


def feed_paging_refusal(allowed: str) -> tuple[ast.expr, Stmts]:
    """A feed's branch for the list's paging parameters: refused with the reason (a feed
    has no pages; docs/decisions.md, "Operators on feeds")."""
    why = (
        " does not apply to a feed: /subscribe and /live-query have no pages "
        f"(a live query's Init is the whole result set); allowed: {allowed}"
    )
    problem = call("BadQuery", concat(call("repr", name(_NAME)), const(why)))
    return in_(name(_NAME), str_set(FEED_REFUSED)), [raise_(problem)]


def operator_refusal(model: Model, allowed: str) -> tuple[ast.expr, Stmts]:
    """The last branch: a `__` name no branch took, refused with what its field takes."""
    info = {f.name: (f.type.value, f.sortable, f.filterable, f.nullable) for f in model.fields}
    problem = call(f"{OPS}.operator_problem", name(_NAME), literal(info), const(allowed))
    return in_(const("__"), name(_NAME)), [raise_(problem)]


# ---------------------------------------------------------------------------------------
# The matcher's operator half (compiler/queries.py `build_match`).
# ---------------------------------------------------------------------------------------

MATCH_PARAMS = ("ranges", "nulls")  # `match_m(record, filters, ranges=(), nulls=())`
_FIELD, _KEY, _WANTED = "_dbsvc_field", "_dbsvc_key", "_dbsvc_wanted"
_RANGE = ("_dbsvc_low", "_dbsvc_low_in", "_dbsvc_high", "_dbsvc_high_in")
_KEYED = (FieldType.FLOAT, FieldType.DATETIME)  # compiler/queries.py KEYED_TYPES


def operator_tests(model: Model) -> Stmts:
    """The statements of `match_m` that test `Query.ranges` and `Query.nulls` on `record`:
    a field's index key against its range (a null is never in one: storage/seek.py
    `Window.holds`, written out), then each null test. The same conditions storage serves
    from its indexes."""
    keyed = [f for f in model.fields if f.sortable and f.type in _KEYED]
    key_of = [
        (eq(name(_FIELD), const(f.name)), [assign(_KEY, call(per_field("key", model, f), name(_KEY)))]) for f in keyed
    ]
    subject = ast.Subscript(value=name("record"), slice=name(_FIELD), ctx=ast.Load())
    key, (low, low_in, high, high_in) = name(_KEY), [name(v) for v in _RANGE]
    no = [return_(const(False))]
    ranges_loop: Stmts = [assign(_KEY, subject), *(if_chain(key_of, []) if key_of else [])]
    ranges_loop += [
        if_(is_none(key), no),  # a range never holds a null
        if_(is_not_none(low), [if_(or_(lt(key, low), and_(eq(key, low), not_(low_in))), no)]),
        if_(is_not_none(high), [if_(or_(gt(key, high), and_(eq(key, high), not_(high_in))), no)]),
    ]
    null_test = ast.Compare(left=is_none(subject), ops=[ast.IsNot()], comparators=[name(_WANTED)])
    return [
        for_((_FIELD, *_RANGE), name("ranges"), ranges_loop),
        for_((_FIELD, _WANTED), name("nulls"), [if_(null_test, [return_(const(False))])]),
    ]
