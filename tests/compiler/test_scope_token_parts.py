"""A read rule of one branch whose token-only parts are and-ed: the list and subscribe scope
needs every one of them, as the single-record check does (compiler/rules.py `_single`). A
hand mutant that or-ed them (a token carrying one of two required claims saw every record)
passed tests/compiler and tests/app/test_access_units.py: none had two token-only parts in
one branch (docs/mutation.md, session 15, wt-mpo5). Each test compiles its own schema."""

from __future__ import annotations

import pytest

from dbsvc import rules as run
from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema

RULES = """\
model Memo {
  id int @id
  owner str @filter
  note str
  @allow(read, token.role == "admin" and token.org == "acme")
}
model Pinned {
  id int @id
  owner str @filter
  note str
  @allow(read, token.role == "staff" and token.org == "acme" and record.owner == token.sub)
}
"""

TOKENS = [
    ({"role": "admin", "org": "acme", "sub": "ann"}, True),
    ({"role": "admin", "org": "other", "sub": "ann"}, False),
    ({"role": "reader", "org": "acme", "sub": "ann"}, False),
    ({"sub": "ann"}, False),
]


def compiled():
    return compile_schema(parse_schema(RULES, "test.dbs"))


@pytest.mark.parametrize(("token", "allowed"), TOKENS)
def test_a_scope_of_token_parts_alone_needs_all_of_them(token, allowed):
    mod = compiled()
    record = {"id": 1, "owner": "bob", "note": "n"}
    scope = mod.scope_memo__list(token)
    assert scope is (run.EVERYTHING if allowed else run.NOTHING)
    assert mod.scope_memo__subscribe(token).visible(record) is allowed
    assert mod.allow_memo__get(record, token) is allowed  # the list agrees with a read


@pytest.mark.parametrize(
    ("token", "allowed"),
    [
        ({"role": "staff", "org": "acme", "sub": "ann"}, True),
        ({"role": "staff", "org": "other", "sub": "ann"}, False),
        ({"role": "admin", "org": "acme", "sub": "ann"}, False),
    ],
)
def test_a_pinned_scope_needs_its_token_parts_too(token, allowed):
    mod = compiled()
    mine, theirs = {"id": 1, "owner": "ann", "note": "n"}, {"id": 2, "owner": "bob", "note": "n"}
    scope = mod.scope_pinned__list(token)
    if allowed:
        assert (scope.field, scope.keys) == ("owner", frozenset({"ann"}))
    else:
        assert scope is run.NOTHING
    assert (scope.visible(mine), scope.visible(theirs)) == (allowed, False)
    assert (mod.allow_pinned__get(mine, token), mod.allow_pinned__get(theirs, token)) == (allowed, False)
