"""dbsvc/datetimes.py, the one datetime parser, over edge inputs, and the three places that
read a datetime someone wrote going through it: a request's value (runtime.py, which generated
code calls), a filter's key, and a schema's literal (a `@default`, here; a rule's constant
takes the same path, schema/rules.py).

Until session 19 the schema and the runtime each had a parser of their own (schema may not
import runtime) and this table held the two to one answer (tests/schema/test_schema_instants.py,
session 18). Each row's answer is the one both gave then: the rows marked "changed" are where
session 18 (wt-tidy) brought the schema's to the runtime's (before, the schema wrote year 5 as
`5-01-01T...`, took an offset of `+05:60` and a non-ASCII digit past the sixth of a fraction,
and raised OverflowError, a traceback from `dbsvc check`, for an instant past year 1 or 9999
in UTC). Fixture-free, so `bench/mutation_inprocess.py` runs it."""

from __future__ import annotations

import pytest

from dbsvc import datetimes, runtime
from dbsvc.errors import SchemaErrors
from dbsvc.schema import parse_schema
from dbsvc.schema.ir import DefaultKind


def default_of(text: str) -> object:
    """What a schema makes of `text` as a datetime field's `@default`: its canonical value, or
    None when the schema refuses it."""
    source = 'model A {\n  id int @id\n  n datetime @default("' + text + '")\n}\n'
    try:
        schema = parse_schema(source, "s.dbs")
    except SchemaErrors:
        return None
    default = schema.models[0].fields[1].default
    assert default is not None and default.kind is DefaultKind.VALUE
    return default.value


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
def test_one_parser_answers_each_edge_input_for_a_request_a_filter_and_a_schema_literal(
    text: str, canonical: str | None
):
    assert datetimes.parse_datetime(text) == canonical
    assert runtime.parse_datetime(text) == canonical  # what a request's value becomes
    key = runtime.parse_datetime_key(text)  # what a filter on the field compares
    assert key == (None if canonical is None else runtime.datetime_key(canonical))
    assert default_of(text) == canonical  # what a schema's literal becomes


def test_a_schema_literal_and_a_request_value_are_read_by_the_same_function():
    # One parser, not two held equal by a table: the schema's path and the runtime's name
    # are dbsvc/datetimes.py's function itself.
    assert runtime.parse_datetime is datetimes.parse_datetime
    assert runtime.parse_datetime_key is datetimes.parse_datetime_key


def test_now_is_in_the_canonical_form_the_parser_gives_back_unchanged():
    now = runtime.now()
    assert datetimes.parse_datetime(now) == now
