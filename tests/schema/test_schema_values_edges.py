"""`@min`, `@max` and `@default` literals at their edges (dbsvc/schema/values.py) through
`parse_schema`: the ends of the 64-bit range, a default exactly at a bound, a null default
beside a bound, each type's message for a literal of the wrong kind, and a datetime's
canonical form on a host whose zone is not UTC. Fixture-free, so
`bench/mutation_inprocess.py` runs it (session 17, wt-mpo7: values.py's survivors)."""

from __future__ import annotations

import os
import time

import pytest

from dbsvc.errors import SchemaErrors
from dbsvc.schema import parse_schema
from dbsvc.schema.ir import Default, DefaultKind, Field

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def field_of(line: str) -> Field:
    """Field `n` of a one-model schema whose third line is `line`."""
    schema = parse_schema("model A {\n  id int @id\n" + line + "\n}\n", "s.dbs")
    return schema.models[0].fields[1]


def errors_of(line: str) -> list[str]:
    with pytest.raises(SchemaErrors) as caught:
        field_of(line)
    return [str(e) for e in caught.value.errors]


def test_an_int_default_at_either_end_of_the_64_bit_range_is_taken():
    assert field_of(f"  n int @default({INT64_MIN})").default == Default(DefaultKind.VALUE, INT64_MIN)
    assert field_of(f"  n int @default({INT64_MAX})").default == Default(DefaultKind.VALUE, INT64_MAX)


def test_int_bounds_at_either_end_of_the_64_bit_range_are_taken():
    field = field_of(f"  n int @min({INT64_MIN}) @max({INT64_MAX})")
    assert (field.min, field.max) == (INT64_MIN, INT64_MAX)


def test_a_str_length_bound_of_zero_is_taken():
    field = field_of('  n str @min(0) @max(0) @default("")')
    assert (field.min, field.max, field.default) == (0, 0, Default(DefaultKind.VALUE, ""))


@pytest.mark.parametrize(
    "line, message",
    [
        (
            f"  n int @max({INT64_MAX + 1})",
            f"s.dbs:3:14: error: @max on int field 'n' is outside the signed 64-bit range, got {INT64_MAX + 1}",
        ),
        ("  n float @max(1e400)", "s.dbs:3:16: error: @max on float field 'n' expects a finite number, got 1e400"),
        ("  n enum(a, b) @default(3)", "s.dbs:3:25: error: @default on enum field 'n' expects a member name, got 3"),
        ("  n str @default(3)", "s.dbs:3:18: error: @default on str field 'n' expects a string, got 3"),
        (
            "  n datetime @default(3)",
            "s.dbs:3:23: error: @default on datetime field 'n' expects now or an RFC 3339 string, got 3",
        ),
        (
            "  n date @default(3)",
            "s.dbs:3:19: error: @default on date field 'n' expects a \"YYYY-MM-DD\" string, got 3",
        ),
        ("  n uuid @default(3)", "s.dbs:3:19: error: @default on uuid field 'n' expects uuid or a uuid string, got 3"),
    ],
)
def test_a_literal_of_the_wrong_kind_is_named_with_what_the_field_expects(line, message):
    assert errors_of(line) == [message]


@pytest.mark.parametrize(
    "line",
    [
        '  n str @min(2) @max(3) @default("ab")',
        '  n str @min(2) @max(3) @default("abc")',
        "  n int @min(2) @max(3) @default(2)",
        "  n int @min(2) @max(3) @default(3)",
        "  n float @min(2) @max(3) @default(2)",
        "  n float @min(2.5) @max(3.5) @default(3.5)",
    ],
)
def test_a_default_exactly_at_a_bound_is_within_it(line):
    assert field_of(line).default is not None


@pytest.mark.parametrize("type_", ["str?", "int?", "float?"])
def test_a_null_default_is_not_held_to_the_bounds(type_):
    # A null default has no length or value to compare: `None` is not a 4-character string.
    field = field_of(f"  n {type_} @min(5) @max(9) @default(null)")
    assert field.default == Default(DefaultKind.VALUE, None)


def test_a_datetime_default_given_with_a_space_is_taken_in_its_canonical_form():
    field = field_of('  n datetime @default("2024-01-31 12:00:00+02:00")')
    assert field.default == Default(DefaultKind.VALUE, "2024-01-31T10:00:00Z")


def test_a_datetime_defaults_canonical_form_is_utc_whatever_the_hosts_zone():
    before = os.environ.get("TZ")
    os.environ["TZ"] = "IST-5:30"  # a POSIX zone string: no tz database needed
    time.tzset()
    try:
        field = field_of('  n datetime @default("2024-01-31T12:00:00.5+02:00")')
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
    assert field.default == Default(DefaultKind.VALUE, "2024-01-31T10:00:00.500000Z")


def test_a_datetime_default_past_year_one_in_utc_is_a_schema_error_not_a_crash():
    assert errors_of('  n datetime @default("0001-01-01T00:00:00+01:00")') == [
        "s.dbs:3:23: error: @default on datetime field 'n' expects an RFC 3339 instant with an offset "
        'such as "2024-01-31T12:00:00Z", got "0001-01-01T00:00:00+01:00"'
    ]
