"""A cursor whose keys are numbers and whose id is an int (a -score page, id order) is read
from its number texts by one pattern (cursors.py `CursorReader.numbers`, `_numbers`),
without the JSON scanner: every text is accepted or refused exactly as the whole decode
(`decode_whole`) accepts or refuses it, to the same keys of the same types and signs
(compared by `repr`, so -0.0 is not 0.0 and 3 is not 3.0), word for word.

The texts are the numbers JSON allows and the ones it does not but Python's `float()` and
`int()` would read (leading zeros, `+`, `_`, a bare point, spaces, non-ASCII digits), plus
the values past a float's or an int64's range. Fixture-free, in process.
"""

from __future__ import annotations

import base64
import random

import pytest

from dbsvc import cursors
from dbsvc.cursors import decode_cursor, decode_whole, encode_cursor, forget_readers, kept_reader
from dbsvc.errors import BadQuery

KINDS = {"score": "f", "n": "i", "title": "s"}
SCORE = (("score", True),)
N = (("n", False),)
BOTH = (("score", True), ("n", False))

NUMBERS = [
    "49.93",
    "0.0",
    "-0.0",
    "-49.93",
    "1e5",
    "1E5",
    "1e+5",
    "1E-5",
    "-1.5e-300",
    "1.7976931348623157e+308",
    "5e-324",
    "1e400",
    "-1e400",
    "1.0e999",
    "3",
    "0",
    "-0",
    "-3",
    "1" + "0" * 400,
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "007",
    "00.5",
    "-01.5",
    "1.",
    ".5",
    "-.5",
    "+1.5",
    "+7",
    "1.5e",
    "1e",
    "1e+",
    "1_0.5",
    "1_000",
    "1.5_0",
    " 1.5",
    "1.5 ",
    "1 ",
    "NaN",
    "Infinity",
    "-Infinity",
    "inf",
    "nan",
    "0x10",
    "1.5.5",
    "--1.5",
    "\u0661.\u0662",  # Arabic-Indic digits: float() reads them, JSON does not
    "\u0667",
    "null",
    "true",
    "",
]


def text_of(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode().rstrip("=")


def shown(decode, text: str, sort) -> str:  # noqa: ANN001
    """The answer as `repr` (types and signs), or the refusal with the text taken out."""
    forget_readers()  # a reader made now (the mutation runner is one process)
    try:
        return repr(decode(text, "Post", sort, KINDS, "i"))
    except BadQuery as exc:
        quoted = text if len(text) <= 40 else text[:39] + "\u2026"
        return "refused: " + str(exc).replace(repr(quoted), "TEXT")


@pytest.mark.parametrize("number", NUMBERS, ids=[repr(n) for n in NUMBERS])
def test_a_float_keys_text_is_read_as_the_whole_decode_reads_it(number):
    text = text_of(f'["c1","Post","-score",[{number}],7]')
    assert shown(decode_cursor, text, SCORE) == shown(decode_whole, text, SCORE)


@pytest.mark.parametrize("number", NUMBERS, ids=[repr(n) for n in NUMBERS])
def test_an_ids_text_is_read_as_the_whole_decode_reads_it(number):
    for raw in (f'["c1","Post","-score",[2.5],{number}]', f'["c1","Post","",[],{number}]'):
        for sort in (SCORE, ()):
            text = text_of(raw)
            assert shown(decode_cursor, text, sort) == shown(decode_whole, text, sort)


@pytest.mark.parametrize("number", NUMBERS, ids=[repr(n) for n in NUMBERS])
def test_an_int_keys_text_and_two_number_keys_are_read_as_the_whole_decode_reads_them(number):
    for raw, sort in (
        (f'["c1","Post","n",[{number}],7]', N),
        (f'["c1","Post","-score,n",[{number},4],7]', BOTH),
        (f'["c1","Post","-score,n",[1.5,{number}],7]', BOTH),
    ):
        text = text_of(raw)
        assert shown(decode_cursor, text, sort) == shown(decode_whole, text, sort)


def test_the_reads_of_the_sign_and_the_type_are_the_scanners():
    """The cases a wrong cut gets wrong while `==` holds: -0.0 against 0.0, 3.0 against 3."""
    forget_readers()
    keys, id_ = decode_cursor(text_of('["c1","Post","-score",[-0.0],-0]'), "Post", SCORE, KINDS, "i")
    assert repr(keys) == "(-0.0,)" and repr(id_) == "0"
    keys, _id = decode_cursor(text_of('["c1","Post","-score",[-0],7]'), "Post", SCORE, KINDS, "i")
    assert repr(keys) == "(0.0,)"  # a JSON int -0 is 0, then the float 0.0 (not -0.0)
    keys, _id = decode_cursor(text_of('["c1","Post","n",[-0],7]'), "Post", N, KINDS, "i")
    assert repr(keys) == "(0,)"


def test_every_cursor_we_write_for_number_keys_and_an_int_id_is_read_by_the_pattern():
    """The cut is taken (not only correct when taken): each cursor our encoder writes for a
    float key, an int key, both, or id order is matched whole by its list's pattern and read
    to the keys and id it was made of, the JSON scanner never reached. Fails before the cut
    (no pattern); a pattern that missed, say, an exponent or a negative id fails it too."""
    rng = random.Random(25)
    scan = cursors.SCAN
    cursors.SCAN = None  # type: ignore[assignment]  # reached: a TypeError
    try:
        for _ in range(2000):
            score = rng.choice([rng.uniform(-100, 100), rng.uniform(-1e300, 1e300), 1e16, -0.0, 5e-324, 0.0])
            n = rng.randint(-(2**63), 2**63 - 1)
            id_ = rng.choice([rng.randint(-(2**63), 2**63 - 1), rng.randint(0, 10**6)])
            for sort, keys in ((SCORE, [score]), (N, [n]), (BOTH, [score, n]), ((), [])):
                forget_readers()
                text = encode_cursor("Post", sort, keys, id_)
                got_keys, got_id = decode_cursor(text, "Post", sort, KINDS, "i")
                assert repr((got_keys, got_id)) == repr((tuple(keys), id_)), text
    finally:
        cursors.SCAN = scan


def test_a_list_with_a_str_key_or_a_str_id_has_no_pattern():
    forget_readers()
    text = encode_cursor("Post", (("title", False),), ["a"], 7)
    assert decode_cursor(text, "Post", (("title", False),), KINDS, "i") == (("a",), 7)
    reader = kept_reader("Post", (("title", False),), "i")
    assert reader is not None and reader.numbers is None
    text = encode_cursor("Post", SCORE, [1.5], "x")
    assert decode_cursor(text, "Post", SCORE, KINDS, "s") == ((1.5,), "x")
    reader = kept_reader("Post", SCORE, "s")
    assert reader is not None and reader.numbers is None
