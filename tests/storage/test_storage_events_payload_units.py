"""events.py's write side at the unit (session 8's mutation survivors): `write_event`'s
record and previous per kind, `write_payload`'s fitted delete and refused insert,
`fitted_delete_payload`'s omitted values at its exact boundary, `frame`'s bytes and
`from_dict`'s reading of a payload with and without a batch mark.

Every expected payload is written out here from the layout of events.py's docstring,
never built with the module's helpers. Fixture-free: bench/mutation_inprocess.py runs it."""

from __future__ import annotations

import json
import zlib

import pytest

from dbsvc.errors import PayloadTooLarge
from dbsvc.storage.events import (
    ChangeEvent,
    EventKind,
    decode_event,
    fitted_delete_payload,
    record_limit,
    write_event,
    write_payload,
)

KEY = "k" * 200
A, B = "x" * 100, "y" * 50
HEAD = '{"kind":"delete","model":"Doc","offset":5,"watermark":2,"id":"' + KEY + '","record":{"code":"' + KEY + '"'
FULL = HEAD + ',"a":"' + A + '","b":"' + B + '","c":null}}'


def gone(batch=None) -> ChangeEvent:
    return ChangeEvent(EventKind.DELETE, "Doc", 5, 2, KEY, {"code": KEY, "a": A, "b": B, "c": None}, None, batch)


def test_a_delete_that_fits_is_its_whole_payload():
    assert fitted_delete_payload(gone(), "code", len(FULL)) == FULL.encode()
    assert write_payload(gone(), "code", 10_000) == FULL.encode()


def test_a_delete_over_its_room_nulls_its_largest_values_never_the_id_and_names_them():
    one = HEAD + ',"a":null,"b":"' + B + '","c":null},"omitted":["a"]}'
    assert len(one) == len(FULL) - 82
    assert fitted_delete_payload(gone(), "code", len(FULL) - 1) == one.encode()
    assert fitted_delete_payload(gone(), "code", len(one)) == one.encode()  # exactly at its room
    two = HEAD + ',"a":null,"b":null,"c":null},"omitted":["a","b"]}'
    assert fitted_delete_payload(gone(), "code", len(one) - 1) == two.encode()
    assert fitted_delete_payload(gone(), "code", 10) == two.encode()  # as small as it gets
    mark = ',"batch":{"first":5,"last":6}'
    room = len(one) + len(mark)
    assert fitted_delete_payload(gone((5, 6)), "code", room) == (one[:-1] + mark + "}").encode()
    decoded = decode_event(fitted_delete_payload(gone((5, 6)), "code", room))
    assert decoded.batch == (5, 6) and decoded.record == {"code": KEY, "a": None, "b": B, "c": None}


def test_write_payload_fits_a_delete_to_its_room():
    one = HEAD + ',"a":null,"b":"' + B + '","c":null},"omitted":["a"]}'
    assert write_payload(gone(), "code", len(FULL)) == FULL.encode()
    assert write_payload(gone(), "code", len(one)) == one.encode()  # a delete is always possible


def record_of(size: int) -> dict:
    record = {"id": 1, "t": "x" * (size - len('{"id":1,"t":""}'))}
    return record


@pytest.mark.parametrize("given_text", [False, True])
def test_write_payload_refuses_an_insert_over_its_record_limit_and_takes_one_at_it(given_text):
    for size, refused in ((1025, False), (1026, True)):
        record = record_of(size)
        text = json.dumps(record, separators=(",", ":")) if given_text else None
        event = write_event(EventKind.INSERT, "Doc", 7, 3, 1, record, None)
        payload = (
            '{"kind":"insert","model":"Doc","offset":7,"watermark":3,"id":1,"record":'
            + json.dumps(record, separators=(",", ":"))
            + "}"
        )
        if not refused:
            assert write_payload(event, "id", 3074, text) == payload.encode()
            continue
        with pytest.raises(PayloadTooLarge) as e:
            write_payload(event, "id", 3074, text)
        assert str(e.value) == (
            "record too large: the Doc record is 1026 bytes of JSON, the limit is 1025 "
            "(an update's log frame holds a record and the one it replaces, and a frame holds at most 3074 bytes)"
        )
        assert e.value.extra == {"model": "Doc", "size": 1026, "limit": 1025}


def test_write_payload_takes_the_given_texts_of_the_records():
    event = write_event(EventKind.UPDATE, "Doc", 8, 4, 1, {"id": 1, "t": "b"}, {"id": 1, "t": "a"})
    assert write_payload(event, "id", 10_000, '{"id":1,"t":"B"}', '{"id":1,"t":"A"}') == (
        b'{"kind":"update","model":"Doc","offset":8,"watermark":4,"id":1,'
        b'"record":{"id":1,"t":"B"},"previous":{"id":1,"t":"A"}}'
    )


def test_write_event_shows_the_record_and_keeps_previous_for_an_update_only():
    new, old = {"id": 1, "t": "b"}, {"id": 1, "t": "a"}
    assert write_event(EventKind.INSERT, "Doc", 1, 1, 1, new, None) == (
        EventKind.INSERT,
        "Doc",
        1,
        1,
        1,
        new,
        None,
        None,
    )
    assert write_event(EventKind.UPDATE, "Doc", 2, 1, 1, new, old, (2, 3)) == (
        EventKind.UPDATE,
        "Doc",
        2,
        1,
        1,
        new,
        old,
        (2, 3),
    )
    assert write_event(EventKind.INSERT, "Doc", 1, 1, 1, new, old) == (
        EventKind.INSERT,
        "Doc",
        1,
        1,
        1,
        new,
        None,
        None,
    )
    # a delete shows the last record and keeps no previous
    assert write_event(EventKind.DELETE, "Doc", 3, 0, 1, None, old) == (
        EventKind.DELETE,
        "Doc",
        3,
        0,
        1,
        old,
        None,
        None,
    )
    assert write_event(EventKind.DELETE, "Doc", 3, 0, 1, None, old).record is old


def test_a_frame_is_offset_crc_length_and_payload():
    event = ChangeEvent(EventKind.INSERT, "Doc", 9, 1, 2, {"id": 2})
    payload = b'{"kind":"insert","model":"Doc","offset":9,"watermark":1,"id":2,"record":{"id":2}}'
    assert event.payload() == payload
    frame = event.frame()
    assert frame.endswith(payload)
    assert frame[:16] == (9).to_bytes(8, "big") + zlib.crc32(payload).to_bytes(4, "big") + (81).to_bytes(4, "big")
    assert len(payload) == 81 and len(frame) == 16 + 81


def test_from_dict_reads_every_field_and_the_batch_mark():
    text = (
        '{"kind":"update","model":"Doc","offset":8,"watermark":4,"id":"a","record":{"id":"a","t":1},'
        '"previous":{"id":"a","t":0},"batch":{"first":7,"last":9}}'
    )
    assert decode_event(text.encode()) == (
        EventKind.UPDATE,
        "Doc",
        8,
        4,
        "a",
        {"id": "a", "t": 1},
        {"id": "a", "t": 0},
        (7, 9),
    )
    plain = '{"kind":"delete","model":"Doc","offset":3,"watermark":0,"id":5,"record":{"id":5}}'
    assert decode_event(memoryview(plain.encode())) == (EventKind.DELETE, "Doc", 3, 0, 5, {"id": 5}, None, None)
    assert ChangeEvent.from_dict(json.loads(text)).to_dict() == json.loads(text)
    assert list(ChangeEvent.from_dict(json.loads(text)).to_dict()) == [
        "kind",
        "model",
        "offset",
        "watermark",
        "id",
        "record",
        "previous",
        "batch",
    ]


def test_an_updates_batch_mark_comes_after_its_previous_record():
    event = ChangeEvent(EventKind.UPDATE, "Doc", 8, 4, 1, {"id": 1, "t": 2}, {"id": 1, "t": 1}, (7, 9))
    assert event.payload() == (
        b'{"kind":"update","model":"Doc","offset":8,"watermark":4,"id":1,"record":{"id":1,"t":2},'
        b'"previous":{"id":1,"t":1},"batch":{"first":7,"last":9}}'
    )


def test_the_record_limit_is_half_of_what_the_head_reserve_leaves():
    assert record_limit(3074) == 1025 and record_limit(3075) == 1025
    assert record_limit(64 * 1024 * 1024) == 33_553_920
    assert type(record_limit(3074)) is int


def test_a_delete_counts_the_comma_before_each_omitted_name_after_the_first():
    record = {"code": KEY, "a": A, "b": B, "d": "z" * 20}
    event = ChangeEvent(EventKind.DELETE, "Doc", 5, 2, KEY, record)
    two = HEAD + ',"a":null,"b":null,"d":"' + "z" * 20 + '"},"omitted":["a","b"]}'
    three = HEAD + ',"a":null,"b":null,"d":null},"omitted":["a","b","d"]}'
    assert fitted_delete_payload(event, "code", len(two)) == two.encode()
    assert fitted_delete_payload(event, "code", len(two) - 1) == three.encode()


def test_write_payload_refuses_an_insert_over_its_room_as_too_large():
    event = write_event(EventKind.INSERT, "Doc", 7, 3, 1, record_of(300), None)
    with pytest.raises(PayloadTooLarge):
        write_payload(event, "id", 200)


def test_write_payload_lowers_the_limit_of_a_record_whose_id_is_longer_than_the_head_reserve():
    long_id = "i" * 2000
    record = {"id": long_id, "t": "x" * 7200}  # about 9,220 bytes: over the lowered limit
    size = len(json.dumps(record, separators=(",", ":")))
    assert record_limit(20_000) == 9488 and size < 9488  # under the plain limit
    event = write_event(EventKind.INSERT, "Doc", 7, 3, long_id, record, None)
    with pytest.raises(PayloadTooLarge):
        write_payload(event, "id", 20_000)
    short = write_event(EventKind.INSERT, "Doc", 7, 3, 1, {"id": 1, "t": "x" * 9200}, None)
    assert write_payload(short, "id", 20_000).startswith(b'{"kind":"insert"')
