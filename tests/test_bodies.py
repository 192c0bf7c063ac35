"""`decode_body` reads a flat object of scalars without the strict decoder's hooks
(dbsvc/bodies.py, `_flat_object`): every body, flat or not, gets exactly what the strict
decoder and `refuse_unstorable` give it, the same value or the same refusal, word for word."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbsvc.bodies import decode_body, decode_body_strictly
from dbsvc.errors import BadRequest, ConstraintViolation


def outcome(decode: Callable[[str], Any], text: str) -> object:
    """What `decode` makes of `text`: the value, or the refusal's type, words and errors."""
    try:
        return decode(text)
    except (BadRequest, ConstraintViolation) as exc:
        return ("refused", type(exc).__name__, str(exc), getattr(exc, "errors", None))


def agree(text: str) -> object:
    """Assert that decode_body and the strict way make the same of `text`; return it."""
    found, reference = outcome(decode_body, text), outcome(decode_body_strictly, text)
    assert same_types(found, reference), (text, found, reference)
    return found


def same_types(a: object, b: object) -> bool:
    """Equal with the same types throughout (1 == 1.0 == True, but a body's float stays one)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return a == b
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_types(a[k], b[k]) for k in a)  # type: ignore[index]
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same_types, a, b))  # type: ignore[arg-type]
    if isinstance(a, float):
        return math.copysign(1.0, a) == math.copysign(1.0, b) and a == b  # type: ignore[arg-type]
    return a == b


PEERS_POST = '{"author_id": 7, "title": "bench 1-2", "body": "lorem ipsum", "score": 42.5}'

CASES = [
    PEERS_POST,
    '{"score": 3}',
    '{"score": 3.0, "n": -0.0, "big": 1.7976931348623157e308, "tiny": 5e-324}',
    '{"published": true, "tags": null, "flag": false}',
    "{}",
    '{"title": "a:b", "body": "c"}',  # a colon in a string: the strict way, the same value
    '{"title": "caf\u00e9"}',  # not ASCII: the strict way
    '{"title": "\\u00e9"}',
    '{"title": "\\ud83d\\ude00"}',  # an escaped pair: one character
    '{"caf\u00e9": 1}',
    '{"tags": ["a", "b"], "n": 1}',
    '{"profile": {"x": 1}}',
    ' {"score": 1}',
    '{"score": 1}\n',
    "\t{}\r\n",
    # not an object: no flat case (a body that is not an object is the validator's 400)
    "[]",
    "[1, 2]",
    '"::"',
    "1",
    "null",
]

REFUSED = [
    ('{"a": 1, "a": 2}', "names the member"),
    ('{"a": 1, "a": "x:y"}', "names the member"),  # the colon in the string makes the count up
    ('{"a": 1, "b": "::", "a": 2}', "names the member"),
    ('{"score": NaN}', "NaN is not valid JSON"),
    ('{"score": Infinity}', "Infinity is not valid JSON"),
    ('{"score": -Infinity}', "-Infinity is not valid JSON"),
    ('{"score": 1e400}', "out of range"),
    ('{"score": -1e400}', "out of range"),
    ('{"title": "\\ud800"}', "lone surrogate"),
    ('{"\\ud800": 1}', "lone surrogate in the key"),
    ('{"a": 1,}', "not valid JSON"),
    ('{"a": }', "not valid JSON"),
    ('{"a": 1} {"b": 2}', "not valid JSON"),
    ('{"a": 1', "not valid JSON"),
    ('{"a": 1}x', "Extra data"),  # as many ':' as members, but more after the object
    ('{"a": 1}}', "Extra data"),
    ('{"tags": ' + "[" * 70 + "]" * 70 + "}", "deeper than"),
    ('{"tags": ' + "[" * 5000 + "]" * 5000 + "}", "deeper than"),
    ('{"n": ' + "9" * 5000 + "}", "not valid JSON"),
    ('{"title": "a\nb"}', "not valid JSON"),  # a raw control character in a string
]


@pytest.mark.parametrize("text", CASES)
def test_decode_body_gives_the_strict_value(text: str) -> None:
    assert not isinstance(agree(text), tuple)


@pytest.mark.parametrize(("text", "words"), REFUSED)
def test_decode_body_refuses_what_the_strict_way_refuses_in_its_words(text: str, words: str) -> None:
    found = agree(text)
    assert isinstance(found, tuple) and found[0] == "refused", found
    assert words in found[2]


def test_a_flat_body_of_ascii_scalars_is_the_flat_case() -> None:
    """The peers' POST body decodes to its fields with their JSON types (the flat case)."""
    found = decode_body(PEERS_POST)
    assert list(found) == ["author_id", "title", "body", "score"]
    assert type(found["author_id"]) is int and type(found["score"]) is float


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
    | st.sampled_from(["a:b", ":", "{", "}", "[", "\\u", '"', "NaN"])
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _values, max_size=6), st.booleans())
def test_decode_body_agrees_with_the_strict_way_on_any_object(body: dict, ascii_only: bool) -> None:
    text = json.dumps(body, ensure_ascii=ascii_only, separators=(",", ":") if ascii_only else (", ", ": "))
    agree(text)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c:", "d"]),
            st.sampled_from(['1', '"x:y"', '2.5', 'null', 'NaN', '1e999', '"\\ud800"', '[]', '{}']),
        ),
        max_size=5,
    )
)
def test_decode_body_agrees_with_the_strict_way_on_written_members(members: list[tuple[str, str]]) -> None:
    """Members written as text, names repeated and values refused included."""
    text = "{" + ", ".join(f'"{name}": {value}' for name, value in members) + "}"
    agree(text)
