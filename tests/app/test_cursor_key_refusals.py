"""A cursor whose id or sort key is not of its field's kind was made by no Link of ours and
is malformed (docs/guide/queries.md "Cursor pages"): a null id (every record has one, while
a null sort key is a real place in a list: records whose field is null), an int id written
as a string or a bool, a bool key written as 1. Both decodes, the reader of our own cursors
and the whole decode, are asked, and the blog application over a real store answers 400.
Fixture-free in process (support/app_calls.py).

Why: cursors.py `_key`'s checks of a null, an int and a bool were never sent a wrong
value; each made always true (`_key` 3, 8, 33, docs/mutation.md session 23) passed every
earlier test."""

from __future__ import annotations

import base64
import json
import tempfile

import pytest

from dbsvc.cursors import decode_cursor, decode_whole, encode_cursor
from dbsvc.errors import BadQuery
from support.app_calls import answer, fresh
from support.storage import open_store

KINDS = {"score": "f", "published": "b", "title": "s"}
SCORE = (("score", True),)
PUBLISHED = (("published", False),)
TITLE = (("title", False),)


def text_of(value: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")


@pytest.mark.parametrize("decode", [decode_cursor, decode_whole], ids=["reader", "whole"])
def test_a_cursor_with_a_null_id_is_malformed_and_a_null_key_is_a_place(decode):
    null_id = text_of(["c1", "Post", "-score", [2.5], None])
    with pytest.raises(BadQuery, match="^malformed cursor"):
        decode(null_id, "Post", SCORE, KINDS, "i")
    null_key = text_of(["c1", "Post", "-score", [None], 7])
    assert decode(null_key, "Post", SCORE, KINDS, "i") == ((None,), 7)
    assert decode(encode_cursor("Post", SCORE, [None], 7), "Post", SCORE, KINDS, "i") == ((None,), 7)


@pytest.mark.parametrize("decode", [decode_cursor, decode_whole], ids=["reader", "whole"])
@pytest.mark.parametrize(
    ("sort", "sort_text", "key", "id_"),
    [
        (SCORE, "-score", 2.5, "7"),  # an int id as a string
        (SCORE, "-score", 2.5, True),  # an int id as a bool (bool is an int to Python)
        (SCORE, "-score", 2.5, 7.0),  # an int id as a float
        (PUBLISHED, "published", 1, 7),  # a bool key as an int
        (PUBLISHED, "published", "true", 7),  # a bool key as a string
        (TITLE, "title", 5, 7),  # a str key as an int
        (SCORE, "-score", "2.5", 7),  # a float key as a string
        (SCORE, "-score", False, 7),  # a float key as a bool
    ],
)
def test_a_cursor_whose_key_or_id_is_of_another_kind_is_malformed(decode, sort, sort_text, key, id_):
    text = text_of(["c1", "Post", sort_text, [key], id_])
    with pytest.raises(BadQuery, match="^malformed cursor"):
        decode(text, "Post", sort, KINDS, "i")
    # The same text with a key and an id of their kinds is taken: the refusal is the value's.
    right = {"-score": 2.5, "published": True, "title": "t"}[sort_text]
    assert decode(text_of(["c1", "Post", sort_text, [right], 7]), "Post", sort, KINDS, "i") == ((right,), 7)


def test_the_app_refuses_a_cursor_with_a_null_id_with_a_400():
    with tempfile.TemporaryDirectory(prefix="dbsvc-null-id-") as directory:
        store = open_store(directory, sync="off")
        try:
            app = fresh(store)
            with pytest.raises(BadQuery) as caught:
                answer(app, f"/api/blog-post?sort=-score&cursor={text_of(['c1', 'BlogPost', '-score', [2.5], None])}")
            assert caught.value.status == 400 and str(caught.value).startswith("malformed cursor")
        finally:
            store.close()
