"""Fixtures for the compiler tests: the demo schemas compiled once per session, and a
factory compiling schema text (the schema parser builds the IR, as in production).

Under mutmut every compilation happens inside the test that asks for it (each fixture per test:
support/mutation.py), so mutmut maps each builder of `dbsvc/compiler/` to every test
that compiles a schema, not to the first one only."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import ConstraintViolation
from dbsvc.schema import load_schema, parse_schema
from support.mutation import shared

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope=shared("session"))
def blog():
    """The generated module of schemas/blog.dbs."""
    return compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))


@pytest.fixture(scope=shared("session"))
def inventory():
    """The generated module of schemas/inventory.dbs."""
    return compile_schema(load_schema(str(ROOT / "schemas" / "inventory.dbs")))


@pytest.fixture(scope=shared("session"))
def compile_text():
    """compile_text(schema_text) -> generated module (path 'test.dbs'), each text compiled once
    per session (under mutmut once per test: a property test compiles once, not per example)."""
    cache: dict[str, object] = {}

    def factory(text: str):
        if text not in cache:
            cache[text] = compile_schema(parse_schema(text, "test.dbs"))
        return cache[text]

    return factory


@pytest.fixture(scope="session")
def violations():
    """violations(callable, *args) -> the list of {"field", "message"} it raised."""

    def run(func, *args):
        with pytest.raises(ConstraintViolation) as info:
            func(*args)
        return info.value.errors

    return run
