"""`WordIndex.match` narrows without copying the cheapest word's postings (words.py): the
answer is still every id all query words match, and still a new set the caller may change
without touching the index, whether the postings are tuples or sets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dbsvc.storage.words import SMALL, WordIndex

WORDS = ["ab", "abc", "abd", "b", "bc", "cd"]


def index_of(records: dict[int, str]) -> WordIndex:
    index = WordIndex([0])
    index.build((id_, [text]) for id_, text in records.items())
    return index


def brute(records: dict[int, str], query: list[str]) -> set[int]:
    return {id_ for id_, text in records.items() if all(any(w.startswith(q) for w in text.split()) for q in query)}


@settings(max_examples=200, deadline=None)
@given(
    records=st.dictionaries(
        st.integers(1, 60), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join), max_size=60
    ),
    query=st.lists(st.sampled_from(["a", "ab", "abc", "b", "bc", "c", "cd", "x"]), min_size=1, max_size=3),
)
def test_match_is_every_id_all_query_words_match(records, query):
    assert index_of(records).match(query) == brute(records, query)


def test_a_one_word_match_is_a_copy_the_caller_may_change():
    records = {i: "ab cd" if i in (2, 4, 6) else "ab" for i in range(1, 4 * SMALL)}  # "ab": a set, "cd": a tuple
    index = index_of(records)
    for query in (["ab"], ["cd"], ["ab", "cd"], ["cd", "ab"], ["c", "a"]):
        found = index.match(query)
        assert found == brute(records, query)
        found.clear()
        assert index.match(query) == brute(records, query), query
    assert type(index.postings["ab"]) is set and type(index.postings["cd"]) is tuple
