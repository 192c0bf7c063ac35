"""Text search's decisions one by one, against literals (issue 33's habit on issue 34's
modules): the tokenizer's documented rules (dbsvc/textsearch.py, docs/guide/queries.md
"Text search", docs/decisions.md "Text search") and the word index's prefix ranges and id
forms (dbsvc/storage/words.py), kept across writes, undo, compaction and restore.

No server: the tokenizer is pure, and the index is a real `WordIndex` or the one a real
store keeps. Every expectation is a literal or the documented text, never the modules'
own constants.
"""

from __future__ import annotations

import pytest

from dbsvc.errors import BadQuery
from dbsvc.storage.words import WordIndex
from dbsvc.textsearch import fold, matches, query_words, word_set, words

# -- the tokenizer -------------------------------------------------------------------------


def test_ascii_is_lowered_and_cut_on_everything_but_letters_and_digits():
    assert fold("Hello, World_42") == "hello, world_42"
    assert words("Hello, World_42") == ["hello", "world", "42"]
    assert words("A") == ["a"]


def test_nfkd_splits_compatibility_forms_and_drops_every_combining_mark():
    assert fold("ﬁ²") == "fi2"  # compatibility forms, no mark among them
    assert fold("Éa\u0301") == "ea"  # a precomposed and a decomposed accent
    assert fold("e\u0301") == "e"  # a decomposed accent on ASCII: not ASCII text
    assert fold("\u0301") == ""  # a lone mark is dropped, not a word
    assert words("Cafe\u0301 na\u0308ive") == ["cafe", "naive"]
    # a mark of every kind of M: Mn (acute), Mc (a Devanagari vowel sign), Me (enclosing circle)
    assert fold("a\u0301") == fold("a\u093e") == fold("a\u20dd") == "a"
    # a letter that NFKD leaves alone is kept, and folded
    assert fold("Ø") == "ø"


def test_case_is_folded_fully_not_lowered():
    assert fold("Straße") == "strasse"  # lower() would keep ß
    assert fold("ΣΑΣ") == "σασ"
    assert fold("ﬀ") == "ff"
    assert words("MASSE Maße") == ["masse", "masse"]


def test_words_keep_order_and_repeats_and_none_or_empty_has_none():
    assert words("b a b") == ["b", "a", "b"]
    assert words(None) == [] and words("") == [] and words("—…") == []


def test_a_records_word_set_joins_its_fields_with_a_separator():
    assert word_set(["ab", "cd"]) == {"ab", "cd"}  # never "abcd": no word spans two fields
    assert word_set(["Ab", None, "", "ab CD"]) == {"ab", "cd"}
    assert word_set([None, None]) == set() and word_set([]) == set()


def test_matches_needs_every_query_word_as_a_prefix_of_some_word():
    assert matches(["Café au lait"], ("caf", "lai"))
    assert matches(["Café au lait"], ("cafe",))  # a whole word is its own prefix
    assert not matches(["decaf"], ("caf",))  # a prefix, never a substring
    assert not matches(["Café au lait"], ("caf", "the"))  # AND, not OR
    assert matches(["one", "two"], ("tw", "on"))  # in any field, any order
    assert matches([None], ()) and matches([], ())  # no query word: everything matches
    assert not matches([None], ("a",))


def test_query_words_are_the_distinct_words_in_order():
    assert query_words("b A b, a c") == ("b", "a", "c")
    assert query_words("x") == ("x",)


def test_sixteen_words_of_sixty_four_characters_are_the_limits():
    sixteen = " ".join("w" + chr(ord("a") + i) for i in range(16))
    assert len(query_words(sixteen)) == 16
    assert query_words("z" * 64) == ("z" * 64,)
    with pytest.raises(BadQuery) as caught:
        query_words(sixteen + " wq")
    assert str(caught.value) == f"search {(sixteen + ' wq')!r} holds 17 words: expected at most 16"
    with pytest.raises(BadQuery) as caught:
        query_words("z" * 65)
    assert str(caught.value) == (
        f"search word {'z' * 60 + '...'!r} is 65 characters long: expected at most 64 characters a word"
    )


def test_a_query_is_shown_whole_up_to_sixty_characters_then_cut():
    sixty = "-" * 60
    with pytest.raises(BadQuery) as caught:
        query_words(sixty)
    assert str(caught.value) == (
        f"search {sixty!r} holds no word: expected one or more words of letters or digits "
        "(at most 16, each a prefix of a word of the record)"
    )
    with pytest.raises(BadQuery) as caught:
        query_words(sixty + "!")
    assert str(caught.value).startswith(f"search {sixty + '...'!r} holds no word")
    many = " ".join(f"w{i:02}" for i in range(20))  # 79 characters
    with pytest.raises(BadQuery) as caught:
        query_words(many)
    assert str(caught.value) == f"search {many[:60] + '...'!r} holds 20 words: expected at most 16"


# -- the word index ------------------------------------------------------------------------


def index_of(records: dict[int, tuple]) -> WordIndex:
    index = WordIndex([0, 2])  # the @search fields at positions 0 and 2 of the values
    for id_, values in records.items():
        index.add(id_, values)
    return index


def test_only_the_search_fields_positions_are_indexed():
    index = index_of({1: ("red apple", "green", None), 2: ("blue", "apple", "Red sky")})
    assert {w: set(ids) for w, ids in index.postings.items()} == {
        "red": {1, 2},
        "apple": {1},
        "blue": {2},
        "sky": {2},
    }
    assert list(index.ordered) == ["apple", "blue", "red", "sky"]
    assert len(index) == 4 and index.postings_count() == 5


def test_a_prefix_is_a_range_of_the_sorted_words():
    index = index_of({1: ("ab", 0, None), 2: ("abc", 0, None), 3: ("abd", 0, None), 4: ("b", 0, None), 5: ("a", 0, None)})
    assert index.expand("ab") == [(1,), (2,), (3,)]  # the word itself first, then the longer ones
    assert index.expand("abc") == [(2,)]
    assert index.expand("a") == [(5,), (1,), (2,), (3,)]
    assert index.expand("aa") == [] and index.expand("c") == []
    assert index.match(("ab",)) == {1, 2, 3}
    assert index.match(("ab", "abd")) == {3}
    assert index.match(("ab", "b")) == set()
