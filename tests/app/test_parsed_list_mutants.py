"""readcache.py `ParsedList` and `ParsedQueries.listing`: what mutation testing found unpinned
(docs/mutation.md, "... session 11, wt-mpo"). A list with no pairs is kept once per model; a
kept list makes its `Link` maker once per path, and a maker of its own for another path; a
target of exactly `longest` characters is still kept."""

from __future__ import annotations

from dbsvc.app import ParsedQueries
from dbsvc.compiler import compile_schema
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.readcache import ParsedList
from dbsvc.runtime import DEFAULT_QUERY
from dbsvc.schema import load_schema
from support.server import ROOT

MODULE = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
POST = MODULE.BY_NAME["BlogPost"]
USER = MODULE.BY_NAME["User"]


def request(target: str) -> Request:
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])


def test_a_list_without_pairs_is_kept_once_per_model():
    queries = ParsedQueries()
    posts = queries.listing(POST, request("/api/blog-post"))
    assert posts.query is DEFAULT_QUERY
    assert queries.listing(POST, request("/api/blog-post")) is posts
    users = queries.listing(USER, request("/api/user"))
    assert users is not posts and queries.listing(USER, request("/api/user")) is users
    assert queries._parsed == {}  # kept apart: the plain lists evict no query


def test_a_kept_list_makes_its_link_maker_once_for_its_path():
    listed = ParsedList(POST.parse_list_query([("sort", "-score")]))
    asked = request("/api/blog-post?sort=-score")
    first = listed.link_after(POST, asked, {"id": 5, "score": 2.5})
    maker = listed._links
    assert maker is not None
    second = listed.link_after(POST, asked, {"id": 6, "score": 1.0})
    assert listed._links is maker  # found, not made again
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
    assert kept.query is query and kept._links is not None
    assert kept.link_after(POST, request(target), {"id": 5, "score": 2.5}) == link
    longer = ParsedQueries(longest=len(target) - 1)
    query = longer.list_query(POST, request(target))
    assert longer.link_after(POST, query, request(target), {"id": 5, "score": 2.5}) == link
    assert longer._parsed == {}
