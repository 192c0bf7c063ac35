"""Text search without a server: the tokenizer, the generated parsers and matcher, the index.

- `dbsvc.textsearch.words` as docs/guide/queries.md ("Text search") documents it, and its
  word characters checked against Unicode categories for every code point;
- the generated `match` (what /subscribe and /live-query decide with) against SQLite's FTS5
  over hypothesis's records and queries (tests/support/query_oracle.py says where the two
  tokenizers agree), and `passes` on stored rows the same;
- the generated parsers' `search` (list and feed), its refusals, and a model without
  `@search` fields refusing it;
- storage's `WordIndex` against a brute-force scan under random inserts, replaces and
  deletes (up to 15 records, so a common word's ids pass from a tuple to a set and back).
"""

from __future__ import annotations

import sqlite3
import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbsvc.compiler import compile_schema, generate_source
from dbsvc.compiler.asyncapi import build_asyncapi
from dbsvc.compiler.openapi import build_openapi
from dbsvc.errors import BadQuery
from dbsvc.schema import parse_schema
from dbsvc.storage.words import WordIndex
from dbsvc.textsearch import MAX_QUERY_WORDS, matches, query_words, words
from support.query_oracle import PROSE, SCHEMA, WORDS, nfc

MODULE = compile_schema(parse_schema(SCHEMA, "items.dbs"))
ITEM = MODULE.BY_NAME["Item"]


def test_words_fold_case_and_accents_and_split_on_what_is_not_a_letter_or_digit():
    assert words("L'Été 2024!") == ["l", "ete", "2024"]
    assert words("don't") == ["don", "t"]  # an apostrophe splits, curly or straight
    assert words("don\u2019t") == ["don", "t"]
    assert words("Straße ΣΑΣ ﬁne x²") == ["strasse", "σασ", "fine", "x2"]  # casefold, NFKD
    assert words("e\u0301te\u0301") == words("été") == ["ete"]  # decomposed accents too
    assert words("東京タワー 123abc") == ["東京タワー", "123abc"]  # CJK: one word per run
    assert words("a_b a.b a-b") == ["a", "b", "a", "b", "a", "b"]
    assert words("") == words(None) == words("  !? 😀 ") == []


def test_word_characters_are_exactly_the_letters_and_numbers_of_every_code_point():
    letters, others = [], []
    for cp in range(sys.maxunicode + 1):
        char = chr(cp)
        category = unicodedata.category(char)[0]
        if category == "M" or unicodedata.normalize("NFKD", char) != char:
            continue  # marks are dropped before splitting; NFKD's changes are the first test's
        (letters if category in "LN" else others).append(char)
    assert len(words(" ".join(letters))) == len(letters)  # each a word of its own
    assert words("x".join(others)) == ["x"] * (len(others) - 1)  # each a separator


def test_query_words_are_distinct_bounded_and_never_empty():
    assert query_words("Café, CAFE au") == ("cafe", "au")
    assert len(query_words(" ".join(f"w{i}" for i in range(MAX_QUERY_WORDS)))) == MAX_QUERY_WORDS
    with pytest.raises(BadQuery, match="holds 17 words: expected at most 16"):
        query_words(" ".join(f"w{i}" for i in range(17)))
    with pytest.raises(BadQuery, match="holds no word"):
        query_words("-- !")
    with pytest.raises(BadQuery, match="is 65 characters long: expected at most 64"):
        query_words("a" * 65)
    assert matches(["Hello wörld"], ("wor", "hel")) and not matches(["Hello"], ("ello",))


def fts5(rows: list[tuple[str, str | None]], query: list[str]) -> list[int]:
    """The positions of `rows` ((t, w) texts) every query word is a prefix of a word of, by FTS5."""
    db = sqlite3.connect(":memory:")
    db.execute('CREATE VIRTUAL TABLE x USING fts5(t, w, tokenize="unicode61 remove_diacritics 2")')
    db.executemany(
        "INSERT INTO x (rowid, t, w) VALUES (?, ?, ?)", [(i, nfc(t), nfc(w)) for i, (t, w) in enumerate(rows)]
    )
    match = " AND ".join(f'"{word}"*' for word in query)
    return sorted(r[0] for r in db.execute("SELECT rowid FROM x WHERE x MATCH ?", (match,)))


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.tuples(PROSE, st.none() | PROSE), max_size=8),
    query=st.lists(WORDS, min_size=1, max_size=3),
    separator=st.sampled_from([" ", ", ", "'", "-"]),
)
def test_the_generated_matcher_agrees_with_sqlite_fts5(rows, query, separator):
    words_ = ITEM.parse_feed_query([("search", separator.join(query))]).search
    want = fts5(rows, query)
    records = [
        dict(zip(ITEM.fields, (i, None, None, None, nfc(t), True, None, None, nfc(w)))) for i, (t, w) in enumerate(rows)
    ]
    assert [r["id"] for r in records if ITEM.match(r, {}, (), (), words_)] == want
    assert [i for i, r in enumerate(records) if ITEM.passes(ITEM.row(r), {}, words_)] == want
    # filters and search together: both must hold
    keep = frozenset({True})
    assert [r["id"] for r in records if ITEM.match(r, {"b": keep}, (), (), words_)] == want
    assert [r["id"] for r in records if ITEM.match(r, {"b": frozenset({False})}, (), (), words_)] == []


def test_parsers_take_search_only_where_the_model_has_search_fields():
    assert ITEM.parse_list_query([("search", "Été au")]).search == ("ete", "au")
    assert ITEM.parse_list_query([("b", "true")]).search == ()
    assert ITEM.parse_feed_query([("search", "x"), ("b", "true")]).search == ("x",)
    with pytest.raises(BadQuery) as caught:
        ITEM.parse_list_query([("search", "a"), ("search", "b")])
    assert str(caught.value) == "'search' given more than once"
    with pytest.raises(BadQuery) as caught:
        ITEM.parse_list_query([("bogus", "1")])
    assert str(caught.value).endswith(
        "sort, limit, offset, cursor, projection, as_of, search; operators __gt, "
        "__gte, __lt, __lte on n, f, s, t, dt; __prefix on s, t; __null on n, f, s, dt, g"
    )
    plain = compile_schema(parse_schema("model P {\n  id int @id\n  t str @filter\n}\n", "p.dbs")).BY_NAME["P"]
    for parse in (plain.parse_list_query, plain.parse_feed_query):
        with pytest.raises(BadQuery) as caught:
            parse([("search", "x")])
        assert str(caught.value).startswith("unknown query parameter 'search'; allowed: filters on t; ")
        assert "search" not in str(caught.value).split("allowed:")[1]
    assert plain.search_fields == () and ITEM.search_fields == ("t", "w")


OPS = st.lists(
    st.tuples(st.sampled_from(["put", "put", "delete"]), st.integers(0, 14), PROSE, st.none() | PROSE), max_size=50
)


@settings(max_examples=50, deadline=None)
@given(ops=OPS, query=st.lists(WORDS, min_size=1, max_size=3))
def test_the_word_index_answers_as_a_scan_after_any_writes(ops, query):
    index = WordIndex([0, 1])
    live: dict[int, tuple] = {}
    for op, id_, t, w in ops:
        values = (t, w)
        if op == "put":
            if id_ in live:
                index.swap(id_, live[id_], values)
            else:
                index.add(id_, values)
            live[id_] = values
        elif id_ in live:
            index.remove(id_, live.pop(id_))
    folded = tuple(dict.fromkeys(w for q in query for w in words(q)))
    assert index.match(folded) == {i for i, v in live.items() if matches(v, folded)}
    assert list(index.ordered) == sorted(index.postings)  # the invariant of words.py
    assert all(index.postings.values())
    rebuilt = WordIndex([0, 1])
    rebuilt.build(live.items())

    def as_sets(postings):
        return {word: set(ids) for word, ids in postings.items()}

    assert as_sets(rebuilt.postings) == as_sets(index.postings) and list(rebuilt.ordered) == list(index.ordered)


def test_openapi_lists_search_with_its_type_and_match_rule_only_where_declared():
    schema = parse_schema(SCHEMA + "model P {\n  id int @id\n  t str @filter\n}\n", "items.dbs")
    paths = build_openapi(schema)["paths"]
    (search,) = [p for p in paths["/api/item"]["get"]["parameters"] if p.get("name") == "search"]
    assert (search["in"], search["required"], search["schema"]) == ("query", False, {"type": "string", "minLength": 1})
    assert search["description"].startswith("Text search over `t`, `w`: a record matches when every word")
    assert "At most 16 words of at most 64 characters" in search["description"]
    assert not [p for p in paths["/api/p"]["get"]["parameters"] if p.get("name") == "search"]


def test_dbsvc_generate_shows_the_search_parser_and_matcher():
    source = generate_source(parse_schema(SCHEMA, "items.dbs"))
    assert "import dbsvc.textsearch as _dbsvc_words" in source
    assert (
        "def search_item(record, words):" in source
        and "def match_item(record, filters, ranges=(), nulls=(), search=()):" in source
    )
    assert "_dbsvc_search = _dbsvc_words.query_words(_dbsvc_value)" in source
    plain = generate_source(parse_schema("model P {\n  id int @id\n  t str @filter\n}\n", "p.dbs"))
    assert "textsearch" not in plain and "def match_p(record, filters, ranges=(), nulls=()):" in plain


def test_asyncapi_feeds_of_a_model_with_search_fields_take_search():
    schema = parse_schema(SCHEMA + "model P {\n  id int @id\n  t str @filter\n}\n", "items.dbs")
    channels = build_asyncapi(schema)["channels"]
    queries = {name: c["bindings"]["ws"]["query"]["properties"] for name, c in channels.items() if "bindings" in c}
    item = [queries["subscribe.item"], queries["live-query.item"]]
    assert all(q["search"]["type"] == "string" for q in item)
    assert "search" not in queries["subscribe.p"] and "search" not in queries["live-query.p"]
