"""storage/followrun.py rule 5 at its decisions, in process and without a store: a group of
plain inserts into one model, each payload spelled exactly as a primary writes it, is
taken from its records alone (`insert_texts`, `insert_group`) and makes the run
`insert_run` makes of the same frames; a payload spelled any other way, even one that
means the same event, is left to the scanned path (None), which decides it as before.
tests/replica/test_replica_apply_plain_runs.py holds the same end to end (a group against
its frames one at a time, on real stores)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.runtime import CompiledModel
from dbsvc.schema import parse_schema
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.followrun import Run, check_fit, insert_group, insert_run, insert_texts, scan_group
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.rows import pack
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
    """A table of its own (the value types it learns are its own, `Table.fit`), taught one record."""
    model = compile_schema(parse_schema(SCHEMA)).BY_NAME["Item"]
    table = Table(model)
    record = item(1)
    check_fit(table, 1, ChangeEvent(EventKind.INSERT, "Item", 1, 1, 1, record), model.row(record))
    return model, table


def item(i: Any, **over: Any) -> dict:
    return {"id": i, "name": f"item {i}", "n": i, "at": f"2026-01-01T00:00:{i % 60:02d}Z", "extra": None} | over


def primary_text(at: int, record: dict, watermark: int) -> str:
    """A plain insert's payload as a primary writes it (compact, in the event's key order)."""
    event = {"kind": "insert", "model": "Item", "offset": at, "watermark": watermark, "id": record["id"]}
    return json.dumps(event | {"record": record}, separators=(",", ":"), ensure_ascii=False)


def group(ids: list[int], first: int = 5, watermark: int = 0) -> list[bytes]:
    return [
        encode_frame(first + n, primary_text(first + n, item(i), watermark + 1 + n).encode()) for n, i in enumerate(ids)
    ]


def taken(table: Table, frames: list[bytes], first: int = 5, watermark: int = 0) -> Run | None:
    found = insert_texts(frames, 1 << 20)
    if found is None:
        return None
    name, texts = found
    return insert_group(table, name, frames, texts, first, watermark, SCAN)


def test_a_primarys_inserts_make_the_run_insert_run_makes():
    _model, table = fresh()
    frames = group([3, 4, 9, 10])
    run = taken(table, frames)
    fields = scan_group(frames, 1 << 20, SCAN)
    assert fields is not None
    assert run is not None and run._replace(stored=None) == insert_run(table, frames, fields, 5, 0, 0, set())
    assert isinstance(run, Run) and run.ids == [3, 4, 9, 10] and run.offsets == [5, 6, 7, 8]
    # followrun.py rule 6: each record's stored form is its frame's own text, which is `pack` of its values
    assert run.stored == [pack(table.model.fields, values) for values in run.values]
    assert run.stored == [frame[16:].split(b'"record":', 1)[1][:-1] for frame in frames]
    assert run.events[1] == ChangeEvent(EventKind.INSERT, "Item", 6, 2, 4, item(4), None, None)
    assert len(table.live) == 0  # nothing changed


def test_the_run_is_checked_as_insert_run_checks_it():
    model, table = fresh()
    table.insert(model.row(item(4)))
    assert taken(table, group([3, 4])) is None  # an id the table holds
    assert taken(table, group([6, 6])) is None  # an id twice
    assert taken(table, group([7, 8]), first=6) is None  # not the offset the store expects next
    assert taken(table, group([7, 8]), watermark=1) is None  # not the table's watermark on
    assert taken(table, [*group([7]), encode_frame(7, group([8])[0][16:])]) is None  # a header's offset
    bad_key = encode_frame(6, primary_text(6, item(8, at="2026-13-01T00:00:00Z"), 2).encode())
    assert taken(table, [*group([7]), bad_key]) is None
    assert taken(table, group([7, 8])) is not None


def test_a_group_that_does_not_start_as_one_models_inserts_is_not_read():
    assert insert_texts([], 1 << 20) is None
    frames = group([3, 4])
    limit = max(map(len, frames)) - 16  # the largest payload
    assert insert_texts(frames, limit - 1) is None  # over the store's payload limit
    assert insert_texts(frames, limit) is not None  # at it
    update = json.dumps({"kind": "update", "model": "Item", "offset": 6}).encode()
    assert insert_texts([frames[0], encode_frame(6, update)], 1 << 20) is None
    assert insert_texts([encode_frame(5, update), frames[1]], 1 << 20) is None
    other = frames[1].replace(b'"model":"Item"', b'"model":"Itex"')
    assert insert_texts([frames[0], other, frames[0]], 1 << 20) is None
    assert insert_texts([frames[0], frames[1][:30] + b"\xff" + frames[1][31:]], 1 << 20) is None
    assert insert_texts(frames, 1 << 20) == ("Item", [f[16:].decode() for f in frames])


def _respelled(text: str) -> dict[str, str]:
    """The second payload of a group spelled otherwise: most mean the same event."""
    record = text[text.index('"record":') + 9 : -1]
    return {
        "a space after a colon": text.replace('"kind":"insert"', '"kind": "insert"'),
        "keys in another order": text.replace('"watermark":2,"id":4', '"id":4,"watermark":2'),
        "an id of 4.0": text.replace('"id":4,"record"', '"id":4.0,"record"'),
        "the record's id 4.0": text.replace('{"id":4,', '{"id":4.0,'),
        "an event id that differs": text.replace('"id":4,"record"', '"id":5,"record"'),
        "an escaped model name": text.replace('"Item"', '"It\\u0065m"'),
        "an escaped kind": text.replace('"insert"', '"ins\\u0065rt"'),
        "space before the end": text[:-1] + " }",
        "space after the end": text + " ",
        "another character for the last brace": text[:-1] + "]",
        "a scan that stops short": text.replace('"record":{', '"record":x{'),
        "a key after the record": text[:-1] + ',"x":1}',
        "a batch mark": text[:-1] + ',"batch":{"first":6,"last":7}}',
        "the record first": '{"record":' + record + "," + text[1 : text.index(',"record":')] + "}",
        "two records": text[:-1] + ',"record":' + record + "}",
        "a record that is a list": text.replace('"record":{', '"record":[{')[:-1] + "]}",
        "the record cut short": text[:-2],
        "NaN in the record": text.replace('"n":4', '"n":NaN'),
        "no record key": text.replace('"record":', '"recorx":'),
        "the record key twice in the head": text.replace('"id":4,"record"', '"id":4,"record":0,"record"'),
    }


@pytest.mark.parametrize("spelling", sorted(_respelled(primary_text(6, item(4), 2))))
def test_any_other_spelling_is_left_to_the_scanned_path(spelling):
    _model, table = fresh()
    frames = group([3, 4, 9])
    text = _respelled(frames[1][16:].decode())[spelling]
    assert text != frames[1][16:].decode()
    frames[1] = encode_frame(6, text.encode())
    assert taken(table, frames) is None


def test_insert_texts_names_the_one_model_every_payload_starts_with():
    frames = group([3, 4])
    longer = frames[1].replace(b'"model":"Item"', b'"model":"Items"')
    assert insert_texts([frames[0], longer], 1 << 20) is None  # "Item" is not "Items"
    unnamed = [f.replace(b'"model":"Item"', b'"model":""') for f in frames]
    assert insert_texts(unnamed, 1 << 20) == ("", [f[16:].decode() for f in unnamed])
    cut = encode_frame(5, b'{"kind":"insert","model":"Item')  # no end to the name
    assert insert_texts([cut, cut], 1 << 20) is None
