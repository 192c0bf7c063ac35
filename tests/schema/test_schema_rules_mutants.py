"""The refusals of `@allow` rules (dbsvc/schema/rules.py) word for word, with their line and
column: what a mutation run found unpinned (docs/mutation.md). A schema author reads these
messages; each names the piece, its type, what was expected and what was given."""

from __future__ import annotations

import pytest

from dbsvc.errors import SchemaErrors
from dbsvc.schema import parse_schema

HEAD = (
    "model Note {",
    "  id int @id",
    "  n int",
    "  x float",
    "  s str",
    "  b bool",
    "  d date",
    "  t datetime",
    "  u uuid?",
    "  e enum(a, b)",
    "  j json",
)
ORDER = "expected int, float, str, date or datetime values (use '==' or '!=')"
UUID = 'a uuid string such as "123e4567-e89b-12d3-a456-426614174000"'
INSTANT = 'an RFC 3339 instant with an offset such as "2024-01-31T12:00:00Z"'


def refusals(rule: str) -> list[tuple[int, int, str]]:
    with pytest.raises(SchemaErrors) as caught:
        parse_schema("\n".join((*HEAD, "  " + rule, "}")) + "\n", "r.dbs")
    return [(e.line, e.col, e.message) for e in caught.value.errors]


@pytest.mark.parametrize(
    "rule, expected",
    [
        (
            "@allow(read, [1, 2] in token.ids)",
            (12, 16, "a list is only allowed after 'in', expected a single value before 'in'"),
        ),
        (
            "@allow(read, record.n in record.s)",
            (12, 28, "expected a list after 'in': a [...] list, a token claim or a json field, got record.s (str)"),
        ),
        (
            "@allow(read, record.n in 3)",
            (12, 28, "expected a list after 'in': a [...] list, a token claim or a json field, got 3"),
        ),
        ("@allow(read, record.n < null)", (12, 25, f"'<' needs ordered values, but null has no order; {ORDER}")),
        ("@allow(read, true > record.n)", (12, 21, f"'>' needs ordered values, but true has no order; {ORDER}")),
        ("@allow(read, record.s < record.b)", (12, 25, f"'<' needs ordered values, but record.b is bool; {ORDER}")),
        ("@allow(read, record.x == [1])", (12, 28, "a list is only allowed after 'in', got it beside '=='")),
    ],
)
def test_misplaced_lists_and_unordered_values_are_refused_at_their_piece(rule, expected):
    assert refusals(rule) == [expected]


@pytest.mark.parametrize(
    "rule, message",
    [
        (
            "@allow(read, record.n == null)",
            "record.n is int, not nullable, so it never is null; expected an integer, got null",
        ),
        (
            "@allow(read, record.x == null)",
            "record.x is float, not nullable, so it never is null; expected a number, got null",
        ),
        (
            "@allow(read, record.b == null)",
            "record.b is bool, not nullable, so it never is null; expected true or false, got null",
        ),
        ("@allow(read, record.s == 1)", "record.s is str, expected a string, got 1"),
        ("@allow(read, record.b == 1)", "record.b is bool, expected true or false, got 1"),
        ("@allow(read, record.d == 1)", 'record.d is date, expected a "YYYY-MM-DD" date, got 1'),
        (
            "@allow(read, record.d == \"2026-13-01\")",
            'record.d is date, expected a "YYYY-MM-DD" date, got "2026-13-01"',
        ),
        ("@allow(read, record.u == 1)", f"record.u is uuid?, expected {UUID}, got 1"),
        ("@allow(read, record.u == \"nope\")", f'record.u is uuid?, expected {UUID}, got "nope"'),
        ("@allow(read, record.t == 1)", f"record.t is datetime, expected {INSTANT}, got 1"),
        ("@allow(read, record.t == \"2026-01-01\")", f'record.t is datetime, expected {INSTANT}, got "2026-01-01"'),
        ("@allow(read, record.e == 1)", "record.e is enum(a, b), expected a member string (a, b), got 1"),
        ("@allow(read, record.e == \"c\")", 'record.e is enum(a, b), expected one of a, b, got "c"'),
        ("@allow(read, record.n == 1.5)", "record.n is int, expected a signed 64-bit integer, got 1.5"),
        ("@allow(read, record.x == \"1\")", 'record.x is float, expected a finite number, got "1"'),
    ],
)
def test_a_literal_that_does_not_fit_its_field_is_refused_at_the_literal(rule, message):
    assert refusals(rule) == [(12, 28, message)]


def test_every_bad_item_of_a_list_is_reported_and_the_rule_dropped():
    assert refusals('@allow(read, record.n in [1, "a", 2, "b"])') == [
        (12, 32, 'record.n is int, expected a signed 64-bit integer, got "a"'),
        (12, 40, 'record.n is int, expected a signed 64-bit integer, got "b"'),
    ]
    # one bad item is enough to drop the rule, wherever it stands
    assert refusals('@allow(read, record.n in ["a", 1])') == [
        (12, 29, 'record.n is int, expected a signed 64-bit integer, got "a"')
    ]


@pytest.mark.parametrize(
    "rule, col",
    [
        ("@allow(read, (record.b or record.b) < 1)", 17),
        ("@allow(read, record.n in (record.b and record.b))", 29),
        ("@allow(read, (record.n == 1) == true)", 17),
        ("@allow(read, (not record.b) == true)", 17),
    ],
)
def test_a_condition_compared_as_a_value_is_refused_at_its_first_piece(rule, col):
    # the checker used to stop with "AssertionError: not an operand" here (a bug a survivor
    # of _place's BoolOp branch pointed at: the parser does build these)
    assert refusals(rule) == [
        (
            12,
            col,
            "(...) is a condition, not a value; expected 'record.FIELD', 'new.FIELD', 'token.CLAIM', "
            "a value or a [...] list on each side of a comparison",
        )
    ]


@pytest.mark.parametrize(
    "rule",
    [
        "@allow(read, record.n == record.x and record.j == record.n)",
        "@allow(read, record.n == 9223372036854775807 or record.n == -9223372036854775808)",
    ],
)
def test_numbers_compare_across_int_and_float_and_int64_holds_its_ends(rule):
    parse_schema("\n".join((*HEAD, "  " + rule, "}")) + "\n", "r.dbs")


def test_fields_of_different_types_and_ints_past_int64_are_refused():
    assert refusals("@allow(read, record.n == record.s)") == [
        (12, 25, "record.n (int) is compared with record.s (str), expected two fields of one type")
    ]
    big = "record.n is int, expected a signed 64-bit integer, got "
    assert refusals("@allow(read, record.n == 9223372036854775808)") == [(12, 28, big + "9223372036854775808")]
    assert refusals("@allow(read, record.n == -9223372036854775809)") == [(12, 28, big + "-9223372036854775809")]
