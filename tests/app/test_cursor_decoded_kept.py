"""Cursor texts accepted are kept decoded on their list's reader (cursors.py
`decode_cursor`, `CursorReader.keep`; docs/decisions.md, "Cursor texts kept decoded per list"): a
client paging or polling sends the same texts again, and the second decode of one is a
dict lookup. What is held here: the second answer is the first; a refusal is never kept
and is refused in the same words again; a text over `KEPT_CURSOR` characters is not kept;
a reader holding `KEPT_CURSORS` texts empties, and all of them do after `KEPT_ALL` kept;
a text kept for one list answers for no other list (another model, sort, id kind or key
kinds refuses it as before).

Fixture-free, in process; each test starts from no text kept (`forget_cursors`) and
decodes for lists of its own model names, so what other tests kept does not count.
"""

from __future__ import annotations

import base64
import json

import pytest

from dbsvc.cursors import (
    KEPT_ALL,
    KEPT_CURSOR,
    KEPT_CURSORS,
    decode_cursor,
    encode_cursor,
    forget_cursors,
    kept_cursors,
)
from dbsvc.errors import BadQuery, MalformedCursor
from support.blog import BLOG

KINDS = {"score": "f", "title": "s"}
SCORE = (("score", True),)
TITLE = (("title", False),)


def refusal(text: str, model: str, sort, kinds=KINDS, id_kind: str = "i") -> tuple[type, str]:  # noqa: ANN001
    with pytest.raises(BadQuery) as caught:
        decode_cursor(text, model, sort, kinds, id_kind)
    return type(caught.value), str(caught.value)


def test_an_accepted_cursor_is_kept_and_its_second_decode_is_the_same_answer():
    forget_cursors()
    text = encode_cursor("KeptA", SCORE, [2.5], 7)
    assert kept_cursors("KeptA", SCORE, "i") == 0
    first = decode_cursor(text, "KeptA", SCORE, KINDS, "i")
    assert first == ((2.5,), 7) and kept_cursors("KeptA", SCORE, "i") == 1
    again = decode_cursor(text, "KeptA", SCORE, KINDS, "i")
    assert again is first and kept_cursors("KeptA", SCORE, "i") == 1
    # a text the reader does not read (json.dumps' spaces: the whole decode) is kept too
    spaced = base64.urlsafe_b64encode(json.dumps(["c1", "KeptA", "-score", [2.5], 7]).encode()).decode().rstrip("=")
    assert decode_cursor(spaced, "KeptA", SCORE, KINDS, "i") == first and kept_cursors("KeptA", SCORE, "i") == 2
    # the generated decode of a schema's model goes through the same kept texts
    post = BLOG.BY_NAME["BlogPost"]
    made = encode_cursor("BlogPost", TITLE, ["a title"], 9)
    assert post.decode_cursor(made, TITLE) == (("a title",), 9)
    assert kept_cursors("BlogPost", TITLE, "i") == 1
    assert post.decode_cursor(made, TITLE) == (("a title",), 9)
    assert kept_cursors("BlogPost", TITLE, "i") == 1


def test_a_list_no_cursor_was_decoded_for_keeps_none():
    # No reader at all (no text of this list ever decoded, accepted or refused): 0, as for
    # a reader that keeps none (the answer a probe reads before the first page).
    forget_cursors()
    assert kept_cursors("KeptNever", SCORE, "i") == 0
    text = encode_cursor("KeptNever", SCORE, [1.5], 2)
    assert decode_cursor(text, "KeptNever", SCORE, KINDS, "i") == ((1.5,), 2)
    assert kept_cursors("KeptNever", SCORE, "i") == 1
    assert kept_cursors("KeptNever", SCORE, "s") == 0  # another id kind: still no reader


def test_a_refused_text_is_never_kept_and_is_refused_the_same_way_again():
    forget_cursors()
    texts = [
        "not a cursor!",  # no base64
        encode_cursor("KeptB", SCORE, ["2.5"], 7),  # a str where the float key goes
        encode_cursor("KeptB", SCORE, [2.5], "7"),  # a str id where an int goes
        encode_cursor("Other", SCORE, [2.5], 7),  # another model's
        encode_cursor("KeptB", TITLE, ["t"], 7),  # another sort's
    ]
    decode_cursor(encode_cursor("KeptB", SCORE, [1.0], 1), "KeptB", SCORE, KINDS, "i")  # the reader made
    for text in texts:
        first = refusal(text, "KeptB", SCORE)
        assert kept_cursors("KeptB", SCORE, "i") == 1
        assert refusal(text, "KeptB", SCORE) == first
        assert kept_cursors("KeptB", SCORE, "i") == 1
    assert refusal(texts[0], "KeptB", SCORE)[0] is MalformedCursor
    assert "made for a list of 'Other'" in refusal(texts[3], "KeptB", SCORE)[1]


def test_a_text_over_kept_cursor_characters_is_answered_and_not_kept():
    forget_cursors()
    by_length = {len(encode_cursor("KeptC", TITLE, ["x" * n], 7)): n for n in range(200)}
    at_most, over = by_length[KEPT_CURSOR], min(length for length in by_length if length > KEPT_CURSOR)
    longest = encode_cursor("KeptC", TITLE, ["x" * at_most], 7)
    assert decode_cursor(longest, "KeptC", TITLE, KINDS, "i") == (("x" * at_most,), 7)
    assert kept_cursors("KeptC", TITLE, "i") == 1  # exactly KEPT_CURSOR characters: kept
    longer = encode_cursor("KeptC", TITLE, ["x" * by_length[over]], 7)
    for _ in range(2):
        assert decode_cursor(longer, "KeptC", TITLE, KINDS, "i") == (("x" * by_length[over],), 7)
        assert kept_cursors("KeptC", TITLE, "i") == 1


def test_a_reader_holding_kept_cursors_texts_empties_before_the_next():
    forget_cursors()
    texts = [encode_cursor("KeptD", SCORE, [0.5], i) for i in range(KEPT_CURSORS + 1)]
    for i, text in enumerate(texts[:-1]):
        assert decode_cursor(text, "KeptD", SCORE, KINDS, "i") == ((0.5,), i)
    assert kept_cursors("KeptD", SCORE, "i") == KEPT_CURSORS
    assert decode_cursor(texts[0], "KeptD", SCORE, KINDS, "i") == ((0.5,), 0)  # kept: nothing added
    assert kept_cursors("KeptD", SCORE, "i") == KEPT_CURSORS
    assert decode_cursor(texts[-1], "KeptD", SCORE, KINDS, "i") == ((0.5,), KEPT_CURSORS)
    assert kept_cursors("KeptD", SCORE, "i") == 1  # emptied, then the new text kept
    assert decode_cursor(texts[0], "KeptD", SCORE, KINDS, "i") == ((0.5,), 0)  # decoded again
    assert kept_cursors("KeptD", SCORE, "i") == 2


def test_every_reader_empties_when_kept_all_texts_were_kept_in_all():
    forget_cursors()
    lists = [f"KeptE{n}" for n in range(KEPT_ALL // KEPT_CURSORS)]
    for model in lists:
        for i in range(KEPT_CURSORS):
            decode_cursor(encode_cursor(model, (), [], i), model, (), KINDS, "i")
    assert [kept_cursors(model, (), "i") for model in lists] == [KEPT_CURSORS] * len(lists)
    assert decode_cursor(encode_cursor(lists[1], (), [], -1), lists[1], (), KINDS, "i") == ((), -1)
    assert [kept_cursors(model, (), "i") for model in lists] == [0, 1] + [0] * (len(lists) - 2)


def test_a_text_kept_for_one_list_answers_for_no_other_list():
    forget_cursors()
    text = encode_cursor("KeptF", SCORE, [2.5], 7)
    assert decode_cursor(text, "KeptF", SCORE, KINDS, "i") == ((2.5,), 7)
    assert kept_cursors("KeptF", SCORE, "i") == 1
    another_model = refusal(text, "KeptG", SCORE)
    assert "made for a list of 'KeptF', not 'KeptG'" in another_model[1]
    another_sort = refusal(text, "KeptF", (("score", False),))
    assert "made for sort='-score'" in another_sort[1]
    assert refusal(text, "KeptF", SCORE, id_kind="s")[0] is MalformedCursor  # an int id, a str id wanted
    assert refusal(text, "KeptF", SCORE, kinds={"score": "i"})[0] is MalformedCursor  # 2.5 is no int key
    for model, sort, id_kind in (("KeptG", SCORE, "i"), ("KeptF", (("score", False),), "i"), ("KeptF", SCORE, "s")):
        assert kept_cursors(model, sort, id_kind) == 0
    # the same list with its own kinds again: a reader made afresh, which reads the text anew
    assert decode_cursor(text, "KeptF", SCORE, KINDS, "i") == ((2.5,), 7)
    assert kept_cursors("KeptF", SCORE, "i") == 1
