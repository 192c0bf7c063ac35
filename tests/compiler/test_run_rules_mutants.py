"""The run-time helpers of access rules (dbsvc/rules.py) at the edges where their decisions
are made, called directly: the comparison rules 1-2 (`same`, `differs`, `ordered`,
`member`), claim lookup and conversion (`claim`, `converted`, `claim_keys`), how a Scope
is assembled from branches (`Part`, `scope_of`) and answers (`Scope.visible`), and the
refusal counters. Written for the survivors of a mutation run (docs/mutation.md): every
expectation is a literal, never one of the module's own constants."""

from __future__ import annotations

import pytest

from dbsvc import rules as run
from dbsvc.rules import MISSING, Part, Refusals, Scope, claim, claim_keys, converted, differs, member, ordered, same


def test_missing_shows_its_name():
    assert repr(MISSING) == "MISSING"


def test_claim_walks_objects_and_is_missing_at_any_absent_or_non_object_step():
    claims = {"sub": "ann", "org": {"id": 7, "tags": ["a"]}, "n": None}
    assert claim(claims, ("sub",)) == "ann"
    assert claim(claims, ("org", "id")) == 7
    assert claim(claims, ()) is claims
    assert claim(claims, ("nope",)) is MISSING
    assert claim(claims, ("org", "nope")) is MISSING
    assert claim(claims, ("sub", "x")) is MISSING  # a string is not an object
    assert claim(claims, ("org", "tags", "0")) is MISSING  # nor is a list
    assert claim(claims, ("n",)) is None  # null is a value, not a missing claim
    assert claim(claims, ("n", "x")) is MISSING


@pytest.mark.parametrize(
    "left, right, equal",
    [
        (1, 1.0, True),  # int and float are one JSON kind
        (2.5, 2.5, True),
        ("a", "a", True),
        (None, None, True),
        (True, True, True),
        ([1], [1], True),
        (True, 1, False),  # a bool is never a number
        (1, True, False),
        (False, 0, False),
        ("1", 1, False),
        (None, 0, False),
        ("a", "b", False),
        (MISSING, MISSING, False),
        (MISSING, "a", False),
        ("a", MISSING, False),
    ],
)
def test_same_is_json_equality_and_false_with_missing(left, right, equal):
    assert same(left, right) is equal


@pytest.mark.parametrize(
    "left, right, answer",
    [
        (1, 2, True),
        (1, 1.0, False),
        ("a", "a", False),
        (True, 1, True),  # different kinds differ
        ("1", 1, True),
        (None, 0, True),
        (None, None, False),
        (MISSING, "a", False),  # a missing claim is false in every comparison
        ("a", MISSING, False),
        (MISSING, MISSING, False),
    ],
)
def test_differs_is_true_between_kinds_and_false_with_missing(left, right, answer):
    assert differs(left, right) is answer


@pytest.mark.parametrize(
    "left, op, right, answer",
    [
        (1, "<", 2, True),
        (2, "<", 2, False),
        (3, "<", 2, False),
        (1, "<=", 2, True),
        (2, "<=", 2, True),
        (3, "<=", 2, False),
        (1, ">", 2, False),
        (2, ">", 2, False),
        (3, ">", 2, True),
        (1, ">=", 2, False),
        (2, ">=", 2, True),
        (3, ">=", 2, True),
        (1, "<", 1.5, True),  # int and float order together
        (2.0, ">=", 2, True),
        ("a", "<", "b", True),
        ("b", "<", "a", False),
        ("b", ">=", "b", True),
    ],
)
def test_ordered_answers_each_operator_on_both_sides_of_equality(left, op, right, answer):
    assert ordered(left, op, right) is answer


@pytest.mark.parametrize(
    "left, right",
    [
        (MISSING, 1),
        (1, MISSING),
        (None, 1),
        (1, None),
        (None, None),
        ("1", 2),  # different kinds
        (1, "2"),
        (False, True),  # bools do not order
        (True, 2),
        ([1], [2]),  # nor lists
        ({"a": 1}, {"a": 2}),
    ],
)
@pytest.mark.parametrize("op", ["<", "<=", ">", ">="])
def test_ordered_is_false_with_missing_null_other_kinds_and_unordered_values(left, op, right):
    assert ordered(left, op, right) is False


def test_member_needs_a_list_and_compares_by_json_kind():
    assert member("a", ["b", "a"]) is True
    assert member("a", ("a",)) is True
    assert member(1, [1.0]) is True
    assert member("c", ["a", "b"]) is False
    assert member(True, [1]) is False
    assert member(1, [True]) is False
    assert member("a", []) is False
    assert member("a", "abc") is False  # a string is not a list
    assert member("a", {"a": 1}) is False
    assert member("a", MISSING) is False
    assert member(MISSING, ["a"]) is False
    assert member(None, [None]) is True


def test_converted_types_a_claim_and_leaves_out_what_the_parser_refuses():
    def parse(text):
        return int(text) if text.isdigit() else None

    assert converted("12", parse) == 12
    assert converted("x", parse) is MISSING
    assert converted(None, parse) is None
    assert converted(12, parse) is MISSING  # not a text: another kind
    assert converted(True, parse) is MISSING
    assert converted(["1", "x", 2, "3"], parse) == [1, 3]
    assert converted([], parse) == []


def test_claim_keys_pins_only_values_of_the_fields_kinds():
    def key(value):
        return ("k", value)

    assert claim_keys("ann", (str,), key) == frozenset({("k", "ann")})
    assert claim_keys(3, (int, float), key) == frozenset({("k", 3)})
    assert claim_keys(True, (int, float), key) == frozenset()  # exact types: a bool is no int
    assert claim_keys("3", (int, float), key) == frozenset()
    assert claim_keys(MISSING, (str,), key) == frozenset()
    assert claim_keys([1, "a", True, "b", "a"], (str,), key, many=True) == frozenset({("k", "a"), ("k", "b")})
    assert claim_keys("a", (str,), key, many=True) == frozenset()  # `in` needs a list claim
    assert claim_keys(MISSING, (str,), key, many=True) == frozenset()
    assert claim_keys(["a", "b"], (str,), key) == frozenset()  # `==` with a list claim pins nothing


def test_claim_keys_pins_null_only_for_a_nullable_field():
    def key(value):
        return value

    assert claim_keys(None, (str,), key) == frozenset()
    assert claim_keys(None, (str,), key, nullable=True) == frozenset({None})
    assert claim_keys([None, "a"], (str,), key, many=True) == frozenset({"a"})
    assert claim_keys([None, "a"], (str,), key, many=True, nullable=True) == frozenset({None, "a"})


def test_claim_keys_leaves_out_what_the_key_function_refuses():
    def key(text):
        return text.upper() if text != "bad" else None

    assert claim_keys("bad", (str,), key) == frozenset()
    assert claim_keys(["bad", "ok"], (str,), key, many=True) == frozenset({"OK"})


def lower(value):
    return value.lower()


def test_scope_visible_checks_nothing_everything_keys_and_where_in_that_order():
    record = {"owner": "Ann", "n": 1}
    assert Scope(everything=True).visible(record) is True
    assert Scope(everything=True).visible(None) is False
    assert Scope(everything=True, nothing=True).visible(record) is False
    assert Scope(nothing=True).visible(record) is False
    assert Scope().visible(record) is True  # no part refuses
    assert Scope(field="owner", keys=frozenset({"ann"}), key=lower).visible(record) is True
    assert Scope(field="owner", keys=frozenset({"bob"}), key=lower).visible(record) is False
    pinned = Scope(field="owner", keys=frozenset({"ann"}), key=lower, where=lambda r: r["n"] > 1)
    assert pinned.visible(record) is False
    assert pinned.visible({"owner": "ANN", "n": 2}) is True
    assert Scope(where=lambda r: r["n"] == 1).visible(record) is True
    assert Scope(where=lambda r: r["n"] == 2).visible(record) is False


def test_part_holds_on_a_record_or_on_its_stored_values():
    part = Part(
        field="owner",
        position=1,
        keys=frozenset({"ann"}),
        key=lower,
        where=lambda r: r["n"] == 1,
        where_row=lambda v: v[0] == 1,
    )
    assert part.holds({"owner": "Ann", "n": 1}, False) is True
    assert part.holds({"owner": "Bob", "n": 1}, False) is False
    assert part.holds({"owner": "Ann", "n": 2}, False) is False
    assert part.holds((1, "Ann"), True) is True
    assert part.holds((1, "Bob"), True) is False
    assert part.holds((2, "Ann"), True) is False
    # the row test reads the row, the record test the record
    only_row = Part(where_row=lambda v: v[0] == 1)
    assert only_row.holds({"n": 2}, False) is True
    assert only_row.holds((2,), True) is False
    only_record = Part(where=lambda r: r["n"] == 1)
    assert only_record.holds((2,), True) is True
    assert only_record.holds({"n": 2}, False) is False
    assert Part(where=lambda r: 1).holds({}, False) is True  # a truthy answer is a bool


def test_scope_of_no_live_branch_is_nothing():
    assert run.scope_of([]).nothing is True
    empty = Part(field="owner", keys=frozenset(), key=lower)
    scope = run.scope_of([empty, empty])
    assert (scope.nothing, scope.everything) == (True, False)


def test_scope_of_a_branch_without_pin_or_test_is_everything():
    pinned = Part(field="owner", keys=frozenset({"ann"}), key=lower)
    scope = run.scope_of([pinned, Part()])
    assert (scope.everything, scope.nothing) == (True, False)
    # a test left in the branch: not everything
    tested = run.scope_of([Part(where=lambda r: True, where_row=lambda v: True)])
    assert (tested.everything, tested.nothing, tested.field) == (False, False, None)


def test_scope_of_one_pinned_branch_keeps_its_own_test():
    def where(r):
        return r["n"] == 1

    def where_row(v):
        return v[0] == 1

    part = Part(field="owner", keys=frozenset({"ann"}), key=lower, where=where, where_row=where_row)
    scope = run.scope_of([part, Part(field="owner", keys=frozenset(), key=lower)])
    assert (scope.everything, scope.nothing, scope.field, scope.keys) == (False, False, "owner", frozenset({"ann"}))
    assert scope.key is lower
    assert scope.where is where and scope.where_row is where_row


def test_scope_of_branches_pinned_on_one_field_unite_their_keys_and_keep_each_test():
    ann = Part(
        field="owner",
        position=0,
        keys=frozenset({"ann"}),
        key=lower,
        where=lambda r: r["n"] == 1,
        where_row=lambda v: v[1] == 1,
    )
    bob = Part(field="owner", position=0, keys=frozenset({"bob", "cy"}), key=lower)
    scope = run.scope_of([ann, bob])
    assert (scope.field, scope.keys, scope.key) == ("owner", frozenset({"ann", "bob", "cy"}), lower)
    assert scope.visible({"owner": "Ann", "n": 1}) is True
    assert scope.visible({"owner": "Ann", "n": 2}) is False  # ann's branch needs n == 1
    assert scope.visible({"owner": "Bob", "n": 2}) is True
    assert scope.where is not None and scope.where_row is not None
    assert scope.where_row(("ann", 2)) is False
    assert scope.where_row(("cy", 2)) is True
    assert scope.where_row(("ann", 1)) is True
    assert scope.where({"owner": "Dan", "n": 1}) is False


def test_scope_of_branches_on_different_fields_or_unpinned_is_a_scan_of_every_branch():
    owner = Part(field="owner", position=0, keys=frozenset({"ann"}), key=lower)
    org = Part(field="org", position=1, keys=frozenset({"x"}), key=lower)
    scope = run.scope_of([owner, org])
    assert (scope.everything, scope.nothing, scope.field, scope.keys) == (False, False, None, frozenset())
    assert scope.where is not None and scope.where_row is not None
    assert scope.where({"owner": "Ann", "org": "y"}) is True
    assert scope.where({"owner": "Bob", "org": "X"}) is True
    assert scope.where({"owner": "Bob", "org": "y"}) is False
    assert scope.where_row(("ann", "y")) is True
    assert scope.where_row(("bob", "x")) is True
    assert scope.where_row(("bob", "y")) is False
    mixed = run.scope_of([owner, Part(where=lambda r: r["n"] == 1, where_row=lambda v: v[2] == 1)])
    assert mixed.field is None
    assert mixed.visible({"owner": "Bob", "org": "y", "n": 1}) is True
    assert mixed.visible({"owner": "Bob", "org": "y", "n": 2}) is False
    assert mixed.where_row is not None and mixed.where_row(("bob", "y", 1)) is True
    assert mixed.where_row(("ann", "y", 2)) is True
    assert mixed.where_row(("bob", "y", 2)) is False


def test_refusals_count_every_operation_and_replicate_from_zero():
    refusals = Refusals()
    assert refusals.counts == {
        "list": 0,
        "get": 0,
        "create": 0,
        "update": 0,
        "delete": 0,
        "subscribe": 0,
        "replicate": 0,
    }
    refusals.count("get")
    refusals.count("get")
    refusals.count("replicate")
    assert refusals.counts["get"] == 2
    assert refusals.counts["replicate"] == 1
    assert refusals.counts["delete"] == 0


def test_operation_words_and_shorthands():
    assert run.OPERATIONS == ("list", "get", "create", "update", "delete", "subscribe")
    assert run.SHORTHANDS == {
        "read": ("list", "get", "subscribe"),
        "write": ("create", "update", "delete"),
        "all": ("list", "get", "create", "update", "delete", "subscribe"),
    }
