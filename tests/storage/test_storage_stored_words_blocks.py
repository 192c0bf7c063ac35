"""The words of stored records, a block at a time (storage/words.py `WordIndex.stored_words`)
and the one-pass cut of a block of plain ASCII texts (textsearch.py `ascii_word_sets`).

`stored_words` yields, for each stored record in order, the words of its `@search` values: a
block of BLOCK records whose searched values are all JSON strings of plain ASCII with no
escape is cut out of the stored bytes and split in one pass, without parsing a record; any
other block (a non-ASCII text, an escape, a null) has each record parsed. The reference here
is `record_words` of each record's parsed values (`rows.unpack`).

Which way a block went is seen through a record that only the parse refuses: one with a field
more than the model's after its searched ones (snapshotload.py refuses such a file; here it
is the witness). Its block gives its words when it is cut, and raises ValueError when it is
parsed. Written from the survivors of the mutation run of these two functions, most of which
changed only the way a block went (docs/mutation.md, "stored_words and ascii_word_sets: the
block cut pinned").
"""

from __future__ import annotations

import random
import string

import pytest

from dbsvc.storage.rows import pack, unpack
from dbsvc.storage.words import BLOCK, WordIndex
from dbsvc.textsearch import ascii_word_sets, word_set

FIELDS = ["id", "title", "n", "body", "tags"]
SEARCHED = [3, 1]  # body, then title: not in field order


def words_of(stored: list[bytes], positions: list[int] = SEARCHED, fields: list[str] = FIELDS) -> list[set[str]]:
    return list(WordIndex(positions).stored_words(stored, fields))


def reference(stored: list[bytes], positions: list[int] = SEARCHED) -> list[set[str]]:
    index = WordIndex(positions)
    return [index.record_words(unpack(text)) for text in stored]


def row(i: int, title: str | None = None, body: str | None = None) -> bytes:
    """Record `i`, with words of its own (`t<i>`, `b<i>`) unless told its texts."""
    title = f"Title t{i} shared" if title is None else title
    body = f"Body-b{i} x_y" if body is None else body
    return pack(FIELDS, [i, title, i * 3, body, None])


def odd(i: int) -> bytes:
    """Record `i` in plain ASCII with a sixth field: cut, it gives its words; parsed, it is
    refused (not an object of the model's five fields)."""
    return pack([*FIELDS, "extra"], [i, f"odd t{i}", i, f"odd b{i}", None, 1])


@pytest.mark.parametrize("count", [1, 2, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 5])
def test_every_record_of_every_block_gives_its_own_words_in_order(count: int) -> None:
    stored = [row(i) for i in range(1, count + 1)]
    got = words_of(stored)
    assert len(got) == count
    assert got == reference(stored)
    assert got[0] == {"title", "t1", "shared", "body", "b1", "x", "y"}
    assert got[-1] == {"title", f"t{count}", "shared", "body", f"b{count}", "x", "y"}


def test_no_records_give_no_words() -> None:
    assert words_of([]) == []


def test_two_fields_are_two_texts_and_empty_ones_hold_no_word() -> None:
    stored = [row(1, "alpha", "beta"), row(2, "", ""), row(3, "", "only"), row(4, "gamma", ""), row(5, " - ", "_")]
    assert words_of(stored) == [{"alpha", "beta"}, set(), {"only"}, {"gamma"}, set()] == reference(stored)


def test_a_null_is_no_word_and_its_block_is_parsed() -> None:
    stored = [row(1), pack(FIELDS, [2, "some title", 2, None, None]), row(3)]
    got = words_of(stored)
    assert got == reference(stored)
    assert got[1] == {"some", "title"}  # never "null"
    with pytest.raises(ValueError):
        words_of([*stored, odd(4)])


@pytest.mark.parametrize("text", ["tab\there", "new\nline", 'say "hi"', "back\\slash", "bell\x07"])
def test_an_escaped_text_is_parsed_and_gives_the_words_of_its_value(text: str) -> None:
    stored = [row(1), row(2, text), row(3, "plain", text)]
    got = words_of(stored)
    assert got == reference(stored)
    assert got[1] == word_set([text, "Body-b2 x_y"])
    with pytest.raises(ValueError):
        words_of([*stored, odd(4)])


def test_non_ascii_words_are_folded_and_their_block_is_parsed() -> None:
    texts = ["Été déjà", "漢字 かな", "Straße", "ﬁne ²", "한국어 x"]
    stored = [row(i, texts[i % len(texts)], "plain ASCII") for i in range(40)]
    got = words_of(stored)
    assert got == reference(stored)
    assert got[0] == {"ete", "deja", "plain", "ascii"}
    assert got[2] == {"strasse", "plain", "ascii"}
    assert got[3] == {"fine", "2", "plain", "ascii"}
    with pytest.raises(ValueError):
        words_of([*stored, odd(40)])


def test_a_block_of_plain_ascii_is_cut_without_parsing_a_record() -> None:
    stored = [row(1), odd(2), row(3)]
    assert words_of(stored) == [reference([row(1)])[0], {"odd", "t2", "b2"}, reference([row(3)])[0]]


def test_each_block_is_cut_or_parsed_on_its_own() -> None:
    """The witness in a plain first block is cut; the same record in the second block, which
    holds a non-ASCII text, is parsed and refused."""
    first = [row(i) for i in range(BLOCK - 1)] + [odd(BLOCK - 1)]
    got = words_of(first + [row(BLOCK), row(BLOCK + 1)])
    assert got[BLOCK - 1] == {"odd", f"t{BLOCK - 1}", f"b{BLOCK - 1}"}
    assert len(got) == BLOCK + 2
    with pytest.raises(ValueError):
        words_of(first + [row(BLOCK, "déjà"), odd(BLOCK + 1)])


@pytest.mark.parametrize(
    "fields, positions",
    [
        (["id", "a", "b"], [2]),  # the last field alone
        (["id", "a", "b"], [1]),  # a field before another
        (["id", "a", "b"], [2, 1]),
        (["a", "id", "b", "c"], [0, 3]),  # the first field, and one after a gap
    ],
)
def test_the_searched_fields_are_found_wherever_they_are(fields: list[str], positions: list[int]) -> None:
    rows = [[f"w{i}f{k}" if k != fields.index("id") else i for k in range(len(fields))] for i in range(30)]
    stored = [pack(fields, r) for r in rows]
    got = words_of(stored, positions, fields)
    assert got == reference(stored, positions)
    assert got[7] == {f"w7f{p}" for p in positions}


def test_ascii_word_sets_cuts_lines_on_every_separator_and_lowers_case() -> None:
    lines = b"Hello, World!\nfoo_bar BAZ-1\n\n  \t \n(x)y"
    assert ascii_word_sets(lines) == [{"hello", "world"}, {"foo", "bar", "baz", "1"}, set(), set(), {"x", "y"}]
    assert ascii_word_sets(b"") == [set()]
    assert ascii_word_sets(b"a\nb\n") == [{"a"}, {"b"}, set()]


def test_ascii_word_sets_is_word_set_of_each_line() -> None:
    rng = random.Random(62)
    alphabet = "".join(chr(c) for c in range(128) if chr(c) != "\n") + string.ascii_letters * 3
    for _ in range(200):
        texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 30))) for _ in range(rng.randint(1, 6))]
        assert ascii_word_sets("\n".join(texts).encode("ascii")) == [word_set([t]) for t in texts], texts


def test_ascii_word_sets_refuses_text_that_is_not_ascii() -> None:
    assert ascii_word_sets("Été".encode()) is None
    assert ascii_word_sets(b"plain\n" + "漢".encode()) is None
    assert ascii_word_sets(b"\x80") is None
