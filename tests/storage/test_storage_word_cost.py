"""storage/words.py's parts kept searches lean on (storage/searches.py): `WordIndex.cost`, the
ids a match reads first (the cheapest query word's, summed over every indexed word it is a
prefix of; 0 for no query word or a word no record holds), and `kept`, empty on a new index
and emptied by `build` (a snapshot's load), whatever it held."""

from __future__ import annotations

from dbsvc.storage.words import WordIndex


def index_of(texts: dict[int, str]) -> WordIndex:
    index = WordIndex((0,))
    for id_, text in texts.items():
        index.add(id_, (text,))
    return index


def test_cost_is_the_cheapest_query_words_ids_over_every_word_it_starts():
    texts = {1: "alpha beta", 2: "alps beta", 3: "alpha", 4: "beta gamma", 5: "betamax", 6: "al"}
    index = index_of(texts)
    assert index.cost(("alpha",)) == 2  # "alpha": 1, 3
    assert index.cost(("al",)) == 4  # "al" 6, "alpha" 1, 3, "alps" 2
    assert index.cost(("beta",)) == 4  # "beta" 1, 2, 4, "betamax" 5
    assert index.cost(("beta", "al")) == 4
    assert index.cost(("beta", "alp", "gamma")) == 1  # "gamma" alone is the cheapest
    assert index.cost(("gam", "alpha")) == 1
    assert index.cost(("beta", "zeta")) == 0  # a word no record holds
    assert index.cost(()) == 0


def test_cost_counts_a_words_ids_in_a_tuple_and_in_a_set():
    index = index_of({i: "common" if i <= 20 else "rare" for i in range(1, 24)})
    assert type(index.postings["common"]) is set and type(index.postings["rare"]) is tuple
    assert index.cost(("common",)) == 20
    assert index.cost(("rare",)) == 3
    assert index.cost(("c", "r")) == 3


def test_kept_is_empty_on_a_new_index_and_emptied_by_build():
    index = WordIndex((1,))
    assert index.kept == {} and index.positions == (1,)
    index.kept[("a", "b")] = ({1}, 1, None)
    index.build([(1, (0, "a b")), (2, (0, "b c"))])
    assert index.kept == {}
    assert index.match(("b",)) == {1, 2} and index.cost(("b", "a")) == 1


def test_match_costed_is_match_cost_and_whether_one_words_postings_were_read():
    texts = {1: "alpha beta", 2: "alps beta", 3: "alpha", 4: "beta gamma", 5: "betamax", 6: "al"}
    texts.update({i: "common rare" if i % 7 == 0 else "common" for i in range(7, 40)})
    index = index_of(texts)
    alone = {("alpha",), ("gamma",), ("common",), ("co",), ("rare",), ("betamax",)}  # one indexed word each
    queries = [("alpha",), ("al",), ("beta",), ("bet", "al"), ("beta", "alp", "gamma"), ("common", "rare")]
    queries += [("co",), ("r", "c"), ("zeta",), ("beta", "zeta"), ("gamma",), ("common",), ("rare",), ("betamax",), ()]
    for query in queries:
        found, cost, one = index.match_costed(query)
        assert (found, cost, one) == (index.match(query), index.cost(query), query in alone), query
    found, _cost, one = index.match_costed(("common",))  # one word's postings, copied for the caller
    assert one and found == index.postings["common"] and found is not index.postings["common"]
