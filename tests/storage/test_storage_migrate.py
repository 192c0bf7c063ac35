"""Schema evolution on open: compatible changes migrate, incompatible ones refuse."""

from __future__ import annotations

import json
import os

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import IncompatibleSchema
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from support.storage import ROOT, open_store, post, run, user
from support.tree import dir_image

BLOG_TEXT = (ROOT / "schemas" / "blog.dbs").read_text()


def _module(text: str):
    return compile_schema(parse_schema(text, "evolved.dbs"))


def _evolve(old: str, new: str):
    assert old in BLOG_TEXT
    return _module(BLOG_TEXT.replace(old, new, 1))


@pytest.fixture
def populated(tenant):
    s = open_store(tenant)

    async def go():
        for i in range(1, 4):
            await s.insert("User", user(i))
        await s.insert("BlogPost", post(1))
        await s.delete("User", 3)

    run(go())
    s.close()
    return tenant


def test_first_open_stores_the_description(tenant, blog):
    open_store(tenant).close()
    with open(os.path.join(tenant, "schema.json")) as f:
        assert json.load(f) == blog.DESCRIPTION


def test_added_fields_are_filled_and_persisted(populated, stores):
    mod = _evolve(
        "  profile  json?\n",
        "  profile  json?\n  nickname str?   @filter\n  rank     int     @sort @default(5)\n"
        "  since    datetime @default(now)\n",
    )
    s = stores(populated, module=mod)
    u1 = s.get("User", 1)[0]
    assert list(u1) == list(mod.MODELS[0].fields)
    assert u1["nickname"] is None and u1["rank"] == 5 and u1["since"].endswith("Z")
    assert s.compacted_on_open and sorted(s.tables["User"].records) == [1, 2]
    assert s.get("User", 3)[0] is None
    from dbsvc.runtime import Query

    assert [r["id"] for r in s.list_records("User", Query(filters={"nickname": frozenset({None})}))[0]] == [1, 2]
    run(s.insert("User", user(7, nickname="x", rank=1, since="2026-02-02T00:00:00Z")))
    s.close()
    s = stores(populated, module=mod)
    assert s.get("User", 1)[0] == u1  # `now` was filled once, not per open
    assert not s.compacted_on_open
    assert s.get("User", 7)[0]["nickname"] == "x"
    s.close()
    with open(os.path.join(populated, "schema.json")) as f:
        assert json.load(f) == mod.DESCRIPTION


def test_flag_changes_and_added_model_migrate_without_compaction(populated, stores):
    mod = _module(
        BLOG_TEXT.replace("  body      str\n", "  body      str      @filter\n", 1)
        + "\nmodel Tag {\n  id int @id\n  label str @unique\n}\n"
    )
    s = stores(populated, module=mod)
    assert not s.compacted_on_open and s.live_counts()["Tag"] == 0
    assert run(s.insert("Tag", {"id": None, "label": "x"}))["id"] == 1


@pytest.mark.parametrize(
    "old,new,reason",
    [
        ("  profile  json?\n", "", "field 'profile' of model 'User' was removed"),
        ("  age      int?      @sort", "  age      str?      @sort", "type changed from 'int' to 'str'"),
        ("  profile  json?\n", "  profile  json?\n  code     str\n", "as required"),
    ],
)
def test_incompatible_change_refuses_listing_reasons_and_touches_nothing(populated, old, new, reason):
    mod = _evolve(old, new)
    before = dir_image(populated)
    with pytest.raises(IncompatibleSchema) as info:
        Store.open(populated, mod.MODELS, mod.DESCRIPTION)
    assert any(reason in r for r in info.value.reasons)
    with pytest.raises(IncompatibleSchema):
        Store.open(populated, mod.MODELS, mod.DESCRIPTION, readonly=True)
    assert dir_image(populated) == {k: v for k, v in before.items()}
    open_store(populated).close()  # the old schema still opens


def test_every_reason_is_listed(populated):
    mod = _module(BLOG_TEXT.replace("  profile  json?\n", "", 1).replace("  age      int?", "  age      str?", 1))
    with pytest.raises(IncompatibleSchema) as info:
        Store.open(populated, mod.MODELS, mod.DESCRIPTION)
    assert len(info.value.reasons) == 2
