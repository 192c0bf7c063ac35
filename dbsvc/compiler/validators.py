"""Builders of the body validators: per-field checks and validate_create/replace/patch.

For each field `f` of a model `m` the generated module holds one check function::

    def check_m__f(value, errors):
        # returns the canonical value, or appends {"field", "message"} to errors
        # and returns _dbsvc_rt.INVALID

and the three validators call it for every field present in the body, so a body is
checked field by field and *every* violation is collected before `ConstraintViolation`
is raised (docs/guide/errors.md). Rules the emitted code follows:

1. A body that is not a JSON object is `BadRequest`, before anything else.
2. Unknown fields are violations, reported first, in body order.
3. Then each declared field in declaration order: present -> checked; absent -> (create
   and replace) default, null, auto id, or "missing required field"; (patch) kept.
4. `null` is only accepted by nullable fields, even when the field has a default.
5. Type checks are exact (`type(v) is int`), so a JSON boolean is never a number; a JSON
   integer is accepted for a float and stored as a float, and an integral JSON number
   (`-925.0`, finite: decode_body refuses the others) for an int, stored as the int. The first failed check of a
   field ends that field's checks: one violation per field.
6. Messages name the field, show the value (`_dbsvc_rt.got`) and say what was expected.
7. A str value is stored in Unicode NFC (`_dbsvc_rt.nfc`), normalized before its length is
   checked; a str id may not be `.` or `..` (they are path segments, RFC 3986 §3.3).
   Lone surrogates, non-finite numbers and excess nesting never get here:
   `dbsvc.bodies.decode_body` refuses them while decoding.
8. A validator calls a field's check only when a value is not plainly good: a test the
   check would pass and keep the value as it is (`_accepted`: an int in range and bounds,
   a finite float within bounds, an ASCII str within its lengths, a bool, an enum member,
   any value of a nullable json field) takes the value without the call. The check
   function stays the one place of every refusal and every conversion.

Imports only the schema IR, the sibling builder helpers and the standard library.
"""

from __future__ import annotations

import ast

from dbsvc.compiler.naming import DOT_SEGMENTS, DOT_SEGMENTS_WHY, RT, expected, local, origin, per_field, per_model
from dbsvc.compiler.nodes import (
    Stmts,
    and_,
    assign,
    call,
    concat,
    const,
    dict_,
    expr,
    for_,
    function,
    gt,
    if_,
    in_,
    is_,
    is_none,
    is_not,
    item,
    lt,
    name,
    ne,
    not_,
    not_in,
    raise_,
    return_,
    str_set,
    tuple_,
    type_is_not,
)
from dbsvc.schema.ir import DefaultKind, Field, FieldType, Model, Schema

_BODY = "body"
_ERRS = "_dbsvc_errors"
_KEY = "_dbsvc_name"
_VALUE = "value"
_CHECK_ERRS = "errors"
_INVALID = f"{RT}.INVALID"


def _violation(errors: str, field_name: ast.expr, message: ast.expr) -> ast.Expr:
    """`errors.append({"field": ..., "message": ...})`."""
    entry = dict_([(const("field"), field_name), (const("message"), message)])
    return expr(call(ast.Attribute(value=name(errors), attr="append", ctx=ast.Load()), entry))


def _fail(field: Field, message: ast.expr) -> Stmts:
    """Inside a check function: record one violation and give up on the field."""
    return [_violation(_CHECK_ERRS, const(field.name), message), return_(name(_INVALID))]


def _got(text: str, value: ast.expr) -> ast.expr:
    """`text + _dbsvc_rt.got(value)`."""
    return concat(const(text), call(f"{RT}.got", value))


def _shown(text: str, value: ast.expr) -> ast.expr:
    """`text + _dbsvc_rt.show(value)`."""
    return concat(const(text), call(f"{RT}.show", value))


def _plural(count: int | float, noun: str) -> str:
    return f"{_number(count)} {noun}" if count == 1 else f"{_number(count)} {noun}s"


def _number(bound: int | float) -> str:
    """A bound as a person writes it: `0` rather than `0.0`."""
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return str(bound)


# ---------------------------------------------------------------------------------------
# Per-field check functions
# ---------------------------------------------------------------------------------------


def _bounds(field: Field, value: ast.expr, measured: ast.expr, *, length: bool) -> Stmts:
    """@min/@max: on the value for numbers, on the length for strings."""
    out: Stmts = []
    label = repr(field.name)
    for bound, word, test in ((field.min, "least", lt), (field.max, "most", gt)):
        if bound is None:
            continue
        if length:
            message = concat(
                const(f"{label} must be at {word} {_plural(bound, 'character')} long, got "),
                call("str", measured),
                const(" characters: "),
                call(f"{RT}.show", value),
            )
        else:
            message = _shown(f"{label} must be at {word} {_number(bound)}, got ", value)
        out.append(if_(test(measured, const(bound)), _fail(field, message)))
    return out


def _reject_bool(field: Field, value: ast.expr) -> ast.If:
    message = concat(
        _got(f"{field.name!r} must be {expected(field)}, got ", value), const(" (a JSON boolean is not a number)")
    )
    return if_(is_(call("type", value), name("bool")), _fail(field, message))


def _wrong_type(field: Field, value: ast.expr) -> Stmts:
    return _fail(field, _got(f"{field.name!r} must be {expected(field)}, got ", value))


def _parsed_string(field: Field, value: ast.expr, parser: str) -> Stmts:
    """str type check, then a runtime parser returning the canonical text or None."""
    canonical = "_dbsvc_canonical"
    return [
        if_(type_is_not(value, "str"), _wrong_type(field, value)),
        assign(canonical, call(f"{RT}.{parser}", value)),
        if_(is_none(name(canonical)), _wrong_type(field, value)),
        return_(name(canonical)),
    ]


def _dot_segments(field: Field, value: ast.expr) -> Stmts:
    """Rule 7: a str id is a path segment, and `.` and `..` are not ids there."""
    message = concat(_shown(f"{field.name!r} must not be ", value), const(f": {DOT_SEGMENTS_WHY}"))
    return [if_(in_(value, tuple_([const(s) for s in DOT_SEGMENTS])), _fail(field, message))]


def _type_checks(field: Field) -> Stmts:
    """The body of a check function after the null check."""
    value = name(_VALUE)
    kind = field.type
    if kind is FieldType.INT:
        out_of_range = ast.BoolOp(
            op=ast.Or(), values=[lt(value, name(f"{RT}.INT64_MIN")), gt(value, name(f"{RT}.INT64_MAX"))]
        )
        too_wide = _fail(field, _shown(f"{field.name!r} must be a signed 64-bit integer, got ", value))
        return [
            _reject_bool(field, value),
            # Rule 5: an integral JSON number (`-925.0`) is an integer, as JSON Schema's
            # "integer" (2020-12 §6.1.1) and pydantic say; stored as the int.
            if_(
                and_(is_(call("type", value), name("float")), call(f"{_VALUE}.is_integer")),
                [if_(out_of_range, too_wide), assign(_VALUE, call("int", value))],
            ),
            if_(type_is_not(value, "int"), _wrong_type(field, value)),
            if_(out_of_range, too_wide),
            *_bounds(field, value, value, length=False),
            return_(value),
        ]
    if kind is FieldType.FLOAT:
        number = "_dbsvc_number"
        return [
            _reject_bool(field, value),
            if_(and_(type_is_not(value, "float"), type_is_not(value, "int")), _wrong_type(field, value)),
            assign(number, call(f"{RT}.finite_float", value)),
            if_(is_none(name(number)), _fail(field, _shown(f"{field.name!r} must be a finite number, got ", value))),
            *_bounds(field, value, name(number), length=False),
            return_(name(number)),
        ]
    if kind is FieldType.STR:
        return [
            if_(type_is_not(value, "str"), _wrong_type(field, value)),
            assign(_VALUE, call(f"{RT}.nfc", value)),
            *(_dot_segments(field, value) if field.is_id else []),
            *_bounds(field, value, call("len", value), length=True),
            return_(value),
        ]
    if kind is FieldType.BOOL:
        return [if_(type_is_not(value, "bool"), _wrong_type(field, value)), return_(value)]
    if kind is FieldType.ENUM:
        return [
            if_(type_is_not(value, "str"), _wrong_type(field, value)),
            if_(not_in(value, str_set(field.enum_members)), _wrong_type(field, value)),
            return_(value),
        ]
    if kind is FieldType.DATETIME:
        return _parsed_string(field, value, "parse_datetime")
    if kind is FieldType.DATE:
        return _parsed_string(field, value, "parse_date")
    if kind is FieldType.UUID:
        return _parsed_string(field, value, "parse_uuid")
    assert kind is FieldType.JSON, kind
    return [return_(value)]


def build_check(schema: Schema, model: Model, field: Field) -> ast.FunctionDef:
    """`check_m__f(value, errors)`: one field's value -> canonical value or INVALID."""
    value = name(_VALUE)
    if field.nullable:
        on_null: Stmts = [return_(const(None))]
    else:
        on_null = _fail(field, const(f"{field.name!r} must not be null; expected {expected(field)}"))
    body = [if_(is_none(value), on_null), *_type_checks(field)]
    doc = origin(schema, field.line, f"{model.name}.{field.name}")
    return function(per_field("check", model, field), [_VALUE, _CHECK_ERRS], doc, body)


# ---------------------------------------------------------------------------------------
# Validators
# ---------------------------------------------------------------------------------------


def _preamble(model: Model) -> Stmts:
    """Rules 1 and 2: the body is an object, and every key is a declared field."""
    names = [f.name for f in model.fields]
    unknown = concat(
        const("unknown field "), call("repr", name(_KEY)), const(f"; {model.name} fields are {', '.join(names)}")
    )
    return [
        if_(
            not_(call("isinstance", name(_BODY), name("dict"))),
            [raise_(call("BadRequest", _got("request body must be a JSON object, got ", name(_BODY))))],
        ),
        assign(_ERRS, ast.List(elts=[], ctx=ast.Load())),
        for_(_KEY, name(_BODY), [if_(not_in(name(_KEY), str_set(names)), [_violation(_ERRS, name(_KEY), unknown)])]),
    ]


def _checked(model: Model, field: Field) -> Stmts:
    """`_dbsvc_v_f = body["f"]`, then, unless `_accepted` says the check would keep it as
    it is, `_dbsvc_v_f = check_m__f(_dbsvc_v_f, _dbsvc_errors)` (rule 8)."""
    given = local(field)
    accepted = _accepted(field, name(given))
    if accepted is None:  # `_dbsvc_v_f = check_m__f(body["f"], _dbsvc_errors)`
        return [assign(given, call(per_field("check", model, field), item(_BODY, field.name), name(_ERRS)))]
    check = assign(given, call(per_field("check", model, field), name(given), name(_ERRS)))
    if isinstance(accepted, ast.Constant):  # a nullable json field: every value is kept
        return [assign(given, item(_BODY, field.name))]
    return [assign(given, item(_BODY, field.name)), if_(not_(accepted), [check])]


def _within(field: Field, measured: ast.expr) -> list[ast.expr]:
    """@min/@max held: the negations of `_bounds`' tests (for a number that is not NaN)."""
    tests: list[ast.expr] = []
    if field.min is not None:
        tests.append(ast.Compare(left=const(field.min), ops=[ast.LtE()], comparators=[measured]))
    if field.max is not None:
        tests.append(ast.Compare(left=measured, ops=[ast.LtE()], comparators=[const(field.max)]))
    return tests


def _accepted(field: Field, value: ast.expr) -> ast.expr | None:
    """A test that is true only of a value `check_m__f` returns as it is, with no violation
    (rule 8), or None where there is none cheaper than the check; a constant True for a
    nullable json field, whose check keeps every value."""
    kind = field.type
    if kind is FieldType.INT:
        # the signed 64-bit range of runtime.INT64_MIN and INT64_MAX, as literals (no lookup)
        int64 = [
            ast.Compare(left=const(-(2**63)), ops=[ast.LtE()], comparators=[value]),
            ast.Compare(left=value, ops=[ast.LtE()], comparators=[const(2**63 - 1)]),
        ]
        return and_(is_(call("type", value), name("int")), *int64, *_within(field, value))
    if kind is FieldType.FLOAT:  # finite: a float minus itself is 0.0 (not for NaN or an infinity)
        finite = ast.Compare(
            left=ast.BinOp(left=value, op=ast.Sub(), right=value), ops=[ast.Eq()], comparators=[const(0.0)]
        )
        return and_(is_(call("type", value), name("float")), finite, *_within(field, value))
    if kind is FieldType.STR and not field.is_id:  # ASCII is its own NFC (runtime.nfc)
        return and_(
            is_(call("type", value), name("str")),
            call(ast.Attribute(value=value, attr="isascii", ctx=ast.Load())),
            *_within(field, call("len", value)),
        )
    if kind is FieldType.BOOL:
        return is_(call("type", value), name("bool"))
    if kind is FieldType.ENUM:
        return and_(is_(call("type", value), name("str")), in_(value, str_set(field.enum_members)))
    if kind is FieldType.JSON:
        return const(True) if field.nullable else is_not(value, const(None))
    return None  # datetime, date, uuid, a str id: the check's own parsing decides


def _omitted(field: Field) -> Stmts:
    """What an omitted field becomes on create and replace (the id handled by the caller)."""
    target = local(field)
    default = field.default
    if default is not None:
        if default.kind is DefaultKind.NOW:
            assert field.type is FieldType.DATETIME, field  # the checker allows now only there
            return [assign(target, call(f"{RT}.now"))]
        if default.kind is DefaultKind.UUID:
            return [assign(target, call(f"{RT}.new_uuid"))]
        value = default.value
        if field.type is FieldType.FLOAT and isinstance(value, int):
            value = float(value)
        return [assign(target, const(value))]
    if field.nullable:
        return [assign(target, const(None))]
    message = f"missing required field {field.name!r} ({expected(field)})"
    return [assign(target, name(_INVALID)), _violation(_ERRS, const(field.name), const(message))]


def _id_mismatch(model: Model, field: Field, other: ast.expr, what: str) -> ast.If:
    """Body id checked and valid but different from `other` -> one violation."""
    given = name(local(field))
    message = concat(_shown(f"{field.name!r} ", given), const(f" differs from {what} "), call(f"{RT}.show", other))
    return if_(and_(is_not(given, name(_INVALID)), ne(given, other)), [_violation(_ERRS, const(field.name), message)])


def _finish(model: Model, values: dict[str, ast.expr]) -> Stmts:
    """Raise every violation at once, else return the record in declaration order."""
    record = dict_([(const(f.name), values[f.name]) for f in model.fields])
    return [if_(name(_ERRS), [raise_(call("ConstraintViolation", name(_ERRS)))]), return_(record)]


def build_validate_create(schema: Schema, model: Model) -> ast.FunctionDef:
    body = _preamble(model)
    for field in model.fields:
        if field.is_id and field.type is FieldType.INT and field.default is None:
            absent: Stmts = [assign(local(field), const(None))]  # storage assigns max + 1
        else:
            absent = _omitted(field)
        body.append(if_(in_(const(field.name), name(_BODY)), _checked(model, field), absent))
    body += _finish(model, {f.name: name(local(f)) for f in model.fields})
    doc = origin(schema, model.line, model.name) + (
        "\n\nPOST body -> record in declaration order; raises BadRequest or ConstraintViolation."
        "\nAn omitted int @id stays None: storage assigns one more than the largest ever used."
    )
    return function(per_model("validate_create", model), [_BODY], doc, body)


def build_validate_replace(schema: Schema, model: Model) -> ast.FunctionDef:
    path_id = "path_id"
    body = _preamble(model)
    values: dict[str, ast.expr] = {}
    for field in model.fields:
        if field.is_id:
            body.append(
                if_(
                    in_(const(field.name), name(_BODY)),
                    [*_checked(model, field), _id_mismatch(model, field, name(path_id), "the id in the path")],
                )
            )
            values[field.name] = name(path_id)
        else:
            body.append(if_(in_(const(field.name), name(_BODY)), _checked(model, field), _omitted(field)))
            values[field.name] = name(local(field))
    body += _finish(model, values)
    doc = origin(schema, model.line, model.name) + (
        "\n\nPUT body -> the whole new record; omitted nullable fields become null, omitted"
        "\ndefaulted fields take their default; the id is always `path_id` (already parsed)."
    )
    return function(per_model("validate_replace", model), [_BODY, path_id], doc, body)


def build_validate_patch(schema: Schema, model: Model) -> ast.FunctionDef:
    current = "current"
    body = _preamble(model)
    for field in model.fields:
        kept = [assign(local(field), item(current, field.name))]
        given: Stmts = _checked(model, field)
        if field.is_id:
            given.append(_id_mismatch(model, field, item(current, field.name), "the record's id"))
        body.append(if_(in_(const(field.name), name(_BODY)), given, kept))
    body += _finish(model, {f.name: name(local(f)) for f in model.fields})
    doc = origin(schema, model.line, model.name) + (
        "\n\nPATCH body merged into `current`: only the fields given are checked; a json"
        "\nfield is replaced whole; the id may not change."
    )
    return function(per_model("validate_patch", model), [_BODY, current], doc, body)


def build_validators(schema: Schema, model: Model) -> Stmts:
    """Every check function of the model, then its three validators."""
    out: Stmts = [build_check(schema, model, f) for f in model.fields]
    out.append(build_validate_create(schema, model))
    out.append(build_validate_replace(schema, model))
    out.append(build_validate_patch(schema, model))
    return out
