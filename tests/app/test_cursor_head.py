"""A cursor this service made is read after its head (cursors.py `decode_cursor`: the
decoded bytes checked to start with `_cursor_head(model, sort)`, only the keys and the id
parsed): every text is accepted or refused exactly as the whole decode (`decode_whole`,
the decode before that cut) accepts or refuses it, word for word.

Two oracles: the same JSON value written compactly (the form of our cursors, whose head
the reader finds) and with json.dumps' default spaces (never the head's bytes, so always
decoded whole) must get the same answer; and texts made at random from our cursors (bytes
changed, cut, added) are held to `decode_whole` itself. Fixture-free, in process.
"""

from __future__ import annotations

import base64
import json
import random

import pytest

from dbsvc import cursors
from dbsvc.cursors import (
    READERS,
    NextLinks,
    decode_cursor,
    decode_whole,
    encode_cursor,
    forget_readers,
    kept_cursors,
    kept_reader,
    next_link,
    readers_kept,
)
from dbsvc.errors import BadQuery

KINDS = {"score": "f", "title": "s", "n": "i", "pinned": "b"}
SCORE = (("score", True),)
TWO = (("score", False), ("title", True))


def text_of(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def answer(decode, text: str, sort, id_kind: str = "i"):  # noqa: ANN001, ANN201
    forget_readers()  # each answer from a reader made now (the mutation runner is one process)
    try:
        return decode(text, "Post", sort, KINDS, id_kind)
    except BadQuery as exc:  # the message quotes the text: compared with it taken out
        shown = text if len(text) <= 40 else text[:39] + "\u2026"  # as a refusal quotes it
        return ("refused", str(exc).replace(repr(shown), "TEXT"))


VALUES = [
    ["c1", "Post", "-score", [2.5], 7],
    ["c1", "Post", "-score", [3], 7],
    ["c1", "Post", "-score", [None], 7],
    ["c1", "Post", "-score", [-0.0], 7],
    ["c1", "Post", "-score", [1e308], 7],
    ["c1", "Post", "-score", [10**400], 7],
    ["c1", "Post", "-score", [2.5], 7, 8],
    ["c1", "Post", "-score", [2.5]],
    ["c1", "Post", "-score", [], 7],
    ["c1", "Post", "-score", [2.5, 1.0], 7],
    ["c1", "Post", "-score", ["2.5"], 7],
    ["c1", "Post", "-score", [True], 7],
    ["c1", "Post", "-score", [[2.5]], 7],
    ["c1", "Post", "-score", [{"a": 1}], 7],
    ["c1", "Post", "-score", [2.5], None],
    ["c1", "Post", "-score", [2.5], "7"],
    ["c1", "Post", "-score", [2.5], 7.0],
    ["c1", "Post", "-score", [2.5], [7]],
    ["c1", "Post", "score", [2.5], 7],  # another sort
    ["c1", "User", "-score", [2.5], 7],  # another model
    ["c2", "Post", "-score", [2.5], 7],
    ["c1", "Post", "-score", 2.5, 7],
]


@pytest.mark.parametrize("value", VALUES, ids=[str(v) for v in VALUES])
def test_a_compact_cursor_is_answered_as_the_same_value_with_spaces(value):
    compact = text_of(json.dumps(value, separators=(",", ":")).encode())
    spaced = text_of(json.dumps(value).encode())
    assert answer(decode_cursor, compact, SCORE) == answer(decode_cursor, spaced, SCORE)


@pytest.mark.parametrize(
    "keys, id_, id_kind",
    [
        ([1.5, "\u00e9t\u00e9 \u2603 \U0001f600"], 3, "i"),  # escaped by our encoder
        ([None, None], 4, "i"),
        ([0, ""], "x\u00e9", "s"),
        ([-1e-300, 'a "quoted" \\ one'], 9, "i"),
    ],
)
def test_a_cursor_of_ours_on_two_keys_decodes_as_the_whole_decode_does(keys, id_, id_kind):
    text = encode_cursor("Post", TWO, keys, id_)
    assert answer(decode_cursor, text, TWO, id_kind) == answer(decode_whole, text, TWO, id_kind)
    assert answer(decode_cursor, text, SCORE, id_kind) == answer(decode_whole, text, SCORE, id_kind)


def test_the_keys_after_the_head_with_utf8_are_read_as_the_whole_decode_reads_them():
    forget_readers()
    raw = '["c1","Post","score,-title",[1.5,"été"],7]'.encode()
    text = text_of(raw)
    assert decode_cursor(text, "Post", TWO[:1] + (("title", True),), KINDS, "i") == ((1.5, "été"), 7)
    for tail in (b" ", b"\n", b"x", b",", b"]", b"\xff"):
        other = text_of(raw + tail)
        assert answer(decode_cursor, other, TWO) == answer(decode_whole, other, TWO)


def test_texts_made_at_random_from_our_cursors_get_the_whole_decodes_answer():
    rng = random.Random(36)
    alphabet = b'[]{},:"\\ 0123456789.eE+-truefalsnul\xc3\xa9\x00\xffc1PostUser'
    for _ in range(3000):
        sort = rng.choice([SCORE, TWO, ()])
        keys = [rng.choice([2.5, -1, None, "t\u00e9", True, 10**20]) for _ in sort]
        raw = bytearray(
            json.dumps(
                ["c1", "Post", ",".join(("-" if d else "") + f for f, d in sort), keys, 7], separators=(",", ":")
            ).encode()
        )
        for _step in range(rng.randint(1, 3)):
            at = rng.randrange(len(raw) + 1)
            move = rng.randrange(3)
            if move == 0 and at < len(raw):
                raw[at] = rng.choice(alphabet)
            elif move == 1:
                raw.insert(at, rng.choice(alphabet))
            elif at < len(raw):
                del raw[at]
        text = text_of(bytes(raw))
        id_kind = rng.choice("isb")
        assert answer(decode_cursor, text, sort, id_kind) == answer(decode_whole, text, sort, id_kind), raw


def test_another_models_kinds_under_the_same_name_are_not_read_with_the_first_ones():
    forget_readers()
    text = encode_cursor("Post", SCORE, [2.5], 7)
    assert decode_cursor(text, "Post", SCORE, KINDS, "i") == ((2.5,), 7)
    with pytest.raises(BadQuery):  # the same list name, its score now a str key
        decode_cursor(text, "Post", SCORE, {**KINDS, "score": "s"}, "i")
    assert decode_cursor(text, "Post", SCORE, KINDS, "i") == ((2.5,), 7)


OURS = [  # (sort, keys, id, id kind): every key kind, a null key, a str id; texts with - and _
    (SCORE, [2.5], 7, "i"),
    (SCORE, [3], 8, "i"),
    (SCORE, [None], 9, "i"),
    (TWO, [-1.5, "\u00e9t\u00e9 >>> ???"], 10, "i"),
    (((("n", False),)), [4], "x\u00e9", "s"),
    ((("pinned", True),), [True], 12, "i"),
    ((), [], 2**40, "i"),
]


def test_a_cursor_of_ours_is_read_after_its_head_and_never_decoded_whole():
    """The cut itself (decisions.md, wt-rand2): each cursor this module makes is read by its
    list's reader, kept once, and the whole decode is never reached for it."""
    forget_readers()
    cursors.decode_whole = None  # type: ignore[assignment]  # reached: a TypeError
    try:
        for sort, keys, id_, kind in OURS:
            text = encode_cursor("Post", sort, keys, id_)
            first = decode_cursor(text, "Post", sort, KINDS, kind)
            reader = kept_reader("Post", sort, kind)
            assert reader is not None
            assert decode_cursor(text, "Post", sort, KINDS, kind) == first
            assert kept_reader("Post", sort, kind) is reader  # found, not made again
            assert reader.read(text) == first == decode_whole(text, "Post", sort, KINDS, kind)
    finally:
        cursors.decode_whole = decode_whole
    assert any(set(encode_cursor("Post", s, k, i)) & set("-_") for s, k, i, _ in OURS)


def test_a_cursor_of_ours_of_every_padding_and_the_longest_length_is_read_after_its_head():
    forget_readers()
    lengths = set()
    for size in range(0, 4200):
        text = encode_cursor("Post", (("title", False),), ["a" * size], 1)
        if len(text) > 4096:
            break
        if len(text) % 4 not in lengths or len(text) == 4096:
            lengths.add(len(text) % 4)
            decode_cursor(text, "Post", (("title", False),), KINDS, "i")
            reader = kept_reader("Post", (("title", False),), "i")
            assert reader is not None and reader.read(text) == ((("a" * size),), 1), len(text)
    assert lengths == {0, 2, 3}


def test_the_readers_kept_are_bounded():
    forget_readers()
    for n in range(READERS + 5):
        text = encode_cursor(f"M{n}", SCORE, [1.0], 1)
        assert decode_cursor(text, f"M{n}", SCORE, KINDS, "i") == ((1.0,), 1)
        assert readers_kept() <= READERS


def test_the_readers_are_told_and_forgotten_through_the_modules_own_names():
    """`kept_reader`, `readers_kept` and `forget_readers`, what the tests above ask in place
    of the module's dict: none before a decode, one after it (the same for the same list,
    another for another id kind), none again once forgotten, with the kept texts' count."""
    forget_readers()
    assert readers_kept() == 0 and kept_reader("Post", SCORE, "i") is None
    text = encode_cursor("Post", SCORE, [2.5], 7)
    decode_cursor(text, "Post", SCORE, KINDS, "i")
    reader = kept_reader("Post", list(SCORE), "i")  # any sequence of the sort's pairs
    assert reader is not None and readers_kept() == 1
    assert reader.read(text) == ((2.5,), 7) and reader.numbers is not None
    decode_cursor(text, "Post", SCORE, KINDS, "i")
    assert readers_kept() == 1 and kept_reader("Post", SCORE, "i") is reader
    assert kept_reader("Post", SCORE, "s") is None and kept_reader("Other", SCORE, "i") is None
    decode_cursor(encode_cursor("Post", SCORE, [2.5], "x"), "Post", SCORE, KINDS, "s")
    assert readers_kept() == 2 and kept_cursors("Post", SCORE, "i") == 1
    forget_readers()
    assert readers_kept() == 0 and kept_reader("Post", SCORE, "i") is None
    assert kept_cursors("Post", SCORE, "i") == 0


def test_a_links_head_encoded_once_gives_the_composed_link_for_many_records_and_model_names():
    """NextLinks encodes its cursor head's whole 3-byte groups once: the Link must still be
    the composed one for heads and tails whose base64 holds `+` and `/` (made `-`, `_`)."""
    rng = random.Random(16)
    keys = {"score": float, "title": str}
    seen = set()
    for model in ("Post", "BlogPost", "M\u00e9?>>", "Z" * 7):
        for sort in (SCORE, TWO, ()):
            prefix = "</api/x?cursor="
            made = NextLinks(prefix, model, sort, keys, "id")
            for _ in range(300):
                record = {"id": rng.randint(-(2**63), 2**63), "score": rng.uniform(-1e6, 1e6), "title": "t?>~"}
                wanted = [keys[f](record[f]) for f, _d in sort]
                link = made.after(record)
                assert link == next_link(prefix, encode_cursor(model, sort, wanted, record["id"]))
                seen |= set(link) & set("-_")
    assert seen == {"-", "_"}


class _Uncomparable(dict):
    """Kinds that refuse to be compared: a decode that looks at them, not only at which
    object they are, raises."""

    def __eq__(self, other: object) -> bool:
        raise AssertionError("kinds compared")

    def __ne__(self, other: object) -> bool:
        raise AssertionError("kinds compared")

    __hash__ = None  # type: ignore[assignment]


def test_the_kinds_object_a_reader_was_made_with_finds_it_without_a_comparison():
    """The generated `decode_cursor_m` passes one module constant per model
    (`cursor_kinds_m`), so a cursor page pays neither a dict build nor a dict comparison;
    an equal mapping that is another object is still compared and read by the same kinds."""
    forget_readers()
    kinds = _Uncomparable(KINDS)
    text = encode_cursor("Post", SCORE, [2.5], 7)
    assert decode_cursor(text, "Post", SCORE, kinds, "i") == ((2.5,), 7)
    reader = kept_reader("Post", SCORE, "i")
    assert reader is not None
    assert decode_cursor(text, "Post", SCORE, kinds, "i") == ((2.5,), 7)
    assert kept_reader("Post", SCORE, "i") is reader  # found, not made again
    assert decode_cursor(text, "Post", SCORE, dict(KINDS), "i") == ((2.5,), 7)
    assert kept_reader("Post", SCORE, "i") is reader  # equal kinds: the same reader
