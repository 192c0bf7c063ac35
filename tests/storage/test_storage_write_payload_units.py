"""The payload a write or a batch's op puts in the log (events.py `write_event`, `write_payload`):
a frame's layout, what an insert, an update and a delete show, a delete fitted within its room
by nulling its largest values (with a batch's mark still last), and the record limit."""

from __future__ import annotations

import struct
import zlib

import pytest

from dbsvc.errors import PayloadTooLarge
from dbsvc.storage.events import ChangeEvent, EventKind, fitted_delete_payload, record_limit, write_event, write_payload


def test_a_frame_is_the_offset_the_crc_the_length_and_the_payload():
    payload = b'{"kind":"insert","model":"User","offset":7,"watermark":3,"id":7,"record":{"id":7}}'
    event = ChangeEvent(EventKind.INSERT, "User", 7, 3, 7, {"id": 7})
    assert event.frame() == struct.pack(">QII", 7, zlib.crc32(payload), len(payload)) + payload


def test_write_event_shows_the_new_record_or_a_deletes_last_one_and_keeps_previous_for_an_update():
    old, new = {"id": 1, "n": 1}, {"id": 1, "n": 2}
    assert write_event(EventKind.INSERT, "U", 1, 1, 1, new, None) == ChangeEvent(EventKind.INSERT, "U", 1, 1, 1, new)
    assert write_event(EventKind.UPDATE, "U", 2, 2, 1, new, old) == ChangeEvent(
        EventKind.UPDATE, "U", 2, 2, 1, new, old
    )
    assert write_event(EventKind.DELETE, "U", 3, 3, 1, None, new) == ChangeEvent(EventKind.DELETE, "U", 3, 3, 1, new)


DOC = {"id": 1, "a": "x" * 40, "b": "y" * 20, "c": None, "d": "z"}
FULL = (
    b'{"kind":"delete","model":"Doc","offset":3,"watermark":2,"id":1,"record":{"id":1,'
    b'"a":"' + b"x" * 40 + b'","b":"' + b"y" * 20 + b'","c":null,"d":"z"}}'
)
NO_A = (
    b'{"kind":"delete","model":"Doc","offset":3,"watermark":2,"id":1,"record":{"id":1,'
    b'"a":null,"b":"' + b"y" * 20 + b'","c":null,"d":"z"},"omitted":["a"]}'
)
NO_AB = (
    b'{"kind":"delete","model":"Doc","offset":3,"watermark":2,"id":1,"record":{"id":1,'
    b'"a":null,"b":null,"c":null,"d":"z"},"omitted":["a","b"]}'
)
NO_ABD = (
    b'{"kind":"delete","model":"Doc","offset":3,"watermark":2,"id":1,"record":{"id":1,'
    b'"a":null,"b":null,"c":null,"d":null},"omitted":["a","b","d"]}'
)


@pytest.mark.parametrize(
    ("room", "expected"),
    [
        (len(FULL), FULL),
        (len(FULL) - 1, NO_A),
        (len(NO_A), NO_A),  # exactly the room: the first name in `omitted` has no comma before it
        (len(NO_A) - 1, NO_AB),
        (len(NO_AB), NO_AB),
        (len(NO_AB) - 1, NO_ABD),  # nothing fits: as small as it gets, never the id or a null
        (10, NO_ABD),
    ],
)
def test_a_delete_over_its_room_nulls_its_largest_values_until_it_fits(room, expected):
    event = ChangeEvent(EventKind.DELETE, "Doc", 3, 2, 1, DOC)
    assert fitted_delete_payload(event, "id", room) == expected


def test_a_fitted_delete_of_a_batch_still_ends_with_its_mark():
    # logfile.py rule 5: a batch row's payload ends with its mark, after "omitted" too
    event = ChangeEvent(EventKind.DELETE, "Doc", 3, 2, 1, DOC, None, (3, 4))
    mark = b',"batch":{"first":3,"last":4}'
    assert fitted_delete_payload(event, "id", len(NO_A) + len(mark)) == NO_A[:-1] + mark + b"}"


def test_a_delete_that_fits_exactly_is_written_whole_and_one_over_is_fitted():
    event = ChangeEvent(EventKind.DELETE, "Doc", 3, 2, 1, DOC)
    assert write_payload(event, "id", len(FULL)) == FULL
    assert write_payload(event, "id", len(FULL) - 1) == NO_A
    assert write_payload(event, "id", len(NO_AB)) == NO_AB


def test_a_delete_that_cannot_fit_is_refused_with_its_frames_size():
    event = ChangeEvent(EventKind.DELETE, "Doc", 3, 2, 1, DOC)
    with pytest.raises(PayloadTooLarge) as info:
        write_payload(event, "id", len(NO_AB) - 1)
    assert str(info.value) == (
        f"record too large: the delete of Doc 1 makes a log frame of {len(NO_ABD)} bytes, over the limit of "
        f"{len(NO_AB) - 1} (the record was stored before the record size limit; it can still be read)"
    )


def test_an_insert_over_the_record_limit_is_refused_and_one_under_it_is_written():
    room = 2 * 1024 + 1024 + 2  # record_limit(room) == 1025 bytes of JSON
    assert record_limit(room) == 1025
    fits = {"id": 1, "t": "x" * (1025 - len('{"id":1,"t":""}'))}
    event = ChangeEvent(EventKind.INSERT, "Doc", 3, 2, 1, fits)
    assert write_payload(event, "id", 10**6) == write_payload(event, "id", room) == event.payload()
    over = {"id": 1, "t": fits["t"] + "x"}
    with pytest.raises(PayloadTooLarge) as info:
        write_payload(ChangeEvent(EventKind.INSERT, "Doc", 3, 2, 1, over), "id", room)
    assert str(info.value).startswith("record too large: the Doc record is 1026 bytes of JSON, the limit is 1025 ")


def test_the_record_limit_is_half_of_what_a_frame_holds_besides_its_head():
    assert record_limit(64 * 1024 * 1024) == 33_553_920
    assert record_limit(1024 + 5) == 2  # rounded down to whole bytes
