"""A cursor's float key written as an int past the floats' range (`1` and 400 zeros; JSON
has ints of any length) is a malformed cursor, refused as the app refuses any bad cursor
(docs/guide/queries.md "Cursor pages"), where `math.isfinite` of it raised OverflowError out
of the decode and out of the app (a 500). Fixture-free in process, plus the blog application
over a real store (support/app_calls.py)."""

from __future__ import annotations

import base64
import json

import pytest

from dbsvc.cursors import decode_cursor, decode_whole, encode_cursor
from dbsvc.errors import BadQuery
from support.app_calls import answer, fresh

KINDS = {"score": "f", "title": "s"}
SCORE = (("score", True),)


def text_of(value: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")


def refusal(decode, text: str) -> str:  # noqa: ANN001
    with pytest.raises(BadQuery) as caught:
        decode(text, "Post", SCORE, KINDS, "i")
    return str(caught.value)


def test_a_float_key_past_the_floats_range_is_malformed_not_an_overflow():
    """Fails before session 22: OverflowError from `math.isfinite(10**400)`."""
    for keys in ([10**400], [-(10**400)]):
        text = text_of(["c1", "Post", "-score", keys, 7])
        assert refusal(decode_cursor, text).startswith(f"malformed cursor {text[:39] + chr(0x2026)!r}")
        assert refusal(decode_cursor, text) == refusal(decode_whole, text)
    near = text_of(["c1", "Post", "-score", [10**300], 7])  # an int a float holds: its float
    assert decode_cursor(near, "Post", SCORE, KINDS, "i") == ((1e300,), 7)


def test_a_float_key_past_the_floats_range_is_a_400_refusal_of_the_app(tmp_path, stores):
    """Fails before session 22: an OverflowError, no RequestError, left the app (the
    server's one place that makes problem+json of a RequestError answered 500 for it)."""
    app = fresh(stores(str(tmp_path), sync="off"))
    big = text_of(["c1", "BlogPost", "-score", [10**400], 7])
    with pytest.raises(BadQuery) as caught:
        answer(app, f"/api/blog-post?sort=-score&cursor={big}")
    assert caught.value.status == 400 and str(caught.value).startswith("malformed cursor")
    fine = encode_cursor("BlogPost", SCORE, [2.5], 7)
    assert answer(app, f"/api/blog-post?sort=-score&cursor={fine}")[0] == 200
