"""`format_errors` renders FILE:LINE:COL: error: MESSAGE, the source line and a caret."""

from __future__ import annotations

import pytest

from dbsvc.errors import SchemaError, SchemaErrors
from dbsvc.schema import format_errors, parse_schema


def test_format_errors_shows_the_line_and_a_caret_under_the_column() -> None:
    source = "model User {\n  id   integer @id\n\tname str @bogus\n}\n"
    with pytest.raises(SchemaErrors) as caught:
        parse_schema(source, "schemas/u.dbs")
    assert format_errors(caught.value) == (
        "schemas/u.dbs:2:8: error: unknown type 'integer' for field 'id', expected int, float, str, "
        "bool, json, datetime, date, uuid or enum(...)\n"
        "    id   integer @id\n"
        "         ^\n"
        "schemas/u.dbs:3:11: error: unknown attribute '@bogus' on field 'name', expected one of "
        "@id, @unique, @filter, @sort, @search, @min, @max, @default, @ref\n"
        "  \tname str @bogus\n"
        "  \t         ^"
    )


def test_format_errors_omits_the_source_line_when_there_is_none() -> None:
    errors = SchemaErrors(
        [SchemaError("expected '}' to close model 'A', got end of file", 3, 1, "a.dbs")], "model A {\n  id int @id\n"
    )
    assert format_errors(errors) == "a.dbs:3:1: error: expected '}' to close model 'A', got end of file"


def test_errors_come_in_source_order_across_stages() -> None:
    # A check error on line 2 and a lexical error on line 4 and a syntax error on line 3.
    source = "model A {\n  id float @id\n  x int @min(\n  y str $\n}\n"
    with pytest.raises(SchemaErrors) as caught:
        parse_schema(source)
    assert [(e.line, e.col) for e in caught.value.errors] == [(2, 12), (3, 14), (4, 9)]
