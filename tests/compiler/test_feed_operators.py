"""Operators on the feeds (issue 34 item 5): the generated feed parser takes the list's
`field__op=value` parameters, and the generated matcher applies them to one record.

The feed parser accepts exactly the operators a list accepts, with the same typed bounds
and the same refusals; `cursor`, `offset`, `sort` and `limit` are refused with a detail
that says why (a feed has no pages). `match_m(record, filters, ranges, nulls)` is the test
`/subscribe` and `/live-query` run on every event (docs/realtime.md, "Operators").
"""

from __future__ import annotations

import pytest

from dbsvc.compiler import generate_source
from dbsvc.errors import BadQuery
from dbsvc.schema import parse_schema
from support.mutation import shared

SCHEMA = """
model Post {
  id      int        @id
  title   str        @sort
  body    str
  score   float      @filter @sort
  views   int?       @sort
  at      datetime?  @sort
  tag     str?       @filter
}
"""
ALLOWED = (
    "filters on score, tag; projection, after; "
    "operators __gt, __gte, __lt, __lte on title, score, views, at; __prefix on title; __null on views, at, tag"
)


@pytest.fixture(scope=shared("module"))
def post(compile_text):
    return compile_text(SCHEMA).BY_NAME["Post"]


def record(**kw):
    base = {"id": 1, "title": "abc", "body": "", "score": 2.0, "views": None, "at": None, "tag": None}
    return {**base, **kw}


def bad(post, *pairs) -> str:
    with pytest.raises(BadQuery) as info:
        post.parse_feed_query(list(pairs))
    return info.value.detail


def test_feed_parser_takes_the_lists_operators_with_typed_bounds(post):
    query = post.parse_feed_query(
        [("score__gte", "3"), ("score__lt", "9"), ("title__prefix", "ab"), ("views__null", "false"), ("after", "0")]
    )
    assert query.ranges == (("score", 3.0, True, 9.0, False), ("title", "ab", True, "ac", False))
    assert query.nulls == (("views", False),)
    assert query.after == 0 and query.cursor is None


def test_feed_parser_gives_the_same_ranges_as_the_list_parser(post):
    pairs = [("at__gt", "2024-05-01T14:00:00+02:00"), ("views__lte", "7"), ("tag__null", "true"), ("score", "2")]
    listed, fed = post.parse_list_query(pairs), post.parse_feed_query(pairs)
    assert (fed.filters, fed.ranges, fed.nulls) == (listed.filters, listed.ranges, listed.nulls)


@pytest.mark.parametrize("param", ["cursor", "offset", "sort", "limit"])
def test_paging_parameters_are_refused_on_a_feed_with_the_reason(post, param):
    assert bad(post, (param, "1")) == (
        f"{param!r} does not apply to a feed: /subscribe and /live-query have no pages "
        f"(a live query's Init is the whole result set); allowed: {ALLOWED}"
    )


def test_a_bad_bound_on_a_feed_is_the_lists_refusal(post):
    assert bad(post, ("score__gte", "abc")) == "invalid value 'abc' for 'score__gte': expected a number"
    assert bad(post, ("views__null", "yes")) == "invalid value 'yes' for 'views__null': expected true or false"


def test_an_operator_a_field_does_not_take_is_refused_naming_what_is_allowed(post):
    assert bad(post, ("body__gt", "x")) == (
        "cannot use 'body__gt': 'body' is not marked @sort, and range operators apply to sort fields "
        f"(title, score, views, at); allowed: {ALLOWED}"
    )
    assert bad(post, ("score__prefix", "1")) == (
        "cannot use 'score__prefix': 'score' is float, not str; __prefix applies to str @sort fields (title); "
        f"allowed: {ALLOWED}"
    )
    assert bad(post, ("nope", "1")) == f"unknown query parameter 'nope'; allowed: {ALLOWED}"


def test_match_applies_ranges(post):
    query = post.parse_feed_query([("score__gt", "2"), ("score__lte", "5")])
    match = post.match

    def inside(**kw):
        return match(record(**kw), query.filters, query.ranges, query.nulls)

    assert [inside(score=s) for s in (1.5, 2.0, 2.5, 5.0, 5.5)] == [False, False, True, True, False]


def test_a_range_never_matches_a_null(post):
    query = post.parse_feed_query([("views__lt", "100")])
    assert post.match(record(views=3), query.filters, query.ranges, query.nulls)
    assert not post.match(record(views=None), query.filters, query.ranges, query.nulls)


def test_match_compares_datetimes_as_instants(post):
    query = post.parse_feed_query([("at__gte", "2024-05-01T14:00:00+02:00")])
    assert post.match(record(at="2024-05-01T12:00:00Z"), query.filters, query.ranges, query.nulls)
    assert not post.match(record(at="2024-05-01T11:59:59.999999Z"), query.filters, query.ranges, query.nulls)


def test_match_applies_prefixes_and_null_tests(post):
    query = post.parse_feed_query([("title__prefix", "ab"), ("tag__null", "true")])
    assert post.match(record(title="abz"), query.filters, query.ranges, query.nulls)
    assert not post.match(record(title="ac"), query.filters, query.ranges, query.nulls)
    assert not post.match(record(title="abz", tag="x"), query.filters, query.ranges, query.nulls)


def test_match_without_operators_is_the_filter_test(post):
    query = post.parse_feed_query([("score", "2")])
    assert post.match(record(), query.filters)
    assert not post.match(record(score=3.0), query.filters)
    assert post.match(record(score=3.0), {})


def test_generate_shows_the_matchers_operator_tests():
    source = generate_source(parse_schema(SCHEMA, "post.dbs"))
    start = source.index("def match_post(")
    matcher = source[start : source.index("\ndef ", start + 1)]
    assert matcher.startswith("def match_post(record, filters, ranges=(), nulls=()):")
    assert "in ranges:" in matcher and "in nulls:" in matcher
    assert "key_post__at(" in matcher  # a datetime is compared as its instant
    feed = source[source.index("def parse_feed_query_post(") :]
    assert "'score__gte'" in feed and "'title__prefix'" in feed and "'views__null'" in feed
