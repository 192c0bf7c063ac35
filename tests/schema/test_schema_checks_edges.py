"""The schema checks (dbsvc/schema/checks.py) at the edges no other test read: which of two
repeated attributes a field keeps, that a refused attribute is not used again by a later
check, every unknown top-level attribute reported, and the field flags `@search` sets.
Each case compares every error, or the checked field, through `parse_schema`. Fixture-free,
so `bench/mutation_inprocess.py` runs it (session 18, wt-mpo8: checks.py's first mutation
run)."""

from __future__ import annotations

import pytest

from dbsvc.schema import parse_schema
from support.schemakit import MODEL, schema_errors

CASES = [
    pytest.param(
        MODEL % "  n int @default(7) @max(5) @max(10)",
        [
            "4:18: error: @default(7) of field 'n' is above @max(5)",
            "4:29: error: duplicate attribute '@max' on field 'n'",
        ],
        id="a-repeated-attribute-keeps-the-first",
    ),
    pytest.param(
        MODEL % '  n int @max("a")',
        ['4:14: error: @max expects a number, got "a"'],
        id="a-max-that-is-no-number-is-refused-once",
    ),
    pytest.param(
        MODEL % '  n int @min("a")',
        ['4:14: error: @min expects a number, got "a"'],
        id="a-min-that-is-no-number-is-refused-once",
    ),
    pytest.param(
        MODEL % "  n int @ref(5)",
        ["4:14: error: @ref expects a model name, got 5"],
        id="a-ref-that-is-no-name-is-refused-once",
    ),
    pytest.param(
        "@deny(replicate)\n@foo\n" + MODEL % "",
        [
            "1:1: error: unknown top-level attribute '@deny', expected '@allow(replicate, ...)' "
            "(field and model attributes go inside a model)",
            "2:1: error: unknown top-level attribute '@foo', expected '@allow(replicate, ...)' "
            "(field and model attributes go inside a model)",
        ],
        id="every-unknown-top-level-attribute-is-named",
    ),
    pytest.param(
        MODEL % '  @projection(p, id, "a\\q")',
        ["4:24: error: invalid escape '\\q' in string, expected one of \\\" \\\\ \\/ \\n \\t \\r \\b \\f \\uXXXX"],
        id="a-projection-with-a-bad-literal-adds-nothing-to-the-lexers-error",
    ),
    pytest.param(
        MODEL % "  @projection(p, 5)",
        ["4:18: error: @projection expects names, got 5"],
        id="a-projection-of-a-number-is-refused-once",
    ),
    pytest.param(
        MODEL % "  @projection(p)",
        ["4:3: error: @projection takes a name and at least one field, got 1 argument"],
        id="one-argument",
    ),
    pytest.param(
        MODEL % "  @projection()",
        ["4:3: error: @projection takes a name and at least one field, got 0 arguments"],
        id="no-arguments",
    ),
    pytest.param(
        MODEL % "  @foo\n  @projection(p)",
        [
            "4:3: error: unknown model attribute '@foo' in model 'A', expected '@projection' or '@allow' "
            "(field attributes go after the field's type)",
            "5:3: error: @projection takes a name and at least one field, got 1 argument",
        ],
        id="the-model-attributes-after-an-unknown-one-are-checked",
    ),
    pytest.param(
        "model A {\n  id int @id\n}\n" * 2 + "model b {\n  id int @id\n}\n",
        [
            "4:7: error: duplicate model 'A', first declared at line 1",
            "7:7: error: model name 'b' is not CapWords, expected a capital letter then letters and digits, "
            "such as 'BlogPost'",
        ],
        id="the-models-after-a-duplicate-are-checked",
    ),
]


@pytest.mark.parametrize("text, errors", CASES)
def test_a_refused_attribute_is_reported_once_and_not_used_after(text, errors):
    assert schema_errors(text) == [f"s.dbs:{e}" for e in errors]


def test_only_a_str_field_marked_search_is_searchable_and_no_field_has_a_token_default_unasked():
    schema = parse_schema(MODEL % "  title str @search\n  n int", "s.dbs")
    fields = schema.models[0].fields
    assert [(f.name, f.searchable) for f in fields] == [("id", False), ("owner", False), ("title", True), ("n", False)]
    assert [f.token_default for f in fields] == [None, None, None, None]


def test_a_projection_after_a_rule_is_kept():
    schema = parse_schema(MODEL % "  @allow(read, record.owner == token.sub)\n  @projection(card, id)", "s.dbs")
    assert [(p.name, p.fields) for p in schema.models[0].projections] == [("card", ("id",))]


def test_a_refs_type_is_the_id_fields_whatever_field_comes_first():
    schema = parse_schema(
        "model B {\n  name str\n  id int @id\n}\nmodel A {\n  id int @id\n  b int @ref(B)\n}\n", "s.dbs"
    )
    assert schema.models[1].fields[1].ref == "B"
