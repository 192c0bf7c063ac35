"""Request bodies: `decode_body`, JSON text -> value, refusing at decode time
what the rest of dbsvc could not store or encode again, so no such value ever reaches a
validator, the log or a response: `NaN`/`Infinity` literals and numbers out of a double's
range (400), an object naming a member twice (400: which value was meant is unknown),
arrays and objects nested deeper than MAX_DEPTH (400), and lone surrogates
(`"\\ud800"`: not Unicode, no UTF-8 form), 422 naming the field, 400 in a key. The checks
cost almost nothing on an ordinary body: a float hook, two `str.count` calls and one substring
test decide whether the (rare) walk over the decoded value is needed at all.

Most bodies are one flat object of scalars (a record's fields), and for those the hooks
(a Python call per object and per float) and the decoder's Python wrappers are most of the
decode: `decode_body` first reads such a body with the C scanner alone (`_flat_object`) and
keeps the result only when the strict decoder would have given the same value (one flat
object, as many `:` in the text as members, every float finite, every string ASCII);
anything else goes the strict way, which decides and words every refusal.

`BODY_DECODER` is the strict decoder itself, also used for a token's JSON (auth/jwt.py) and
for each line of an import (datatools/lines.py), so a value is refused the same way whatever
carried it. Apart from dbsvc/runtime.py since it shares nothing with the generated modules'
surface but `show`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json.scanner import make_scanner
from typing import Any

from dbsvc.errors import BadRequest, ConstraintViolation
from dbsvc.runtime import SURROGATE_RE, show
from dbsvc.strictjson import NonFinite, finite_float, refuse_constant

MAX_DEPTH = 64  # nesting of arrays and objects in a body, the body itself counted
# The refusal of a body nested deeper than MAX_DEPTH, whichever check finds it: the decoder's
# recursion limit (RecursionError) or the level count after it (which of the two comes first
# depends on the Python: 3.13's decoder takes 5,000 levels that 3.11's cannot).
TOO_DEEP = (
    f"request body nests arrays and objects deeper than {MAX_DEPTH} levels: "
    f"at most {MAX_DEPTH} are allowed, the body itself counted"
)


# A decoded string can hold a surrogate only if the text escaped one: UTF-8 input cannot
# carry one (the strict decode refuses it), and json decodes a valid pair into one character.
_ESCAPED_SURROGATE_RE = re.compile(r"\\u[dD][89a-fA-F]")


class _Unacceptable(ValueError):
    """JSON that parses, but that dbsvc refuses to store: an object that names one member
    twice. (A number a double cannot hold is strictjson.py's `NonFinite`.)"""


def _each_name_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members as a dict, refusing a name given twice: json would keep the
    last value and drop the others without a word, and which one the client meant is not
    ours to guess (RFC 8259 §4 calls the outcome unpredictable; I-JSON, RFC 7493 §2.3,
    forbids it). About half a microsecond more per decoded object."""
    members = dict(pairs)
    if len(members) != len(pairs):
        seen: set[str] = set()
        for name, _value in pairs:
            if name in seen:
                raise _Unacceptable(
                    f"an object names the member {show(name)} twice: expected each name once (RFC 8259 §4)"
                )
            seen.add(name)
    return members


# One decoder for every body: json.loads with an argument builds a new JSONDecoder per call.
# Public for `dbsvc import`, which scans its lines with the same hooks, and for the token
# guard, which decodes a token's header and claims with it.
BODY_DECODER = json.JSONDecoder(
    parse_constant=refuse_constant, parse_float=finite_float, object_pairs_hook=_each_name_once
)


# The C scanner without hooks (`_flat_object`): json.JSONDecoder's defaults.
_PLAIN_SCAN: Callable[[str, int], tuple[Any, int]] = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _flat_object(text: str) -> dict[str, Any] | None:
    """`text` as the strict decoder reads it when it is one object whose names are ASCII and
    whose values are ASCII strings, integers, finite floats, booleans or nulls; None for
    anything else (the strict decoder then reads it, or refuses it, itself). Sound because:
    - the text is that one object from its first character to its last, and no value is an
      array or an object, so its depth is 1 (the nesting limit cannot apply);
    - it holds as many `:` as the object has members: every member written in the text has
      its `:`, so a name given twice (which the plain scanner keeps once) leaves the count
      short, whatever `:` the strings hold;
    - every float is finite: the plain scanner gives `NaN`, `Infinity` and `1e400` as
      floats that a float minus itself does not make 0.0;
    - every string is ASCII (`str.isascii` is one test of the string's kind), so none holds
      a lone surrogate. Surrounding whitespace, rare in a body, goes the strict way."""
    if text[:1] != "{":
        return None
    try:
        value, end = _PLAIN_SCAN(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return None  # not JSON, or too deep: the strict decoder says what
    if end != len(text) or text.count(":") != len(value):
        return None
    for name, item in value.items():
        kind = type(item)
        if kind is str:
            if not item.isascii():
                return None
        elif kind is float:
            if item - item != 0.0:
                return None
        elif kind is not int and kind is not bool and item is not None:
            return None
        if not name.isascii():
            return None
    return value  # type: ignore[no-any-return]


def decode_body(text: str) -> Any:
    """A request body's JSON text -> value; BadRequest (400) or ConstraintViolation (422).

    Refused: text that is not JSON (400); `NaN`, `Infinity`, `-Infinity` and numbers out
    of a double's range such as `1e400` (400: JSON numbers are finite, and the encoder
    refuses infinities); an object, at any depth, that names a member twice (400); arrays
    and objects nested deeper than MAX_DEPTH, the body counted as level 1 (400); a lone
    surrogate, 400 in an object key of the body, else 422 naming the body field whose value
    holds it. A flat object of scalars is read by `_flat_object`, to the value
    `decode_body_strictly` gives it; anything else is `decode_body_strictly`'s.
    """
    flat = _flat_object(text)
    if flat is not None:
        return flat
    return decode_body_strictly(text)


def decode_body_strictly(text: str) -> Any:
    """`decode_body` through the strict decoder and `refuse_unstorable` alone, whatever the
    body: the reference the flat case is held to (tests/test_bodies.py)."""
    try:
        value = BODY_DECODER.decode(text)
    except (_Unacceptable, NonFinite) as exc:
        raise BadRequest(f"request body is not acceptable JSON: {exc}") from exc
    except RecursionError as exc:
        raise BadRequest(TOO_DEEP) from exc
    except ValueError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    refuse_unstorable(text, value)
    return value


def refuse_unstorable(text: str, value: Any) -> None:
    """The checks of `decode_body` after the decoder: `value`, decoded from (a part of)
    `text`, nests no deeper than MAX_DEPTH and holds no lone surrogate. `dbsvc import`
    applies them to each line's record, so a file cannot store what a request could not."""
    # Nesting deeper than MAX_DEPTH needs more than MAX_DEPTH opening brackets.
    if text.count("[") + text.count("{") > MAX_DEPTH and _nests_deeper(value, MAX_DEPTH):
        raise BadRequest(TOO_DEEP)
    if "\\u" in text and _ESCAPED_SURROGATE_RE.search(text) is not None:
        _refuse_surrogates(value)


def _nests_deeper(value: Any, limit: int) -> bool:
    """True when arrays and objects nest more than `limit` levels (`value` is level 1).
    Level by level, without recursion: the point is to refuse what recursion could not
    handle, and a wide body costs one visit per child."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 1
    while level:
        below = []
        for node in level:
            for child in node.values() if type(node) is dict else node:
                if type(child) is dict or type(child) is list:
                    below.append(child)
        if below and depth == limit:
            return True
        level = below
        depth += 1
    return False


def _surrogate_text(value: Any) -> str | None:
    """The first string (object keys included) in `value` holding a lone surrogate, or None."""
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) is str:
            if not node.isascii() and SURROGATE_RE.search(node) is not None:
                return node
        elif type(node) is dict:
            stack.extend(node.keys())
            stack.extend(node.values())
        elif type(node) is list:
            stack.extend(node)
    return None


def _refuse_surrogates(body: Any) -> None:
    """BadRequest for a lone surrogate in a key of the body object or in a body that is
    not an object; ConstraintViolation listing every field whose value holds one."""
    why = "expected Unicode text (a lone surrogate has no UTF-8 form, RFC 8259 §8.2)"
    if type(body) is not dict:
        found = _surrogate_text(body)
        if found is not None:
            raise BadRequest(f"request body holds a lone surrogate in the string {show(found)}: {why}")
        return
    errors = []
    for key, value in body.items():
        if SURROGATE_RE.search(key) is not None:
            raise BadRequest(f"request body holds a lone surrogate in the key {show(key)}: {why}")
        found = _surrogate_text(value)
        if found is not None:
            message = f"{key!r} holds a lone surrogate in the string {show(found)}: {why}"
            errors.append({"field": key, "message": message})
    if errors:
        raise ConstraintViolation(errors)
