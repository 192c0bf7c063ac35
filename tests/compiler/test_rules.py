"""The generated access-rule functions (compiler/rules.py), called directly over records and
claims: `allow_m__op`, `scope_m__list` / `scope_m__subscribe` (dbsvc.rules.Scope),
`fill_m__from_token`, `ModelRules` on the CompiledModel, `RULES` and `REPLICATE_RULE`."""

from __future__ import annotations

import inspect

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbsvc import rules as run
from dbsvc.compiler import generate_source
from dbsvc.errors import Forbidden
from dbsvc.schema import parse_schema
from support.mutation import shared

NOTES = """\
@allow(replicate, token.role == "replicator")
model Note {
  id int @id
  owner str @filter @default(token.sub)
  org str? @filter
  at datetime
  ref uuid?
  score float
  done bool
  tags json
  @allow(read, record.owner == token.sub or token.role == "admin")
  @allow(create, token.sub != null)
  @allow(update, record.owner == token.sub and new.owner == record.owner)
  @allow(delete, token.role == "admin" or record.at < "2026-01-01T00:00:00+01:00" and record.owner == token.sub)
}
model Post {
  id int @id
  author str @filter @default(token.sub)
  status enum(draft, published) @filter
  @allow(read, record.status == "published" or record.author == token.sub)
  @allow(write, record.author == token.sub)
}
model Doc {
  id int @id
  org str @filter
  level int
  title str
  @allow(list get, record.org in token.orgs and not token.suspended)
  @allow(list get, token.org.id == record.org and record.level <= token.clearance)
  @allow(get, "editor" in token."https://x.io/roles")
}
model Open {
  id int @id
  note str? @default(token.nick)
}
"""


@pytest.fixture(scope=shared("module"))
def mod(compile_text):
    return compile_text(NOTES)


def note(**values):
    record = {
        "id": 1,
        "owner": "ann",
        "org": None,
        "at": "2025-06-01T00:00:00Z",
        "ref": None,
        "score": 1.0,
        "done": False,
        "tags": [],
    }
    record.update(values)
    return record


def row(module, model, record):
    return getattr(module, f"row_{model}")(record)


def sees(scope: run.Scope, module, model, record) -> bool:
    """What storage answers for a stored row: the pinned field's key, then where_row."""
    if scope.nothing:
        return False
    if scope.everything:
        return True
    values = row(module, model, record)
    compiled = module.BY_NAME[model.capitalize()]
    if scope.field is not None:
        assert scope.key is compiled.keys[scope.field]
        if scope.key(values[compiled.fields.index(scope.field)]) not in scope.keys:
            return False
    return scope.where_row is None or scope.where_row(values)


def test_owner_rule_pins_the_filter_field_and_get_agrees(mod) -> None:
    scope = mod.scope_note__list({"sub": "ann"})
    assert (scope.field, scope.keys, scope.where, scope.nothing, scope.everything) == (
        "owner",
        frozenset({"ann"}),
        None,
        False,
        False,
    )
    assert scope.visible(note()) and not scope.visible(note(owner="bob"))
    assert mod.allow_note__get(note(), {"sub": "ann"}) is True
    assert mod.allow_note__get(note(owner="bob"), {"sub": "ann"}) is False


def test_a_missing_or_wrong_kind_claim_sees_nothing_never_an_error(mod) -> None:
    for claims in ({}, {"sub": 7}, {"sub": None}, {"sub": ["ann"]}, {"sub": True}):
        assert mod.scope_note__list(claims).nothing, claims
        assert mod.allow_note__get(note(), claims) is False


def test_a_token_only_branch_that_holds_is_everything(mod) -> None:
    assert mod.scope_note__list({"role": "admin"}) is run.EVERYTHING
    assert mod.scope_note__subscribe({"sub": "x", "role": "admin"}) is run.EVERYTHING
    assert mod.allow_note__get(note(owner="zed"), {"role": "admin"}) is True


def test_a_single_branch_scope_is_built_directly(compile_text) -> None:
    module = compile_text(PROPERTY)
    assert module.scope_s__list({"level": 1, "sub": "a"}) is run.NOTHING
    assert module.scope_s__list({"level": 2, "sub": 5}) is run.NOTHING
    scope = module.scope_s__list({"level": 2, "sub": "a"})
    assert (scope.field, scope.keys) == ("org", frozenset({"a"}))
    assert scope.visible({"id": 1, "org": "a", "done": True})
    assert not scope.visible({"id": 1, "org": "a", "done": False})
    assert module.scope_u__list({}) is run.EVERYTHING
    assert module.scope_u__list({"banned": True}) is run.NOTHING


def test_literal_pin_and_claim_pin_on_different_fields_scan(mod) -> None:
    scope = mod.scope_post__list({"sub": "ann"})
    assert scope.field is None and scope.where is not None
    post = {"id": 1, "author": "bob", "status": "published"}
    assert scope.visible(post) and sees(scope, mod, "post", post)
    draft = {"id": 2, "author": "bob", "status": "draft"}
    assert not scope.visible(draft) and not sees(scope, mod, "post", draft)
    assert scope.visible({"id": 3, "author": "ann", "status": "draft"})
    anonymous = mod.scope_post__list({})  # only the literal branch is left: the index answers it
    assert (anonymous.field, anonymous.keys, anonymous.where) == ("status", frozenset({"published"}), None)


def test_in_a_list_claim_and_not_and_nested_claims(mod) -> None:
    scope = mod.scope_doc__list({"orgs": ["a", "b", 3]})
    assert (scope.field, scope.keys, scope.where) == ("org", frozenset({"a", "b"}), None)
    assert mod.scope_doc__list({"orgs": ["a"], "suspended": True}).nothing
    assert mod.scope_doc__list({"orgs": "a"}).nothing  # `in` needs a list
    both = mod.scope_doc__list({"orgs": ["a"], "org": {"id": "c"}, "clearance": 2})
    assert both.field == "org" and both.keys == frozenset({"a", "c"})
    doc = {"id": 1, "org": "c", "level": 3, "title": "t"}
    assert not both.visible(doc) and not sees(both, mod, "doc", doc)
    assert both.visible(dict(doc, level=2)) and sees(both, mod, "doc", dict(doc, level=2))
    assert both.visible(dict(doc, org="a", level=9))
    assert mod.allow_doc__get(doc, {"org": {"id": "c"}, "clearance": 5}) is True
    assert mod.allow_doc__get(doc, {"org": "c", "clearance": 5}) is False  # not an object: missing
    assert mod.allow_doc__get(doc, {"https://x.io/roles": ["editor"]}) is True


def test_typed_comparisons_datetime_orders_instants(mod) -> None:
    old, new = note(at="2025-12-31T23:30:00Z"), note(at="2025-12-31T23:00:00.000001Z")
    claims = {"sub": "ann"}
    # the literal is 2025-12-31T23:00:00Z: instants compare, not their text
    assert mod.allow_note__delete(new, claims) is False
    assert mod.allow_note__delete(note(at="2025-12-31T22:59:59.999999Z"), claims) is True
    assert mod.allow_note__delete(old, claims) is False
    assert mod.allow_note__delete(old, {"role": "admin"}) is True


def test_update_reads_both_sides(mod) -> None:
    before = note()
    assert mod.allow_note__update(before, note(done=True), {"sub": "ann"}) is True
    assert mod.allow_note__update(before, note(owner="bob"), {"sub": "ann"}) is False
    assert mod.allow_note__update(before, note(), {"sub": "bob"}) is False


def test_an_update_rule_without_new_holds_before_and_after(mod) -> None:
    # Post: @allow(write, record.author == token.sub), no `new`: PostgreSQL's USING without
    # WITH CHECK, tested on both sides, so an author cannot hand a post to someone else.
    mine = {"id": 1, "author": "ann", "status": "draft"}
    assert mod.allow_post__update(mine, {**mine, "status": "published"}, {"sub": "ann"}) is True
    assert mod.allow_post__update(mine, {**mine, "author": "bob"}, {"sub": "ann"}) is False
    assert mod.allow_post__update({**mine, "author": "bob"}, mine, {"sub": "ann"}) is False
    assert "tested on the record before and after" in mod.allow_post__update.__doc__


def test_create_and_operations_no_rule_allows(mod) -> None:
    assert mod.allow_note__create(note(), {"sub": "ann"}) is True
    assert mod.allow_note__create(note(), {"sub": None}) is False
    assert mod.allow_note__create(note(), {}) is False  # a missing claim: `!=` is false too
    assert mod.allow_doc__create({}, {"role": "admin"}) is False
    assert mod.scope_doc__subscribe({"orgs": ["a"]}).nothing
    assert mod.DOC_MODEL.rules.text["create"] == ""


def test_model_rules_and_constants(mod) -> None:
    rules = mod.NOTE_MODEL.rules
    assert isinstance(rules, run.ModelRules)
    assert rules.get is mod.allow_note__get and rules.list is mod.scope_note__list
    assert rules.text["get"] == '@allow(read, record.owner == token.sub or token.role == "admin")'
    assert mod.OPEN_MODEL.rules is None
    assert mod.OPEN_MODEL.fill_from_token is mod.fill_open__from_token
    assert mod.RULES is True
    assert mod.REPLICATE_RULE({"role": "replicator"}) is True
    assert mod.REPLICATE_RULE({"role": "admin"}) is False
    assert mod.REPLICATE_RULE({}) is False


def test_a_schema_without_rules_compiles_as_before(compile_text) -> None:
    module = compile_text("model A {\n  id int @id\n}\n")
    assert module.RULES is False and module.REPLICATE_RULE is None
    assert module.A_MODEL.rules is None and module.A_MODEL.fill_from_token is None


def test_fill_from_token_sets_checks_and_refuses(mod) -> None:
    body = {"at": "2025-01-01T00:00:00Z"}
    mod.fill_note__from_token(body, {"sub": "ann"})
    assert body["owner"] == "ann"
    same = {"owner": "ann"}
    mod.fill_note__from_token(same, {"sub": "ann"})
    with pytest.raises(Forbidden, match=r"field 'owner' of Note is set from the token's claim 'sub'"):
        mod.fill_note__from_token({"owner": "bob"}, {"sub": "ann"})
    with pytest.raises(Forbidden, match=r"the token has no claim 'sub', which sets field 'owner'"):
        mod.fill_note__from_token({}, {})
    nullable = {}
    mod.fill_open__from_token(nullable, {})
    assert nullable == {"note": None}
    mod.fill_note__from_token(["not", "an", "object"], {"sub": "ann"})  # left to the validator


def test_generated_functions_quote_their_rules_with_lines(mod) -> None:
    doc = inspect.getdoc(mod.allow_note__delete)
    assert "line 14: @allow(delete, token.role == \"admin\" or record.at <" in doc
    source = generate_source(parse_schema(NOTES, "notes.dbs"))
    assert "def scope_note__list(token):" in source
    assert "def allow_note__update(record, new, token):" in source
    assert "Generated from notes.dbs:11 (Note, list)." in source
    assert "REPLICATE_RULE = allow_replicate" in source


def test_uuid_claims_compare_in_any_letter_case(compile_text) -> None:
    module = compile_text("model R {\n  id int @id\n  who uuid @filter\n  @allow(read, record.who == token.sub)\n}\n")
    lower = "aaaaaaaa-0000-0000-0000-00000000000a"
    record = {"id": 1, "who": lower}
    claims = {"sub": lower.upper()}
    assert module.allow_r__get(record, claims) is True
    scope = module.scope_r__list(claims)
    assert scope.keys == frozenset({lower}) and scope.visible(record)
    assert module.scope_r__list({"sub": "not-a-uuid"}).nothing


# -- the property: a Scope sees exactly what `get` allows -----------------------------------

PROPERTY = """\
model P {
  id int @id
  owner str @filter
  org str? @filter
  at datetime? @filter
  score float @filter
  level int
  done bool
  tags json
  @allow(read, record.owner == token.sub and not token.banned or record.org in token.orgs and record.done)
  @allow(read, token.role == "admin" and token.level > 2 or record.score == token.score or record.at == token.at)
  @allow(read, record.level < token.level and "x" in record.tags or record.org == null and token.anon)
}
model Q {
  id int @id
  org str @filter
  at datetime @filter
  @allow(read, record.org == token.org and record.at >= "2025-01-01T00:00:00Z")
  @allow(read, record.org in token.orgs)
}
model R {
  id int @id
  org str? @filter
  done bool
  @allow(read, record.org == token.sub or record.org in token.orgs and token.anon and record.done)
  @allow(read, token.role == "admin" and not token.banned)
}
model S {
  id int @id
  org str? @filter
  done bool
  @allow(read, token.level > 1 and record.org == token.sub and record.done)
}
model T {
  id int @id
  org str? @filter
  done bool
  @allow(read, record.done or token.role == "admin")
}
model U {
  id int @id
  org str? @filter
  done bool
  @allow(read, not token.banned)
}
"""

claim_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1, 4),
    st.sampled_from([0.5, 1.0, 2.0]),
    st.sampled_from(["a", "b", "admin", "x", "2025-01-01T01:00:00+01:00", "2025-01-01T00:00:00Z", "junk"]),
    st.lists(st.sampled_from(["a", "b", "c", 1, None, True]), max_size=3),
)
claim_sets = st.dictionaries(
    st.sampled_from(["sub", "banned", "orgs", "role", "level", "score", "at", "anon", "org"]), claim_values, max_size=6
)
p_records = st.fixed_dictionaries(
    {
        "id": st.just(1),
        "owner": st.sampled_from(["a", "b", "admin"]),
        "org": st.sampled_from(["a", "b", "c", None]),
        "at": st.sampled_from([None, "2025-01-01T00:00:00Z", "2024-12-31T23:59:59Z"]),
        "score": st.sampled_from([0.5, 1.0, 2.0]),
        "level": st.integers(-1, 4),
        "done": st.booleans(),
        "tags": st.sampled_from([[], ["x"], "x", {"x": 1}, None]),
    }
)
q_records = st.fixed_dictionaries(
    {
        "id": st.just(1),
        "org": st.sampled_from(["a", "b", "c"]),
        "at": st.sampled_from(["2025-01-01T00:00:00Z", "2024-12-31T23:59:59Z"]),
    }
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(claims=claim_sets, record=p_records, other=q_records)
def test_scope_visible_agrees_with_get_for_any_claims_and_record(compile_text, claims, record, other) -> None:
    module = compile_text(PROPERTY)
    third = {"id": 1, "org": record["org"], "done": record["done"]}
    for model, sample in (("p", record), ("q", other), ("r", third), ("s", third), ("t", third), ("u", third)):
        allowed = getattr(module, f"allow_{model}__get")(sample, claims)
        for operation in ("list", "subscribe"):
            scope = getattr(module, f"scope_{model}__{operation}")(claims)
            assert scope.visible(sample) is allowed, (model, operation, scope)
            assert sees(scope, module, model, sample) is allowed, (model, operation, scope)
