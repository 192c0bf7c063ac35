"""Literals -> typed values: `@min`/`@max` bounds and `@default` values for one field type.

Each function returns either the converted value or a message saying what is wrong; it
never raises for bad input and knows nothing of locations (the caller attaches them).

Canonical forms (docs/guide/schema.md#types, `dbsvc.schema.ir.Default`):

- int      Python int inside the signed 64-bit range
- float    Python float, finite (an integer literal is accepted and converted)
- datetime RFC 3339 with an offset in, `YYYY-MM-DDTHH:MM:SS[.ffffff]Z` in UTC out
- date     `YYYY-MM-DD`
- uuid     the 36-character hyphenated form, lower case
- enum     the member name (written bare or as a string)

Imports nothing from dbsvc but `dbsvc.schema.*` and dbsvc/formats.py, the datetime, date and
uuid parsers the runtime's requests go through too (a literal is a value a request could send).
"""

from __future__ import annotations

import math

from dbsvc.formats import parse_date, parse_datetime, parse_uuid
from dbsvc.schema.ir import Default, DefaultKind, FieldType
from dbsvc.schema.syntax import Literal, LiteralKind

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
BOUNDED_TYPES = frozenset({FieldType.INT, FieldType.FLOAT, FieldType.STR})


def shown(literal: Literal) -> str:
    """How a message quotes a literal: numbers and strings as written, names with `repr`."""
    if literal.kind in (LiteralKind.IDENT, LiteralKind.BOOL, LiteralKind.NULL):
        return repr(literal.text)
    return literal.text


def is_number(literal: Literal) -> bool:
    return literal.kind in (LiteralKind.INT, LiteralKind.FLOAT)


def convert_bound(attr: str, type_: FieldType, field: str, literal: Literal) -> int | float | Problem:
    """The value of `@min`/`@max` (`attr`) on field `field` of `type_`, or what is wrong.

    The caller has already checked that `literal` is a number and `type_` is bounded.
    """
    value = literal.value
    got = shown(literal)
    if type_ is FieldType.STR:
        if literal.kind is not LiteralKind.INT or value < 0:  # type: ignore[operator]
            return Problem(f"@{attr} on str field {field!r} is a length, expected a non-negative integer, got {got}")
        return value  # type: ignore[return-value]
    if type_ is FieldType.INT:
        if literal.kind is not LiteralKind.INT:
            return Problem(f"@{attr} on int field {field!r} expects an integer, got {got}")
        if not INT64_MIN <= value <= INT64_MAX:  # type: ignore[operator]
            return Problem(f"@{attr} on int field {field!r} is outside the signed 64-bit range, got {got}")
        return value  # type: ignore[return-value]
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number):
        return Problem(f"@{attr} on float field {field!r} expects a finite number, got {got}")
    return number


class Problem(str):
    """A message saying why a literal does not fit its field (returned, never raised)."""


def convert_default(
    type_: FieldType, members: tuple[str, ...], nullable: bool, field: str, literal: Literal
) -> Default | Problem:
    """The `Default` that `@default(literal)` means on a field, or what is wrong with it.

    Bounds are not checked here (see `check_default_bounds`).
    """
    kind, value = literal.kind, literal.value
    name = type_.value
    if kind is LiteralKind.NULL:
        if nullable:
            return Default(DefaultKind.VALUE, None)
        return Problem(
            f"@default(null) on non-nullable field {field!r}, expected a {name} value or a '?' after the type"
        )
    if type_ is FieldType.ENUM and kind in (LiteralKind.IDENT, LiteralKind.STRING):
        if value in members:
            return Default(DefaultKind.VALUE, value)
        return Problem(f"@default({shown(literal)}) on field {field!r} is not a member of enum({', '.join(members)})")
    if kind is LiteralKind.IDENT and value == "now":
        if type_ is FieldType.DATETIME:
            return Default(DefaultKind.NOW)
        return Problem(f"@default(now) needs a datetime field, but field {field!r} is {name}")
    if kind is LiteralKind.IDENT and value == "uuid":
        if type_ is FieldType.UUID:
            return Default(DefaultKind.UUID)
        return Problem(f"@default(uuid) needs a uuid field, but field {field!r} is {name}")
    converted = _convert_value(type_, field, literal)
    if isinstance(converted, Problem):
        return converted
    return Default(DefaultKind.VALUE, converted)


def _convert_value(type_: FieldType, field: str, literal: Literal) -> object:
    kind, value = literal.kind, literal.value
    got = shown(literal)
    on = f"@default on {type_.value} field {field!r}"
    if type_ is FieldType.INT:
        if kind is not LiteralKind.INT:
            return Problem(f"{on} expects an integer, got {got}")
        if not INT64_MIN <= value <= INT64_MAX:  # type: ignore[operator]
            return Problem(f"{on} is outside the signed 64-bit range, got {got}")
        return value
    if type_ is FieldType.FLOAT:
        if not is_number(literal):
            return Problem(f"{on} expects a number, got {got}")
        number = float(value)  # type: ignore[arg-type]
        if not math.isfinite(number):
            return Problem(f"{on} expects a finite number, got {got}")
        return number
    if type_ is FieldType.BOOL:
        if kind is not LiteralKind.BOOL:
            return Problem(f"{on} expects true or false, got {got}")
        return value
    if type_ is FieldType.JSON:
        if kind is LiteralKind.IDENT:
            return Problem(f"{on} expects a JSON literal, got {got}")
        return value
    if type_ is FieldType.ENUM:
        return Problem(f"{on} expects a member name, got {got}")
    if kind is not LiteralKind.STRING:
        expected = {
            FieldType.STR: "a string",
            FieldType.DATETIME: "now or an RFC 3339 string",
            FieldType.DATE: 'a "YYYY-MM-DD" string',
            FieldType.UUID: "uuid or a uuid string",
        }[type_]
        return Problem(f"{on} expects {expected}, got {got}")
    if type_ is FieldType.STR:
        return value
    text = str(value)
    if type_ is FieldType.DATETIME:
        canonical = parse_datetime(text)
        expected = 'an RFC 3339 instant with an offset such as "2024-01-31T12:00:00Z"'
    elif type_ is FieldType.DATE:
        canonical = parse_date(text)
        expected = 'a "YYYY-MM-DD" date'
    else:
        assert type_ is FieldType.UUID
        canonical = parse_uuid(text)
        expected = "the form 'xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx'"
    if canonical is None:
        return Problem(f"{on} expects {expected}, got {got}")
    return canonical


Bound = tuple[int | float, str]  # (value, as written)


def check_default_bounds(
    type_: FieldType, field: str, default: Default, low: Bound | None, high: Bound | None, literal: Literal
) -> Problem | None:
    """What is wrong when a VALUE default lies outside `@min`/`@max`, else None."""
    value = default.value
    if default.kind is not DefaultKind.VALUE or value is None or type_ not in BOUNDED_TYPES:
        return None
    got = f"@default({shown(literal)}) of field {field!r}"
    if type_ is FieldType.STR:
        length = len(str(value))
        if low is not None and length < low[0]:
            return Problem(f"{got} is shorter than @min({low[1]})")
        if high is not None and length > high[0]:
            return Problem(f"{got} is longer than @max({high[1]})")
        return None
    if low is not None and value < low[0]:  # type: ignore[operator]
        return Problem(f"{got} is below @min({low[1]})")
    if high is not None and value > high[0]:  # type: ignore[operator]
        return Problem(f"{got} is above @max({high[1]})")
    return None
