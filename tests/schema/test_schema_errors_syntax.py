"""Every broken schema text is reported with the exact message, line and column
(docs/guide/schema.md): characters, strings and numbers the lexer refuses, a model's or a
field's shape the parser refuses, and the recovery that goes on to the next line or model so
that one run reports every error, each once.

One table, one parametrized test: each case is a source and the full list of
(line, col, message) that `parse_schema` must raise, in source order. Messages are part of
the interface: `dbsvc check` prints them and users grep for them.
"""

from __future__ import annotations

import pytest

from support.schemakit import placed_errors, src

CASES = [
    pytest.param(
        src('model A {', '  id int @id', '  n str $', '}'), [(3, 9, "unexpected character '$'")], id='unexpected_char'
    ),
    pytest.param(
        src('[auth]', 'issuer = "abc', 'model A {', '  id int @id', '}'),
        [(2, 10, 'unterminated string, expected a closing \'"\' before the end of the line')],
        id='unterminated_string',
    ),
    pytest.param(
        src('[auth]', 'issuer = "a\\qb"', 'model A {', '  id int @id', '}'),
        [(2, 12, 'invalid escape \'\\q\' in string, expected one of \\" \\\\ \\/ \\n \\t \\r \\b \\f \\uXXXX')],
        id='bad_escape',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @min(12ab)', '}'),
        [(3, 14, "invalid number '12ab', expected digits with an optional fraction and exponent")],
        id='bad_number',
    ),
    pytest.param(
        src('modle A {', '  id int @id', '}', 'model B {', '  id int @id', '}'),
        [(1, 1, "expected 'model', a '[table]' header or '@allow(replicate, ...)', got 'modle'")],
        id='top_level_junk',
    ),
    pytest.param(
        src('model {', '  id int @id', '}', 'model B {', '  id int @id', '}'),
        [(1, 7, "expected a model name after 'model', got '{'")],
        id='missing_model_name',
    ),
    pytest.param(
        src('model A', '  id int @id', '}', 'model B {', '  id int @id', '}'),
        [(1, 8, "expected '{' after model name 'A', got end of line")],
        id='missing_brace_open',
    ),
    pytest.param(
        src('model A {', '  id int @id', 'model B {', '  id int @id', '}'),
        [(3, 1, "expected '}' to close model 'A', got 'model'")],
        id='missing_close_brace',
    ),
    pytest.param(
        src('model A {', '  id int @id'),
        [(3, 1, "expected '}' to close model 'A', got end of file")],
        id='missing_close_brace_eof',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  name', '}'),
        [(3, 7, "expected a type after field name 'name', got end of line")],
        id='field_missing_type',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  name str filter', '}'),
        [(3, 12, "expected an attribute such as '@filter' or the end of the line, got 'filter'")],
        id='field_junk_after_type',
    ),
    pytest.param(
        src('model A {', '  id int @ id', '}'),
        [(2, 12, "expected an attribute name right after '@', got 'id'")],
        id='attr_space',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @min(1', '}'),
        [(3, 15, "expected ',' or ')' in the arguments of '@min', got end of line")],
        id='attr_unclosed',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  r enum(a, b', '}'),
        [(3, 14, "expected ',' or ')' in the enum member list, got end of line")],
        id='enum_unclosed',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  r enum', '}'),
        [(3, 9, "expected '(' after 'enum', got end of line")],
        id='enum_no_paren',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  r enum()', '}'),
        [(3, 5, "enum of field 'r' has no members, expected at least one")],
        id='enum_empty',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  r enum(a, b, a)', '}'),
        [(3, 16, "enum member 'a' of field 'r' is repeated")],
        id='enum_repeat',
    ),
    pytest.param(
        src('}', 'model A {', '  id int @id', '}'),
        [(1, 1, "expected 'model', a '[table]' header or '@allow(replicate, ...)', got '}'")],
        id='stray_close_brace',
    ),
    pytest.param(
        src(
            'model A {', '  id int @id', '  a int @min(', '  b str @max(3) @default("toolong")', '  c json @filter', '}'
        ),
        [
            (3, 14, "expected an argument of '@min', got end of line"),
            (4, 26, '@default("toolong") of field \'b\' is longer than @max(3)'),
            (5, 10, "@filter on json field 'c' is not allowed: json values have no order"),
        ],
        id='recovery_keeps_going',
    ),
    # Recovery: one typo gives one error, later lines are still checked.
    pytest.param(
        src('model A {', '  id int @id', '  profile js$on?', '}'),
        [(3, 13, "unexpected character '$'")],
        id='lex_error_hides_line_noise',
    ),
    pytest.param(
        src('model A {', '  id int }@id', '  n str', '}'),
        [(2, 10, "expected an attribute such as '@filter' or the end of the line, got '}'")],
        id='stray_brace_mid_line',
    ),
    pytest.param(
        src('model@id User {', '  id int @id', '}', 'model Post {', '  id int @id', '  author int @ref(User)', '}'),
        [(1, 6, "expected a model name after 'model', got '@'")],
        id='broken_header_hides_ref_to_it',
    ),
    pytest.param(
        src('[auth]', 'issuer = "x"', 'model} User {', '  id int @id', '}', 'model Post {', '  id int @id', '}'),
        [(3, 6, "expected a model name after 'model', got '}'")],
        id='broken_model_line_after_table',
    ),
    pytest.param(
        src('model A {', '  { n int', '  id int @id', '  @projection(p, id, n)', '}'),
        [(2, 3, "expected a field name, a model attribute such as '@projection', or '}', got '{'")],
        id='broken_field_not_reported_again',
    ),
]


@pytest.mark.parametrize(("source", "expected"), CASES)
def test_parse_reports_every_error_with_its_place(source: str, expected: list[tuple[int, int, str]]) -> None:
    assert placed_errors(source) == expected
