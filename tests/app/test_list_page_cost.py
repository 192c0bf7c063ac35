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

from dbsvc.cursors import CURSOR_VERSION, decode_cursor, encode_cursor
from dbsvc.operators import sort_text
from dbsvc.readcache import EncodedRecords
from support.blog import BLOG


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


MODULE = BLOG  # compiled once per process (tests/support/blog.py)
POST = MODULE.BY_NAME["BlogPost"]


def post(id_: int, title: str) -> dict:
    return {"id": id_, "author_id": 1, "title": title, "body": "b", "published": True, "score": 1.5, "tags": None}


def test_a_page_of_the_same_record_objects_is_joined_once():
    cache = EncodedRecords(list(MODULE.MODELS), pages=2)
    records = [post(1, "a"), post(2, "b")]
    cache.encode_page(POST, records)  # joined once: kept from its second join (admission.py)
    first = cache.encode_page(POST, records)
    assert json.loads(b"[" + first + b"]") == records
    assert cache.encode_page(POST, list(records)) is first  # the same objects: kept
    newer = [post(1, "new"), records[1]]  # a new version of record 1
    assert json.loads(b"[" + cache.encode_page(POST, newer) + b"]")[0]["title"] == "new"
    equal = [post(1, "a"), post(2, "b")]  # equal values, other objects: joined again
    again = cache.encode_page(POST, equal)
    assert again == first and again is not first
    for page in (newer, newer, equal):  # newer's second and third joins, equal's second:
        cache.encode_page(POST, page)  # two pages kept since (newer's first was forgotten)
    assert cache.encode_page(POST, records) is not first  # pages=2: the oldest went


def test_a_kept_page_is_not_confused_with_one_of_reused_ids():
    cache = EncodedRecords(list(MODULE.MODELS), pages=4)
    for n in range(200):  # records made and dropped: CPython reuses their addresses
        page = [post(n, f"t{n}"), post(n + 1, f"u{n}")]
        assert json.loads(b"[" + cache.encode_page(POST, page) + b"]") == page
