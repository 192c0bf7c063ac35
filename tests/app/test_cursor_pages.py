"""Pages at many cursors or offsets of one list (readcache.py `ParsedQueries.at_page`; issue 36 item 2,
bench/README.md "Random cursor pages"): the list is parsed and kept once without its cursor,
each page decodes its cursor (or reads its offset) alone, and every answer and every refusal is the generated
parser's for the whole pairs, word for word, whatever else is wrong beside the cursor.

Fixture-free, in process: the parser of schemas/blog.dbs is the oracle."""

from __future__ import annotations

import itertools
from dataclasses import fields, replace

import pytest

from dbsvc.cursors import encode_cursor, link_prefix, next_link
from dbsvc.errors import BadQuery
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.parsedlists import ParsedQueries, with_cursor, with_offset
from dbsvc.runtime import MAX_FILTER_VALUES, Query
from support.blog import BLOG

MODULE = BLOG  # compiled once per process (tests/support/blog.py)
POST = MODULE.BY_NAME["BlogPost"]
SCORE = (("score", True),)


def request(target: str) -> Request:
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])


def answer(call):  # noqa: ANN001, ANN201 (a thunk; its Query or its refusal's text)
    try:
        return call()
    except BadQuery as exc:
        return ("refused", str(exc))


def test_many_cursors_of_one_list_keep_one_list_and_each_query_is_the_parsers():
    """Before: each cursor was a list of its own (100 kept here, 1,024 at most, each cursor
    parsed whole by the generated parser on every page)."""
    queries = ParsedQueries()
    for id_ in range(1, 101):
        cursor = encode_cursor("BlogPost", SORT := SCORE, [id_ / 4], id_)
        target = f"/api/blog-post?author_id=7&sort=-score&limit=20&cursor={cursor}"
        query = queries.listing(POST, request(target)).query
        assert query == POST.parse_list_query(request(target).query)
        assert query.cursor == ((id_ / 4,), id_) and query.sort == SORT
    assert len(queries) == 1


def test_a_cursor_alone_is_the_list_with_no_pairs_at_that_cursor():
    queries = ParsedQueries()
    for id_ in (1, 2, 3):
        target = f"/api/blog-post?cursor={encode_cursor('BlogPost', (), [], id_)}"
        assert queries.listing(POST, request(target)).query == POST.parse_list_query(request(target).query)
    assert len(queries) == 0  # the list with no pairs is kept apart, as before


def test_a_polled_cursor_page_is_kept_apart_and_a_walk_never_drops_a_list():
    queries = ParsedQueries(capacity=8)
    target = f"/api/blog-post?sort=-score&cursor={encode_cursor('BlogPost', SCORE, [2.5], 9)}"
    once, first, again = (queries.listing(POST, request(target)) for _ in range(3))
    assert again is first is not once and first.query == POST.parse_list_query(request(target).query)
    others = [queries.listing(POST, request(f"/api/blog-post?limit={n}")) for n in range(1, 7)]
    walk = [f"/api/blog-post?sort=-score&cursor={encode_cursor('BlogPost', SCORE, [1.5], n)}" for n in range(50)]
    pages = [[queries.listing(POST, request(target)) for _ in range(2)][1] for target in walk]  # each kept
    assert len(queries) == 7  # the six lists and the walk's list, none dropped by its 50 pages
    assert [queries.listing(POST, request(f"/api/blog-post?limit={n}")) for n in range(1, 7)] == others
    assert queries.listing(POST, request(walk[-1])) is pages[-1]  # the last 8 // 4 pages are kept
    assert queries.listing(POST, request(walk[-2])) is pages[-2]
    assert queries.listing(POST, request(walk[-3])) is not pages[-3]
    assert queries.listing(POST, request(walk[-3])).query == pages[-3].query


def test_with_cursor_is_replace_on_every_field():
    every = Query(
        filters={"a": frozenset({1})},
        sort=SCORE,
        limit=5,
        offset=1,
        projection="summary",
        as_of=3,
        after=4,
        where_row=len,
        ranges=(("score", 1.0, True, None, True),),
        nulls=(("tags", True),),
        cursor=((1.0,), 2),
        expand=(("author_id", None),),
        search=("ab",),
    )
    made = with_cursor(every, ((9.0,), 7))
    assert made == replace(every, cursor=((9.0,), 7)) and made.cursor == ((9.0,), 7)
    assert [getattr(made, f.name) for f in fields(Query)] == [
        getattr(replace(every, cursor=((9.0,), 7)), f.name) for f in fields(Query)
    ]


GOOD = encode_cursor("BlogPost", SCORE, [2.5], 9)
PARTS = {  # pairs beside which a cursor is asked; each part alone, then every two together
    "bad filter": [("author_id", "x")],
    "unknown": [("colour", "red")],
    "bad sort": [("sort", "body")],
    "id order": [("sort", "")],
    "offset": [("offset", "20")],
    "offset 0": [("offset", "0")],
    "bad limit": [("limit", "-1")],
    "range": [("score__gte", "1")],
    "bad range": [("score__gte", "x")],
    "bad op": [("body__gt", "1")],
    "sort twice": [("sort", "-score"), ("sort", "title")],
    "filters": [("score", str(n)) for n in range(MAX_FILTER_VALUES + 1)],
    "search": [("search", "ab cd")],
}
CURSORS = {
    "good": GOOD,
    "malformed": "%%%",
    "not json": "bm90IGpzb24",
    "other model": encode_cursor("User", SCORE, [2.5], 9),
    "other sort": encode_cursor("BlogPost", (("title", False),), ["t"], 9),
    "id order": encode_cursor("BlogPost", (), [], 9),
    "bad key": encode_cursor("BlogPost", SCORE, ["text"], 9),
}


@pytest.mark.parametrize("cursor", CURSORS, ids=list(CURSORS))
def test_every_pairing_of_a_cursor_answers_and_refuses_as_the_whole_pairs_parse(cursor):
    """The cursor first, last and twice, beside each part and each two parts: the query or
    the refusal's text is the parser's of the whole pairs (a bad cursor beside another bad
    pair is refused as before, whichever the parser names)."""
    text = CURSORS[cursor]
    sides = [[("sort", "-score")], *PARTS.values()]
    sides += [a + b for a, b in itertools.combinations(PARTS.values(), 2)]
    for side in sides:
        for pairs in ([*side, ("cursor", text)], [("cursor", text), *side], [*side, ("cursor", text)] * 2):
            queries = ParsedQueries()
            got = answer(lambda: queries.listing(POST, Request("GET", "/api/blog-post?", "/api/blog-post", pairs, [])))
            want = answer(lambda: POST.parse_list_query(pairs))
            assert (got.query if not isinstance(got, tuple) else got) == want, pairs


def test_a_refused_cursor_leaves_its_list_kept_and_the_next_good_cursor_answers():
    queries = ParsedQueries()
    with pytest.raises(BadQuery, match="malformed cursor"):
        queries.listing(POST, request("/api/blog-post?sort=-score&cursor=%25%25"))
    target = f"/api/blog-post?sort=-score&cursor={GOOD}"
    assert queries.listing(POST, request(target)).query.cursor == ((2.5,), 9)
    assert len(queries) == 1


def test_a_cursor_pages_link_is_the_composed_text_and_its_maker_is_the_lists():
    queries = ParsedQueries()
    base = "/api/blog-post?author_id=7&sort=-score&limit=20"
    first = queries.listing(POST, request(base))
    record = {"id": 5, "score": 1.0}
    first.link_after(POST, request(base), record)
    for id_ in (11, 12):
        target = f"{base}&cursor={encode_cursor('BlogPost', SCORE, [3.0], id_)}"
        page = queries.listing(POST, request(target))
        assert page.links is first.links  # found with the list, not made again
        want = next_link(link_prefix("/api/blog-post", request(base).query), encode_cursor("BlogPost", SCORE, [1.0], 5))
        assert page.link_after(POST, request(target), record) == want


def test_cursor_pages_kept_are_a_quarter_of_capacity_rounded_down():
    queries = ParsedQueries(capacity=10)  # 10 // 4: the last two pages, never a third
    walk = [f"/api/blog-post?sort=-score&cursor={encode_cursor('BlogPost', SCORE, [1.5], n)}" for n in range(5)]
    pages = [[queries.listing(POST, request(target)) for _ in range(2)][1] for target in walk]  # kept at the 2nd
    assert queries.listing(POST, request(walk[-2])) is pages[-2]
    assert queries.listing(POST, request(walk[-3])) is not pages[-3]


def test_pages_at_cursors_of_a_list_never_linked_share_one_kept_maker():
    """The list itself never asked (a walk that starts at a cursor): its pages still find
    the one maker kept for the list's pages (ParsedQueries.maker), not one each."""
    queries = ParsedQueries()
    record = {"id": 5, "score": 1.0}
    made = []
    for id_ in (11, 12):
        target = f"/api/blog-post?sort=-score&cursor={encode_cursor('BlogPost', SCORE, [3.0], id_)}"
        page = queries.listing(POST, request(target))
        page.link_after(POST, request(target), record)
        made.append(page.links)
    assert made[0] is made[1] is not None


def test_a_cursor_whose_text_holds_base64url_letters_decodes_to_its_keys():
    """`-` and `_` (base64url's 62nd and 63rd letters) are read as `+` and `/`: a title of
    `?` and `>` makes both."""
    sort = (("title", False),)
    for title in ("???>>>", "a?b>c~"):
        text = encode_cursor("BlogPost", sort, [title], 1)
        assert "-" in text or "_" in text
        assert POST.decode_cursor(text, sort) == ((title,), 1)
        pairs = [("sort", "title"), ("cursor", text)]
        assert ParsedQueries().listing(POST, Request("GET", "/x", "/api/blog-post", pairs, [])).query.cursor == (
            (title,),
            1,
        )


def test_many_offsets_of_one_list_keep_one_list_and_each_query_is_the_parsers():
    """Before (session 14, wt-rand): each offset was a list of its own, parsed whole."""
    queries = ParsedQueries()
    for offset in range(0, 2000, 20):
        target = f"/api/blog-post?author_id=7&sort=-score&limit=20&offset={offset}"
        query = queries.listing(POST, request(target)).query
        assert query == POST.parse_list_query(request(target).query) and query.offset == offset
    assert len(queries) == 1
    plain = queries.listing(POST, request("/api/blog-post?offset=40")).query
    assert plain == POST.parse_list_query([("offset", "40")]) and len(queries) == 1  # the list with no pairs


def test_with_offset_is_replace_on_every_field():
    every = Query(filters={"a": frozenset({1})}, sort=SCORE, limit=5, offset=1, cursor=((1.0,), 2), search=("ab",))
    assert [getattr(with_offset(every, 9), f.name) for f in fields(Query)] == [
        getattr(replace(every, offset=9), f.name) for f in fields(Query)
    ]


OFFSETS = {"20": "20", "0": "0", "negative": "-1", "word": "x", "empty": "", "digit ٣": "٣", "long": "1" * 4001}
OFFSET_PARTS = {
    **{name: side for name, side in PARTS.items() if not name.startswith("offset")},
    "cursor": [("cursor", GOOD)],
    "bad cursor": [("cursor", "%%%")],
}


@pytest.mark.parametrize("offset", OFFSETS, ids=list(OFFSETS))
def test_every_pairing_of_an_offset_answers_and_refuses_as_the_whole_pairs_parse(offset):
    """The offset first, last and twice, beside each part and each two parts (a cursor
    among them): the query or the refusal's text is the parser's of the whole pairs."""
    text = OFFSETS[offset]
    sides = [[], [("sort", "-score")], *OFFSET_PARTS.values()]
    sides += [a + b for a, b in itertools.combinations(OFFSET_PARTS.values(), 2)]
    for side in sides:
        for pairs in ([*side, ("offset", text)], [("offset", text), *side], [*side, ("offset", text)] * 2):
            queries = ParsedQueries()
            got = answer(lambda: queries.listing(POST, Request("GET", "/api/blog-post?", "/api/blog-post", pairs, [])))
            want = answer(lambda: POST.parse_list_query(pairs))
            assert (got.query if not isinstance(got, tuple) else got) == want, pairs


def test_offset_pages_are_kept_apart_and_share_the_lists_link_maker():
    queries = ParsedQueries(capacity=8)
    base = "/api/blog-post?author_id=7&sort=-score&limit=20"
    first = queries.listing(POST, request(base))
    record = {"id": 5, "score": 1.0}
    first.link_after(POST, request(base), record)
    pages = [[queries.listing(POST, request(f"{base}&offset={20 * n}")) for _ in range(2)][1] for n in range(1, 4)]
    assert all(page.links is first.links for page in pages) and len(queries) == 1
    assert queries.listing(POST, request(f"{base}&offset=60")) is pages[-1]  # the last 8 // 4 kept
    assert queries.listing(POST, request(f"{base}&offset=20")) is not pages[0]


def test_under_a_capacity_of_three_no_page_is_kept_apart_and_each_answers():
    """capacity // 4 is 0: a page at a cursor or an offset is made each time, never kept
    (before: an `offset` page there popped from an empty dict, KeyError)."""
    queries = ParsedQueries(capacity=3)
    for target in ("/api/blog-post?offset=20", f"/api/blog-post?cursor={encode_cursor('BlogPost', (), [], 9)}"):
        first, again = (queries.listing(POST, request(target)) for _ in range(2))
        assert again is not first and again.query == first.query == POST.parse_list_query(request(target).query)


def test_a_page_at_a_cursor_or_an_offset_is_kept_apart_from_its_second_ask():
    """Pages at many targets (session 15, wt-many): asked once, a page is made and not
    kept apart (no eviction for it); asked again, it is kept and then found. Failed before
    session 15, when every page was kept apart at its first ask."""
    queries = ParsedQueries(capacity=8)
    for target in ("/api/blog-post?offset=20", f"/api/blog-post?cursor={encode_cursor('BlogPost', (), [], 9)}"):
        once, second, third = (queries.listing(POST, request(target)) for _ in range(3))
        assert once is not second and third is second
        assert once.query == second.query == POST.parse_list_query(request(target).query)


def test_pages_apart_are_admitted_within_a_window_of_a_quarter_of_capacity():
    """The pages kept apart take a target from its second ask among the last
    `capacity // 4` asked once (admission.py): 8 // 4 = 2 and 10 // 4 = 2."""
    a, b, c = (request(f"/api/blog-post?offset={n}") for n in (20, 40, 60))
    queries = ParsedQueries(capacity=8)
    queries.listing(POST, a)
    queries.listing(POST, b)
    kept = queries.listing(POST, a)  # a's second ask within the window of 2: kept
    assert queries.listing(POST, a) is kept
    queries = ParsedQueries(capacity=10)
    for target in (a, b, c):  # c's ask empties the window of 2: a is forgotten
        queries.listing(POST, target)
    fourth, fifth = queries.listing(POST, a), queries.listing(POST, a)
    assert fifth is not fourth and queries.listing(POST, a) is fifth
