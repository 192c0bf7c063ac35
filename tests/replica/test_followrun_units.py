"""storage/followrun.py at its decisions, in process and without a store: each check a run
of plain inserts or updates makes (offsets, watermarks, model, fields, ids, value types,
index keys) says yes to a good run and no to a run with one fault, `scan_group` takes
exactly the payloads follow.py's `_decode` would, `plain_spans` cuts a group where its
kinds, models or key counts change, and `check_fit` refuses a record with its message word
for word. tests/replica/test_replica_apply_plain_runs.py holds the same rules end to end
(a group against its frames one at a time, on real stores); these are the cheap units.

Every test makes its own table (`fresh`): the value types `check_fit` learns are the
table's (`Table.fit`), so none carry from one test to the next."""

from __future__ import annotations

import json
import sys
from typing import Any

from dbsvc.compiler import compile_schema
from dbsvc.errors import StreamError
from dbsvc.runtime import CompiledModel, datetime_key
from dbsvc.schema import parse_schema
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.followrun import (
    Run,
    check_fit,
    column_keys,
    insert_run,
    joined_parts,
    plain_spans,
    rows_and_columns,
    scan_group,
    update_run,
)
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.table import Table

SCHEMA = """model Item {
  id     int      @id
  name   str      @filter @sort @min(1)
  n      int?     @sort
  at     datetime @sort
  extra  json?
}
"""
SCAN = json.JSONDecoder().scan_once


def fresh() -> tuple[CompiledModel, Table]:
    model = compile_schema(parse_schema(SCHEMA)).BY_NAME["Item"]
    return model, Table(model)


def item(i: Any, **over: Any) -> dict:
    return {"id": i, "name": f"item {i}", "n": i, "at": "2026-01-01T00:00:00Z", "extra": None} | over


def payload(kind: str, at: int, record: Any, watermark: int | None = None, **over: Any) -> dict:
    event: dict[str, Any] = {
        "kind": kind,
        "model": "Item",
        "offset": at,
        "watermark": at if watermark is None else watermark,
    }
    event["id"] = record["id"] if isinstance(record, dict) else None
    event["record"] = record
    event.update(over)
    return event


def frame(event: dict, header: int | None = None) -> bytes:
    text = json.dumps(event, separators=(",", ":")).encode()
    return encode_frame(event.get("offset", 3) if header is None else header, text)


def taught(model: CompiledModel, table: Table, record: dict) -> None:
    """`check_fit` of one good record: its value types are known good from then on."""
    check_fit(table, 1, ChangeEvent(EventKind.INSERT, "Item", 1, 1, record["id"], record), model.row(record))


# -- scan_group ------------------------------------------------------------------------


def test_scan_group_takes_each_payload_alone_within_the_limit():
    events = [payload("insert", 1, item(1)), payload("insert", 2, item(2))]
    frames = [frame(e) for e in events]
    size = max(len(f) for f in frames) - 16  # the header is 16 bytes
    assert scan_group(frames, size, SCAN) == events
    assert scan_group(frames, size - 1, SCAN) is None
    assert scan_group([], 100, SCAN) is None


def test_scan_group_refuses_a_group_with_one_payload_that_is_not_one_json_value():
    good = frame(payload("insert", 1, item(1)))
    bad = [
        encode_frame(2, b'{"kind":"insert"'),  # cut short
        encode_frame(2, b'{"a":1} '),  # something after the value
        encode_frame(2, b'{"a":1}{"b":2}'),  # two values
        encode_frame(2, b"\xff{}"),  # not UTF-8
        encode_frame(2, b"x"),  # no value starts here (the scanner's StopIteration)
        encode_frame(2, b"[" * 100_000 + b"]" * 100_000),  # deeper than the interpreter's stack
    ]
    for one in bad:
        assert scan_group([good, one], 1 << 20, SCAN) is None, one[:40]
    assert scan_group([good, encode_frame(2, b"7")], 1 << 20, SCAN) == [json.loads(good[16:]), 7]


def alone(payloads: list[bytes]) -> list[Any] | None:
    """What follow.py `_decode` makes of each payload by itself: its value when the whole
    payload is one JSON value, else None for the group."""
    values = []
    for one in payloads:
        try:
            value, end = SCAN(one.decode(), 0)
        except (ValueError, RecursionError, StopIteration):
            return None
        if end != len(one.decode()):
            return None
        values.append(value)
    return values


# Payloads that are one value only once joined to a neighbour, and their good partners:
# an object cut in two, a number's digits, fraction or exponent cut off, a literal's
# letters, a string cut inside, an empty payload, one value and a half, whitespace.
PIECES = [
    b'{"a":1',
    b',"b":2}',
    b'{"a":"x',
    b'y"}',
    b"12",
    b"34",
    b".5",
    b"e3",
    b"E+3",
    b"-",
    b"nul",
    b"l",
    b"true",
    b"tru",
    b"e",
    b"-Infinity",
    b'"',
    b'""',
    b"",
    b" ",
    b" 1",
    b"1 ",
    b"[1,",
    b"2]",
    b"{}",
    b"[]",
    b'{"a":1}{"b":2}',
    b'"caf\\u00e9"',  # an escape: ASCII
    '"café"'.encode(),  # UTF-8: the group is read a payload at a time
    '"\u65e5'.encode(),
    b"\xff",
    b"\xc3",
    b'\xa9"',
]


def assert_scanned_as_alone(group: list[bytes]) -> None:
    frames = [encode_frame(at + 1, one) for at, one in enumerate(group)]
    got, want = scan_group(frames, 1 << 20, SCAN), alone(group)
    # None leaves every frame to the general path, which reads each payload alone (rule
    # 2): so never a value other than the payload's own, never a group it would refuse.
    assert got is None or got == want, group
    if want is not None and all(one.endswith((b"}", b"]", b'"')) for one in group):
        assert got == want, group  # a value that ends at a closing character: every event


def test_scan_group_of_ascii_payloads_scanned_in_one_text_takes_what_each_takes_alone():
    # rule 2: every pair of pieces, in both orders and at each place of a group of three.
    for a in PIECES:
        for b in PIECES:
            for group in ([a, b], [b'"7"', a, b], [a, b, b'"7"'], [a, b'"7"', b]):
                assert_scanned_as_alone(group)


def test_scan_group_of_one_text_cut_anywhere_takes_only_whole_values():
    # One valid text (values of every JSON type) cut at every pair of places into a group
    # of three payloads: each taken only as the value it is alone.
    whole = b'{"k":[1,-2.5e3,"s\\"]"],"t":true}' + b'nulltrue123"x"[{}]'
    for first in range(len(whole) + 1):
        for second in range(first, len(whole) + 1):
            assert_scanned_as_alone([whole[:first], whole[first:second], whole[second:]])


# -- plain_spans -----------------------------------------------------------------------


def test_plain_spans_cut_where_the_kind_the_model_or_the_key_count_changes():
    ins = payload("insert", 1, item(1))
    upd = payload("update", 1, item(1), previous=item(1))
    other = payload("insert", 1, item(1), model="Other")
    marked = payload("insert", 1, item(1), batch={"first": 1, "last": 2})
    fields = [ins, ins, ins, upd, upd, other, other, marked, marked, ins, upd, {"kind": 7}, {"kind": 7}]
    assert plain_spans(fields) == [
        (0, 3, "insert"),
        (3, 5, "update"),
        (5, 7, "insert"),
        (7, 9, None),  # a batch mark: seven keys for an insert
        (9, 10, None),  # one frame alone is never a run
        (10, 11, None),
        (11, 13, None),  # a kind that is not a string
    ]
    deletes = payload("delete", 1, item(1))
    assert plain_spans([deletes, deletes]) == [(0, 2, None)]
    assert plain_spans([upd | {"previous": None, "x": 1}] * 2) == [(0, 2, None)]  # eight keys
    assert plain_spans([ins, [1]]) == [(0, 2, None)]
    assert plain_spans([]) == [(0, 0, None)]
    assert plain_spans([ins, ins, other, other]) == [(0, 2, "insert"), (2, 4, "insert")]  # two models
    assert plain_spans([{"kind": [1]}, {"kind": [1]}, ins]) == [(0, 2, None), (2, 3, None)]  # an unhashable kind


# -- insert_run ------------------------------------------------------------------------


def good_inserts(first: int, ids: list[int], watermark: int = 0) -> tuple[list[bytes], list[dict]]:
    fields = [payload("insert", first + n, item(i), watermark + 1 + n) for n, i in enumerate(ids)]
    return [frame(f) for f in fields], fields


def test_a_good_run_of_inserts_is_its_events_values_ids_undo_marks_and_offsets():
    model, table = fresh()
    taught(model, table, item(1))
    frames, fields = good_inserts(5, [3, 4, 9])
    run = insert_run(table, frames, fields, 5, 0, 2, set())
    assert isinstance(run, Run)
    assert run.events == [
        ChangeEvent(EventKind.INSERT, "Item", 5, 1, 3, item(3), None, None),
        ChangeEvent(EventKind.INSERT, "Item", 6, 2, 4, item(4), None, None),
        ChangeEvent(EventKind.INSERT, "Item", 7, 3, 9, item(9), None, None),
    ]
    assert list(map(list, run.values)) == [[i, f"item {i}", i, "2026-01-01T00:00:00Z", None] for i in (3, 4, 9)]
    assert (run.ids, run.tops, run.offsets) == ([3, 4, 9], [2, 3, 4], [5, 6, 7])
    assert len(table.live) == 0  # nothing changed


def test_a_runs_columns_and_keys_are_its_values_a_field_at_a_time():
    # What tableruns.py `insert_run` takes from the check instead of computing it again
    # (session 13, rep9): the columns are the values transposed, the keys a keyed field's.
    model, table = fresh()
    taught(model, table, item(1))
    frames, fields = good_inserts(5, [3, 4, 9])
    run = insert_run(table, frames, fields, 5, 0, 2, set())
    assert run is not None
    assert run.columns == list(zip(*run.values))
    keyed = [model.fields.index("n"), model.fields.index("at")]  # an int64 column, a datetime
    assert run.keys == {p: [model.keys[model.fields[p]](v[p]) for v in run.values] for p in keyed}
    assert joined_parts([run]) == (run.keys, run.columns, None)  # no texts: tableruns.py packs the values


def test_runs_in_a_row_join_their_keys_and_columns_in_order():
    model, table = fresh()
    taught(model, table, item(1))
    first = insert_run(table, *good_inserts(5, [3, 4]), 5, 0, 2, set())
    second = insert_run(table, *good_inserts(7, [9, 12, 13], watermark=2), 7, 2, 4, {3, 4})
    both = insert_run(table, *good_inserts(5, [3, 4, 9, 12, 13]), 5, 0, 2, set())
    assert first is not None and second is not None and both is not None
    assert joined_parts([first, second]) == (both.keys, both.columns, None)
    # A row that came without a run, or runs keyed on other fields: nothing to hand over.
    assert joined_parts(None) == (None, None, None) and joined_parts([]) == (None, None, None)
    assert joined_parts([first, second._replace(keys={})]) == (None, None, None)
    # Stored texts (followrun.py rule 6) join when every run has its own, else none do.
    texts = [b"a", b"b"], [b"c", b"d", b"e"]
    kept = [first._replace(stored=texts[0]), second._replace(stored=texts[1])]
    assert joined_parts(kept) == (both.keys, both.columns, [b"a", b"b", b"c", b"d", b"e"])
    assert joined_parts([kept[0], second]) == (both.keys, both.columns, None)


def test_a_runs_values_are_model_row_of_each_record_enum_members_shared():
    # followrun.py makes a run's values a field at a time: the same tuples `row` makes a
    # record at a time, an enum's value the model's own member string (runtime.shared).
    model = compile_schema(parse_schema(SCHEMA.replace("extra  json?", "kind enum(a, b)\n  extra json?"))).BY_NAME[
        "Item"
    ]
    table = Table(model)
    records = [{f: item(i, kind="ab"[i % 2])[f] for f in model.fields} for i in (3, 4, 5)]
    taught(model, table, records[0])
    fields = [payload("insert", 5 + n, r, 1 + n) for n, r in enumerate(records)]
    # The members come from the payload's JSON: equal strings, other objects.
    fields = json.loads(json.dumps(fields))
    run = insert_run(table, [frame(f) for f in fields], fields, 5, 0, 2, set())
    assert run is not None
    assert run.values == [model.row(r) for r in records]
    members = model.shared_values[model.fields.index("kind")]
    assert [v[4] is members[v[4]] for v in run.values] == [True] * 3


def test_a_runs_rows_are_model_row_even_for_an_unhashable_enum_value():
    # followrun.py `rows_and_columns` takes a record's values from its dict and an enum's member a
    # column at a time (session 13, rep9); a list where an enum is (a broken primary's)
    # is kept as `runtime.shared` keeps it, and such a run's types are new: refused.
    model = compile_schema(parse_schema(SCHEMA.replace("extra  json?", "kind enum(a, b)\n  extra json?"))).BY_NAME[
        "Item"
    ]
    records = [{f: item(i, kind=["a"] if i == 4 else "b")[f] for f in model.fields} for i in (3, 4, 5)]
    records = json.loads(json.dumps(records))
    values, columns = rows_and_columns(model, records)
    assert values == [model.row(r) for r in records] and columns == list(zip(*values))
    assert values[0][4] is model.shared_values[4]["b"] and values[1][4] == ["a"]
    assert rows_and_columns(model, []) == ([], [])
    # A value that is no member (a broken primary's) is kept as it is, not made None.
    other = [dict(r, kind="c") for r in records]
    assert rows_and_columns(model, other)[0] == [model.row(r) for r in other]
    table = Table(model)
    taught(model, table, records[0])
    fields = [payload("insert", 5 + n, r, 1 + n) for n, r in enumerate(records)]
    assert insert_run(table, [frame(f) for f in fields], fields, 5, 0, 2, set()) is None


def test_ids_out_of_order_are_looked_up_and_taken_when_new():
    model, table = fresh()
    taught(model, table, item(1))
    for i in (10, 20):
        table.insert(model.row(item(i)))
    frames, fields = good_inserts(1, [15, 12, 30, 5])
    run = insert_run(table, frames, fields, 1, 0, 20, {7})
    assert run is not None and run.tops == [20, 20, 20, 30]
    for ids, pending in [([15, 12, 20], set()), ([15, 12, 15], set()), ([15, 12, 7], {7})]:
        frames, fields = good_inserts(1, ids)
        assert insert_run(table, frames, fields, 1, 0, 20, pending) is None, (ids, pending)
    # ascending and above the top: no lookup, whatever the table holds below it
    frames, fields = good_inserts(1, [21, 22])
    assert insert_run(table, frames, fields, 1, 0, 20, {7}) is not None
    frames, fields = good_inserts(1, [20, 21])  # the first not above the top: looked up, 20 is live
    assert insert_run(table, frames, fields, 1, 0, 20, set()) is None
    frames, fields = good_inserts(1, [22, 21])  # above the top, not ascending: looked up, both new
    assert insert_run(table, frames, fields, 1, 0, 20, set()) is not None
    frames, fields = good_inserts(1, [22, 22])
    assert insert_run(table, frames, fields, 1, 0, 20, set()) is None


def test_a_run_of_inserts_with_one_fault_is_left_to_the_general_path():
    model, table = fresh()
    taught(model, table, item(1))
    record = item(12)

    def run_with(fault: Any, at: int = 1, watermark: int = 0, header: int | None = None) -> Run | None:
        frames, fields = good_inserts(1, [10, 11, 12])
        if fault is not None:
            fields[2] = fault
            frames[2] = frame(fault, header)
        return insert_run(table, frames, fields, at, watermark, 0, set())

    assert run_with(None) is not None
    assert run_with(payload("insert", 3, record, 3), header=3) is not None
    faults = {
        "payload offset": payload("insert", 4, record, 3),
        "bool offset": payload("insert", True, record, 3) | {"offset": True},
        "watermark": payload("insert", 3, record, 4),
        "no offset": {k: v for k, v in payload("insert", 3, record, 3).items() if k != "offset"},
        "record a list": payload("insert", 3, [12], 3) | {"id": 12},
        "str id": payload("insert", 3, record | {"id": "12"}, 3),
        "event id differs": payload("insert", 3, record, 3) | {"id": 13},
        "missing field": payload("insert", 3, {k: v for k, v in record.items() if k != "extra"}, 3),
        "an extra field": payload("insert", 3, record | {"more": 1}, 3),
        "fields out of order": payload("insert", 3, dict(reversed(list(record.items()))), 3),
        "datetime key": payload("insert", 3, record | {"at": "2026-13-01T00:00:00Z"}, 3),
        "int64 key": payload("insert", 3, record | {"n": 2**63}, 3),
        "empty datetime": payload("insert", 3, record | {"at": ""}, 3),
        "int64 key below": payload("insert", 3, record | {"n": -(2**63) - 1}, 3),
        "new types": payload("insert", 3, record | {"n": None}, 3),
        "a float": payload("insert", 3, record | {"n": 1.5}, 3),
    }
    for name, fault in faults.items():
        assert run_with(fault) is None, name
    assert run_with(payload("insert", 3, record, 3), header=4) is None  # the frame's header offset
    assert run_with(None, at=2) is None  # not the offset the store expects next
    assert run_with(None, watermark=1) is None  # not the table's watermark on
    # int64 bounds themselves are in range
    for n in (2**63 - 1, -(2**63)):
        assert run_with(payload("insert", 3, record | {"n": n}, 3)) is not None, n


def test_a_run_with_mixed_value_types_needs_each_of_its_shapes_known():
    model, table = fresh()
    taught(model, table, item(1))
    frames, fields = good_inserts(1, [2, 3])
    fields[1] = payload("insert", 2, item(3, n=None), 2)
    frames[1] = frame(fields[1])
    assert insert_run(table, frames, fields, 1, 0, 1, set()) is None  # (int, ..., None) is new
    taught(model, table, item(1, n=None))
    run = insert_run(table, frames, fields, 1, 0, 1, set())
    assert run is not None and run.ids == [2, 3]
    frames, fields = good_inserts(1, [2, 3])
    fields[1] = payload("insert", 2, item(3, name=5), 2)  # two shapes, one never validated
    frames[1] = frame(fields[1])
    assert insert_run(table, frames, fields, 1, 0, 1, set()) is None


def test_an_int64_key_out_of_range_beside_a_null_is_refused():
    """The nulls of an int64 key column are left out of its range check, not the check
    itself (mutant `_checked_values` 42 skipped it once a null was there)."""
    model, table = fresh()
    taught(model, table, item(1))
    taught(model, table, item(1, n=None))
    records = [item(2, n=None), item(3, n=2**63)]
    fields = [payload("insert", 1 + n, record, 1 + n) for n, record in enumerate(records)]
    assert insert_run(table, [frame(f) for f in fields], fields, 1, 0, 1, set()) is None
    fields[1] = payload("insert", 2, item(3, n=2**63 - 1), 2)
    run = insert_run(table, [frame(f) for f in fields], fields, 1, 0, 1, set())
    assert run is not None and run.ids == [2, 3]


def test_a_null_datetime_or_int_is_no_key_to_check():
    source = SCHEMA.replace("at     datetime @sort", "at     datetime? @sort")
    model = compile_schema(parse_schema(source)).BY_NAME["Item"]
    table = Table(model)
    taught(model, table, item(1, at=None, n=None))
    frames, fields = good_inserts(1, [2, 3])
    fields = [payload("insert", 1 + n, item(i, at=None, n=None), 1 + n) for n, i in enumerate([2, 3])]
    frames = [frame(f) for f in fields]
    run = insert_run(table, frames, fields, 1, 0, 1, set())
    assert run is not None and run.ids == [2, 3]


# -- update_run ------------------------------------------------------------------------


def test_a_run_of_updates_is_each_rows_event_and_values_or_none():
    model, table = fresh()
    taught(model, table, item(1))
    for i in (1, 2):
        table.insert(model.row(item(i)))

    def updates(*over: dict) -> tuple[list[bytes], list[dict]]:
        fields = [
            payload("update", 3 + n, item(i, name="new"), 1 + n, previous=item(i)) | o
            for n, (i, o) in enumerate(zip((1, 2), over))
        ]
        return [frame(f) for f in fields], fields

    frames, fields = updates({}, {})
    rows = update_run(table, frames, fields, 3, 0)
    assert rows == [
        (
            ChangeEvent(EventKind.UPDATE, "Item", 3, 1, 1, item(1, name="new"), item(1), None),
            model.row(item(1, name="new")),
        ),
        (
            ChangeEvent(EventKind.UPDATE, "Item", 4, 2, 2, item(2, name="new"), item(2), None),
            model.row(item(2, name="new")),
        ),
    ]
    bad = [
        {"previous": None},
        {"id": 3, "record": item(3)},  # not live
        {"id": [2], "record": item([2])},  # unhashable
        {"offset": 5},
        {"record": item(2, n=2**63)},
        {"record": item(2, n=0.5)},
        {"record": item(9)},  # the record's id is not the event's
    ]
    for over in bad:
        frames, fields = updates({}, over)
        assert update_run(table, frames, fields, 3, 0) is None, over
    frames, fields = updates({}, {})
    fields[1] = {k: v for k, v in fields[1].items() if k != "previous"}
    assert update_run(table, frames, fields, 3, 0) is None
    frames, fields = updates({}, {})
    assert update_run(table, frames, fields, 4, 0) is None
    assert update_run(table, frames, fields, 3, 1) is None


# -- check_fit -------------------------------------------------------------------------


def event_of(record: dict, id_: Any = None) -> ChangeEvent:
    return ChangeEvent(EventKind.INSERT, "Item", 9, 9, record["id"] if id_ is None else id_, record)


def refusal(table: Table, record: dict, id_: Any = None) -> str:
    try:
        check_fit(table, 9, event_of(record, id_), table.model.row(record))
    except StreamError as exc:
        return str(exc)
    return "passed"


def test_check_fit_refuses_with_the_field_the_value_and_what_was_expected():
    model, table = fresh()
    assert (
        refusal(table, item(1), id_=2)
        == "replication frame at offset 9: Item event id 2 differs from the record's id 1"
    )
    refused = refusal(table, item(1, n=1.5))
    assert refused.startswith("replication frame at offset 9: Item 1 does not fit the schema: "), refused
    assert "n" in refused
    assert refusal(table, item(1)) == "passed"
    # known types now: only the keys that can fail are checked, each with its message
    assert refusal(table, item(1, at="2026-13-01T00:00:00Z")).startswith(
        "replication frame at offset 9: Item 1 does not fit the schema: at: "
    )
    assert refusal(table, item(1, n=2**63)) == (
        "replication frame at offset 9: Item 1 does not fit the schema: n 9223372036854775808 is out of the int64 range"
    )
    assert refusal(table, item(1, n=-(2**63) - 1)) == (
        "replication frame at offset 9: Item 1 does not fit the schema: n -9223372036854775809 is out of the int64 range"
    )
    assert refusal(table, item(1, n=2**63 - 1)) == "passed"
    assert refusal(table, item(1, n=-(2**63))) == "passed"
    assert refusal(table, item(1, n=None)) == "passed"  # a new shape, validated, then known
    assert refusal(table, item(2, n=None)) == "passed"
    # a null key is skipped, and the keys after it are still checked
    assert refusal(table, item(2, n=None, at="2026-13-01T00:00:00Z")).startswith(
        "replication frame at offset 9: Item 2 does not fit the schema: at: "
    )


def test_a_key_that_parses_is_checked_without_a_key_array():
    source = SCHEMA.replace("at     datetime @sort", "at     datetime @filter")
    model = compile_schema(parse_schema(source)).BY_NAME["Item"]
    table = Table(model)
    assert model.key_arrays.get("at") is None  # a filter's key, not kept in an array
    assert refusal(table, item(1)) == "passed"
    assert refusal(table, item(1, at="2026-13-01T00:00:00Z")).startswith(
        "replication frame at offset 9: Item 1 does not fit the schema: at: "
    )


# -- datetime keys a column at a time ----------------------------------------------------

# Stored texts and texts no primary stores: `column_keys` must key each as `datetime_key`
# does, or raise the same exception type.
DATETIMES = [
    "2026-01-01T00:00:00Z",
    "2026-01-01T00:00:00.000001Z",
    "1969-12-31T23:59:59.999999Z",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999Z",
    "2024-02-29T12:00:00Z",
    "2026-13-01T00:00:00Z",
    "2023-02-29T00:00:00Z",
    "",
    "Z",
    "2026-01-01Z",
    "2026-01-01T00:00:00+01:00Z",
    "2026-01-01T00:00:00",
    5,
    1.5,
    ["2026-01-01T00:00:00Z"],
]


def outcome(make: Any) -> Any:
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - the exception's type is the outcome compared
        return type(exc)


def test_a_datetime_fields_index_key_is_the_runtimes_datetime_key():
    """What `column_keys` recognises: the model's key of a datetime is runtime.py's own,
    which keys None as None (the generated wrapper was a second Python call a key)."""
    model, _table = fresh()
    assert model.keys["at"] is datetime_key
    assert model.keys["n"] is not datetime_key and model.keys["name"] is not datetime_key


def test_a_datetime_column_is_keyed_as_datetime_key_keys_each_value():
    good = "2026-05-01T12:30:00.5Z"
    for value in DATETIMES:
        expected = outcome(lambda: [datetime_key(good), datetime_key(value)])
        assert outcome(lambda: column_keys(datetime_key, (good, value))) == expected, value
    column = tuple(DATETIMES[:6])
    assert column_keys(datetime_key, column) == list(map(datetime_key, column))
    assert column_keys(datetime_key, (good, None)) == [datetime_key(good), None]
    assert column_keys(datetime_key, ()) == []


def test_a_datetime_column_is_keyed_without_a_python_call_a_value():
    def calls_keying(column: tuple[str, ...]) -> int:
        calls: list[str] = []

        def count(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                calls.append(frame.f_code.co_name)

        sys.setprofile(count)
        try:
            keys = column_keys(datetime_key, column)
        finally:
            sys.setprofile(None)
        assert keys == list(map(datetime_key, column))
        return len(calls)

    one = calls_keying(("2026-01-01T00:00:00Z",))
    assert calls_keying(tuple(f"2026-01-01T00:00:{second:02d}Z" for second in range(60))) == one
