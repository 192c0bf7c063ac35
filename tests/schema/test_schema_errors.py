"""Every broken model declaration is reported with the exact message, line and column
(docs/guide/schema.md): models, fields, types, attributes, references, projections, names,
and the values of `@min`, `@max` and `@default`; several models' errors in one run.

One table, one parametrized test: each case is a source and the full list of
(line, col, message) that `parse_schema` must raise, in source order. Messages are part of
the interface: `dbsvc check` prints them and users grep for them.

The text's own syntax is test_schema_errors_syntax.py; the [runtime] and [auth] tables are
test_schema_errors_tables.py.
"""

from __future__ import annotations

import pytest

from dbsvc.errors import SchemaErrors
from dbsvc.schema import parse_schema
from support.schemakit import placed_errors, src

CASES = [
    pytest.param(
        src('[runtime]', 'replication = true'),
        [(1, 1, "the schema declares no models, expected at least one 'model Name { ... }'")],
        id='no_models',
    ),
    pytest.param(
        src(), [(1, 1, "the schema declares no models, expected at least one 'model Name { ... }'")], id='empty'
    ),
    pytest.param(
        src('model blog_post {', '  id int @id', '}'),
        [
            (
                1,
                7,
                "model name 'blog_post' is not CapWords, expected a capital letter then letters and digits, such as 'BlogPost'",
            )
        ],
        id='model_not_capwords',
    ),
    pytest.param(
        src('model HTTPLog {', '  id int @id', '}', 'model HttpLog {', '  id int @id', '}'),
        [
            (
                4,
                7,
                "model 'HttpLog' would be served at '/api/http-log' like model 'HTTPLog' (line 1), "
                "expected a name with a different route",
            )
        ],
        id='route_collision',
    ),
    pytest.param(
        src('model None {', '  id int @id', '}'),
        [(1, 7, "model name 'None' is a Python keyword, expected another name")],
        id='model_named_none',
    ),
    pytest.param(
        src('model A {', '  id int @id', '}', 'model A {', '  id int @id', '}'),
        [(4, 7, "duplicate model 'A', first declared at line 1")],
        id='duplicate_model',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n str', '  n int', '}'),
        [(4, 3, "duplicate field 'n' in model 'A', first declared at line 3")],
        id='duplicate_field',
    ),
    pytest.param(
        src('model A {', '  id integer @id', '}'),
        [
            (
                2,
                6,
                "unknown type 'integer' for field 'id', expected int, float, str, bool, json, datetime, date, uuid or enum(...)",
            )
        ],
        id='unknown_type',
    ),
    pytest.param(
        src('model A {', '  id int @id @primary', '}'),
        [
            (
                2,
                14,
                "unknown attribute '@primary' on field 'id', expected one of @id, @unique, @filter, @sort, @search, @min, @max, @default, @ref",
            )
        ],
        id='unknown_attribute',
    ),
    pytest.param(
        src('model A {', '  id int @id @projection(p, id)', '}'),
        [(2, 14, '@projection is a model attribute, expected it on its own line in the model body')],
        id='projection_on_field',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  @index(id)', '}'),
        [
            (
                3,
                3,
                "unknown model attribute '@index' in model 'A', expected '@projection' or '@allow' (field attributes go after the field's type)",
            )
        ],
        id='unknown_model_attribute',
    ),
    pytest.param(
        src('model A {', '  id int @id(1)', '}'), [(2, 10, '@id takes no arguments, got 1')], id='flag_with_args'
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @min', '}'),
        [(3, 9, '@min takes exactly one argument, got 0')],
        id='min_no_args',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @max(1, 2)', '}'),
        [(3, 9, '@max takes exactly one argument, got 2')],
        id='max_two_args',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @min("1")', '}'),
        [(3, 14, '@min expects a number, got "1"')],
        id='min_string',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  b int @ref("A")', '}'),
        [(3, 14, '@ref expects a model name, got "A"')],
        id='ref_string',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @default()', '}'),
        [(3, 9, '@default takes exactly one argument, got 0')],
        id='default_no_args',
    ),
    pytest.param(
        src('model A {', '  n int', '}'), [(1, 7, "model 'A' has no @id field, expected exactly one")], id='missing_id'
    ),
    pytest.param(
        src('model A {', '  id int @id', '  code str @id', '}'),
        [(3, 12, "model 'A' has a second @id field 'code' (the first is 'id'), expected exactly one")],
        id='double_id',
    ),
    pytest.param(
        src('model A {', '  id int? @id', '}'),
        [(2, 11, "@id field 'id' cannot be nullable, expected no '?' after its type")],
        id='nullable_id',
    ),
    pytest.param(
        src('model A {', '  id float @id', '}'),
        [(2, 12, "@id field 'id' has type 'float', expected int, str or uuid")],
        id='float_id',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  j json @filter', '}'),
        [(3, 10, "@filter on json field 'j' is not allowed: json values have no order")],
        id='filter_json',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int? @search', '  j json @search', '  t str? @search(x)', '}'),
        [
            (
                3,
                10,
                "@search on int field 'n' is not allowed: expected it on a str field (text search cuts a field's text into words)",
            ),
            (
                4,
                10,
                "@search on json field 'j' is not allowed: expected it on a str field (text search cuts a field's text into words)",
            ),
            (5, 10, '@search takes no arguments, got 1'),
        ],
        id='search_not_on_str',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  search str @search', '}'),
        [
            (
                3,
                3,
                "field name 'search' is reserved for a query parameter, expected another name (reserved: after, as_of, cursor, expand, limit, offset, projection, search, sort)",
            )
        ],
        id='search_reserved',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  j json @unique', '}'),
        [(3, 10, "@unique on json field 'j' is not allowed: json values have no index key")],
        id='unique_json',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  j json? @sort', '}'),
        [(3, 11, "@sort on json field 'j' is not allowed: json values have no order")],
        id='sort_json',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  b int @ref(Bee)', '}'),
        [(3, 14, "@ref to unknown model 'Bee', expected one of the declared models (A)")],
        id='ref_unknown',
    ),
    pytest.param(
        src('model A {', '  id int @id', '}', 'model B {', '  id int @id', '  a str @ref(A)', '}'),
        [(6, 14, "@ref(A) on str field 'a' does not match the int id of model 'A', expected type 'int'")],
        id='ref_type_mismatch',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  @projection(p, id, nme)', '}'),
        [(3, 22, "projection 'p' names unknown field 'nme' of model 'A'")],
        id='projection_unknown_field',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  @projection(p, id, id)', '}'),
        [(3, 22, "projection 'p' repeats field 'id'")],
        id='projection_repeat',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  @projection(p, id)', '  @projection(p, id)', '}'),
        [(4, 15, "duplicate projection 'p' in model 'A', first declared at line 3")],
        id='projection_twice',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  @projection(p)', '}'),
        [(3, 3, '@projection takes a name and at least one field, got 1 argument')],
        id='projection_no_fields',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  @projection("p", id)', '}'),
        [(3, 15, '@projection expects names, got "p"')],
        id='projection_string',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  limit int', '}'),
        [
            (
                3,
                3,
                "field name 'limit' is reserved for a query parameter, expected another name (reserved: after, as_of, cursor, expand, limit, offset, projection, search, sort)",
            )
        ],
        id='reserved_name',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  score__max int @sort', '}'),
        [
            (
                3,
                3,
                "field name 'score__max' contains '__', expected a name without a double underscore: query operators are written field__op (score__gte=3), so '__' cannot be part of a field name",
            )
        ],
        id='double_underscore_name',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  authorId int', '}'),
        [
            (
                3,
                3,
                "field name 'authorId' is not snake_case, expected lower-case letters, digits and '_', starting with a letter",
            )
        ],
        id='not_snake',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @min(5) @max(2)', '}'),
        [(3, 14, "@min(5) of field 'n' is above @max(2)")],
        id='min_above_max',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  b bool @min(0)', '}'),
        [(3, 10, "@min means nothing on bool field 'b', expected it on int, float or str")],
        id='min_on_bool',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  r enum(a) @max(3)', '}'),
        [(3, 13, "@max means nothing on enum field 'r', expected it on int, float or str")],
        id='max_on_enum',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  t datetime @min(0)', '}'),
        [(3, 14, "@min means nothing on datetime field 't', expected it on int, float or str")],
        id='min_on_datetime',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @min(1.5)', '}'),
        [(3, 14, "@min on int field 'n' expects an integer, got 1.5")],
        id='min_float_on_int',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  s str @min(-1)', '}'),
        [(3, 14, "@min on str field 's' is a length, expected a non-negative integer, got -1")],
        id='min_negative_length',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @default("3")', '}'),
        [(3, 18, '@default on int field \'n\' expects an integer, got "3"')],
        id='default_wrong_type_int',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  b bool @default(1)', '}'),
        [(3, 19, "@default on bool field 'b' expects true or false, got 1")],
        id='default_wrong_type_bool',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @max(10) @default(11)', '}'),
        [(3, 27, "@default(11) of field 'n' is above @max(10)")],
        id='default_above_max',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  s str @min(2) @default("a")', '}'),
        [(3, 26, '@default("a") of field \'s\' is shorter than @min(2)')],
        id='default_too_short',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  r enum(a, b) @default(c)', '}'),
        [(3, 25, "@default('c') on field 'r' is not a member of enum(a, b)")],
        id='default_enum_not_member',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  d date @default(now)', '}'),
        [(3, 19, "@default(now) needs a datetime field, but field 'd' is date")],
        id='default_now_on_date',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  s str @default(uuid)', '}'),
        [(3, 18, "@default(uuid) needs a uuid field, but field 's' is str")],
        id='default_uuid_on_str',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  s str @default(null)', '}'),
        [(3, 18, "@default(null) on non-nullable field 's', expected a str value or a '?' after the type")],
        id='default_null_not_nullable',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  t datetime @default("2024-01-01")', '}'),
        [
            (
                3,
                23,
                '@default on datetime field \'t\' expects an RFC 3339 instant with an offset such as "2024-01-31T12:00:00Z", got "2024-01-01"',
            )
        ],
        id='default_bad_datetime',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  d date @default("2024-02-30")', '}'),
        [(3, 19, '@default on date field \'d\' expects a "YYYY-MM-DD" date, got "2024-02-30"')],
        id='default_bad_date',
    ),
    pytest.param(
        src('model A {', '  id uuid @id', '  u uuid @default("not-a-uuid")', '}'),
        [
            (
                3,
                19,
                '@default on uuid field \'u\' expects the form \'xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx\', got "not-a-uuid"',
            )
        ],
        id='default_bad_uuid',
    ),
    pytest.param(
        src('model A {', '  id int @id @default(1)', '}'),
        [(2, 14, "@default on int @id field 'id' is not allowed: int ids are auto-assigned")],
        id='default_on_int_id',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @default(9223372036854775808)', '}'),
        [(3, 18, "@default on int field 'n' is outside the signed 64-bit range, got 9223372036854775808")],
        id='default_int_overflow',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  n int @filter @filter', '}'),
        [(3, 17, "duplicate attribute '@filter' on field 'n'")],
        id='duplicate_attribute',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  j json @default(foo)', '}'),
        [(3, 19, "@default on json field 'j' expects a JSON literal, got 'foo'")],
        id='default_bare_ident_json',
    ),
    pytest.param(
        src(
            'model A {',
            '  id int @id',
            '  n int @min(9) @max(1)',
            '}',
            'model B {',
            '  id float @id',
            '  x json @sort',
            '}',
            'model C {',
            '  bad bad',
            '  id int @id @ref(Nope)',
            '}',
        ),
        [
            (3, 14, "@min(9) of field 'n' is above @max(1)"),
            (6, 12, "@id field 'id' has type 'float', expected int, str or uuid"),
            (7, 10, "@sort on json field 'x' is not allowed: json values have no order"),
            (
                10,
                7,
                "unknown type 'bad' for field 'bad', expected int, float, str, bool, json, datetime, date, uuid or enum(...)",
            ),
            (11, 19, "@ref to unknown model 'Nope', expected one of the declared models (A, B, C)"),
        ],
        id='several_models',
    ),
    pytest.param(
        src('model A {', '  id uuid @id @max(36)', '}'),
        [(2, 15, "@max means nothing on uuid field 'id', expected it on int, float or str")],
        id='max_on_uuid',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  j json @min(1)', '}'),
        [(3, 10, "@min means nothing on json field 'j', expected it on int, float or str")],
        id='min_on_json',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  f float @default(1e999)', '}'),
        [(3, 20, "@default on float field 'f' expects a finite number, got 1e999")],
        id='default_float_infinite',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  b json @ref(A)', '}'),
        [(3, 15, "@ref(A) on json field 'b' does not match the int id of model 'A', expected type 'int'")],
        id='ref_from_json_field',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  f float @default("1.5")', '}'),
        [(3, 20, '@default on float field \'f\' expects a number, got "1.5"')],
        id='default_string_on_float',
    ),
    pytest.param(
        src('model A {', '  id int @id', '  f float @min(0) @default(-0.5)', '}'),
        [(3, 28, "@default(-0.5) of field 'f' is below @min(0)")],
        id='default_below_min',
    ),
]


@pytest.mark.parametrize(("source", "expected"), CASES)
def test_parse_reports_every_error_with_its_place(source: str, expected: list[tuple[int, int, str]]) -> None:
    assert placed_errors(source) == expected


def test_error_table_is_large_enough() -> None:
    assert len(CASES) >= 40


def test_errors_in_several_models_are_all_reported_in_one_run() -> None:
    source = src(
        "model A {",
        "  id int @id",
        "  n int @min(9) @max(1)",
        "}",
        "model B {",
        "  id float @id",
        "  x json @sort",
        "}",
        "model C {",
        "  bad bad",
        "  id int @id @ref(Nope)",
        "}",
    )
    with pytest.raises(SchemaErrors) as caught:
        parse_schema(source)
    assert [(e.line, e.col) for e in caught.value.errors] == [(3, 14), (6, 12), (7, 10), (10, 7), (11, 19)]
