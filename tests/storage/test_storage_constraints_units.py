"""constraints.py's decisions at the unit, on in-memory tables (`Table(model)`, no store, no
files): each refusal word for word with its typed error and field, the automatic id at and
past the signed 64-bit top, a @ref left unchanged by a replace not checked again, a record's
@ref to itself not counted as a child of its delete, and the children's count and models.

Every expected text is written out here from the module's docstring and docs/guide, never
taken from the module, so a change to a message or a rule fails a test. Fixture-free, so
bench/mutation_inprocess.py runs it (docs/mutation.md)."""

from __future__ import annotations

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import ConstraintViolation, ForeignKeyViolation, NotFound, Referenced, UniqueViolation
from dbsvc.schema import parse_schema
from dbsvc.storage.constraints import Constraints
from dbsvc.storage.table import Table

SCHEMA = """
model Node {
  id      int   @id
  parent  int?  @ref(Node) @filter
  name    str   @unique @filter
}

model Leaf {
  id    int  @id
  node  int? @ref(Node) @filter
  other int? @ref(Node) @filter
}

model Tag {
  code str @id
  node int? @ref(Node) @filter
}
"""
TOP = 9223372036854775807  # the largest signed 64-bit id


def tables() -> tuple[Constraints, dict[str, Table]]:
    compiled = compile_schema(parse_schema(SCHEMA))
    ts = {m.name: Table(m) for m in compiled.MODELS}
    return Constraints(ts), ts


def put(checks: Constraints, table: Table, record: dict) -> dict:
    record, _id, apply = checks.insert(table, record)
    apply()
    return record


def self_ref(checks: Constraints, n: Table, i: int) -> None:
    """Node `i` whose parent is itself: an insert refers to a record not there yet, so a
    replace sets it."""
    put(checks, n, node(i))
    checks.replace(n, i, node(i, parent=i))[2]()


def node(i, parent=None, name=None) -> dict:
    return {"id": i, "parent": parent, "name": name if name is not None else f"n{i}"}


def leaf(i, node_=None, other=None) -> dict:
    return {"id": i, "node": node_, "other": other}


# -- insert ----------------------------------------------------------------------------------


def test_an_insert_without_an_int_id_takes_the_next_after_the_largest_ever_used():
    checks, ts = tables()
    n = ts["Node"]
    assert put(checks, n, node(None))["id"] == 1
    assert put(checks, n, node(7))["id"] == 7
    given = node(None, name="x")
    record = put(checks, n, given)
    assert record["id"] == 8 and given["id"] is None  # the caller's dict is left alone
    assert n.max_id == 8 and set(n.live) == {1, 7, 8}


def test_an_insert_without_a_string_id_is_refused_naming_the_id_field():
    checks, ts = tables()
    with pytest.raises(ConstraintViolation) as e:
        checks.insert(ts["Tag"], {"code": None, "node": None})
    assert e.value.errors == [{"field": "code", "message": "is required"}]
    assert not ts["Tag"].live


def test_the_automatic_id_at_the_top_is_refused_and_an_explicit_one_below_still_goes_in():
    checks, ts = tables()
    n = ts["Node"]
    put(checks, n, node(TOP - 1))
    assert put(checks, n, node(None, name="last"))["id"] == TOP  # one below the top: the top is given
    with pytest.raises(ConstraintViolation) as e:
        checks.insert(n, node(None, name="past"))
    assert e.value.errors == [
        {
            "field": "id",
            "message": f"no automatic id is left: the largest id ever used is {TOP}; give an unused id explicitly",
        }
    ]
    assert put(checks, n, node(5))["id"] == 5


def test_a_used_id_is_refused_naming_the_field_the_value_and_the_holder():
    checks, ts = tables()
    put(checks, ts["Node"], node(3))
    with pytest.raises(UniqueViolation) as e:
        checks.insert(ts["Node"], node(3, name="other"))
    assert str(e.value) == "id 3 is already used by node 3"
    assert e.value.extra["field"] == "id"
    put(checks, ts["Tag"], {"code": "a", "node": None})
    with pytest.raises(UniqueViolation) as e:
        checks.insert(ts["Tag"], {"code": "a", "node": None})
    assert str(e.value) == "code 'a' is already used by tag 'a'"


def test_a_taken_unique_value_is_refused_naming_the_holder():
    checks, ts = tables()
    put(checks, ts["Node"], node(1, name="same"))
    with pytest.raises(UniqueViolation) as e:
        checks.insert(ts["Node"], node(2, name="same"))
    assert str(e.value) == "name 'same' is already used by node 1"
    assert e.value.extra["field"] == "name"
    assert set(ts["Node"].live) == {1}


def test_a_ref_to_no_parent_is_refused_and_null_or_a_live_parent_is_not():
    checks, ts = tables()
    put(checks, ts["Node"], node(1))
    with pytest.raises(ForeignKeyViolation) as e:
        checks.insert(ts["Leaf"], leaf(1, node_=1, other=9))
    assert str(e.value) == "other 9 does not match any node"
    assert e.value.extra["field"] == "other"
    with pytest.raises(ForeignKeyViolation) as e:
        checks.insert(ts["Tag"], {"code": "t", "node": 2})
    assert str(e.value) == "node 2 does not match any node"
    put(checks, ts["Leaf"], leaf(1, node_=1, other=None))
    put(checks, ts["Leaf"], leaf(2))
    assert set(ts["Leaf"].live) == {1, 2}


def test_an_insert_may_reference_itself_by_its_given_or_its_automatic_id():
    """A record's @ref to its own id names a record that exists once the write is in (as in
    PostgreSQL); another model's table holding that id is no parent of it."""
    checks, ts = tables()
    n = ts["Node"]
    assert put(checks, n, node(1, parent=1)) == node(1, parent=1)
    record = put(checks, n, {"parent": 2, "name": "auto"})  # the automatic id is 2
    assert record == {"id": 2, "parent": 2, "name": "auto"}
    with pytest.raises(ForeignKeyViolation) as e:
        checks.insert(n, node(3, parent=4))  # another missing node, not itself
    assert str(e.value) == "parent 4 does not match any node"
    with pytest.raises(ForeignKeyViolation) as e:
        checks.insert(n, {"parent": 9, "name": "auto2"})  # the automatic id would be 3
    assert str(e.value) == "parent 9 does not match any node"
    with pytest.raises(ForeignKeyViolation) as e:
        checks.insert(ts["Leaf"], leaf(5, node_=5))  # a Leaf's own id is no node
    assert str(e.value) == "node 5 does not match any node"
    assert set(n.live) == {1, 2} and not ts["Leaf"].live


def test_check_insert_returns_the_record_its_id_and_its_values_and_changes_nothing():
    checks, ts = tables()
    n = ts["Node"]
    record, id_, values = checks.check_insert(n, node(None, name="a"))
    assert (record["id"], id_) == (1, 1)
    assert values == n.model.row(record)
    assert not n.live and n.max_id == 0


# -- replace ---------------------------------------------------------------------------------


def test_a_replace_of_a_missing_record_is_not_found():
    checks, ts = tables()
    with pytest.raises(NotFound) as e:
        checks.replace(ts["Node"], 4, node(4))
    assert str(e.value) == "Node 4 does not exist"
    with pytest.raises(NotFound) as e:
        checks.check_replace(ts["Tag"], "x", {"code": "x", "node": None})
    assert str(e.value) == "Tag 'x' does not exist"


def test_a_replace_takes_the_paths_id_and_returns_the_previous_record():
    checks, ts = tables()
    n = ts["Node"]
    put(checks, n, node(1, name="old"))
    given = node(99, name="new")
    previous, record, apply = checks.replace(n, 1, given)
    assert previous == node(1, name="old")
    assert record == node(1, name="new") and given["id"] == 99
    assert n.shown(1, n.live[1]) == node(1, name="old")  # nothing changed before apply
    apply()
    assert n.shown(1, n.live[1]) == node(1, name="new") and set(n.live) == {1}
    current, previous, record, values = checks.check_replace(n, 1, node(1, name="newer"))
    assert current is n.live[1] and previous == node(1, name="new")
    assert record == node(1, name="newer") and values == n.model.row(record)


def test_a_replace_keeps_its_own_unique_value_and_refuses_anothers():
    checks, ts = tables()
    n = ts["Node"]
    put(checks, n, node(1, name="a"))
    put(checks, n, node(2, name="b"))
    checks.replace(n, 1, node(1, name="a"))[2]()
    with pytest.raises(UniqueViolation) as e:
        checks.replace(n, 1, node(1, name="b"))
    assert str(e.value) == "name 'b' is already used by node 2"


def test_a_replace_checks_a_changed_ref_and_leaves_an_unchanged_one():
    checks, ts = tables()
    put(checks, ts["Node"], node(1))
    put(checks, ts["Leaf"], leaf(1, node_=1))
    # the parent is gone from the live map (as a replica could leave it): unchanged, not checked
    del ts["Node"].live[1]
    checks.check_replace(ts["Leaf"], 1, leaf(1, node_=1))
    with pytest.raises(ForeignKeyViolation) as e:
        checks.check_replace(ts["Leaf"], 1, leaf(1, node_=1, other=1))
    assert str(e.value) == "other 1 does not match any node"
    checks.check_replace(ts["Leaf"], 1, leaf(1, node_=None))


# -- delete ----------------------------------------------------------------------------------


def test_a_delete_of_a_missing_record_is_not_found():
    checks, ts = tables()
    with pytest.raises(NotFound) as e:
        checks.delete(ts["Leaf"], 2)
    assert str(e.value) == "Leaf 2 does not exist"


def test_a_delete_of_a_referenced_record_counts_every_child_and_names_their_models():
    checks, ts = tables()
    put(checks, ts["Node"], node(1))
    put(checks, ts["Node"], node(2, parent=1))
    checks.delete(ts["Node"], 2)  # no child: allowed (not applied)
    put(checks, ts["Leaf"], leaf(1, node_=1, other=1))
    put(checks, ts["Tag"], {"code": "t", "node": 1})
    with pytest.raises(Referenced) as e:
        checks.delete(ts["Node"], 1)
    assert str(e.value) == "node 1 is referenced by 4 record(s) of Leaf, Node, Tag"
    assert e.value.extra["count"] == 4
    checks.delete(ts["Leaf"], 1)[1]()
    with pytest.raises(Referenced) as e:
        checks.delete(ts["Node"], 1)
    assert str(e.value) == "node 1 is referenced by 2 record(s) of Node, Tag"
    assert e.value.extra["count"] == 2


def test_a_records_ref_to_itself_is_no_child_of_its_delete():
    checks, ts = tables()
    n = ts["Node"]
    self_ref(checks, n, 1)
    previous, apply = checks.delete(n, 1)
    assert previous == node(1, parent=1) and 1 in n.live
    apply()
    assert not n.live
    self_ref(checks, n, 2)
    put(checks, n, node(3, parent=2))
    with pytest.raises(Referenced) as e:
        checks.delete(n, 2)
    assert str(e.value) == "node 2 is referenced by 1 record(s) of Node"
    assert e.value.extra["count"] == 1
    # another record's self-reference does not lower the count of a delete of its parent
    self_ref(checks, n, 4)
    checks.replace(n, 4, node(4, parent=3))[2]()
    with pytest.raises(Referenced) as e:
        checks.delete(n, 3)
    assert str(e.value) == "node 3 is referenced by 1 record(s) of Node"


# -- the dicts handed out (shown.py): a write's record is the one a read hands back --------


def test_an_inserted_or_replaced_record_is_the_dict_reads_and_later_checks_hand_out():
    checks, ts = tables()
    n = ts["Node"]
    inserted = put(checks, n, node(1, name="a"))
    assert n.shown(1, n.live[1]) is inserted  # kept under its id by insert's apply
    assert checks.check_replace(n, 1, node(1, name="b"))[1] is inserted
    assert checks.delete(n, 1)[0] is inserted
    _previous, replaced, apply = checks.replace(n, 1, node(1, name="b"))
    apply()
    assert n.shown(1, n.live[1]) is replaced
    assert checks.delete(n, 1)[0] is replaced


def test_a_replace_given_its_own_id_keeps_the_callers_dict_and_copies_only_to_set_the_id():
    checks, ts = tables()
    n = ts["Node"]
    put(checks, n, node(1))
    given = node(1, name="b")
    assert checks.check_replace(n, 1, given)[2] is given
    other = node(2, name="c")
    record = checks.check_replace(n, 1, other)[2]
    assert record is not other and record == node(1, name="c") and other["id"] == 2


def test_a_replace_is_undone_to_the_record_it_replaced():
    checks, ts = tables()
    n = ts["Node"]
    put(checks, n, node(1, name="a"))
    before = n.live[1]
    checks.replace(n, 1, node(1, name="b"))[2]()
    assert n.shown(1, n.live[1])["name"] == "b"
    n.undo_last(n.max_id)  # a group write's rollback (commit.py)
    assert n.live[1] is before and n.shown(1, n.live[1]) == node(1, name="a")
    assert n.unique_clash(n.model.row(node(2, name="a"))) == ("name", 1)
    assert n.unique_clash(n.model.row(node(2, name="b"))) is None
