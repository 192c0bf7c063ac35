"""A @ref whose parent record is deleted, or would be: every decision of storage/constraints.py.

dbsvc has no cascade (docs/guide/schema.md, `@ref`): deleting a record that others still
reference is refused with `Referenced` (409 `referenced`), as PostgREST's default foreign
key (NO ACTION) and PocketBase's relation without "cascade delete" refuse it; a child may
not be pointed at a parent that is gone (`ForeignKeyViolation`); once its children are
gone or moved, the parent may go. A record's reference to itself is not a child: it goes
with the record (PostgreSQL deletes such a row too), which a tree or a list stored in one
model needs for its root or its last node.
"""

from __future__ import annotations

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import ForeignKeyViolation, NotFound, Referenced
from dbsvc.schema import load_schema
from dbsvc.storage import EventKind, Store
from dbsvc.storage.tenants import create_tenant
from support.storage import run

TREE = """\
model Node {
  id     int  @id
  name   str  @filter
  parent int? @ref(Node) @filter
}

model Tag {
  id   int @id
  node int @ref(Node) @filter
}
"""


@pytest.fixture
def tree(tmp_path):
    source = tmp_path / "tree.dbs"
    source.write_text(TREE)
    compiled = compile_schema(load_schema(str(source)))
    tenant = create_tenant(str(tmp_path / "data"), "t")
    store = Store.open(tenant, compiled.MODELS, compiled.DESCRIPTION)
    yield store
    store.close()


def node(id_: int, parent: int | None = None, name: str = "n") -> dict:
    return {"id": id_, "name": name, "parent": parent}


def test_a_referenced_parent_is_refused_naming_its_children_and_their_models(tree):
    run(tree.insert("Node", node(1)))
    run(tree.insert("Node", node(2, parent=1)))
    run(tree.insert("Tag", {"id": 1, "node": 1}))
    run(tree.insert("Tag", {"id": 2, "node": 1}))
    with pytest.raises(Referenced) as refused:
        run(tree.delete("Node", 1))
    assert refused.value.detail == "node 1 is referenced by 3 record(s) of Node, Tag"
    assert refused.value.extra == {"count": 3}
    assert tree.get("Node", 1)[0] == node(1)  # nothing lost, nothing cascaded
    assert [tree.get("Tag", i)[0] for i in (1, 2)] == [{"id": 1, "node": 1}, {"id": 2, "node": 1}]


def test_the_parent_goes_once_its_children_are_gone_or_moved(tree):
    run(tree.insert("Node", node(1)))
    run(tree.insert("Node", node(2)))
    run(tree.insert("Node", node(3, parent=1)))
    run(tree.insert("Tag", {"id": 1, "node": 1}))
    run(tree.replace("Node", 3, node(3, parent=2)))  # moved
    run(tree.delete("Tag", 1))  # gone
    assert run(tree.delete("Node", 1)) == node(1)
    with pytest.raises(Referenced, match=r"^node 2 is referenced by 1 record\(s\) of Node$"):
        run(tree.delete("Node", 2))


def test_a_child_cannot_point_at_a_parent_that_is_gone(tree):
    run(tree.insert("Node", node(1)))
    run(tree.insert("Node", node(2)))
    assert run(tree.delete("Node", 1)) == node(1)
    with pytest.raises(ForeignKeyViolation) as refused:
        run(tree.insert("Node", node(3, parent=1)))
    assert (refused.value.detail, refused.value.extra) == ("parent 1 does not match any node", {"field": "parent"})
    with pytest.raises(ForeignKeyViolation, match="^parent 1 does not match any node$"):
        run(tree.replace("Node", 2, node(2, parent=1)))
    with pytest.raises(ForeignKeyViolation, match="^node 1 does not match any node$"):
        run(tree.insert("Tag", {"id": 1, "node": 1}))
    assert tree.get("Node", 2)[0] == node(2)


def test_a_record_referencing_itself_can_be_deleted(tree):
    run(tree.insert("Node", node(1)))
    run(tree.replace("Node", 1, node(1, parent=1)))  # the root of its own tree
    assert run(tree.delete("Node", 1)) == node(1, parent=1)
    with pytest.raises(NotFound):
        run(tree.delete("Node", 1))


def test_a_record_referencing_itself_is_still_refused_while_others_reference_it(tree):
    run(tree.insert("Node", node(1)))
    run(tree.replace("Node", 1, node(1, parent=1)))
    run(tree.insert("Node", node(2, parent=1)))
    with pytest.raises(Referenced) as refused:
        run(tree.delete("Node", 1))
    assert (refused.value.detail, refused.value.extra) == ("node 1 is referenced by 1 record(s) of Node", {"count": 1})
    run(tree.delete("Node", 2))
    assert run(tree.delete("Node", 1)) == node(1, parent=1)


def test_a_cycle_of_two_is_undone_one_reference_at_a_time(tree):
    # Two records referencing each other: neither is its own reference, so each protects
    # the other until one of them lets go (no cascade, no cycle detection).
    run(tree.insert("Node", node(1)))
    run(tree.insert("Node", node(2, parent=1)))
    run(tree.replace("Node", 1, node(1, parent=2)))
    for id_ in (1, 2):
        with pytest.raises(Referenced):
            run(tree.delete("Node", id_))
    run(tree.replace("Node", 1, node(1)))
    assert run(tree.delete("Node", 2)) == node(2, parent=1)
    assert run(tree.delete("Node", 1)) == node(1)


def test_the_delete_of_a_record_referencing_itself_is_logged_and_replayed(tmp_path, stores):
    source = tmp_path / "tree.dbs"
    source.write_text(TREE)
    compiled = compile_schema(load_schema(str(source)))
    tenant = create_tenant(str(tmp_path / "data"), "t")
    store = stores(tenant, module=compiled)
    run(store.insert("Node", node(1)))
    run(store.replace("Node", 1, node(1, parent=1)))
    run(store.delete("Node", 1))
    assert [(e.kind, e.id, e.record) for e in store.events_after(0)] == [
        (EventKind.INSERT, 1, node(1)),
        (EventKind.UPDATE, 1, node(1, parent=1)),
        (EventKind.DELETE, 1, node(1, parent=1)),
    ]
    store.close()
    store = stores(tenant, module=compiled)  # the log replays
    assert store.get("Node", 1)[0] is None
    run(store.insert("Node", node(2)))
    assert run(store.delete("Node", 2)) == node(2)  # no reference to 1 is left counted
