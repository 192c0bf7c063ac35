"""`canonical_instant` (dbsvc/schema/values.py) over edge inputs. Each row's answer is the
one the function gave before session 18 (wt-tidy) cut the steps Python 3.11's
`datetime.fromisoformat` made redundant (`t` and space rewritten to `T`, the fraction cut to
six digits, `Z` rewritten to `+00:00`), but for the rows marked "changed": the schema now
takes exactly the instants runtime.py's `parse_datetime` takes, in the same canonical form
(before, it wrote year 5 as `5-01-01T...`, took an offset of `+05:60` and a non-ASCII digit
past the sixth of a fraction, and raised OverflowError, a traceback from `dbsvc check`, for
an instant past year 1 or 9999 in UTC). Fixture-free, so `bench/mutation_inprocess.py` runs it."""

from __future__ import annotations

import pytest

from dbsvc.runtime import parse_datetime
from dbsvc.schema.values import canonical_instant
from support.schemakit import schema_errors


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
def test_canonical_instant_answers_as_before_the_311_simplification(text: str, canonical: str | None):
    assert canonical_instant(text) == canonical
    assert parse_datetime(text) == canonical  # what a request's value becomes


def test_a_datetime_default_past_year_one_in_utc_is_a_schema_error_not_a_crash():
    assert schema_errors('model A {\n  id int @id\n  n datetime @default("0001-01-01T00:00:00+01:00")\n}\n') == [
        "s.dbs:3:23: error: @default on datetime field 'n' expects an RFC 3339 instant with an offset "
        'such as "2024-01-31T12:00:00Z", got "0001-01-01T00:00:00+01:00"'
    ]
