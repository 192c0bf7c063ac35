"""dbsvc/schema/lexer.py's `tokenize`, token by token: each kind's text, value, line and
column, the EOF's place, and each lexical error word for word, as its docstring defines them
(numbers with a fraction or an exponent and their malformed neighbours, every escape, a
string cut by the end of a line or of the file, the two-character operators, a comment at
the end of the file). The parser's tests see tokens only through its messages, so 75 of the
lexer's 419 mutants survived them. Fixture-free, so `bench/mutation_inprocess.py` runs it
(session 16, wt-mpo6)."""

from __future__ import annotations

import pytest

from dbsvc.schema.lexer import tokenize

CASES = [
    (
        'model Zed {\n  a == b <= c != d >= e < f > g\n}',
        [
            ('IDENT', 'model', 'model', 1, 1),
            ('IDENT', 'Zed', 'Zed', 1, 7),
            ('PUNCT', '{', '{', 1, 11),
            ('NEWLINE', '', None, 1, 12),
            ('IDENT', 'a', 'a', 2, 3),
            ('PUNCT', '==', '==', 2, 5),
            ('IDENT', 'b', 'b', 2, 8),
            ('PUNCT', '<=', '<=', 2, 10),
            ('IDENT', 'c', 'c', 2, 13),
            ('PUNCT', '!=', '!=', 2, 15),
            ('IDENT', 'd', 'd', 2, 18),
            ('PUNCT', '>=', '>=', 2, 20),
            ('IDENT', 'e', 'e', 2, 23),
            ('PUNCT', '<', '<', 2, 25),
            ('IDENT', 'f', 'f', 2, 27),
            ('PUNCT', '>', '>', 2, 29),
            ('IDENT', 'g', 'g', 2, 31),
            ('NEWLINE', '', None, 2, 32),
            ('PUNCT', '}', '}', 3, 1),
            ('EOF', '', None, 3, 2),
        ],
        [],
    ),
    (
        '+1 -2 3.5 1e3 2E+4 6e-1 7.25e2',
        [
            ('INT', '+1', 1, 1, 1),
            ('INT', '-2', -2, 1, 4),
            ('FLOAT', '3.5', 3.5, 1, 7),
            ('FLOAT', '1e3', 1000.0, 1, 11),
            ('FLOAT', '2E+4', 20000.0, 1, 15),
            ('FLOAT', '6e-1', 0.6, 1, 20),
            ('FLOAT', '7.25e2', 725.0, 1, 25),
            ('EOF', '', None, 1, 31),
        ],
        [],
    ),
    ('1 2', [('INT', '1', 1, 1, 1), ('INT', '2', 2, 1, 3), ('EOF', '', None, 1, 4)], []),
    (
        '1.',
        [('BAD', '1.', None, 1, 1), ('EOF', '', None, 1, 3)],
        ["<schema>:1:1: error: invalid number '1.', expected digits with an optional fraction and exponent"],
    ),
    (
        '5.x',
        [('BAD', '5.x', None, 1, 1), ('EOF', '', None, 1, 4)],
        ["<schema>:1:1: error: invalid number '5.x', expected digits with an optional fraction and exponent"],
    ),
    (
        '5a.b',
        [('BAD', '5a.b', None, 1, 1), ('EOF', '', None, 1, 5)],
        ["<schema>:1:1: error: invalid number '5a.b', expected digits with an optional fraction and exponent"],
    ),
    (
        '5abc',
        [('BAD', '5abc', None, 1, 1), ('EOF', '', None, 1, 5)],
        ["<schema>:1:1: error: invalid number '5abc', expected digits with an optional fraction and exponent"],
    ),
    (
        '1eX5',
        [('BAD', '1eX5', None, 1, 1), ('EOF', '', None, 1, 5)],
        ["<schema>:1:1: error: invalid number '1eX5', expected digits with an optional fraction and exponent"],
    ),
    (
        '1e+ ',
        [('BAD', '1e', None, 1, 1), ('EOF', '', None, 1, 5)],
        [
            "<schema>:1:1: error: invalid number '1e', expected digits with an optional fraction and exponent",
            "<schema>:1:3: error: unexpected character '+'",
        ],
    ),
    ('2E3', [('FLOAT', '2E3', 2000.0, 1, 1), ('EOF', '', None, 1, 4)], []),
    ('a # note', [('IDENT', 'a', 'a', 1, 1), ('EOF', '', None, 1, 9)], []),
    ('$ab', [('IDENT', 'ab', 'ab', 1, 2), ('EOF', '', None, 1, 4)], ["<schema>:1:1: error: unexpected character '$'"]),
    (
        '"abc',
        [('BAD', '"abc', None, 1, 1), ('EOF', '', None, 1, 5)],
        ['<schema>:1:1: error: unterminated string, expected a closing \'"\' before the end of the line'],
    ),
    (
        '"\\x1234"',
        [('BAD', '"\\x1234"', None, 1, 1), ('EOF', '', None, 1, 9)],
        [
            '<schema>:1:2: error: invalid escape \'\\x\' in string, expected one of \\" \\\\ \\/ \\n \\t \\r \\b \\f \\uXXXX'
        ],
    ),
    (
        '"\\u12zz"',
        [('BAD', '"\\u12zz"', None, 1, 1), ('EOF', '', None, 1, 9)],
        [
            '<schema>:1:2: error: invalid escape \'\\u\' in string, expected one of \\" \\\\ \\/ \\n \\t \\r \\b \\f \\uXXXX'
        ],
    ),
    (
        '"\\u20ac\\n\\"\\\\\\/\\t\\r\\b\\f"',
        [('STRING', '"\\u20ac\\n\\"\\\\\\/\\t\\r\\b\\f"', '€\n"\\/\t\r\x08\x0c', 1, 1), ('EOF', '', None, 1, 25)],
        [],
    ),
    (
        '"ab\\\nc"',
        [
            ('BAD', '"ab\\', None, 1, 1),
            ('NEWLINE', '', None, 1, 5),
            ('IDENT', 'c', 'c', 2, 1),
            ('BAD', '"', None, 2, 2),
            ('EOF', '', None, 2, 3),
        ],
        [
            '<schema>:1:4: error: invalid escape \'\\\' in string, expected one of \\" \\\\ \\/ \\n \\t \\r \\b \\f \\uXXXX',
            '<schema>:1:1: error: unterminated string, expected a closing \'"\' before the end of the line',
            '<schema>:2:2: error: unterminated string, expected a closing \'"\' before the end of the line',
        ],
    ),
    (
        '"\\',
        [('BAD', '"\\', None, 1, 1), ('EOF', '', None, 1, 3)],
        [
            '<schema>:1:2: error: invalid escape \'\\\' in string, expected one of \\" \\\\ \\/ \\n \\t \\r \\b \\f \\uXXXX',
            '<schema>:1:1: error: unterminated string, expected a closing \'"\' before the end of the line',
        ],
    ),
    (
        '"\\q"',
        [('BAD', '"\\q"', None, 1, 1), ('EOF', '', None, 1, 5)],
        [
            '<schema>:1:2: error: invalid escape \'\\q\' in string, expected one of \\" \\\\ \\/ \\n \\t \\r \\b \\f \\uXXXX'
        ],
    ),
    (
        '"\\qa"',
        [('BAD', '"\\qa"', None, 1, 1), ('EOF', '', None, 1, 6)],
        [
            '<schema>:1:2: error: invalid escape \'\\q\' in string, expected one of \\" \\\\ \\/ \\n \\t \\r \\b \\f \\uXXXX'
        ],
    ),
    (
        'x@y.z?(1),[2]=3',
        [
            ('IDENT', 'x', 'x', 1, 1),
            ('PUNCT', '@', '@', 1, 2),
            ('IDENT', 'y', 'y', 1, 3),
            ('PUNCT', '.', '.', 1, 4),
            ('IDENT', 'z', 'z', 1, 5),
            ('PUNCT', '?', '?', 1, 6),
            ('PUNCT', '(', '(', 1, 7),
            ('INT', '1', 1, 1, 8),
            ('PUNCT', ')', ')', 1, 9),
            ('PUNCT', ',', ',', 1, 10),
            ('PUNCT', '[', '[', 1, 11),
            ('INT', '2', 2, 1, 12),
            ('PUNCT', ']', ']', 1, 13),
            ('PUNCT', '=', '=', 1, 14),
            ('INT', '3', 3, 1, 15),
            ('EOF', '', None, 1, 16),
        ],
        [],
    ),
]


@pytest.mark.parametrize(("text", "tokens", "errors"), CASES)
def test_tokenize_gives_each_token_its_text_value_and_place(text, tokens, errors):
    found, problems = tokenize(text)
    assert [(t.kind.name, t.text, t.value, t.line, t.col) for t in found] == tokens
    assert [str(e) for e in problems] == errors


def test_an_error_names_the_path_it_was_given():
    _, problems = tokenize("$", "blog.dbs")
    assert [str(e) for e in problems] == ["blog.dbs:1:1: error: unexpected character '$'"]


def test_a_bad_literal_after_the_first_column_is_its_own_slice():
    found, _ = tokenize('x 1. "\\q"')
    assert [(t.kind.name, t.text, t.col) for t in found] == [
        ("IDENT", "x", 1),
        ("BAD", "1.", 3),
        ("BAD", '"\\q"', 6),
        ("EOF", "", 10),
    ]
