"""Access rules in the schema language (`@allow`, `@default(token.X)`): what they parse to,
and every compile error with its exact message, line and column (docs/guide/schema.md#access-rules)."""

from __future__ import annotations

import pytest

from dbsvc.errors import SchemaErrors
from dbsvc.schema import parse_schema
from dbsvc.schema.ir import AllOf, AnyOf, ClaimRef, Comparison, Const, FieldRef, ListConst, Negation, Truth


def src(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


NOTE = (
    "model Note {",
    "  id int @id",
    "  owner str @filter",
    "  org str? @filter",
    "  at datetime",
    "  day date",
    "  ref uuid?",
    "  score float",
    "  n int",
    "  done bool",
    "  status enum(draft, published)",
    "  meta json",
)


def note(*rules: str, top: tuple[str, ...] = ()) -> str:
    return src(*top, *NOTE, *("  " + r for r in rules), "}")


def test_rule_operations_expand_shorthands_in_declaration_order() -> None:
    schema = parse_schema(note("@allow(write read)", "@allow(all)", "@allow(delete get)"))
    rules = schema.models[0].rules
    assert [r.operations for r in rules] == [
        ("list", "get", "create", "update", "delete", "subscribe"),
        ("list", "get", "create", "update", "delete", "subscribe"),
        ("get", "delete"),
    ]
    assert rules[0].expr is None
    assert rules[0].text == "@allow(write read)"
    assert (rules[2].line, rules[2].col) == (15, 3)


def test_rule_expression_tree_keeps_precedence_or_and_not() -> None:
    rule = (
        parse_schema(note('@allow(read, record.owner == token.sub or not token.banned and token.role in ["a", "b"])'))
        .models[0]
        .rules[0]
    )
    owner = parse_schema(note()).models[0].field("owner")
    assert rule.expr == AnyOf(
        (
            Comparison("==", FieldRef("record", owner), ClaimRef(("sub",))),
            AllOf(
                (Negation(Truth(ClaimRef(("banned",)))), Comparison("in", ClaimRef(("role",)), ListConst(("a", "b"))))
            ),
        )
    )
    assert rule.text == '@allow(read, record.owner == token.sub or not token.banned and token.role in ["a", "b"])'


def test_rule_literals_take_the_canonical_form_of_their_field() -> None:
    rule = (
        parse_schema(
            note(
                '@allow(get, record.at < "2026-01-01T01:00:00+01:00" and record.ref == "AAAAAAAA-0000-0000-0000-00000000000A"'
                " and record.score > 2 and record.day >= \"2024-02-29\" and (record.done) and record.org == null)"
            )
        )
        .models[0]
        .rules[0]
    )
    assert isinstance(rule.expr, AllOf)
    consts = [p.right for p in rule.expr.parts if isinstance(p, Comparison)]
    assert consts == [
        Const("2026-01-01T00:00:00Z"),
        Const("aaaaaaaa-0000-0000-0000-00000000000a"),
        Const(2.0),
        Const("2024-02-29"),
        Const(None),
    ]
    assert isinstance(rule.expr.parts[4], Truth)


def test_rule_nested_and_quoted_claims() -> None:
    rule = (
        parse_schema(note('@allow(get, token.org.id == record.org or "admin" in token."https://x.io/roles")'))
        .models[0]
        .rules[0]
    )
    assert isinstance(rule.expr, AnyOf)
    assert rule.expr.parts[0].left == ClaimRef(("org", "id"))  # type: ignore[union-attr]
    assert rule.expr.parts[1].right == ClaimRef(("https://x.io/roles",))  # type: ignore[union-attr]


def test_new_is_allowed_in_update_only_rules() -> None:
    rule = parse_schema(note("@allow(update, new.owner == record.owner)")).models[0].rules[0]
    assert rule.operations == ("update",)


def test_token_default_and_replicate_rule() -> None:
    schema = parse_schema(
        src(
            '@allow(replicate, token.role == "replicator")',
            "model Note {",
            "  id int @id",
            "  owner str @default(token.sub)",
            "  org str? @default(token.org.id)",
            "}",
        )
    )
    owner, org = schema.models[0].fields[1:]
    assert owner.token_default == ("sub",) and owner.default is None
    assert org.token_default == ("org", "id")
    assert [r.operations for r in schema.replicate_rules] == [("replicate",)]
    assert schema.has_rules and not schema.models[0].rules


def test_a_schema_without_rules_has_none() -> None:
    schema = parse_schema(note())
    assert not schema.has_rules and schema.replicate_rules == () and schema.models[0].rules == ()


def test_rules_of_a_schema_with_tables_and_several_models() -> None:
    schema = parse_schema(
        src(
            "[runtime]",
            "replication = true",
            "@allow(replicate, token.replicator)",
            "model A {",
            "  id int @id",
            "  @allow(read)",
            "}",
            "@allow(replicate, token.role == \"ops\")",
            "model B { id int @id }",
        )
    )
    assert schema.runtime.replication is True
    assert len(schema.replicate_rules) == 2
    assert schema.models[0].rules[0].operations == ("list", "get", "subscribe")


# -- every compile error: (line, col, message) -----------------------------------------------

L = len(NOTE) + 1  # the line of the first rule in note(...)

ERRORS = [
    pytest.param(
        note("@allow(reed, record.owner == token.sub)"),
        [
            (
                L,
                10,
                "unknown operation 'reed' in @allow, expected list, get, create, update, delete, subscribe, read, write, all",
            )
        ],
        id="unknown_operation",
    ),
    pytest.param(
        note("@allow(read, record.ownr == token.sub)"),
        [
            (
                L,
                23,
                "unknown field 'ownr' of model 'Note' in @allow, expected one of id, owner, org, at, day, ref, score, n, done, status, meta",
            )
        ],
        id="unknown_field",
    ),
    pytest.param(
        note("@allow(update delete, new.owner == token.sub)"),
        [
            (
                L,
                25,
                "new.owner: 'new' is the record after an update, expected it only in a rule whose operations are all 'update' (this one also allows delete)",
            )
        ],
        id="new_outside_update",
    ),
    pytest.param(
        note(top=("@allow(replicate, record.owner == token.sub)",)),
        [
            (
                1,
                19,
                "record.owner in the replicate rule: it is about the token, not a record, expected only 'token.CLAIM' operands",
            )
        ],
        id="record_in_replicate",
    ),
    pytest.param(
        note(top=("@allow(read, token.role == \"x\")",)),
        [
            (
                1,
                8,
                "operation 'read' of a top-level @allow is not 'replicate', expected @allow(replicate, ...) here and model operations in a model body",
            )
        ],
        id="model_operation_at_top_level",
    ),
    pytest.param(
        note("@allow(replicate)"),
        [
            (
                L,
                10,
                "@allow(replicate) in model 'Note': replication is of the whole schema, expected it at the top level, outside models",
            )
        ],
        id="replicate_in_model",
    ),
    pytest.param(
        note('@allow(get, record.status == "archived")'),
        [(L, 32, 'record.status is enum(draft, published), expected one of draft, published, got "archived"')],
        id="enum_non_member",
    ),
    pytest.param(
        note('@allow(get, record.at > "yesterday")'),
        [
            (
                L,
                27,
                'record.at is datetime, expected an RFC 3339 instant with an offset such as "2024-01-31T12:00:00Z", got "yesterday"',
            )
        ],
        id="datetime_unparsable",
    ),
    pytest.param(
        note("@allow(get, record.owner == 3)"),
        [(L, 31, "record.owner is str, expected a string, got 3")],
        id="str_with_int",
    ),
    pytest.param(
        note("@allow(get, record.n == 2.5)"),
        [(L, 27, "record.n is int, expected a signed 64-bit integer, got 2.5")],
        id="int_with_float",
    ),
    pytest.param(
        note("@allow(get, record.owner == null)"),
        [(L, 31, "record.owner is str, not nullable, so it never is null; expected a string, got null")],
        id="null_on_non_nullable",
    ),
    pytest.param(
        note('@allow(get, record.status in ["draft", "gone"])'),
        [(L, 42, 'record.status is enum(draft, published), expected one of draft, published, got "gone"')],
        id="list_item_mismatch",
    ),
    pytest.param(
        note("@allow(get, record.owner == record.n)"),
        [(L, 28, "record.owner (str) is compared with record.n (int), expected two fields of one type")],
        id="fields_of_two_types",
    ),
    pytest.param(
        note("@allow(get, record.done < true)"),
        [
            (
                L,
                27,
                "'<' needs ordered values, but record.done is bool; expected int, float, str, date or datetime values (use '==' or '!=')",
            )
        ],
        id="order_on_bool",
    ),
    pytest.param(
        note("@allow(get, record.meta >= 1)"),
        [
            (
                L,
                27,
                "'>=' needs ordered values, but record.meta is json; expected int, float, str, date or datetime values (use '==' or '!=')",
            )
        ],
        id="order_on_json",
    ),
    pytest.param(
        note("@allow(get, record.owner)"),
        [
            (
                L,
                15,
                "record.owner is not a condition, expected a comparison such as 'record.owner == ...', a bool field, a token claim, true or false",
            )
        ],
        id="lone_non_boolean",
    ),
    pytest.param(
        note("@allow(get, token.sub in record.owner)"),
        [(L, 28, "expected a list after 'in': a [...] list, a token claim or a json field, got record.owner (str)")],
        id="in_without_list",
    ),
    pytest.param(
        note('@allow(get, [1] == token.n)'),
        [(L, 15, "a list is only allowed after 'in', got it beside '=='")],
        id="list_beside_equals",
    ),
    pytest.param(
        note("@allow(get, record.owner == token.sub"),
        [(L, 40, "expected 'and', 'or', a comparison or ')' in the rule of '@allow', got end of line")],
        id="syntax_unclosed",
    ),
    pytest.param(
        note("@allow(get record.owner == token.sub)"),
        [(L, 20, "expected ',' then the rule, or ')' after the operations of '@allow', got '.'")],
        id="syntax_missing_comma",
    ),
    pytest.param(
        note("@allow(get, record.owner = token.sub)"),
        [(L, 28, "expected 'and', 'or', a comparison or ')' in the rule of '@allow', got '='")],
        id="syntax_single_equals",
    ),
    pytest.param(
        note("@allow(get, owner == token.sub)"),
        [(L, 15, "expected 'record.FIELD', 'new.FIELD', 'token.CLAIM', a value, '[' or '(', got 'owner'")],
        id="syntax_bare_name",
    ),
    pytest.param(
        note("@allow(, token.a)"),
        [(L, 10, "expected an operation such as 'read' or 'update' after '@allow(', got ','")],
        id="syntax_no_operation",
    ),
    pytest.param(
        src("model Note {", "  id int @id", "  owner str @allow(read)", "}"),
        [(3, 13, "@allow is a model attribute, expected it on its own line in the model body")],
        id="allow_on_a_field",
    ),
    pytest.param(
        src("@index(x)", "model Note {", "  id int @id", "}"),
        [
            (
                1,
                1,
                "unknown top-level attribute '@index', expected '@allow(replicate, ...)' (field and model attributes go inside a model)",
            )
        ],
        id="unknown_top_level_attribute",
    ),
    pytest.param(
        src("model Note {", "  id str @id @default(token.sub)", "}"),
        [(2, 23, "@default(token.sub) on @id field 'id' is not allowed: a token claim names a user, not a record")],
        id="token_default_on_id",
    ),
    pytest.param(
        src("model Note {", "  id int @id", "  n int @min(token.n)", "}"),
        [(3, 14, "@min expects a number, got token.n")],
        id="claim_where_a_number_goes",
    ),
    pytest.param(
        note("@allow(reed, record.nope == 1 and record.done < 1)", "@allow(get, record.owner == token.sub)"),
        [
            (
                L,
                10,
                "unknown operation 'reed' in @allow, expected list, get, create, update, delete, subscribe, read, write, all",
            ),
            (
                L,
                23,
                "unknown field 'nope' of model 'Note' in @allow, expected one of id, owner, org, at, day, ref, score, n, done, status, meta",
            ),
            (
                L,
                49,
                "'<' needs ordered values, but record.done is bool; expected int, float, str, date or datetime values (use '==' or '!=')",
            ),
        ],
        id="every_error_of_a_rule",
    ),
    pytest.param(
        note("@allow(get, record.a ==", "@allow(get, record.b == 1)", "oops int int"),
        [
            (L, 26, "expected 'record.FIELD', 'new.FIELD', 'token.CLAIM', a value, '[' or '(', got end of line"),
            (
                L + 1,
                22,
                "unknown field 'b' of model 'Note' in @allow, expected one of id, owner, org, at, day, ref, score, n, done, status, meta",
            ),
            (L + 2, 12, "expected an attribute such as '@filter' or the end of the line, got 'int'"),
        ],
        id="one_typo_one_error",
    ),
]


@pytest.mark.parametrize(("source", "expected"), ERRORS)
def test_rule_errors_name_the_place(source: str, expected: list[tuple[int, int, str]]) -> None:
    with pytest.raises(SchemaErrors) as caught:
        parse_schema(source, "rules.dbs")
    assert [(e.line, e.col, e.message) for e in caught.value.errors] == expected
