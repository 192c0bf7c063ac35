"""Schema errors -> the text `dbsvc check` prints (docs/guide/schema.md).

Each error renders as three lines, compiler style::

    schemas/blog.dbs:14:12: error: unknown type 'integer' for field 'id', expected ...
      id       integer   @id
               ^

The source line is shown as written (tabs kept, so the caret line copies the tabs of the
prefix and lines up in any terminal). An error whose line is outside the source (such as
one at end of file after a final newline) gets only its first line. Pure: no I/O.
"""

from __future__ import annotations

from dbsvc.errors import SchemaError, SchemaErrors


def format_error(error: SchemaError, lines: list[str]) -> str:
    """One error: the `FILE:LINE:COL: error: MESSAGE` line, the source line and a caret."""
    head = str(error)
    if not 1 <= error.line <= len(lines):
        return head
    text = lines[error.line - 1]
    prefix = text[: max(error.col - 1, 0)]
    caret = "".join(ch if ch == "\t" else " " for ch in prefix) + "^"
    return f"{head}\n  {text}\n  {caret}"


def format_errors(errors: SchemaErrors) -> str:
    """Every error of one run, in the order held (source order), one block each."""
    lines = errors.source.splitlines()
    return "\n".join(format_error(error, lines) for error in errors.errors)
