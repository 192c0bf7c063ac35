"""The app-side modules of issue 36 at their decisions (docs/mutation.md, session 8):
operators.py `decode_cursor` (each refusal, word for word, and each key kind), expand.py's
entries kept per tick (rule 6), config.py `SERVICE_LIST_CACHE_BYTES`, and storage/tenants.py's
drop refused while a workers reader holds its lock.

No pytest fixture (the in-process mutation runner, bench/mutation_inprocess.py, calls these
functions itself): each test that needs files makes its own directory.
"""

from __future__ import annotations

import base64
import json

import pytest

from dbsvc.errors import BadQuery
from dbsvc.operators import decode_cursor, encode_cursor

KINDS = {"score": "f", "title": "s", "n": "i", "pinned": "b"}


def cursor_of(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def refusal(text: str, model: str = "Post", sort=(("score", True),), id_kind: str = "i") -> str:
    with pytest.raises(BadQuery) as refused:
        decode_cursor(text, model, sort, KINDS, id_kind)
    return str(refused.value)


def shown(text: str) -> str:
    """A cursor as a refusal quotes it (docs/guide: at most 40 characters)."""
    return text if len(text) <= 40 else text[:39] + "…"


def malformed(text: str) -> str:
    return f"malformed cursor {shown(text)!r}: expected the cursor of a Link rel=\"next\" header of this list"


@pytest.mark.parametrize(
    "sort, keys, id_, kind, decoded",
    [
        ((("score", True),), [2.5], 7, "i", ((2.5,), 7)),
        ((("score", True),), [3], 7, "i", ((3.0,), 7)),  # an int score is a float key
        ((("score", False), ("title", False)), [None, "ab"], 1, "i", ((None, "ab"), 1)),
        ((("n", True),), [4], "x", "s", ((4,), "x")),
        ((("pinned", False),), [True], 2, "i", ((True,), 2)),
        ((), [], 9, "i", ((), 9)),
    ],
)
def test_a_cursor_of_ours_decodes_to_its_keys_and_id(sort, keys, id_, kind, decoded):
    result = decode_cursor(encode_cursor("Post", sort, keys, id_), "Post", sort, KINDS, kind)
    assert result == decoded and [type(k) for k in result[0]] == [type(k) for k in decoded[0]]


@pytest.mark.parametrize(
    "value",
    [
        ["c2", "Post", "-score", [2.5], 7],  # another version
        ["c1", "Post", "-score", [2.5]],  # four items
        ["c1", "Post", "-score", [2.5], 7, 8],  # six
        {"c1": 1},
        "c1",
        ["c1", "Post", "-score", 2.5, 7],  # keys not a list
        ["c1", "Post", "-score", [], 7],  # too few keys
        ["c1", "Post", "-score", [2.5, 1.0], 7],  # too many
        ["c1", "Post", "-score", ["2.5"], 7],  # a str for a float key
        ["c1", "Post", "-score", [True], 7],  # a bool is no number here
        ["c1", "Post", "-score", [2.5], None],  # an id is never null
        ["c1", "Post", "-score", [2.5], "7"],  # a str id where ids are ints
        ["c1", "Post", "-score", [2.5], 7.0],
        ["c1", "Post", "-score", [2.5], True],
    ],
)
def test_a_cursor_not_of_this_shape_is_malformed(value):
    text = cursor_of(value)
    assert refusal(text) == malformed(text)


@pytest.mark.parametrize(
    "sort, key, id_kind",
    [
        (("n", False), 2.0, "i"),
        (("n", False), True, "i"),
        (("n", False), "2", "i"),
        (("title", False), 2, "i"),
        (("pinned", False), 1, "i"),
        (("pinned", False), "true", "i"),
        (("n", False), 2, "s"),  # the id 7 is no str
        (("n", False), 2, "b"),
        (("n", False), 2, "x"),  # a kind of no index: nothing fits it
    ],
)
def test_a_key_or_id_of_the_wrong_kind_is_malformed(sort, key, id_kind):
    text = cursor_of(["c1", "Post", sort_text_of(sort), [key], 7])
    assert refusal(text, sort=(sort,), id_kind=id_kind) == malformed(text)


def sort_text_of(sort: tuple[str, bool]) -> str:
    return ("-" if sort[1] else "") + sort[0]


def test_a_float_key_must_be_finite_and_an_int_or_a_float():
    for raw in (b'["c1","Post","-score",[Infinity],7]', b'["c1","Post","-score",[NaN],7]'):
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        assert refusal(text) == malformed(text)
    big = cursor_of(["c1", "Post", "-score", [10**400], 7])  # an int too large for a float
    with pytest.raises((BadQuery, OverflowError)):
        decode_cursor(big, "Post", (("score", True),), KINDS, "i")
    assert decode_cursor(cursor_of(["c1", "Post", "-score", [-0.0], 7]), "Post", (("score", True),), KINDS, "i") == (
        (-0.0,),
        7,
    )


@pytest.mark.parametrize(
    "text",
    [
        "!!!!",  # not base64
        "a",  # one character: no whole byte
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),  # not UTF-8
        base64.urlsafe_b64encode(b"[1,").decode(),  # not JSON
        "",
    ],
)
def test_text_that_is_no_json_under_base64url_is_malformed(text):
    assert refusal(text) == malformed(text)


def test_a_cursor_of_4096_characters_is_read_and_one_more_is_refused_unread():
    def padded(spaces: int) -> str:
        return cursor_of(["c1", "Post", "title", ["t" * 3000 + " " * spaces], 7])

    spaces = next(n for n in range(200) if len(padded(n)) >= 4096)
    fits, over = padded(spaces), padded(spaces + 1)
    assert len(fits) == 4096 and len(over) > 4096
    assert decode_cursor(fits, "Post", (("title", False),), KINDS, "i") == (("t" * 3000 + " " * spaces,), 7)
    assert refusal(over, sort=(("title", False),)) == malformed(over)


def test_a_cursor_of_another_list_is_refused_naming_the_list_it_came_from():
    text = encode_cursor("User", (("score", True),), [1.0], 1234)
    assert len(text) > 40 and refusal(text) == f"cursor {text[:39] + '…'!r} was made for a list of 'User', not 'Post'"
    short = encode_cursor("U", (), [], 7)
    assert len(short) <= 40 and len(encode_cursor("User", (), [], 7)) <= 40
    assert refusal(short, sort=()) == f"cursor {short!r} was made for a list of 'U', not 'Post'"
    sorted_ = encode_cursor("Post", (("score", False),), [1.0], 123456)
    assert len(sorted_) > 40 and refusal(sorted_) == (
        f"cursor {sorted_[:39] + '…'!r} was made for sort='score', and this request sorts by '-score': "
        "a cursor continues the list it came from, with the same sort"
    )


def test_a_refusal_quotes_40_characters_whole_and_41_cut_to_39_and_an_ellipsis():
    forty = cursor_of(["c1", "Post", "-score", [2.5], "abcdefgh"])[:40]
    assert len(forty) == 40 and refusal(forty) == (
        f"malformed cursor {forty!r}: expected the cursor of a Link rel=\"next\" header of this list"
    )
    longer = forty + "A"
    assert refusal(longer) == (
        f"malformed cursor {longer[:39] + '…'!r}: expected the cursor of a Link rel=\"next\" header of this list"
    )
