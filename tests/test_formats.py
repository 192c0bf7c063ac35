"""dbsvc/formats.py, the one parser each of the datetime, date and uuid types, over edge
inputs, and the places that read such a value someone wrote going through it: a request's value
(runtime.py, which generated code calls for a body, a filter, a path id and a claim), a
datetime filter's key, and a schema's literals (a `@default` and a rule's constant).

Until session 19 the schema and the runtime each had a datetime parser of their own (schema may
not import runtime) and this table held the two to one answer (tests/schema/test_schema_instants.py,
session 18). Each datetime row's answer is the one both gave then: the rows marked "changed" are
where session 18 (wt-tidy) brought the schema's to the runtime's (before, the schema wrote year 5
as `5-01-01T...`, took an offset of `+05:60` and a non-ASCII digit past the sixth of a fraction,
and raised OverflowError, a traceback from `dbsvc check`, for an instant past year 1 or 9999 in
UTC). Until session 20 the date and uuid types had two parsers each as well (schema/values.py
`canonical_day`, `canonical_uuid`; runtime.py `parse_date`, `parse_uuid`), held to one answer
by nothing; their rows are the answers both gave (they agreed on every one: the schema's date
shape read any script's digits with `\\d`, which `date.fromisoformat` then refused).
Fixture-free, so `bench/mutation_inprocess.py` runs it."""

from __future__ import annotations

import json

import pytest

from dbsvc import formats, runtime
from dbsvc.errors import SchemaErrors
from dbsvc.schema import parse_schema
from dbsvc.schema.ir import Comparison, Const, DefaultKind


def default_of(type_: str, text: str) -> object:
    """What a schema makes of `text` as a `type_` field's `@default`: its canonical value, or
    None when the schema refuses it."""
    source = "model A {\n  id int @id\n  v " + type_ + " @default(" + json.dumps(text) + ")\n}\n"
    try:
        schema = parse_schema(source, "s.dbs")
    except SchemaErrors:
        return None
    default = schema.models[0].fields[1].default
    assert default is not None and default.kind is DefaultKind.VALUE
    return default.value


def rule_constant_of(type_: str, text: str) -> object:
    """What a schema makes of `text` compared with a `type_` field in an `@allow` rule: the
    constant's canonical value, or None when the schema refuses it."""
    rule = "@allow(read, record.v == " + json.dumps(text) + ")"
    source = "model A {\n  id int @id\n  v " + type_ + "\n  " + rule + "\n}\n"
    try:
        schema = parse_schema(source, "s.dbs")
    except SchemaErrors:
        return None
    expr = schema.models[0].rules[0].expr
    assert isinstance(expr, Comparison) and isinstance(expr.right, Const)
    return expr.right.value


@pytest.mark.parametrize(
    "text, canonical",
    [
        ('2024-01-31T12:00:00Z', '2024-01-31T12:00:00Z'),
        ('2024-01-31t12:00:00Z', '2024-01-31T12:00:00Z'),
        ('2024-01-31 12:00:00Z', '2024-01-31T12:00:00Z'),
        ('2024-01-31T12:00:00z', '2024-01-31T12:00:00Z'),
        ('2024-01-31T12:00:00+02:00', '2024-01-31T10:00:00Z'),
        ('2024-01-31T12:00:00-02:30', '2024-01-31T14:30:00Z'),
        ('2024-01-31T12:00:00-00:00', '2024-01-31T12:00:00Z'),
        ('2024-01-31T00:30:00+01:00', '2024-01-30T23:30:00Z'),
        ('2024-01-31T12:00:00.5Z', '2024-01-31T12:00:00.500000Z'),
        ('2024-01-31T12:00:00.000000Z', '2024-01-31T12:00:00Z'),
        ('2024-01-31T12:00:00.123456Z', '2024-01-31T12:00:00.123456Z'),
        ('2024-01-31T12:00:00.1234567Z', '2024-01-31T12:00:00.123456Z'),
        ('2024-01-31T12:00:00.123456789+02:00', '2024-01-31T10:00:00.123456Z'),
        ('2024-01-31T12:00:00.9999999Z', '2024-01-31T12:00:00.999999Z'),
        ("2024-01-31T12:00:00.123456\u0663Z", None),  # changed: runtime.py reads ASCII digits only
        ('2024-02-29T00:00:00Z', '2024-02-29T00:00:00Z'),
        ('9999-12-31T23:59:59.999999Z', '9999-12-31T23:59:59.999999Z'),
        ('1000-01-01T00:00:00Z', '1000-01-01T00:00:00Z'),
        ("2024-01-31T12:00:00+05:60", None),  # changed
        ("2024-01-31T12:00:00+05:59", "2024-01-31T06:01:00Z"),
        ("0005-01-01T00:00:00Z", "0005-01-01T00:00:00Z"),  # changed
        ("1000-01-01T00:30:00+01:00", "0999-12-31T23:30:00Z"),  # changed
        ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z"),
        ("0001-01-01T00:00:00+01:00", None),  # changed
        ("9999-12-31T23:59:59-01:00", None),  # changed
        ("0000-01-01T00:00:00Z", None),
        ('2023-02-29T00:00:00Z', None),
        ('2024-13-01T00:00:00Z', None),
        ('2024-01-31T24:00:00Z', None),
        ('2024-01-31T23:59:60Z', None),
        ('2024-01-31T12:00:00+24:00', None),
        ('2024-01-31T12:00:00.Z', None),
        ('2024-01-31T12:00:00', None),
        ('2024-01-31T12:00Z', None),
        ('2024-01-31T12:00:00+0200', None),
        ('2024-01-31T12:00:00+02', None),
        ('2024-01-31X12:00:00Z', None),
        ('2024-W05-3T12:00:00Z', None),
        ('20240131T120000Z', None),
        ('2024-01-31T12:00:00,5Z', None),
        ('2024-01-31T12:00:00.٣Z', None),
        ('٢024-01-31T12:00:00Z', None),
        (' 2024-01-31T12:00:00Z', None),
        ('2024-01-31T12:00:00Z ', None),
        ('2024-01-31T12:00:00ZZ', None),
        ('2024-01-31T12:00:00.5.5Z', None),
        ('2024-01-31T12:00:00+02:00:00', None),
    ],
)
def test_one_parser_answers_each_edge_datetime_for_a_request_a_filter_and_a_schema_literal(
    text: str, canonical: str | None
):
    assert formats.parse_datetime(text) == canonical
    assert runtime.parse_datetime(text) == canonical  # what a request's value becomes
    key = runtime.parse_datetime_key(text)  # what a filter on the field compares
    assert key == (None if canonical is None else runtime.datetime_key(canonical))
    assert default_of("datetime", text) == canonical  # what a schema's literal becomes
    assert rule_constant_of("datetime", text) == canonical


@pytest.mark.parametrize(
    "text, canonical",
    [
        ("2024-01-31", "2024-01-31"),
        ("2024-02-29", "2024-02-29"),  # a leap year
        ("2000-02-29", "2000-02-29"),  # divisible by 400
        ("1900-02-29", None),  # divisible by 100 only
        ("2023-02-29", None),
        ("2024-04-31", None),
        ("2024-13-01", None),
        ("2024-00-10", None),
        ("2024-01-00", None),
        ("0001-01-01", "0001-01-01"),  # the first year Python has
        ("9999-12-31", "9999-12-31"),  # and its last
        ("0000-01-01", None),
        ("10000-01-01", None),
        ("+2024-01-01", None),
        ("-2024-01-01", None),
        ("2024-1-31", None),
        ("24-01-31", None),
        ("20240131", None),  # date.fromisoformat alone takes the basic form
        ("2024-W05-3", None),  # and a week date
        ("2024-031", None),
        ("2024/01/31", None),
        (" 2024-01-31", None),
        ("2024-01-31 ", None),
        ("2024-01-31\n", None),
        ("2024-01-31T00:00:00Z", None),
        ("\u0662\u0660\u0662\u0664-\u0660\u0661-\u0663\u0661", None),  # Arabic-Indic digits
        ("2024-01-3\u0661", None),  # one of them
        ("\uff12\uff10\uff12\uff14-\uff10\uff11-\uff13\uff11", None),  # fullwidth digits
        ("", None),
    ],
)
def test_one_parser_answers_each_edge_date_for_a_request_and_a_schema_literal(text: str, canonical: str | None):
    assert formats.parse_date(text) == canonical
    assert runtime.parse_date(text) == canonical  # what a request's value or filter becomes
    assert default_of("date", text) == canonical  # what a schema's literal becomes
    assert rule_constant_of("date", text) == canonical


UUID = "123e4567-e89b-12d3-a456-426614174000"


@pytest.mark.parametrize(
    "text, canonical",
    [
        (UUID, UUID),
        (UUID.upper(), UUID),  # either letter case, lower case out
        ("123E4567-e89B-12d3-A456-426614174000", UUID),
        ("00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000"),  # the nil uuid
        ("ffffffff-ffff-ffff-ffff-ffffffffffff", "ffffffff-ffff-ffff-ffff-ffffffffffff"),  # the max uuid
        ("123e4567e89b12d3a456426614174000", None),  # uuid.UUID takes these four
        ("{" + UUID + "}", None),
        ("urn:uuid:" + UUID, None),
        (" " + UUID, None),
        (UUID + " ", None),
        (UUID + "\n", None),
        ("123e4567-e89b-12d3-a456-42661417400", None),  # a digit short
        ("123e4567-e89b-12d3-a456-4266141740000", None),  # a digit over
        ("123e4567-e89b-12d3a456-426614174000", None),  # a hyphen missing
        ("123e456-7e89b-12d3-a456-426614174000", None),  # a hyphen moved
        ("123e4567-e89b-12d3-a456-42661417400g", None),
        ("123e4567-e89b-12d3-a456-42661417400\u0663", None),  # an Arabic-Indic digit
        ("123e4567-e89b-12d3-a456-42661417400\uff41", None),  # a fullwidth letter a
        ("123e4567-e89b-12d3-a456-42661417400\u0130", None),  # a letter whose lower case is two characters
        ("", None),
    ],
)
def test_one_parser_answers_each_edge_uuid_for_a_request_and_a_schema_literal(text: str, canonical: str | None):
    assert formats.parse_uuid(text) == canonical
    assert runtime.parse_uuid(text) == canonical  # what a body, filter, path id or claim becomes
    assert default_of("uuid", text) == canonical  # what a schema's literal becomes
    assert rule_constant_of("uuid", text) == canonical


def test_a_schema_literal_and_a_request_value_are_read_by_the_same_function():
    # One parser per type, not two held equal by a table: the schema's path and the runtime's
    # names are dbsvc/formats.py's functions themselves.
    assert runtime.parse_datetime is formats.parse_datetime
    assert runtime.parse_datetime_key is formats.parse_datetime_key
    assert runtime.parse_date is formats.parse_date
    assert runtime.parse_uuid is formats.parse_uuid


def test_now_and_a_new_uuid_are_in_the_canonical_form_the_parsers_give_back_unchanged():
    now = runtime.now()
    assert formats.parse_datetime(now) == now
    fresh = runtime.new_uuid()
    assert formats.parse_uuid(fresh) == fresh
