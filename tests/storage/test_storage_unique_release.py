"""Every @unique field of the shipped schemas, after each kind of write: a value a record
gives up is free at once, the value it takes is taken, and both stay so across a restart
(the log replayed) and a compaction (the snapshot loaded).

Writes: PUT (a replace), PATCH (the app's read-merge-replace: the generated `validate_patch`
over the current record, then a replace), DELETE, and writes that fail: refused by a unique
clash, or lost to an injected fsync error (rolled back in memory; absent after a restart).

Probes go through the Store's own write path: "free" is an insert of a new record holding
the value (then deleted again), "taken" is an insert and a replace of a bystander that are
both refused, naming the holder. A store made read-only by an I/O error cannot take probe
writes, so there `check_batch` (which judges rows against the live indexes, writing nothing)
is the probe.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import BatchRejected, Unavailable, UniqueViolation
from dbsvc.schema import load_schema
from dbsvc.storage import Store
from dbsvc.storage.tenants import compact_tenant, create_tenant
from support.storage import BLOG, ROOT, run

WRITE_TIMEOUT = 60.0  # a write whose commit task died would otherwise hang the test

INVENTORY = compile_schema(load_schema(str(ROOT / "schemas" / "inventory.dbs")))
_serial = itertools.count(1)


@dataclass(frozen=True)
class Case:
    """One @unique field: how to make a valid create body holding a given value of it."""

    schema: Any
    model: str
    field: str
    body: Callable[[Any], dict]
    parents: tuple[tuple[str, dict], ...] = field(default=())

    @property
    def compiled(self):
        return self.schema.BY_NAME[self.model]

    def value(self, label: str) -> str:
        return f"{label}-{next(_serial)}@example.com" if self.field == "email" else f"{label}-{next(_serial)}"

    def create(self, value: Any) -> dict:
        return self.compiled.validate_create(self.body(value))


CASES = [
    Case(BLOG, "User", "email", lambda v: {"email": v, "name": "Ann"}),
    Case(
        INVENTORY,
        "Item",
        "sku",
        lambda v: {"id": str(uuid.uuid4()), "sku": v, "warehouse": "w1", "unit_price": 1.5},
        parents=(("Warehouse", {"code": "w1", "city": "Oslo", "opened": "2026-01-01"}),),
    ),
]


def test_the_cases_cover_every_unique_field_of_every_shipped_schema():
    shipped = [compile_schema(load_schema(str(path))) for path in sorted((ROOT / "schemas").glob("*.dbs"))]
    declared = {(m.name, f) for schema in shipped for m in schema.MODELS for f in m.unique_fields}
    assert declared == {(c.model, c.field) for c in CASES}


class Tenant:
    """A tenant directory and its open store, closed and reopened (or compacted) on demand."""

    def __init__(self, data: str, case: Case) -> None:
        self.data, self.case = data, case
        self.path = create_tenant(data, "t")
        self.store = self.open()
        for model, body in case.parents:
            self.wait(self.store.insert(model, case.schema.BY_NAME[model].validate_create(body)))

    def open(self) -> Store:
        return Store.open(self.path, self.case.schema.MODELS, self.case.schema.DESCRIPTION)

    @staticmethod
    def wait(write):
        return run(asyncio.wait_for(write, WRITE_TIMEOUT))

    def insert(self, value: Any) -> dict:
        return self.wait(self.store.insert(self.case.model, self.case.create(value)))

    def put(self, record: dict, value: Any) -> dict:
        key = record[self.case.compiled.id_field]
        _previous, stored = self.wait(self.store.replace(self.case.model, key, {**record, self.case.field: value}))
        return stored

    def patch(self, record: dict, value: Any) -> dict:
        model = self.case.compiled
        key = record[model.id_field]
        current, _watermark = self.store.get(self.case.model, key)
        merged = model.validate_patch({self.case.field: value}, current)
        _previous, stored = self.wait(self.store.replace(self.case.model, key, merged))
        return stored

    def delete(self, record: dict) -> None:
        self.wait(self.store.delete(self.case.model, record[self.case.compiled.id_field]))

    def settle(self, when: str) -> None:
        """`live`: as is; `restart`: close and reopen (replay); `compaction`: close,
        compact offline, reopen (snapshot)."""
        if when == "live":
            return
        epoch = self.store.epoch
        self.drop()
        if when == "compaction":
            compact_tenant(self.data, "t")
        self.store = self.open()
        assert (self.store.epoch != epoch) == (when == "compaction")

    # -- probes --------------------------------------------------------------------------

    def assert_free(self, value: Any) -> None:
        probe = self.insert(value)
        assert probe[self.case.field] == value
        self.delete(probe)

    def assert_taken(self, value: Any, holder: dict, bystander: dict) -> None:
        model = self.case.compiled
        owner = holder[model.id_field]
        expected = f"{self.case.field} {value!r} is already used by {model.kebab} {owner!r}"
        with pytest.raises(UniqueViolation) as refused:
            self.insert(value)
        assert str(refused.value.detail) == expected
        with pytest.raises(UniqueViolation) as refused:
            self.put(bystander, value)
        assert str(refused.value.detail) == expected
        assert self.store.get(self.case.model, owner)[0][self.case.field] == value

    def judged_free(self, value: Any) -> bool:
        """Whether a new record holding `value` would pass the unique check (writes nothing)."""
        try:
            self.store.check_batch([(self.case.model, self.case.create(value))])
        except BatchRejected:
            return False
        return True

    def drop(self) -> None:
        """Close the store and let go of it before the next open or compaction: each freezes
        what is alive (recovery.py gc.freeze), and a store frozen there outlives its test."""
        self.store.close()
        del self.store

    def close(self) -> None:
        if hasattr(self, "store"):  # none when an open after `drop` failed
            self.store.close()


@pytest.fixture(params=CASES, ids=lambda c: f"{c.model}.{c.field}")
def case(request) -> Case:
    return request.param


@pytest.fixture
def tenant(tmp_path, case):
    """This module's `tenant` is a `Tenant` of the case's schema (conftest's is a bare path)."""
    opened = Tenant(str(tmp_path / "data"), case)
    yield opened
    opened.close()


WHEN = pytest.mark.parametrize("when", ["live", "restart", "compaction"])


@WHEN
@pytest.mark.parametrize("how", ["put", "patch"])
def test_a_changed_value_is_free_and_the_new_one_taken(tenant, when, how):
    old, new = tenant.case.value("old"), tenant.case.value("new")
    holder = tenant.insert(old)
    bystander = tenant.insert(tenant.case.value("by"))
    holder = getattr(tenant, how)(holder, new)
    tenant.settle(when)
    tenant.assert_free(old)
    tenant.assert_taken(new, holder, bystander)


@WHEN
@pytest.mark.parametrize("how", ["put", "patch"])
def test_a_write_keeping_its_value_still_holds_it(tenant, when, how):
    value = tenant.case.value("kept")
    holder = tenant.insert(value)
    bystander = tenant.insert(tenant.case.value("by"))
    holder = getattr(tenant, how)(holder, value)  # no self-clash with its own value
    tenant.settle(when)
    tenant.assert_taken(value, holder, bystander)
    holder = tenant.put(holder, value)
    tenant.assert_taken(value, holder, bystander)


@WHEN
def test_a_deleted_records_value_is_free(tenant, when):
    value = tenant.case.value("gone")
    holder = tenant.insert(value)
    tenant.delete(holder)
    tenant.settle(when)
    tenant.assert_free(value)


@WHEN
def test_a_value_passed_from_one_record_to_another_belongs_to_the_second(tenant, when):
    first_value, second_value = tenant.case.value("a"), tenant.case.value("b")
    first = tenant.insert(first_value)
    second = tenant.insert(second_value)
    first = tenant.put(first, tenant.case.value("moved"))
    second = tenant.patch(second, first_value)  # the value `first` gave up
    tenant.settle(when)
    tenant.assert_taken(first_value, second, first)
    tenant.assert_free(second_value)
    tenant.delete(second)
    tenant.assert_free(first_value)


@WHEN
def test_a_write_refused_by_a_clash_changes_nothing(tenant, when):
    mine, theirs = tenant.case.value("mine"), tenant.case.value("theirs")
    holder = tenant.insert(mine)
    other = tenant.insert(theirs)
    for write in (tenant.put, tenant.patch):
        with pytest.raises(UniqueViolation):
            write(holder, theirs)
    with pytest.raises(UniqueViolation):
        tenant.insert(theirs)
    tenant.settle(when)
    tenant.assert_taken(mine, holder, other)
    tenant.assert_taken(theirs, other, holder)


@pytest.mark.parametrize("how", ["insert", "put", "patch", "delete"])
def test_a_write_lost_to_an_fsync_error_leaves_every_value_as_it_was(tenant, monkeypatch, how):
    held, wanted = tenant.case.value("held"), tenant.case.value("wanted")
    holder = tenant.insert(held)
    bystander = tenant.insert(tenant.case.value("by"))
    # The next fsync of a reopened store fails: the write under test is its first.
    tenant.drop()
    monkeypatch.setenv("DBSVC_FAULT", "fsync:1:EIO")
    tenant.store = tenant.open()
    monkeypatch.delenv("DBSVC_FAULT")
    with pytest.raises(Unavailable):
        if how == "insert":
            tenant.insert(wanted)
        elif how == "delete":
            tenant.delete(holder)
        else:
            getattr(tenant, how)(holder, wanted)
    # Rolled back in memory: the indexes are as before the write (the store is read-only now).
    assert not tenant.judged_free(held)
    assert tenant.judged_free(wanted)
    tenant.settle("restart")
    tenant.assert_taken(held, holder, bystander)
    tenant.assert_free(wanted)
    tenant.settle("compaction")
    tenant.assert_taken(held, holder, bystander)
    tenant.assert_free(wanted)
