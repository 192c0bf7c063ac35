"""List queries parsed once per distinct query (app.py `ParsedQueries`): the parse is kept,
never the answer, and a query that does not parse is refused every time."""

from __future__ import annotations

import pytest

from dbsvc.app import ParsedQueries
from dbsvc.errors import BadQuery
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.parsedlists import ParsedList
from dbsvc.runtime import DEFAULT_QUERY
from support.blog import BLOG

MODULE = BLOG  # compiled once per process (tests/support/blog.py)
POST = MODULE.BY_NAME["BlogPost"]
USER = MODULE.BY_NAME["User"]


def request(target: str) -> Request:
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])


def test_the_same_query_is_parsed_once_and_equals_a_fresh_parse():
    queries = ParsedQueries()
    first = queries.list_query(POST, request("/api/blog-post?published=true&sort=-score&limit=20"))
    again = queries.list_query(POST, request("/api/blog-post?published=true&sort=-score&limit=20"))
    assert again is first
    assert first == POST.parse_list_query([("published", "true"), ("sort", "-score"), ("limit", "20")])
    assert first.filters == {"published": frozenset({True})}
    assert first.sort == (("score", True),) and first.limit == 20


def test_the_key_is_the_decoded_pairs_so_two_spellings_parse_alike():
    queries = ParsedQueries()
    plain = queries.list_query(POST, request("/api/blog-post?sort=title"))
    encoded = queries.list_query(POST, request("/api/blog-post?sort=%74itle"))
    assert plain == encoded


def test_each_model_parses_its_own_queries():
    queries = ParsedQueries()
    target = "/api/x?sort=-score"
    assert queries.list_query(POST, request(target)).sort == (("score", True),)
    with pytest.raises(BadQuery, match="cannot sort by '-score'"):
        queries.list_query(USER, request(target))  # users have no score


def test_a_query_that_does_not_parse_is_refused_every_time_and_not_kept():
    queries = ParsedQueries()
    for _ in range(3):
        with pytest.raises(BadQuery, match="'limit' must be a non-negative integer, got 'ten'"):
            queries.list_query(POST, request("/api/blog-post?limit=ten"))
    assert len(queries) == 0


def test_no_query_is_the_default_query_and_is_not_kept():
    queries = ParsedQueries()
    assert queries.list_query(POST, request("/api/blog-post")) is DEFAULT_QUERY
    assert len(queries) == 0


def test_capacity_drops_the_oldest_query_first():
    queries = ParsedQueries(capacity=2)
    parsed = [queries.list_query(POST, request(f"/api/blog-post?limit={n}")) for n in (1, 2, 3)]
    assert [q.limit for q in parsed] == [1, 2, 3]
    assert len(queries) == 2
    assert queries.list_query(POST, request("/api/blog-post?limit=3")) is parsed[2]
    dropped = queries.list_query(POST, request("/api/blog-post?limit=1"))
    assert dropped == parsed[0] and dropped is not parsed[0]  # parsed afresh


def test_a_long_target_is_parsed_but_not_kept():
    queries = ParsedQueries(longest=64)
    target = "/api/blog-post?limit=5&" + "&".join(["author_id=1"] * 12)
    assert len(target) > 64
    first = queries.list_query(POST, request(target))
    assert first.limit == 5 and first.filters == {"author_id": frozenset({1})}
    assert queries.list_query(POST, request(target)) == first
    assert len(queries) == 0


def test_a_polled_list_sees_every_write_between_two_polls(blog):
    """Over a real server: the same list URL twice, a write between, answers differ."""
    author = blog.post("/api/user", {"email": "parsed-queries@x.io", "name": "Poll"}).json["id"]
    url = f"/api/blog-post?author_id={author}&sort=-score&limit=5"
    before = blog.get(url)
    assert before.status == 200 and before.json["total"] == 0 and before.json["data"] == []
    created = blog.post("/api/blog-post", {"author_id": author, "title": "t", "body": "b", "score": 2.5})
    assert created.status == 201
    after = blog.get(url)
    assert after.json["total"] == 1
    assert [r["id"] for r in after.json["data"]] == [created.json["id"]]
    assert blog.get(f"/api/blog-post?author_id={author}&sort=-score&limit=ten").status == 400


def test_the_next_link_is_the_same_bytes_whether_its_prefix_is_kept_or_not():
    # readcache.py `link_after`: the quoted part before the cursor is kept per distinct list,
    # within the bound on targets; a longer target gets the same text, made afresh.
    queries = ParsedQueries()
    target = "/api/blog-post?title__prefix=a%20b&offset=40&sort=-score"
    query = queries.list_query(POST, request(target))
    first = queries.link_after(POST, query, request(target), {"id": 5, "score": 2.5})
    cursor = "WyJjMSIsIkJsb2dQb3N0IiwiLXNjb3JlIixbMi41XSw1XQ"
    assert first == f'</api/blog-post?title__prefix=a%20b&sort=-score&cursor={cursor}>; rel="next"'
    then = "WyJjMSIsIkJsb2dQb3N0IiwiLXNjb3JlIixbMS4wXSw2XQ"
    assert queries.link_after(POST, query, request(target), {"id": 6, "score": 1.0}) == first.replace(cursor, then)
    long_value = "x" * 600
    long_target = f"/api/blog-post?title__prefix={long_value}"
    expected = f'</api/blog-post?title__prefix={long_value}&cursor=WyJjMSIsIkJsb2dQb3N0IiwiIixbXSw1XQ>; rel="next"'
    long_query = queries.list_query(POST, request(long_target))
    assert queries.link_after(POST, long_query, request(long_target), {"id": 5}) == expected
    assert queries.link_after(POST, long_query, request(long_target), {"id": 5}) == expected


# readcache.py `ParsedList` and `ParsedQueries.listing`, where mutation testing found them
# unpinned (docs/mutation.md, "... session 11, wt-mpo").


def test_a_list_without_pairs_is_kept_once_per_model():
    queries = ParsedQueries()
    posts = queries.listing(POST, request("/api/blog-post"))
    assert posts.query is DEFAULT_QUERY
    assert queries.listing(POST, request("/api/blog-post")) is posts
    users = queries.listing(USER, request("/api/user"))
    assert users is not posts and queries.listing(USER, request("/api/user")) is users
    assert len(queries) == 0  # kept apart: the plain lists evict no query


def test_a_kept_list_makes_its_link_maker_once_for_its_path():
    listed = ParsedList(POST.parse_list_query([("sort", "-score")]))
    asked = request("/api/blog-post?sort=-score")
    first = listed.link_after(POST, asked, {"id": 5, "score": 2.5})
    maker = listed.links
    assert maker is not None
    second = listed.link_after(POST, asked, {"id": 6, "score": 1.0})
    assert listed.links is maker  # found, not made again
    assert first.startswith("</api/blog-post?sort=-score&cursor=") and second != first


def test_a_kept_list_asked_from_another_path_links_to_that_path():
    listed = ParsedList(POST.parse_list_query([("sort", "-score")]))
    record = {"id": 5, "score": 2.5}
    here = listed.link_after(POST, request("/api/blog-post?sort=-score"), record)
    there = listed.link_after(POST, request("/v2/api/blog-post?sort=-score"), record)
    assert here.startswith("</api/blog-post?sort=-score&cursor=")
    assert there == here.replace("</api/", "</v2/api/", 1)
    assert listed.link_after(POST, request("/api/blog-post?sort=-score"), record) == here


def test_a_target_of_exactly_longest_characters_is_kept_with_its_link_maker():
    target = "/api/blog-post?sort=-score&limit=5"
    queries = ParsedQueries(longest=len(target))
    query = queries.list_query(POST, request(target))
    link = queries.link_after(POST, query, request(target), {"id": 5, "score": 2.5})
    kept = queries.listing(POST, request(target))
    assert kept.query is query and kept.links is not None
    assert kept.link_after(POST, request(target), {"id": 5, "score": 2.5}) == link
    longer = ParsedQueries(longest=len(target) - 1)
    query = longer.list_query(POST, request(target))
    assert longer.link_after(POST, query, request(target), {"id": 5, "score": 2.5}) == link
    assert len(longer) == 0
