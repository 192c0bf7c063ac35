"""Text search's decisions one by one, against literals (issue 33's habit on issue 34's
modules): the tokenizer's documented rules (dbsvc/textsearch.py, docs/guide/queries.md
"Text search", docs/decisions.md "Text search") and the word index's prefix ranges and id
forms (dbsvc/storage/words.py), kept across writes, undo, compaction and restore.

No server: the tokenizer is pure, and the index is a real `WordIndex` or the one a real
store keeps. Every expectation is a literal or the documented text, never the modules'
own constants.
"""

from __future__ import annotations

import os

import pytest

from dbsvc.datatools.backup import restore_backup, take_backup
from dbsvc.errors import BadQuery
from dbsvc.storage.tenants import compact_tenant
from dbsvc.storage.words import WordIndex
from dbsvc.textsearch import fold, matches, query_words, word_set, words
from support.storage import open_store, post, run, user

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
    assert {w: set(ids) for w, ids in index.postings.items()} == {"red": {1, 2}, "apple": {1}, "blue": {2}, "sky": {2}}
    assert list(index.ordered) == ["apple", "blue", "red", "sky"]
    assert len(index) == 4 and index.postings_count() == 5


def test_a_prefix_is_a_range_of_the_sorted_words():
    index = index_of(
        {1: ("ab", 0, None), 2: ("abc", 0, None), 3: ("abd", 0, None), 4: ("b", 0, None), 5: ("a", 0, None)}
    )
    assert index.expand("ab") == [(1,), (2,), (3,)]  # the word itself first, then the longer ones
    assert index.expand("abc") == [(2,)]
    assert index.expand("a") == [(5,), (1,), (2,), (3,)]
    assert index.expand("aa") == [] and index.expand("c") == []
    assert index.match(("ab",)) == {1, 2, 3}
    assert index.match(("ab", "abd")) == {3}
    assert index.match(("ab", "b")) == set()


def forms(index: WordIndex) -> dict[str, tuple[str, list]]:
    """word -> (the form its ids are held in, the ids sorted)."""
    return {w: (type(ids).__name__, sorted(ids)) for w, ids in index.postings.items()}


def test_a_word_keeps_up_to_eight_ids_in_a_tuple_then_a_set_and_back_at_four():
    index = WordIndex([0])
    for id_ in range(1, 9):
        index.add(id_, ("common",))
    assert forms(index) == {"common": ("tuple", [1, 2, 3, 4, 5, 6, 7, 8])}
    assert index.postings["common"] == (1, 2, 3, 4, 5, 6, 7, 8)  # in the order added
    index.add(9, ("common",))
    assert forms(index) == {"common": ("set", [1, 2, 3, 4, 5, 6, 7, 8, 9])}
    for id_ in (9, 8, 7, 6):
        index.remove(id_, ("common",))
    assert forms(index) == {"common": ("set", [1, 2, 3, 4, 5])}  # five: still a set
    index.remove(5, ("common",))
    assert forms(index) == {"common": ("tuple", [1, 2, 3, 4])}  # four: a tuple again
    index.remove(2, ("common",))
    assert index.postings["common"] == (1, 3, 4)
    for id_ in (1, 3, 4):
        index.remove(id_, ("common",))
    assert index.postings == {} and list(index.ordered) == [] and len(index) == 0


def test_a_common_words_set_is_changed_in_place_and_a_record_leaves_every_word():
    """Adding an id to, or taking one from, a word held in a set is O(1): the same set
    changes (words.py, "Memory"); a record of several such words leaves each of them."""
    index = WordIndex([0])
    for id_ in range(1, 11):
        index.add(id_, ("alpha beta gamma",))
    sets = [index.postings[w] for w in ("alpha", "beta", "gamma")]
    assert [type(ids) for ids in sets] == [set, set, set]
    index.add(11, ("alpha beta gamma",))
    index.remove(3, ("alpha beta gamma",))
    assert [index.postings[w] for w in ("alpha", "beta", "gamma")] == sets
    assert all(index.postings[w] is ids for w, ids in zip(("alpha", "beta", "gamma"), sets))
    want = {1, 2, 4, 5, 6, 7, 8, 9, 10, 11}
    assert forms(index) == {w: ("set", sorted(want)) for w in ("alpha", "beta", "gamma")}
    for id_ in (1, 2, 4, 5, 6, 7):  # down to four ids: back to tuples, each word
        index.remove(id_, ("alpha beta gamma",))
    assert forms(index) == {w: ("tuple", [8, 9, 10, 11]) for w in ("alpha", "beta", "gamma")}


def test_build_keeps_eight_ids_in_a_tuple_and_nine_in_a_set():
    index = WordIndex([0])
    index.build([(i, ("eight nine" if i <= 8 else "nine",)) for i in range(1, 10)])
    assert forms(index) == {"eight": ("tuple", [1, 2, 3, 4, 5, 6, 7, 8]), "nine": ("set", list(range(1, 10)))}
    assert index.postings["eight"] == (1, 2, 3, 4, 5, 6, 7, 8)
    assert list(index.ordered) == ["eight", "nine"]
    assert index.postings_count() == 17 and len(index) == 2
    empty = WordIndex([0])
    empty.build([])
    assert empty.postings == {} and list(empty.ordered) == []


def test_removing_a_word_of_a_record_keeps_the_other_records_ids():
    index = index_of({1: ("x y", 0, None), 2: ("x", 0, None), 3: ("y x", 0, None)})
    index.remove(2, ("x", 0, None))
    assert forms(index) == {"x": ("tuple", [1, 3]), "y": ("tuple", [1, 3])}
    assert list(index.ordered) == ["x", "y"]


def test_swap_moves_a_record_only_between_the_words_that_changed():
    index = index_of({1: ("red apple", 0, "pie"), 2: ("red", 0, None)})
    index.swap(1, ("red apple", 0, "pie"), ("red pear", 0, "pie"))
    assert forms(index) == {"red": ("tuple", [1, 2]), "pear": ("tuple", [1]), "pie": ("tuple", [1])}
    assert index.postings["red"] == (1, 2)  # an unchanged word is not moved: its order kept
    assert list(index.ordered) == ["pear", "pie", "red"]
    # a change outside the search fields changes nothing
    index.swap(2, ("red", 0, None), ("red", 1, None))
    assert index.postings["red"] == (1, 2)
    # a change of case only: the same words, nothing moved
    index.swap(2, ("red", 1, None), ("RED", 1, None))
    assert index.postings["red"] == (1, 2)
    index.swap(1, ("red pear", 0, "pie"), (None, 0, None))
    assert forms(index) == {"red": ("tuple", [2])}


def test_match_takes_the_cheapest_word_first_and_narrows_by_every_other():
    # "a" covers many ids, "ab" few: the answer is the same whatever the order asked
    records = {i: (f"a{i} common", 0, None) for i in range(1, 21)}
    records[21] = ("ab common", 0, None)
    records[22] = ("ab rare", 0, None)
    index = index_of(records)
    assert index.match(("ab", "common")) == {21}
    assert index.match(("common", "ab")) == {21}
    assert index.match(("a", "common", "ab")) == {21}
    assert index.match(("a", "rare")) == {22}
    assert index.match(("a",)) == set(range(1, 23))
    assert index.match(("zz", "a")) == set() and index.match(("a", "zz")) == set()
    assert index.match(()) == set()  # the store never asks with no word; nothing matches then


def test_every_query_word_narrows_while_candidates_are_left():
    index = index_of({1: ("x y z", 0, None), 2: ("y z", 0, None), 3: ("x", 0, None), 4: ("x", 0, None)})
    # y and z (two ids each) narrow first, to 1 and 2; x (three ids) takes 2 out last
    assert index.match(("x", "y", "z")) == {1}
    assert index.match(("y", "z")) == {1, 2}
    assert index.match(("y", "z", "w")) == set()


def test_a_short_prefix_of_many_words_against_few_candidates_is_tested_per_candidate():
    # "x" is a prefix of two words of ten ids each (cost 20); "only" holds one id: 20 is more
    # than 8 times 1 candidate times 2 words, so the candidate is tested against the two
    index = WordIndex([0])
    for i in range(1, 11):
        index.add(i, ("xa only",) if i == 5 else ("xa",))
        index.add(100 + i, ("xb",))
    assert index.match(("only", "x")) == {5}
    assert index.match(("x", "only")) == {5}
    index.swap(5, ("xa only",), ("xa",))
    index.add(50, ("only",))  # a candidate without an x word
    assert index.match(("only", "x")) == set()
    assert index.match(("only", "xb")) == set()  # one word: intersected
    index.swap(105, ("xb",), ("xb only",))  # two candidates: cost 20 is at most 8 * 2 * 2, a union
    assert index.match(("only", "x")) == {105}


def test_a_prefix_of_several_words_narrows_by_their_union():
    # "b" covers "ba" and "bb" (2 ids): cheaper than testing, so their union narrows
    index = WordIndex([0])
    for i in range(1, 6):
        index.add(i, ({1: "common ba", 3: "common bb"}.get(i, "common"),))
    index.add(9, ("ba",))
    assert index.match(("common", "b")) == {1, 3}
    assert index.match(("b", "common")) == {1, 3}
    assert index.match(("comm", "bb", "b")) == {3}


# -- the index a store keeps ---------------------------------------------------------------


def posts_words(store) -> dict[str, list]:
    words_ = store.tables["BlogPost"].words
    assert words_ is not None and list(words_.ordered) == sorted(words_.postings)
    return {w: sorted(ids) for w, ids in words_.postings.items()}


BLOG_WORDS = {  # the words of the live posts after `_write`, by hand
    "title": [1, 3],
    "1": [1],
    "b": [1, 3],
    "pear": [2],
    "pie": [2],
    "3": [3],
}


def _write(store) -> None:
    async def go():
        await store.insert("User", user(1))
        await store.insert("BlogPost", post(1, author=1, title="title 1", body="b"))
        await store.insert("BlogPost", post(2, author=1, title="Apple pie", body="b"))
        await store.insert("BlogPost", post(3, author=1, title="title 3", body="b"))
        await store.insert("BlogPost", post(4, author=1, title="gone", body="b"))
        await store.replace("BlogPost", 2, post(2, author=1, title="Pear pie", body=""))
        await store.delete("BlogPost", 4)

    run(go())


def test_a_stores_index_follows_writes_and_undo_and_is_rebuilt_at_open_compaction_and_restore(tenant):
    s = open_store(tenant, sync="off")
    try:
        _write(s)
        assert posts_words(s) == BLOG_WORDS
        table = s.tables["BlogPost"]
        for write in (  # a write whose frame failed is undone (writes.py rule 2)
            lambda: table.insert(table.model.row(post(70, author=1, title="undone", body="b"))),
            lambda: table.replace(table.live[1], table.model.row(post(1, author=1, title="undone", body="b"))),
            lambda: table.delete(3, table.live[3]),
        ):
            write()
            assert posts_words(s) != BLOG_WORDS
            table.undo_last(table.max_id)
            assert posts_words(s) == BLOG_WORDS
    finally:
        s.close()
    s = open_store(tenant, sync="off")  # replayed from the log
    try:
        assert posts_words(s) == BLOG_WORDS
    finally:
        s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    s = open_store(tenant, sync="off")  # built from the snapshot
    try:
        assert posts_words(s) == BLOG_WORDS
        run(s.replace("BlogPost", 3, post(3, author=1, title="Title three", body="b")))
        want = {w: ids for w, ids in {**BLOG_WORDS, "three": [3]}.items() if w != "3"}
        assert posts_words(s) == want
    finally:
        s.close()
    # a backup restored as another tenant: its snapshot and log give the same index
    backup = os.path.join(os.path.dirname(os.path.dirname(tenant)), "bk")
    take_backup(tenant, backup, "t")
    restore_backup(backup, os.path.dirname(tenant), "copy")
    s = open_store(os.path.join(os.path.dirname(tenant), "copy"), sync="off")
    try:
        assert posts_words(s) == want
    finally:
        s.close()
