"""Records are held as stored records (the record's compact JSON object, its fields in
declaration order, rows.py) and handed out as dicts: the generated conversions agree with the dict
form, packing and unpacking give the values back exactly, and a record version read twice
is the same dict, which the application's encoded-JSON cache relies on (app.py
EncodedRecords)."""

from __future__ import annotations

import pytest

from dbsvc.runtime import Query, compact_json
from dbsvc.storage import shown as shown_module
from dbsvc.storage.rows import pack, unpack
from dbsvc.storage.table import Table
from support.storage import BLOG, post, run, user

USER, POST = BLOG.BY_NAME["User"], BLOG.BY_NAME["BlogPost"]


@pytest.mark.parametrize(
    "model, record",
    [(USER, user(3, age=40, profile={"a": [1, 2]})), (POST, post(9, author=2, score=2.5, published=True, tags=["x"]))],
)
def test_row_is_the_values_in_field_order_and_decode_turns_it_back(model, record):
    stored = model.row(record)
    assert type(stored) is tuple and stored == tuple(record[f] for f in model.fields)
    assert model.decode(stored) == record and list(model.decode(stored)) == list(model.fields)


@pytest.mark.parametrize(
    "values",
    [
        (1, "plain", None, True, False, 0, -0.0, 2.5, 1e300, 2**63 - 1, -(2**63)),
        (7, "ünïcödé ✓ 🙂", "tab\tnewline\nquote\"backslash\\", "\x00\x1f", "]", "[", ",\t"),
        (3, {"nested": [1, {"deep": [None, "x"]}], "": {}}, [], [[]], "2026-01-01T00:00:00Z"),
        (4, "\ud800 lone surrogate (only a hand-made file holds one)"),
    ],
)
def test_a_stored_record_is_its_record_as_compact_json_and_unpacks_to_its_values(values):
    fields = tuple(f"f{i}" for i in range(len(values)))
    stored = pack(fields, values)
    assert type(stored) is bytes
    record = dict(zip(fields, values))
    assert stored == compact_json(record).encode("utf-8", "surrogatepass")  # the snapshot's row text
    assert b"\t" not in stored  # a TAB in a value is escaped: ",TAB" ends rows only
    back = unpack(stored)
    assert back == list(values) and type(back) is list
    assert [type(v) for v in back] == [type(v) for v in values]  # -0.0 stays a float, 0 an int
    assert unpack(stored) is not back  # a new list each time


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"author_id": frozenset([2])},
        {"author_id": frozenset([3])},
        {"published": frozenset([True]), "score": frozenset([2.5, 7.0])},
        {"published": frozenset([False])},
    ],
)
def test_passes_on_a_row_is_match_on_its_record(filters):
    record = post(9, author=2, score=2.5, published=True)
    assert POST.passes(POST.row(record), filters) is POST.match(record, filters)


def test_a_record_read_twice_is_the_same_dict_until_it_changes(tenant, stores):
    s = stores(tenant)
    written = run(s.insert("User", user(1)))
    assert s.get("User", 1)[0] is written  # the write's own dict
    listed = s.list_records("User", Query())[0]
    assert listed[0] is written
    _previous, replaced = run(s.replace("User", 1, user(1, name="other")))
    assert s.get("User", 1)[0] is replaced and replaced["name"] == "other"
    s.close()
    s = stores(tenant)  # reopened: made once, then kept
    first = s.get("User", 1)[0]
    assert first == replaced and s.get("User", 1)[0] is first
    assert s.list_records("User", Query(sort=(("name", False),)))[0][0] is first


def test_past_versions_are_dicts_of_their_own(tenant, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    run(s.replace("User", 1, user(1, name="second")))
    past, watermark = s.get("User", 1, as_of=1)
    assert past == user(1) and watermark == 1
    assert s.list_records("User", Query(as_of=1))[0] == [user(1)]
    assert s.get("User", 1)[0]["name"] == "second"


def test_shown_dicts_are_bounded(monkeypatch):
    monkeypatch.setattr(shown_module, "SHOWN", 3)
    table = Table(USER)
    rows = [table.insert(USER.row(user(i))) for i in range(1, 6)]
    dicts = [table.shown(i, stored) for i, stored in enumerate(rows, 1)]
    assert len(table.shown_ids) == 3 and table.shown(3, rows[2]) is dicts[2]  # kept while there was room
    again = table.shown(5, rows[-1])  # full: 5 was read once, not kept; kept from its second read
    assert again is not dicts[-1] and table.shown(5, rows[-1]) is again and 1 not in table.shown_ids
    assert table.shown(1, rows[0]) is not dicts[0] and table.shown(1, rows[0]) == dicts[0]
    table.delete(1, rows[0])
    assert 1 not in table.shown_ids and 1 not in table.records


def test_a_large_record_is_never_remembered_as_a_dict(monkeypatch):
    """Its dict would hold its values a second time beside the stored bytes."""
    monkeypatch.setattr(shown_module, "SHOWN_BYTES", 200)
    table = Table(USER)
    small = table.insert(USER.row(user(1)))
    big = table.insert(USER.row(user(2, profile={"text": "x" * 300})))
    assert table.shown(1, small) is table.shown(1, small)
    first = table.shown(2, big)
    assert first == user(2, profile={"text": "x" * 300}) and table.shown(2, big) is not first
    assert table.shown_ids == {1}
    grown = table.replace(small, USER.row(user(1, profile={"text": "y" * 300})))
    table.prime(1, grown, user(1, profile={"text": "y" * 300}))  # a write that grew it
    assert table.shown_ids == set()


def test_records_view_reads_dicts_and_sees_later_writes():
    table = Table(USER)
    view = table.records
    table.insert(USER.row(user(1)))
    assert dict(view) == {1: user(1)} and len(view) == 1 and 1 in view and 2 not in view
    table.insert(USER.row(user(2)))
    assert sorted(view) == [1, 2] and view[2] == user(2)
