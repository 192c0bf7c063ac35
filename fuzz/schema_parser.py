"""Schema source -> `parse_schema` -> (on success) the generated module.

Invariants: bytes that are not UTF-8 are refused the way `load_schema` refuses them; text
is either refused with `SchemaErrors` whose report renders (`format_errors`, the text
`dbsvc check` prints), or accepted, in which case the schema is described and compiled
without error (the style rule: every user error is found in the checks, so a `compile()`
that rejects our tree is our bug).
"""

from __future__ import annotations

from dbsvc.compiler import compile_schema
from dbsvc.errors import SchemaErrors
from dbsvc.schema import describe_schema, format_errors, parse_schema

MAX_SOURCE = 16 * 1024  # compiling is the slow part; larger inputs teach the parser nothing new


def TestOneInput(data: bytes) -> None:
    if len(data) > MAX_SOURCE:
        return
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return  # load_schema's one SchemaError at 1:1
    try:
        schema = parse_schema(text, "fuzz.dbs")
    except SchemaErrors as exc:
        report = format_errors(exc)
        assert report.startswith("fuzz.dbs:"), report
        assert exc.errors, "SchemaErrors without an error"
        return
    describe_schema(schema)
    module = compile_schema(schema)
    assert len(module.MODELS) == len(schema.models)
