"""What the schema tests share: a one-model text to put a member line in, a text from its
lines (`src`), and the errors `parse_schema` reports for a text, each as the line `dbsvc check`
prints. Fixture-free, so the files using it stay runnable by `bench/mutation_inprocess.py`."""

from __future__ import annotations

import pytest

from dbsvc.errors import SchemaErrors
from dbsvc.schema import parse_schema

# A model with an id and a str field; `MODEL % "  x int"` adds one member line (line 4).
MODEL = "model A {\n  id int @id\n  owner str\n%s\n}\n"


def src(*lines: str) -> str:
    """A schema source from its lines, ending with a newline like a file on disk."""
    return "".join(line + "\n" for line in lines)


def schema_errors(text: str, path: str = "s.dbs") -> list[str]:
    """Every error `parse_schema` reports for `text`, in order, as printed; a text it takes
    fails the test."""
    with pytest.raises(SchemaErrors) as caught:
        parse_schema(text, path)
    return [str(e) for e in caught.value.errors]


def placed_errors(text: str, path: str = "broken.dbs") -> list[tuple[int, int, str]]:
    """Every error `parse_schema` reports for `text`, in order, as (line, column, message),
    each checked to name `path`; a text it takes fails the test."""
    with pytest.raises(SchemaErrors) as caught:
        parse_schema(text, path)
    assert all(e.path == path for e in caught.value.errors)
    return [(e.line, e.col, e.message) for e in caught.value.errors]
