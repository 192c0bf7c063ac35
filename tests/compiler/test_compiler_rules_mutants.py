"""The access-rule builders (dbsvc/compiler/rules.py) at the decisions a mutation run showed
unpinned (docs/mutation.md): which update rules read `new` (a rule that does not is tested
on both sides), scopes pinned on a keyed (float, datetime) `@filter` field, branches of
several rules. Each test compiles its own schema (no cache shared between tests), so that a
mutation run records every test as a caller of the builders it exercises."""

from __future__ import annotations

import pytest

from dbsvc import rules as run
from dbsvc.compiler import compile_schema, generate_source
from dbsvc.errors import Forbidden
from dbsvc.schema import parse_schema


def compiled(text: str):
    return compile_schema(parse_schema(text, "test.dbs"))


TASK = """\
model Finish {
  id int @id
  owner str
  done bool
  @allow(update, record.done == false and new.done == true)
}
model Either {
  id int @id
  owner str
  done bool
  @allow(update, new.done == true or record.owner == token.sub)
}
model Toggle {
  id int @id
  owner str
  done bool
  @allow(update, not (record.done == new.done))
}
model Bare {
  id int @id
  owner str
  done bool
  @allow(update, new.done)
}
model Plain {
  id int @id
  owner str
  done bool
  @allow(update, record.owner == token.sub)
}
"""


def task(done: bool, owner: str = "ann") -> dict:
    return {"id": 1, "owner": owner, "done": done}


def test_an_update_rule_reading_new_under_and_is_asked_once_of_both_sides():
    mod = compiled(TASK)
    assert mod.allow_finish__update(task(False), task(True), {}) is True
    assert mod.allow_finish__update(task(True), task(True), {}) is False
    assert mod.allow_finish__update(task(False), task(False), {}) is False


def test_an_update_rule_reading_new_under_or_is_asked_once_of_both_sides():
    mod = compiled(TASK)
    # the owner hands the task to bob, not done: the rule's second branch holds for the old record
    assert mod.allow_either__update(task(False), task(False, "bob"), {"sub": "ann"}) is True
    assert mod.allow_either__update(task(False, "bob"), task(True, "bob"), {"sub": "ann"}) is True
    assert mod.allow_either__update(task(False, "bob"), task(False, "bob"), {"sub": "ann"}) is False


def test_an_update_rule_reading_new_under_not_is_asked_once_of_both_sides():
    mod = compiled(TASK)
    assert mod.allow_toggle__update(task(False), task(True), {}) is True
    assert mod.allow_toggle__update(task(True), task(False), {}) is True
    assert mod.allow_toggle__update(task(True), task(True), {}) is False


def test_a_bare_new_field_as_an_update_rule():
    mod = compiled(TASK)
    assert mod.allow_bare__update(task(False), task(True), {}) is True
    assert mod.allow_bare__update(task(True), task(False), {}) is False


def test_an_update_rule_reading_only_the_record_holds_before_and_after():
    mod = compiled(TASK)
    assert mod.allow_plain__update(task(False), task(True), {"sub": "ann"}) is True
    assert mod.allow_plain__update(task(False), task(False, "bob"), {"sub": "ann"}) is False
    assert mod.allow_plain__update(task(False, "bob"), task(False), {"sub": "ann"}) is False


KEYED = """\
model Score {
  id int @id
  level float @filter
  at datetime @filter
  @allow(read, record.level == token.level)
}
model Stamp {
  id int @id
  at datetime @filter
  note str
  @allow(read, record.at == token.at and record.note == token.note)
}
model Two {
  id int @id
  level float @filter
  note str
  @allow(read, record.level == token.level and record.note == "x")
  @allow(read, record.level in token.levels)
}
"""


def test_a_scope_pinned_on_a_float_field_keys_the_claim_as_the_index_does():
    mod = compiled(KEYED)
    model = mod.BY_NAME["Score"]
    scope = mod.scope_score__list({"level": 2})
    assert (scope.field, scope.keys) == ("level", frozenset({2.0}))
    assert type(next(iter(scope.keys))) is float
    assert scope.key is model.keys["level"]
    assert scope.visible({"id": 1, "level": 2.0, "at": "2026-01-01T00:00:00Z"}) is True
    assert scope.visible({"id": 1, "level": 3.0, "at": "2026-01-01T00:00:00Z"}) is False
    assert mod.scope_score__list({"level": "2"}).nothing is True  # another kind pins nothing
    assert mod.scope_score__list({}).nothing is True


def test_a_scope_pinned_on_a_datetime_field_parses_the_claim_and_keeps_the_rest_as_a_test():
    mod = compiled(KEYED)
    scope = mod.scope_stamp__list({"at": "2026-01-01T01:00:00+01:00", "note": "n"})
    assert scope.field == "at" and len(scope.keys) == 1
    stored = mod.BY_NAME["Stamp"].keys["at"]("2026-01-01T00:00:00Z")
    assert scope.keys == frozenset({stored})
    assert scope.visible({"id": 1, "at": "2026-01-01T00:00:00Z", "note": "n"}) is True
    assert scope.visible({"id": 1, "at": "2026-01-01T00:00:00Z", "note": "m"}) is False
    assert scope.where_row is not None and scope.where_row((1, stored, "n")) is True
    assert scope.where_row((1, stored, "m")) is False
    assert mod.scope_stamp__list({"at": "not a time", "note": "n"}).nothing is True


def test_two_rules_pinned_on_one_float_field_unite_their_keys_and_keep_each_test():
    mod = compiled(KEYED)
    scope = mod.scope_two__list({"level": 1, "levels": [2, 3.5, "x"]})
    assert (scope.field, scope.keys) == ("level", frozenset({1.0, 2.0, 3.5}))
    assert scope.visible({"id": 1, "level": 1.0, "note": "x"}) is True
    assert scope.visible({"id": 1, "level": 1.0, "note": "y"}) is False  # the first rule's test
    assert scope.visible({"id": 1, "level": 2.0, "note": "y"}) is True
    assert scope.where_row is not None
    assert (scope.where_row((1, 1.0, "y")), scope.where_row((1, 3.5, "y"))) == (False, True)
    only_second = mod.scope_two__list({"levels": [2]})
    assert (only_second.field, only_second.keys) == ("level", frozenset({2.0}))
    assert mod.scope_two__list({}) is run.NOTHING or mod.scope_two__list({}).nothing is True


DOCUMENTED = """\
model Two {
  id int @id
  level float @filter
  note str
  @allow(read, record.level == token.level and record.note == "x")
  @allow(read, record.level in token.levels)
  @allow(update, record.note == "x")
}
"""


def test_the_generated_functions_quote_their_rules_as_written():
    mod = compiled(DOCUMENTED)
    assert mod.allow_two__update.__doc__.strip().splitlines() == [
        "Generated from test.dbs:7 (Two, update).",
        "",
        "    Allowed when any of these holds:",
        '    line 7: @allow(update, record.note == "x")',
        "    A rule that does not read `new` is tested on the record before and after the change.",
    ]
    assert mod.allow_two__get.__doc__.strip().splitlines() == [
        "Generated from test.dbs:5 (Two, get).",
        "",
        "    Allowed when any of these holds:",
        '    line 5: @allow(read, record.level == token.level and record.note == "x")',
        "    line 6: @allow(read, record.level in token.levels)",
    ]
    assert mod.allow_two__delete.__doc__.strip().splitlines() == [
        "Generated from test.dbs:1 (Two, delete).",
        "",
        "    No rule allows delete: refused.",
    ]


def test_the_record_tests_of_a_branch_say_what_they_test():
    source = generate_source(parse_schema(DOCUMENTED, "test.dbs"))
    assert "    def _dbsvc_where_1(record):\n" in source
    assert '        """The record-side parts of this branch (the token is the enclosing call\'s)."""\n' in source
    assert "    def _dbsvc_where_row_1(row):\n" in source
    assert '        """The stored values\' parts of this branch (the token is the enclosing call\'s)."""\n' in source
    assert "        return _dbsvc_rules.same(row[2], 'x')\n" in source


LITERALS = """\
model Tag {
  id int @id
  tag str? @filter
  @allow(read, record.tag == "a")
}
model Level {
  id int @id
  level float @filter
  @allow(read, record.level in [1, 2.5])
}
model At {
  id int @id
  at datetime @filter
  @allow(read, record.at == "2026-01-01T01:00:00+01:00")
}
model Untagged {
  id int @id
  tag str? @filter
  @allow(read, record.tag == null)
}
"""


def test_a_scope_pinned_by_a_literal_holds_the_literals_index_keys():
    mod = compiled(LITERALS)
    assert (mod.scope_tag__list({}).field, mod.scope_tag__list({}).keys) == ("tag", frozenset({"a"}))
    level = mod.scope_level__list({})
    assert level.keys == frozenset({1.0, 2.5}) and {type(k) for k in level.keys} == {float}
    at = mod.scope_at__list({})
    assert at.keys == frozenset({mod.BY_NAME["At"].keys["at"]("2026-01-01T00:00:00Z")})
    assert at.visible({"id": 1, "at": "2026-01-01T00:00:00.000Z"}) is True
    assert at.visible({"id": 1, "at": "2026-01-01T01:00:00Z"}) is False
    assert mod.scope_untagged__list({}).keys == frozenset({None})


NESTED = """\
model Desk {
  id int @id
  org str @filter
  level int
  note str
  @allow(read, record.org == token.org and (token.role == "admin" or token.role == "auditor"))
}
model Shelf {
  id int @id
  org str @filter
  level int
  @allow(read, token.on == true and (record.level > 1 or record.org == token.org))
}
model Loose {
  id int @id
  org str @filter
  note str
  @allow(read, record.note == token.note)
}
"""


def test_an_or_nested_in_an_and_is_a_token_test_or_a_record_test_by_what_it_reads():
    mod = compiled(NESTED)
    desk = mod.scope_desk__list({"org": "a", "role": "auditor"})
    assert (desk.field, desk.keys, desk.where) == ("org", frozenset({"a"}), None)  # the or is token-only
    assert mod.scope_desk__list({"org": "a", "role": "guest"}).nothing is True
    shelf = mod.scope_shelf__list({"on": True, "org": "a"})
    assert shelf.field is None and shelf.where is not None  # the or reads the record: a test
    assert shelf.visible({"id": 1, "org": "b", "level": 2}) is True
    assert shelf.visible({"id": 1, "org": "a", "level": 0}) is True
    assert shelf.visible({"id": 1, "org": "b", "level": 1}) is False
    assert mod.scope_shelf__list({"on": False, "org": "a"}).nothing is True


def test_a_comparison_on_a_field_without_filter_is_a_test_never_a_pin():
    mod = compiled(NESTED)
    scope = mod.scope_loose__list({"note": "x"})
    assert scope.field is None and scope.key is None
    assert scope.visible({"id": 1, "org": "a", "note": "x"}) is True
    assert scope.visible({"id": 1, "org": "a", "note": "y"}) is False


def test_the_rule_functions_are_valid_trees_not_only_valid_text():
    """build_rules' trees compile as trees (every context set): the module is unparsed
    first, but a tree that unparse happens to print would break the day it is compiled."""
    import ast

    from dbsvc.compiler.rules import build_replicate, build_rules

    for text in (NESTED, KEYED, TASK, DOCUMENTED, LITERALS):
        schema = parse_schema(text, "test.dbs")
        body = [stmt for model in schema.models for stmt in build_rules(schema, model)] + build_replicate(schema)
        compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), "<rules>", "exec")


FIELDS = """\
model Same {
  id int @id
  org str @filter
  owner str
  @allow(read, record.org == record.owner)
}
model Within {
  id int @id
  org str @filter
  tags json
  @allow(read, record.org in record.tags)
}
model Span {
  id int @id
  start datetime
  end datetime
  @allow(read, record.start < record.end)
}
model Echo {
  id int @id
  at datetime
  j json
  @allow(read, record.at == record.j)
}
"""


def test_a_filter_field_compared_with_another_field_is_a_test_never_a_pin():
    mod = compiled(FIELDS)
    same = mod.scope_same__list({})
    assert same.field is None and same.key is None
    assert (same.visible({"id": 1, "org": "a", "owner": "a"}), same.visible({"id": 1, "org": "a", "owner": "b"})) == (
        True,
        False,
    )
    within = mod.scope_within__list({})
    assert within.field is None and within.key is None
    assert within.visible({"id": 1, "org": "a", "tags": ["b", "a"]}) is True
    assert within.visible({"id": 1, "org": "a", "tags": ["b"]}) is False


def test_two_datetime_fields_compare_as_instants_and_a_json_field_as_the_stored_text():
    mod = compiled(FIELDS)
    whole, half = "2026-01-01T00:00:00Z", "2026-01-01T00:00:00.500000Z"  # as stored; as text half < whole
    assert mod.allow_span__get({"id": 1, "start": whole, "end": half}, {}) is True
    assert mod.allow_span__get({"id": 1, "start": half, "end": whole}, {}) is False
    assert mod.allow_echo__get({"id": 1, "at": whole, "j": whole}, {}) is True
    assert mod.allow_echo__get({"id": 1, "at": whole, "j": half}, {}) is False


CONSTANTS = """\
model Yes {
  id int @id
  @allow(read, true)
}
model No {
  id int @id
  @allow(read, false)
}
model Listed {
  id int @id
  level int
  at datetime
  @allow(read, record.level in [1, 2])
  @allow(delete, record.at in ["2026-01-01T01:00:00+01:00", "2027-01-01T00:00:00Z"])
}
"""


def test_a_literal_true_or_false_rule_allows_or_refuses_every_record():
    mod = compiled(CONSTANTS)
    assert mod.allow_yes__get({"id": 1}, {}) is True
    assert mod.scope_yes__list({}).everything is True
    assert mod.allow_no__get({"id": 1}, {}) is False
    assert mod.scope_no__list({}).nothing is True


def test_a_list_literal_on_a_field_without_filter_holds_the_fields_typed_values():
    mod = compiled(CONSTANTS)
    record = {"id": 1, "level": 2, "at": "2026-01-01T00:00:00Z"}
    assert mod.allow_listed__get(record, {}) is True
    assert mod.allow_listed__get({**record, "level": 3}, {}) is False
    assert mod.allow_listed__delete(record, {}) is True  # the same instant as the first literal
    assert mod.allow_listed__delete({**record, "at": "2026-06-01T00:00:00Z"}, {}) is False


BARE = """\
@allow(replicate)
model Open {
  id int @id
  at datetime
  @allow(read)
  @allow(delete, token.since <= record.at)
  @allow(update, "2026-01-01T01:00:00+01:00" == record.at)
}
"""


def test_a_rule_without_a_condition_allows_every_record_and_token():
    mod = compiled(BARE)
    assert mod.allow_open__get({"id": 1, "at": "2026-01-01T00:00:00Z"}, {}) is True
    assert mod.scope_open__list({}).everything is True
    assert mod.allow_replicate({}) is True
    assert mod.allow_open__create({"id": 1, "at": "2026-01-01T00:00:00Z"}, {}) is False  # no create rule


def test_a_claim_or_literal_on_the_left_of_a_datetime_field_is_typed_like_the_field():
    mod = compiled(BARE)
    record = {"id": 1, "at": "2026-01-01T00:00:00.500000Z"}
    assert mod.allow_open__delete(record, {"since": "2026-01-01T01:00:00.2+01:00"}) is True
    assert mod.allow_open__delete(record, {"since": "2026-01-01T00:00:01Z"}) is False
    assert mod.allow_open__update({"id": 1, "at": "2026-01-01T00:00:00Z"}, {"id": 1, "at": "2026-01-01T00:00:00Z"}, {})
    assert mod.allow_open__update(record, record, {}) is False


def test_a_scope_function_says_what_it_answers():
    mod = compiled(DOCUMENTED)
    assert mod.scope_two__list.__doc__.strip().splitlines() == [
        "Generated from test.dbs:5 (Two, list).",
        "",
        "    Allowed when any of these holds:",
        '    line 5: @allow(read, record.level == token.level and record.note == "x")',
        "    line 6: @allow(read, record.level in token.levels)",
        "",
        "    The token's Scope (dbsvc.rules): what it may see.",
    ]


def test_a_branch_that_allows_everything_ends_a_scope_of_several_rules():
    mod = compiled(
        "model Board {\n  id int @id\n  org str @filter\n"
        "  @allow(read, record.org == token.org)\n  @allow(read)\n  @allow(read, token.role == \"x\")\n}\n"
    )
    assert mod.scope_board__list({}).everything is True
    assert mod.scope_board__list({"org": "a"}).everything is True


CARDS = """\
@allow(replicate, token.role == "replicator")
@allow(replicate, token.sub == "backup")
model Card {
  id int @id
  owner str @default(token.sub)
  team str? @default(token.org.team)
  title str
  @allow(read, record.owner == token.sub)
  @allow(create delete, token.role == "admin")
  @allow(delete, token.sub == "x")
}
model Free {
  id int @id
  by str @default(token.org.id)
}
"""

FILL_CARD = '''\
def fill_card__from_token(body, token):
    """Generated from cards.dbs:5 (Card).

    Sets from the token, on create:
    line 5: owner @default(token.sub)
    line 6: team @default(token.org.team)
    """
    if not isinstance(body, dict):
        return None
    _dbsvc_value = _dbsvc_rules.claim(token, ('sub',))
    if _dbsvc_value is _dbsvc_rules.MISSING:
        raise Forbidden("the token has no claim 'sub', which sets field 'owner' of Card (@default(token.sub)), \
expected a token carrying it")
    if 'owner' in body and (not _dbsvc_rules.same(body['owner'], _dbsvc_value)):
        raise Forbidden("field 'owner' of Card is set from the token's claim 'sub' (@default(token.sub)), expected \
the body to omit it or carry the same value")
    body['owner'] = _dbsvc_value
    _dbsvc_value = _dbsvc_rules.claim(token, ('org', 'team'))
    if _dbsvc_value is _dbsvc_rules.MISSING:
        _dbsvc_value = None
    if 'team' in body and (not _dbsvc_rules.same(body['team'], _dbsvc_value)):
        raise Forbidden("field 'team' of Card is set from the token's claim 'org.team' (@default(token.org.team)), \
expected the body to omit it or carry the same value")
    body['team'] = _dbsvc_value'''

REPLICATE = '''\
def allow_replicate(token):
    """Generated from cards.dbs:1 (replicate).

    May this token replicate? Any of:
    line 1: @allow(replicate, token.role == "replicator")
    line 2: @allow(replicate, token.sub == "backup")
    """
    if _dbsvc_rules.same(_dbsvc_rules.claim(token, ('role',)), 'replicator'):
        return True
    if _dbsvc_rules.same(_dbsvc_rules.claim(token, ('sub',)), 'backup'):
        return True
    return False
REPLICATE_RULE = allow_replicate
RULES = True'''

CARD_ARGUMENTS = {
    "rules": "_dbsvc_rules.ModelRules(list=scope_card__list, get=allow_card__get, create=allow_card__create, "
    "update=allow_card__update, delete=allow_card__delete, subscribe=scope_card__subscribe, "
    "text={'list': '@allow(read, record.owner == token.sub)', 'get': '@allow(read, record.owner == token.sub)', "
    "'create': '@allow(create delete, token.role == \"admin\")', 'update': '', "
    "'delete': '@allow(create delete, token.role == \"admin\") or @allow(delete, token.sub == \"x\")', "
    "'subscribe': '@allow(read, record.owner == token.sub)'})",
    "fill_from_token": "fill_card__from_token",
}


def test_the_token_defaults_the_model_arguments_and_the_replicate_rule_as_emitted():
    import ast

    from dbsvc.compiler.rules import build_fill, build_replicate, build_rules, model_rules_arguments

    schema = parse_schema(CARDS, "cards.dbs")
    card, free = schema.models
    assert ast.unparse(build_fill(schema, card)) == FILL_CARD
    assert ast.unparse(ast.Module(body=build_replicate(schema), type_ignores=[])) == REPLICATE
    assert {k: ast.unparse(v) for k, v in model_rules_arguments(card).items()} == CARD_ARGUMENTS
    assert list(model_rules_arguments(card)) == ["rules", "fill_from_token"]
    assert {k: ast.unparse(v) for k, v in model_rules_arguments(free).items()} == {
        "fill_from_token": "fill_free__from_token"
    }
    assert [f.name for f in build_rules(schema, card)] == [  # type: ignore[attr-defined]
        "scope_card__list",
        "allow_card__get",
        "allow_card__create",
        "allow_card__update",
        "allow_card__delete",
        "scope_card__subscribe",
        "fill_card__from_token",
    ]
    assert [f.name for f in build_rules(schema, free)] == ["fill_free__from_token"]  # type: ignore[attr-defined]
    plain = parse_schema("model A {\n  id int @id\n}\n", "a.dbs")
    assert (
        ast.unparse(ast.Module(body=build_replicate(plain), type_ignores=[])) == "REPLICATE_RULE = None\nRULES = False"
    )
    assert build_fill(plain, plain.models[0]) is None
    assert model_rules_arguments(plain.models[0]) == {}
    assert build_rules(plain, plain.models[0]) == []
    with pytest.raises(Forbidden) as refused:
        compiled(CARDS).fill_free__from_token({}, {"org": {}})
    assert refused.value.detail == (
        "the token has no claim 'org.id', which sets field 'by' of Free (@default(token.org.id)), "
        "expected a token carrying it"
    )
