"""Generated query-string parsers: docs/guide/queries.md, with exact BadQuery details."""

from __future__ import annotations

import pytest

from dbsvc.errors import BadQuery, BadRequest
from dbsvc.runtime import DEFAULT_QUERY, MAX_LIMIT, Query
from support.mutation import shared

FILTERS = """
model Row {
  id    int       @id @filter
  n     int       @filter @sort
  f     float     @filter @sort
  s     str?      @filter @sort
  b     bool      @filter
  e     enum(red, green) @filter @sort
  dt    datetime? @filter @sort
  d     date      @filter @sort
  u     uuid      @filter
  j     json?
  plain str
  @projection(short, id, s)
  @projection(tiny, id)
}

model Bare {
  id    str @id
  x     int
}

model Keyed {
  id    uuid @id
}
"""

FILTERABLE = "id, n, f, s, b, e, dt, d, u"
SORTABLE = "n, f, s, e, dt, d"


@pytest.fixture(scope=shared("module"))
def module(compile_text):
    return compile_text(FILTERS)


@pytest.fixture(scope=shared("module"))
def row(module):
    return module.BY_NAME["Row"]


@pytest.fixture(scope=shared("module"))
def bare(module):
    return module.BY_NAME["Bare"]


def bad(parse, pairs) -> str:
    with pytest.raises(BadQuery) as info:
        parse(pairs)
    return info.value.detail


def filters_of(row, *pairs):
    return row.parse_list_query(list(pairs)).filters


# --- defaults, limit, offset, as_of --------------------------------------------------------


def test_empty_query_is_the_shared_default(row):
    for parse in (row.parse_list_query, row.parse_get_query, row.parse_feed_query):
        assert parse([]) is DEFAULT_QUERY
    assert DEFAULT_QUERY == Query(limit=100, offset=0)


def test_limit_offset_as_of_parse(row):
    query = row.parse_list_query([("limit", "20"), ("offset", "40"), ("as_of", "7")])
    assert (query.limit, query.offset, query.as_of, query.sort, dict(query.filters)) == (20, 40, 7, (), {})


def test_limit_is_clamped_and_zero_is_allowed(row):
    assert row.parse_list_query([("limit", "5000")]).limit == MAX_LIMIT == 1000
    assert row.parse_list_query([("limit", "1" + "0" * 40)]).limit == 1000
    assert row.parse_list_query([("limit", "0")]).limit == 0


def test_default_limit_when_only_other_params(row):
    assert row.parse_list_query([("offset", "1")]).limit == 100


@pytest.mark.parametrize(
    ("param", "value", "what"),
    [
        ("limit", "-1", "a non-negative integer"),
        ("limit", "1.5", "a non-negative integer"),
        ("limit", "ten", "a non-negative integer"),
        ("limit", "", "a non-negative integer"),
        ("limit", "+3", "a non-negative integer"),
        ("limit", " 3", "a non-negative integer"),
        ("offset", "-5", "a non-negative integer"),
        ("offset", "²", "a non-negative integer"),
        ("as_of", "abc", "a non-negative integer watermark"),
        ("as_of", "-1", "a non-negative integer watermark"),
    ],
)
def test_bad_counts_are_refused_naming_the_value(row, param, value, what):
    assert bad(row.parse_list_query, [(param, value)]) == f"{param!r} must be {what}, got {value!r}"


@pytest.mark.parametrize("param", ["sort", "limit", "offset", "projection", "as_of"])
def test_repeated_control_parameter_is_refused(row, param):
    value = {"sort": "n", "projection": "short"}.get(param, "1")
    assert bad(row.parse_list_query, [(param, value), (param, value)]) == f"{param!r} given more than once"


# --- unknown parameters and fields ---------------------------------------------------------


def test_unknown_parameter_names_it_and_the_allowed_ones(row):
    assert bad(row.parse_list_query, [("colour", "red")]) == (
        f"unknown query parameter 'colour'; allowed: filters on {FILTERABLE}; "
        "sort, limit, offset, cursor, projection, as_of; "
        f"operators __gt, __gte, __lt, __lte on {SORTABLE}; __prefix on s; __null on s, dt"
    )


def test_filter_on_a_field_not_marked_filter(row):
    assert bad(row.parse_list_query, [("plain", "x")]) == (
        f"cannot filter on 'plain' (not marked @filter); filterable fields of Row: {FILTERABLE}"
    )
    assert bad(row.parse_list_query, [("j", "1")]).startswith("cannot filter on 'j'")


def test_model_without_filters_says_so(bare):
    assert bad(bare.parse_list_query, [("x", "1")]) == (
        "cannot filter on 'x' (not marked @filter); filterable fields of Bare: (none)"
    )
    assert bad(bare.parse_list_query, [("y", "1")]) == (
        "unknown query parameter 'y'; allowed: sort, limit, offset, cursor, projection, as_of"
    )


# --- sort ----------------------------------------------------------------------------------


def test_sort_keys_and_directions(row):
    assert row.parse_list_query([("sort", "n,-f,dt")]).sort == (("n", False), ("f", True), ("dt", False))


@pytest.mark.parametrize(
    ("value", "part"), [("plain", "plain"), ("n,-b", "-b"), ("", ""), ("n,", ""), ("--n", "--n"), ("+n", "+n")]
)
def test_sort_on_a_field_not_marked_sort(row, value, part):
    assert bad(row.parse_list_query, [("sort", value)]) == (
        f"cannot sort by {part!r}; sortable fields of Row: n, f, s, e, dt, d (prefix - for descending)"
    )


def test_sort_field_given_twice(row):
    assert bad(row.parse_list_query, [("sort", "n,-n")]) == "sort field 'n' given twice in 'n,-n'"


def test_model_without_sortable_fields(bare):
    assert bad(bare.parse_list_query, [("sort", "id")]) == (
        "cannot sort by 'id'; sortable fields of Bare: (none) (prefix - for descending)"
    )


# --- projection ----------------------------------------------------------------------------


def test_projection_names(row, bare):
    assert row.parse_list_query([("projection", "tiny")]).projection == "tiny"
    assert row.parse_get_query([("projection", "short")]).projection == "short"
    assert (
        bad(row.parse_get_query, [("projection", "long")])
        == "unknown projection 'long'; projections of Row: short, tiny"
    )
    assert bad(bare.parse_list_query, [("projection", "x")]) == "unknown projection 'x'; Bare declares no projections"


# --- get and feed --------------------------------------------------------------------------


def test_get_query_takes_projection_and_as_of_only(row):
    assert row.parse_get_query([("as_of", "3")]) == Query(as_of=3)
    assert bad(row.parse_get_query, [("n", "1")]) == "unknown query parameter 'n'; allowed: projection, as_of"
    assert bad(row.parse_get_query, [("limit", "1")]) == "unknown query parameter 'limit'; allowed: projection, as_of"


def test_feed_query_takes_filters_projection_after(row):
    query = row.parse_feed_query([("n", "1"), ("projection", "tiny"), ("after", "12")])
    assert query == Query(filters={"n": frozenset({1})}, projection="tiny", after=12)
    assert bad(row.parse_feed_query, [("after", "x")]) == "'after' must be a non-negative integer offset, got 'x'"
    assert bad(row.parse_feed_query, [("sort", "n")]) == (
        "'sort' does not apply to a feed: /subscribe and /live-query have no pages (a live query's Init is the "
        f"whole result set); allowed: filters on {FILTERABLE}; projection, after; operators __gt, __gte, __lt, "
        f"__lte on {SORTABLE}; __prefix on s; __null on s, dt"
    )


# --- typed filters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "texts", "keys"),
    [
        ("n", ["3", "3.0", "+3", "3e0", "0.3e1"], {3}),
        ("n", ["-9223372036854775808"], {-(2**63)}),
        ("f", ["3", "3.0", "3.00", "3e0", "+3"], {3.0}),
        ("f", ["-0.5", "-.5"], {-0.5}),
        ("s", ["x", "x"], {"x"}),
        ("s", ["", "null"], {"", None}),
        ("b", ["true"], {True}),
        ("b", ["false", "true"], {False, True}),
        ("e", ["red", "green"], {"red", "green"}),
        (
            "dt",
            ["2024-05-01T12:00:00Z", "2024-05-01T14:00:00+02:00", "2024-05-01t07:00:00.000-05:00"],
            {1714564800000000},
        ),
        ("dt", ["null"], {None}),
        ("d", ["2024-02-29"], {"2024-02-29"}),
        (
            "u",
            ["123E4567-E89B-12D3-A456-426614174ABC", "123e4567-e89b-12d3-a456-426614174abc"],
            {"123e4567-e89b-12d3-a456-426614174abc"},
        ),
    ],
)
def test_filter_values_become_typed_keys(row, field, texts, keys):
    assert filters_of(row, *[(field, t) for t in texts]) == {field: frozenset(keys)}


def test_filters_on_several_fields_are_kept_apart(row):
    assert filters_of(row, ("n", "1"), ("b", "true"), ("n", "2")) == {"n": frozenset({1, 2}), "b": frozenset({True})}


@pytest.mark.parametrize(
    ("field", "text", "expected"),
    [
        ("n", "abc", "an integer"),
        ("n", "3.5", "an integer"),
        ("n", "9223372036854775808", "an integer"),
        ("n", "1e400", "an integer"),
        ("n", "null", "an integer"),
        ("n", "", "an integer"),
        ("n", "1_000", "an integer"),
        ("f", "nan", "a number"),
        ("f", "inf", "a number"),
        ("f", "1e400", "a number"),
        ("f", "0x10", "a number"),
        ("b", "True", "a boolean"),
        ("b", "1", "a boolean"),
        ("b", "yes", "a boolean"),
        ("e", "blue", "one of red, green"),
        ("e", "RED", "one of red, green"),
        ("dt", "2024-05-01", 'an RFC 3339 date-time such as "2024-05-01T12:00:00Z" or null'),
        ("dt", "2024-05-01T12:00:00", 'an RFC 3339 date-time such as "2024-05-01T12:00:00Z" or null'),
        ("d", "2023-02-29", 'a date such as "2024-05-01" (YYYY-MM-DD)'),
        ("d", "null", 'a date such as "2024-05-01" (YYYY-MM-DD)'),
        ("u", "nope", 'a UUID such as "123e4567-e89b-12d3-a456-426614174000"'),
    ],
)
def test_filter_value_of_the_wrong_type_is_refused(row, field, text, expected):
    assert (
        bad(row.parse_list_query, [(field, text)])
        == f"invalid value {text!r} for filter {field!r}: expected {expected}"
    )


def test_same_errors_from_feed_parser(row):
    assert (
        bad(row.parse_feed_query, [("e", "blue")]) == "invalid value 'blue' for filter 'e': expected one of red, green"
    )


# --- ids -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("segment", "value"),
    [("0", 0), ("42", 42), ("-7", -7), ("9223372036854775807", 2**63 - 1), ("007", 7), ("-925.0", -925), ("1e3", 1000)],
)
def test_int_ids_parse(row, segment, value):
    assert row.parse_id(segment) == value


@pytest.mark.parametrize("segment", ["", "x", "1.5", "+1", " 1", "9223372036854775808", "١", "1e30", "NaN"])
def test_bad_int_ids_are_bad_requests_naming_the_segment(row, segment):
    with pytest.raises(BadRequest) as info:
        row.parse_id(segment)
    assert info.value.detail == f"invalid id {segment!r}: Row ids are signed 64-bit integers"


def test_str_ids_are_taken_as_is(bare):
    assert bare.parse_id("Any Thing/42") == "Any Thing/42"


def test_uuid_ids_are_lower_cased_and_checked(module):
    keyed = module.BY_NAME["Keyed"]
    assert keyed.parse_id("123E4567-E89B-12D3-A456-426614174ABC") == "123e4567-e89b-12d3-a456-426614174abc"
    with pytest.raises(BadRequest) as info:
        keyed.parse_id("123")
    assert info.value.detail == "invalid id '123': Keyed ids are UUIDs such as \"123e4567-e89b-12d3-a456-426614174000\""
