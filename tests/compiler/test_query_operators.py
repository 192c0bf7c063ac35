"""Generated list parsers' operators and cursors (issue 34): `field__op=value`, `cursor`.

Each declared operator parses its value as the field's type (the same typed keys as
filters); each refusal's detail names the parameter, the value and what is allowed
(docs/guide/queries.md, "Operators", "Cursor pages").
"""

from __future__ import annotations

import base64
import json

import pytest

from dbsvc.compiler import generate_source
from dbsvc.cursors import decode_cursor, encode_cursor, link_prefix, next_link
from dbsvc.errors import BadQuery
from dbsvc.operators import prefix_end, ranges
from dbsvc.schema import SchemaErrors, parse_schema
from support.mutation import shared

SCHEMA = """
model Post {
  id      int        @id
  title   str        @sort
  body    str
  score   float      @filter @sort
  views   int?       @sort
  at      datetime?  @sort
  day     date       @sort
  kind    enum(a, b) @filter @sort
  tag     str?       @filter
  pinned  bool       @filter @sort
}
"""
ALLOWED = (
    "filters on score, kind, tag, pinned; sort, limit, offset, cursor, projection, as_of; "
    "operators __gt, __gte, __lt, __lte on title, score, views, at, day, kind, pinned; __prefix on title; "
    "__null on views, at, tag"
)


@pytest.fixture(scope=shared("module"))
def post(compile_text):
    return compile_text(SCHEMA).BY_NAME["Post"]


def bad(post, *pairs) -> str:
    with pytest.raises(BadQuery) as info:
        post.parse_list_query(list(pairs))
    return info.value.detail


# --- ranges --------------------------------------------------------------------------------


def test_range_bounds_are_typed_like_filters(post):
    query = post.parse_list_query([("score__gte", "3"), ("views__lt", "+10")])
    assert query.ranges == (("score", 3.0, True, None, True), ("views", None, True, 10, False))
    assert type(query.ranges[0][1]) is float


def test_datetime_bounds_in_any_offset_are_one_instant(post):
    utc = post.parse_list_query([("at__gt", "2024-05-01T12:00:00Z")]).ranges
    paris = post.parse_list_query([("at__gt", "2024-05-01T14:00:00+02:00")]).ranges
    assert utc == paris == (("at", 1714564800000000, False, None, True),)


def test_bounds_of_one_field_are_anded(post):
    query = post.parse_list_query([("score__gt", "1"), ("score__lte", "9"), ("score__gte", "4"), ("score__lt", "9")])
    assert query.ranges == (("score", 4.0, True, 9.0, False),)


def test_equal_bounds_keep_the_stricter(post):
    query = post.parse_list_query([("score__gte", "2"), ("score__gt", "2.0")])
    assert query.ranges == (("score", 2.0, False, None, True),)


def test_prefix_is_a_range_over_the_sorted_strings(post):
    assert post.parse_list_query([("title__prefix", "ab")]).ranges == (("title", "ab", True, "ac", False),)
    # NFC, as str values are stored: the NFD spelling is the same prefix
    assert post.parse_list_query([("title__prefix", "cafe\u0301")]).ranges[0][1] == "caf\u00e9"


def test_prefix_end_of_the_last_code_point():
    assert prefix_end("a\U0010ffff") == "b"
    assert prefix_end("\U0010ffff") is None
    assert prefix_end("") is None
    assert ranges([("t", "prefix", "")]) == (("t", "", True, None, True),)


@pytest.mark.parametrize(
    ("param", "value", "wanted"),
    [
        ("score__gte", "abc", "a number"),
        ("score__gte", "null", "a number"),
        ("views__lt", "1.5", "an integer"),
        ("at__gt", "2024-05-01", 'an RFC 3339 date-time such as "2024-05-01T12:00:00Z"'),
        ("day__lte", "2024-02-30", 'a date such as "2024-05-01" (YYYY-MM-DD)'),
        ("kind__gt", "c", "one of a, b"),
        ("pinned__gt", "yes", "a boolean"),
    ],
)
def test_a_bound_that_does_not_parse_names_parameter_value_and_type(post, param, value, wanted):
    assert bad(post, (param, value)) == f"invalid value {value!r} for {param!r}: expected {wanted}"


# --- null tests ----------------------------------------------------------------------------


def test_null_tests(post):
    query = post.parse_list_query([("views__null", "true"), ("tag__null", "false")])
    assert query.nulls == (("views", True), ("tag", False))
    assert bad(post, ("views__null", "yes")) == "invalid value 'yes' for 'views__null': expected true or false"
    assert bad(post, ("views__null", "true"), ("views__null", "true")) == "'views__null' given more than once"


def test_repeated_exact_values_still_mean_any_of(post):
    assert post.parse_list_query([("kind", "a"), ("kind", "b")]).filters == {"kind": frozenset({"a", "b"})}


# --- refusals ------------------------------------------------------------------------------


def test_range_on_a_field_not_marked_sort(post):
    assert bad(post, ("body__gt", "x")) == (
        "cannot use 'body__gt': 'body' is not marked @sort, and range operators apply to sort fields "
        f"(title, score, views, at, day, kind, pinned); allowed: {ALLOWED}"
    )


def test_prefix_on_a_non_string(post):
    assert bad(post, ("score__prefix", "1")) == (
        "cannot use 'score__prefix': 'score' is float, not str; __prefix applies to str @sort fields (title); "
        f"allowed: {ALLOWED}"
    )
    assert bad(post, ("body__prefix", "x")).startswith("cannot use 'body__prefix': 'body' is not marked @sort;")


def test_null_on_a_field_that_is_not_nullable(post):
    assert bad(post, ("score__null", "true")) == (
        "cannot use 'score__null': 'score' is not nullable; __null applies to nullable @filter or @sort fields "
        f"(views, at, tag); allowed: {ALLOWED}"
    )


def test_unknown_operator_and_unknown_field(post):
    assert bad(post, ("score__ne", "1")) == (
        "unknown operator '__ne' in 'score__ne': operators are __gt, __gte, __lt, __lte, __prefix, __null; "
        f"allowed: {ALLOWED}"
    )
    assert bad(post, ("colour__gt", "1")) == f"unknown query parameter 'colour__gt'; allowed: {ALLOWED}"


def test_operators_are_not_accepted_by_single_reads(post):
    # feeds take them since issue 34 item 5: tests/compiler/test_feed_operators.py
    with pytest.raises(BadQuery):
        post.parse_get_query([("score__gt", "1")])


# --- cursors -------------------------------------------------------------------------------


def test_cursor_round_trip(post):
    text = encode_cursor("Post", (("score", True), ("title", False)), [2.5, "ab"], 7)
    query = post.parse_list_query([("sort", "-score,title"), ("cursor", text)])
    assert query.cursor == ((2.5, "ab"), 7)
    plain = post.parse_list_query([("cursor", encode_cursor("Post", (), [], 3))])
    assert plain.cursor == ((), 3)


def test_cursor_for_another_sort_or_model_is_refused(post):
    text = encode_cursor("Post", (("score", True),), [2.5], 7)
    assert bad(post, ("sort", "score"), ("cursor", text)).endswith(
        "was made for sort='-score', and this request sorts by 'score': "
        "a cursor continues the list it came from, with the same sort"
    )
    other = encode_cursor("User", (), [], 7)
    assert bad(post, ("cursor", other)) == f"cursor {other!r} was made for a list of 'User', not 'Post'"


@pytest.mark.parametrize(
    "payload",
    [
        "not base64 at all!",
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        base64.urlsafe_b64encode(b'{"a": 1}').decode(),
        base64.urlsafe_b64encode(json.dumps(["c1", "Post", "-score", ["x"], 7]).encode()).decode(),
        base64.urlsafe_b64encode(json.dumps(["c1", "Post", "-score", [1.0], "7"]).encode()).decode(),
        base64.urlsafe_b64encode(json.dumps(["c1", "Post", "-score", [], 7]).encode()).decode(),
        base64.urlsafe_b64encode(json.dumps(["c9", "Post", "-score", [1.0], 7]).encode()).decode(),
        base64.urlsafe_b64encode(b'["c1", "Post", "-score", [NaN], 7]').decode(),
        "A" * 5000,
    ],
)
def test_malformed_cursor_is_refused(post, payload):
    detail = bad(post, ("sort", "-score"), ("cursor", payload))
    assert detail.startswith("malformed cursor ") and detail.endswith(
        'expected the cursor of a Link rel="next" header of this list'
    )


def test_cursor_with_offset_or_twice_is_refused(post):
    text = encode_cursor("Post", (), [], 3)
    assert bad(post, ("cursor", text), ("offset", "0")) == (
        "'cursor' and 'offset' cannot be combined: a cursor page starts right after the cursor's record; "
        "leave out offset"
    )
    assert bad(post, ("cursor", text), ("cursor", text)) == "'cursor' given more than once"


def test_cursor_keys_checked_against_the_field_kinds():
    kinds = {"at": "i", "score": "f", "pinned": "b"}
    made = encode_cursor("Post", (("at", False), ("pinned", True)), [None, True], 4)
    assert decode_cursor(made, "Post", (("at", False), ("pinned", True)), kinds, "i") == ((None, True), 4)
    with pytest.raises(BadQuery):
        decode_cursor(encode_cursor("Post", (("pinned", False),), [1], 4), "Post", (("pinned", False),), kinds, "i")


# --- the generated source shows it ---------------------------------------------------------


def test_generate_shows_the_operator_branches_and_bound_parsers():
    source = generate_source(parse_schema(SCHEMA, "test.dbs"))
    assert "def bound_post__score(text, param):" in source
    assert "elif _dbsvc_name == 'title__prefix':" in source
    assert "elif _dbsvc_name == 'views__null':" in source
    assert "body__gt" not in source.split("def parse_list_query_post")[1].split("elif '__' in _dbsvc_name")[0]


def test_field_names_with_double_underscores_are_refused_at_their_place():
    with pytest.raises(SchemaErrors) as info:
        parse_schema("model A {\n  id int @id\n  a__b int @sort\n}\n", "x.dbs")
    (error,) = info.value.errors
    assert (error.line, error.col) == (3, 3)
    assert "contains '__'" in error.message


def test_openapi_lists_every_operator_parameter_with_its_type():
    from dbsvc.compiler import build_openapi

    document = build_openapi(parse_schema(SCHEMA, "test.dbs"))
    operation = document["paths"]["/api/post"]["get"]
    params = {p["name"]: p["schema"] for p in operation["parameters"] if "name" in p}
    assert params["score__gte"]["type"] == "number"
    assert (params["views__lt"]["type"], params["views__lt"]["format"]) == ("integer", "int64")
    assert (params["at__gt"]["type"], params["at__gt"]["format"]) == ("string", "date-time")
    assert params["kind__lte"] == {"type": "string", "enum": ["a", "b"]}
    assert params["title__prefix"] == {"type": "string"}
    assert params["tag__null"] == params["views__null"] == {"type": "boolean"}
    assert "body__gt" not in params and "score__prefix" not in params and "score__null" not in params
    assert {"$ref": "#/components/parameters/cursor"} in operation["parameters"]
    assert "Link" in operation["responses"]["200"]["headers"]
    assert document["components"]["parameters"]["cursor"]["schema"] == {"type": "string"}


@pytest.mark.parametrize(
    ("path", "pairs", "expected"),
    [
        ("/api/post", [], '</api/post?cursor=Q2-_>; rel="next"'),
        (
            "/api/post",
            [("sort", "-score"), ("offset", "40"), ("limit", "20"), ("cursor", "old")],
            '</api/post?sort=-score&limit=20&cursor=Q2-_>; rel="next"',
        ),
        (
            "/api/pöst x",
            [("title__prefix", "a b&c=ü"), ("search", "é/?#")],
            "</api/p%C3%B6st%20x?title__prefix=a%20b%26c%3D%C3%BC&search=%C3%A9%2F%3F%23&cursor=Q2-_>; rel=\"next\"",
        ),
    ],
)
def test_the_next_link_keeps_the_request_but_offset_and_cursor_quoted(path, pairs, expected):
    prefix = link_prefix(path, pairs)
    assert next_link(prefix, "Q2-_") == expected
    assert next_link(prefix, "Zz9") == expected.replace("Q2-_", "Zz9")
