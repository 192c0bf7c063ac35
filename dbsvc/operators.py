"""The query operators' run-time half: range bounds, prefixes, null tests, a sort's text.

Generated list parsers (compiler/queries.py) accept exactly the parameters a schema
declares (`score__gte`, `title__prefix`, `deleted_at__null`, ...) and call the helpers
here for the parts that are not schema-specific (docs/guide/queries.md, "Operators"; the
syntax is settled in docs/decisions.md):

- `ranges(bounds)`: the (field, operator, key) bounds a parser collected -> one
  `(field, low, low_inclusive, high, high_inclusive)` range per field (`Query.ranges`),
  every bound of a field ANDed; `__prefix=p` is the range [p, prefix_end(p)). A None
  low or high is unbounded; a range never holds a null.
- `null_wanted(text, param)`: `true` / `false` -> bool, or BadQuery.
- `operator_problem(param, fields, allowed)`: the BadQuery for a `field__op` name the
  parser did not accept, saying which of the model's fields take which operators.
- `sort_text(sort)`: a parsed sort's canonical text (`-score,title`), the form a cursor
  carries its sort in.

The `cursor` parameter, its text and the next page's `Link` are cursors.py's (a job of
their own, moved there when this module reached the 600-line cap); it imports `sort_text`
from here, never the other way.

Imports errors and the standard library only; storage imports `prefix_end` (the range a
`__prefix` is, which storage/bucketplan.py recognises).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dbsvc.errors import BadQuery

RANGE_OPERATORS = ("gt", "gte", "lt", "lte")
OPERATORS = (*RANGE_OPERATORS, "prefix", "null")
_TOP = chr(0x10FFFF)

# One range of `Query.ranges`: (field, low, low inclusive, high, high inclusive).
Range = tuple[str, Any, bool, Any, bool]


def prefix_end(prefix: str) -> str | None:
    """The least string after every string that starts with `prefix` (code point order,
    the order str keys sort in), or None when there is none (all U+10FFFF)."""
    stripped = prefix.rstrip(_TOP)
    if not stripped:
        return None
    return stripped[:-1] + chr(ord(stripped[-1]) + 1)


def ranges(bounds: Iterable[tuple[str, str, Any]]) -> tuple[Range, ...]:
    """(field, operator, key) bounds -> one range per field, in the order fields first
    appear; bounds of one field are ANDed (the tighter one wins)."""
    out: dict[str, list[Any]] = {}
    for field, op, key in bounds:
        out.setdefault(field, [None, True, None, True])
        if op == "prefix":
            end = prefix_end(key)
            _tighten_low(out[field], key, True)
            if end is not None:
                _tighten_high(out[field], end, False)
        elif op in ("gt", "gte"):
            _tighten_low(out[field], key, op == "gte")
        else:
            _tighten_high(out[field], key, op == "lte")
    return tuple((field, b[0], b[1], b[2], b[3]) for field, b in out.items())


def _tighten_low(bound: list[Any], key: Any, inclusive: bool) -> None:
    if bound[0] is None or key > bound[0]:
        bound[0], bound[1] = key, inclusive
    elif key == bound[0]:
        bound[1] = bound[1] and inclusive


def _tighten_high(bound: list[Any], key: Any, inclusive: bool) -> None:
    if bound[2] is None or key < bound[2]:
        bound[2], bound[3] = key, inclusive
    elif key == bound[2]:
        bound[3] = bound[3] and inclusive


def null_wanted(text: str, param: str) -> bool:
    """`field__null=true|false` -> whether the field must be null."""
    if text == "true":
        return True
    if text == "false":
        return False
    raise BadQuery(f"invalid value {text!r} for {param!r}: expected true or false")


def operator_problem(param: str, fields: Mapping[str, tuple[str, bool, bool, bool]], allowed: str) -> BadQuery:
    """The refusal of a `field__op` parameter the parser did not accept. `fields` maps each
    field name to (type word, sortable, filterable, nullable); `allowed` lists every
    parameter the parser does accept."""
    field, _sep, op = param.rpartition("__")
    if field not in fields:
        return BadQuery(f"unknown query parameter {param!r}; allowed: {allowed}")
    kind, sortable, filterable, nullable = fields[field]
    if op not in OPERATORS:
        wanted = ", ".join("__" + o for o in OPERATORS)
        return BadQuery(f"unknown operator {'__' + op!r} in {param!r}: operators are {wanted}; allowed: {allowed}")
    sortables = [f for f, info in fields.items() if info[1]]
    if op in RANGE_OPERATORS:
        return BadQuery(
            f"cannot use {param!r}: {field!r} is not marked @sort, and range operators apply to sort fields "
            f"({_names(sortables)}); allowed: {allowed}"
        )
    if op == "prefix":
        strings = [f for f, info in fields.items() if info[1] and info[0] == "str"]
        why = f"{field!r} is {kind}, not str" if kind != "str" else f"{field!r} is not marked @sort"
        return BadQuery(
            f"cannot use {param!r}: {why}; __prefix applies to str @sort fields ({_names(strings)}); allowed: {allowed}"
        )
    nullables = [f for f, info in fields.items() if info[3] and (info[1] or info[2])]
    why = f"{field!r} is not nullable" if not nullable else f"{field!r} is neither @filter nor @sort"
    return BadQuery(
        f"cannot use {param!r}: {why}; __null applies to nullable @filter or @sort fields ({_names(nullables)}); "
        f"allowed: {allowed}"
    )


def _names(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"


def sort_text(sort: Sequence[tuple[str, bool]]) -> str:
    """A parsed sort -> its canonical text (`-score,title`; "" for id order)."""
    return ",".join(("-" if desc else "") + field for field, desc in sort)
