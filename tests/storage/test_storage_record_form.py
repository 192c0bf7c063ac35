"""Records are held as stored rows (tuples in field order) and handed out as dicts: the
generated conversions agree with the dict form, and a record version read twice is the
same dict, which the application's encoded-JSON cache relies on (app.py EncodedRecords)."""

from __future__ import annotations

import pytest
from support.storage import BLOG, open_store, post, run, user

from dbsvc.runtime import Query
from dbsvc.storage import table as table_module
from dbsvc.storage.table import Table

USER, POST = BLOG.BY_NAME["User"], BLOG.BY_NAME["BlogPost"]


@pytest.mark.parametrize("model, record", [
    (USER, user(3, age=40, profile={"a": [1, 2]})),
    (POST, post(9, author=2, score=2.5, published=True, tags=["x"])),
])
def test_row_is_the_values_in_field_order_and_decode_turns_it_back(model, record):
    stored = model.row(record)
    assert type(stored) is tuple and stored == tuple(record[f] for f in model.fields)
    assert model.decode(stored) == record and list(model.decode(stored)) == list(model.fields)


@pytest.mark.parametrize("filters", [
    {}, {"author_id": frozenset([2])}, {"author_id": frozenset([3])},
    {"published": frozenset([True]), "score": frozenset([2.5, 7.0])},
    {"published": frozenset([False])},
])
def test_passes_on_a_row_is_match_on_its_record(filters):
    record = post(9, author=2, score=2.5, published=True)
    assert POST.passes(POST.row(record), filters) is POST.match(record, filters)


def test_a_record_read_twice_is_the_same_dict_until_it_changes(tenant):
    s = open_store(tenant)
    written = run(s.insert("User", user(1)))
    assert s.get("User", 1)[0] is written                  # the write's own dict
    listed = s.list("User", Query())[0]
    assert listed[0] is written
    _previous, replaced = run(s.replace("User", 1, user(1, name="other")))
    assert s.get("User", 1)[0] is replaced and replaced["name"] == "other"
    s.close()
    s = open_store(tenant)                                  # reopened: made once, then kept
    first = s.get("User", 1)[0]
    assert first == replaced and s.get("User", 1)[0] is first
    assert s.list("User", Query(sort=(("name", False),)))[0][0] is first
    s.close()


def test_past_versions_are_dicts_of_their_own(tenant):
    s = open_store(tenant)
    run(s.insert("User", user(1)))
    run(s.replace("User", 1, user(1, name="second")))
    past, watermark = s.get("User", 1, as_of=1)
    assert past == user(1) and watermark == 1
    assert s.list("User", Query(as_of=1))[0] == [user(1)]
    assert s.get("User", 1)[0]["name"] == "second"
    s.close()


def test_shown_dicts_are_bounded(monkeypatch):
    monkeypatch.setattr(table_module, "SHOWN", 3)
    table = Table(USER)
    rows = [USER.row(user(i)) for i in range(1, 6)]
    for stored in rows:
        table.insert(stored)
    dicts = [table.shown(stored) for stored in rows]
    assert len(table._shown) == 3
    assert table.shown(rows[-1]) is dicts[-1]               # still remembered
    assert table.shown(rows[0]) is not dicts[0] and table.shown(rows[0]) == dicts[0]
    table.delete(rows[0])
    assert 1 not in table._shown and 1 not in table.records


def test_records_view_reads_dicts_and_sees_later_writes():
    table = Table(USER)
    view = table.records
    table.insert(USER.row(user(1)))
    assert dict(view) == {1: user(1)} and len(view) == 1 and 1 in view and 2 not in view
    table.insert(USER.row(user(2)))
    assert sorted(view) == [1, 2] and view[2] == user(2)
