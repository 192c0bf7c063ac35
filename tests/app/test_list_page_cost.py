"""A list page's common parts, made cheaper (issue 36 item 2, "A page of 20 records" in
bench/README.md), hold the bytes they had: the `cursor` of a `Link` header is the very
base64url of the `json.dumps` text it was made from before, for every kind of index key
(int, float, str with escapes and non-ASCII, bool, null, a non-finite float, a big int).
"""

from __future__ import annotations

import base64
import json
import math

from hypothesis import given
from hypothesis import strategies as st

from dbsvc.operators import CURSOR_VERSION, decode_cursor, encode_cursor, sort_text


def json_cursor(model: str, sort: tuple, keys: list, id_: object) -> str:
    """A cursor as `encode_cursor` made it with json.dumps (commit cb1a4ce)."""
    text = json.dumps([CURSOR_VERSION, model, sort_text(sort), list(keys), id_], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode("ascii")


KEYS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
    st.text(max_size=12),
)
NAMES = st.text(min_size=1, max_size=10)


@given(
    model=NAMES,
    sort=st.lists(st.tuples(NAMES, st.booleans()), max_size=3).map(tuple),
    keys=st.lists(KEYS, max_size=3),
    id_=st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.text(max_size=12)),
)
def test_cursor_text_is_the_json_dumps_one(model, sort, keys, id_):
    assert encode_cursor(model, sort, keys, id_) == json_cursor(model, sort, keys, id_)


def test_cursor_text_of_edge_keys_is_the_json_dumps_one():
    cases = [
        ("BlogPost", (("score", True),), [99.89], 2054),
        ("Post", (), [], 3),
        ("Pöst", (("t", False), ("x", True)), ['a"\\\u00e9\U0001f600\n\x00', None], "id/ü"),
        ("P", (("b", False),), [True], -5),
        ("P", (("f", False),), [1e16], 1),
        ("P", (("f", False),), [-0.0], 1),
        ("P", (("f", False),), [math.inf], 1),
        ("P", (("f", False),), [5e-324], 1),
        ("P", (("i", True),), [2**70], 1),
    ]
    for model, sort, keys, id_ in cases:
        assert encode_cursor(model, sort, keys, id_) == json_cursor(model, sort, keys, id_), (model, keys)


def test_cursor_made_fast_decodes_to_its_keys():
    sort = (("score", True), ("title", False))
    text = encode_cursor("Post", sort, [2.5, "\u00e9t\u00e9"], 7)
    assert decode_cursor(text, "Post", sort, {"score": "f", "title": "s"}, "i") == ((2.5, "\u00e9t\u00e9"), 7)
