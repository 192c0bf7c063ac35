"""Schema source text -> checked IR (`dbsvc.schema.ir.Schema`), and what is built on it.

Public API::

    parse_schema(text, path="<schema>") -> Schema     raises SchemaErrors
    load_schema(path) -> Schema                        reads the file as UTF-8; raises SchemaErrors
    format_errors(errors: SchemaErrors) -> str         FILE:LINE:COL: error: MESSAGE + line + caret
    describe_schema(schema) -> dict                    the JSON description a tenant stores
    schema_changes(old, new) -> (compatible, incompatible)   two descriptions compared

Pipeline: `lexer.tokenize` -> `parser.parse_tokens` (parse tree in `syntax`) ->
`checks.check_schema` (IR). Each stage reports every problem it sees and the next stage
still runs on what was recovered, so `SchemaErrors` holds every error of the file in
source order (line, then column). A `Schema` is returned only when there are none.

Only `load_schema` does I/O. This package imports nothing from dbsvc but `dbsvc.errors`
and its own modules.
"""

from __future__ import annotations

import os

from dbsvc.errors import SchemaError, SchemaErrors
from dbsvc.schema.checks import check_schema
from dbsvc.schema.describe import describe_schema, schema_changes
from dbsvc.schema.ir import Schema
from dbsvc.schema.lexer import tokenize
from dbsvc.schema.parser import parse_tokens
from dbsvc.schema.report import format_errors

__all__ = [
    "Schema",
    "SchemaError",
    "SchemaErrors",
    "describe_schema",
    "format_errors",
    "load_schema",
    "parse_schema",
    "schema_changes",
]


def parse_schema(text: str, path: str = "<schema>") -> Schema:
    """Parse and check schema source `text`; `path` names it in errors and anchors `pubkey`."""
    tokens, lex_errors = tokenize(text, path)
    tree, syntax_errors = parse_tokens(tokens, path, text)
    schema, check_errors = check_schema(tree, text, path)
    # A bad character or literal usually derails the parser on the rest of its line; the
    # lexical error says what is wrong, the syntax errors after it on that line add noise.
    lexed_bad = {(e.line, e.col) for e in lex_errors}
    syntax_errors = [e for e in syntax_errors if not any(line == e.line and col <= e.col for line, col in lexed_bad)]
    errors = lex_errors + syntax_errors + check_errors
    if errors:
        errors.sort(key=lambda e: (e.line, e.col))
        raise SchemaErrors(_unique(errors), text)
    return schema


def load_schema(path: str | os.PathLike[str]) -> Schema:
    """Read the schema file at `path` (UTF-8, a leading BOM ignored) and parse it; see `parse_schema`.

    An unreadable file raises OSError; a file that is not UTF-8 is one SchemaError at 1:1.
    """
    name = os.fspath(path)
    with open(name, "rb") as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8-sig")  # a leading byte order mark is not part of the text
    except UnicodeDecodeError as exc:
        error = SchemaError(f"file is not UTF-8: cannot decode byte at offset {exc.start}", 1, 1, name)
        raise SchemaErrors([error], "") from exc
    return parse_schema(text, name)


def _unique(errors: list[SchemaError]) -> list[SchemaError]:
    """Drop exact repeats (same place, same message) that two stages may both find."""
    seen: set[tuple[int, int, str]] = set()
    kept = []
    for error in errors:
        key = (error.line, error.col, error.message)
        if key not in seen:
            seen.add(key)
            kept.append(error)
    return kept
