"""The parser's own messages for a misplaced or missing token (dbsvc/schema/parser.py), each
with its line and column, through `parse_schema`: a table's name and key, what may end a
line, an attribute of a model, a rule's parenthesis, list and references. Fixture-free, so
`bench/mutation_inprocess.py` runs it (session 17, wt-mpo7: the parser's survivors that
were messages no test read)."""

from __future__ import annotations

import pytest

from dbsvc.schema import parse_schema
from support.schemakit import MODEL, schema_errors


def rule(text: str) -> str:
    return MODEL % ("  " + text)


CASES = [
    ("[auth]\n= 1\n" + MODEL % "", "2:1", "expected a key name or a '[table]' header, got '='"),
    ("[auth]\nleeway = 1 2\n" + MODEL % "", "2:12", "expected end of line after the value of 'leeway', got '2'"),
    ("[1]\n" + MODEL % "", "1:2", "expected a table name after '[', got '1'"),
    ("[auth] x\n" + MODEL % "", "1:8", "expected end of line after '[auth]', got 'x'"),
    (
        '@allow(replicate, token.role == "r") x\n' + MODEL % "",
        "1:38",
        "expected the end of the line after a top-level attribute, got 'x'",
    ),
    (MODEL % "  @projection(card, id) x", "4:25", "expected a model attribute or the end of the line, got 'x'"),
    (rule("@allow(read, (record.owner == token.sub x)"), "4:43", "expected 'and', 'or', a comparison or ')', got 'x'"),
    (rule("@allow(read, token.role in [,])"), "4:31", "expected a value in the list, got ','"),
    (rule('@allow(read, token.role in ["a" "b"])'), "4:35", "expected ',' or ']' in the list, got '\"b\"'"),
    (rule("@allow(read, token)"), "4:21", "expected '.' and a claim name after 'token', got ')'"),
    (rule("@allow(read, record)"), "4:22", "expected '.' and a field name after 'record', got ')'"),
    (rule("@allow(read, token.1)"), "4:22", "expected a claim name after '.', got '1'"),
    (rule("@allow(read, record.1)"), "4:23", "expected a field name after '.', got '1'"),
    (rule('@allow(read, record."owner" == token.sub)'), "4:23", "expected a field name after '.', got '\"owner\"'"),
    (rule("@allow read"), "4:10", "expected '(' after '@allow', got 'read'"),
    ("model A {\n  id int @id\n  r enum(a, 1)\n}\n", "3:13", "expected an enum member name, got '1'"),
]


@pytest.mark.parametrize("text, place, message", CASES)
def test_a_misplaced_token_is_named_with_what_was_expected_there(text, place, message):
    assert schema_errors(text) == [f"s.dbs:{place}: error: {message}"]


def test_a_claim_may_be_named_by_a_string_after_token():
    schema = parse_schema(rule('@allow(read, record.owner == token."https://x.io/sub")'), "s.dbs")
    assert schema.models[0].rules[0].text == '@allow(read, record.owner == token."https://x.io/sub")'


def test_two_model_attributes_on_one_line_are_both_taken():
    schema = parse_schema(MODEL % "  @projection(a, id) @projection(b, owner)", "s.dbs")
    assert [(p.name, p.fields) for p in schema.models[0].projections] == [("a", ("id",)), ("b", ("owner",))]


def test_a_rule_on_the_last_line_of_a_file_without_a_newline_keeps_its_text():
    schema = parse_schema(MODEL % "" + '@allow(replicate, token.role == "r")', "s.dbs")
    assert schema.replicate_rules[0].text == '@allow(replicate, token.role == "r")'
