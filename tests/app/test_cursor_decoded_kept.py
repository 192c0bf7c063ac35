"""The cursor texts a list's reader accepted are kept with their answer (operators.py
`decode_cursor`, `_DECODED`; issue 36 item 2, docs/guide/queries.md "Cursor pages"): a
cursor asked again is one lookup, and the answer kept is only ever given back for the very
list that read it. A cursor of another model, another sort or other key kinds under the
same text is still refused word for word as the whole decode refuses it; a refusal is
never kept; the keys kept are the exact ones (a float's repr, a null, a negative id).

Fixture-free, in process.
"""

from __future__ import annotations

import base64
import json

import pytest

from dbsvc import operators
from dbsvc.errors import BadQuery
from dbsvc.operators import _decode_whole, decode_cursor, encode_cursor

KINDS = {"score": "f", "title": "s", "n": "i", "pinned": "b"}
SCORE = (("score", True),)


def text_of(value: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")


def refusal(text: str, model: str = "Post", sort=SCORE, kinds=KINDS) -> str:  # noqa: ANN001
    with pytest.raises(BadQuery) as caught:
        decode_cursor(text, model, sort, kinds, "i")
    return str(caught.value)


def whole_refusal(text: str, model: str = "Post", sort=SCORE, kinds=KINDS) -> str:  # noqa: ANN001
    with pytest.raises(BadQuery) as caught:
        _decode_whole(text, model, sort, kinds, "i")
    return str(caught.value)


@pytest.mark.parametrize(
    "sort, keys, id_",
    [
        (SCORE, [0.1], 7),  # a float's repr: 0.1, never 0.1000000000000000055...
        (SCORE, [1e-300], 8),
        (SCORE, [-0.0], 9),  # kept as -0.0, not 0.0
        (SCORE, [None], 10),  # a null key
        (SCORE, [2.5], -11),  # a negative id
        ((("n", False), ("score", True)), [-3, 2.5], 12),
        ((("title", False),), ["\u00e9t\u00e9"], 13),
        ((), [], 2**40),  # id order
    ],
)
def test_a_cursor_asked_again_is_answered_from_what_was_kept_with_the_same_keys(sort, keys, id_):
    operators._READERS.clear()
    operators._DECODED.clear()
    text = encode_cursor("Post", sort, keys, id_)
    first = decode_cursor(text, "Post", sort, KINDS, "i")
    assert first == _decode_whole(text, "Post", sort, KINDS, "i") == (tuple(keys), id_)
    assert text in operators._DECODED  # kept ...
    again = decode_cursor(text, "Post", sort, KINDS, "i")
    assert again is first  # ... and given back, not decoded again
    assert [repr(key) for key in again[0]] == [repr(key) for key in keys]


def test_a_kept_cursor_is_refused_for_another_model_sort_or_key_kinds():
    """The answer is kept with the reader that read it: a lookup by the text alone would
    give another model's or sort's list this list's keys."""
    operators._READERS.clear()
    operators._DECODED.clear()
    text = encode_cursor("Post", SCORE, [2.5], 7)
    assert decode_cursor(text, "Post", SCORE, KINDS, "i") == ((2.5,), 7)
    assert refusal(text, model="User") == whole_refusal(text, model="User")
    assert "was made for a list of 'Post', not 'User'" in refusal(text, model="User")
    assert refusal(text, sort=(("score", False),)) == whole_refusal(text, sort=(("score", False),))
    assert "was made for sort='-score'" in refusal(text, sort=(("score", False),))
    as_str = {**KINDS, "score": "s"}  # the same list name, its score now a str key
    assert refusal(text, kinds=as_str) == whole_refusal(text, kinds=as_str)
    assert decode_cursor(text, "Post", SCORE, KINDS, "i") == ((2.5,), 7)  # still ours


def test_a_refused_cursor_is_never_kept_and_is_refused_each_time():
    operators._DECODED.clear()
    for text in ("!!!!", text_of(["c1", "Post", "-score", ["2.5"], 7]), text_of(["c1", "Post", "-score", [2.5]])):
        assert refusal(text) == refusal(text) == whole_refusal(text)
    assert not operators._DECODED


def test_the_texts_kept_are_bounded_and_the_oldest_go_first():
    operators._DECODED.clear()
    texts = [encode_cursor("Post", SCORE, [n / 8], n) for n in range(operators.DECODED + 5)]
    for n, text in enumerate(texts):
        assert decode_cursor(text, "Post", SCORE, KINDS, "i") == ((n / 8,), n)
        assert len(operators._DECODED) <= operators.DECODED
    assert texts[0] not in operators._DECODED and texts[-1] in operators._DECODED
