"""Where the parser (dbsvc/schema/parser.py) resumes after a broken line, and what it takes
for the start of a model or a section: a third token `{` on a field's line, `model` as a
table key, a table header under a model left open, a broken member line that ends with the
model's `}`, a table entry that ends with `}`, an attribute name that is not a name, a dotted
or bare `token` argument, an empty list in a rule. Each case compares every error, or the
parsed result, through `parse_schema`. Fixture-free, so `bench/mutation_inprocess.py` runs
it (session 18, wt-mpo8: parser.py's survivors that wt-mpo7 left not judged)."""

from __future__ import annotations

import pytest

from dbsvc.schema import parse_schema
from support.schemakit import MODEL, schema_errors

CASES = [
    pytest.param(
        "model A {\n  id int @id\n  x int {\n}\n",
        ["3:9: error: expected an attribute such as '@filter' or the end of the line, got '{'"],
        id="a-field-line-whose-third-token-is-a-brace-is-no-model-header",
    ),
    pytest.param(
        "[runtime]\nmodel = 1\n" + MODEL % "",
        [
            "2:1: error: unknown key 'model' in [runtime], expected one of replication, "
            "changefeed_capacity, replication_retain_mb"
        ],
        id="model-as-a-table-key-is-a-key",
    ),
    pytest.param(
        "model A {\n  id int @id\n[runtime]\nreplication = true\n",
        ["3:1: error: expected '}' to close model 'A', got '['"],
        id="a-table-header-ends-a-model-left-open",
    ),
    pytest.param(
        "model A {\n  id int @id\n  x int 5 }\nmodel B {\n  id int @id\n}\n",
        ["3:9: error: expected an attribute such as '@filter' or the end of the line, got '5'"],
        id="a-broken-member-line-still-closes-the-model-at-its-brace",
    ),
    pytest.param(
        "[runtime]\nreplication = true }\n" + MODEL % "",
        ["2:20: error: expected end of line after the value of 'replication', got '}'"],
        id="a-table-entry-ending-with-a-brace-is-skipped-whole",
    ),
    pytest.param(
        MODEL % "  x int @5",
        ["4:10: error: expected an attribute name right after '@', got '5'"],
        id="an-attribute-name-must-be-a-name",
    ),
    pytest.param(
        MODEL % "  x str @default(a.b)",
        ["4:19: error: expected ',' or ')' in the arguments of '@default', got '.'"],
        id="a-dotted-default-is-a-claim-only-after-token",
    ),
    pytest.param(
        MODEL % "  x str @default(token)",
        ["4:18: error: @default on str field 'x' expects a string, got 'token'"],
        id="a-bare-token-argument-is-a-word",
    ),
]


@pytest.mark.parametrize("text, errors", CASES)
def test_the_parser_resumes_where_the_next_line_or_section_begins(text, errors):
    assert schema_errors(text) == [f"s.dbs:{e}" for e in errors]


def test_an_empty_list_in_a_rule_is_a_list_of_no_values():
    schema = parse_schema(MODEL % "  @allow(read, token.role in [])", "s.dbs")
    comparison = schema.models[0].rules[0].expr
    assert comparison.op == "in"
    assert comparison.right.values == ()


def test_a_rules_values_are_the_literals_written():
    rule = '  @allow(read, record.owner == "x" or token.level >= 3 or token.admin == true)'
    parts = parse_schema(MODEL % rule, "s.dbs").models[0].rules[0].expr.parts
    assert [p.right.value for p in parts] == ["x", 3, True]
