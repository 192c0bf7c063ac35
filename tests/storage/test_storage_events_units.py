"""events.py's size rule and decoding at the unit where each is decided (module docstring,
"Sizes"): `size_refusal`'s two refusals word for word with their numbers, the record limit
an id longer than the head reserve lowers, the measure of a record's text in UTF-8 bytes,
a payload at its limit and one byte over; a head of each kind and model (quotes and
characters outside ASCII as JSON writes them); `decode_event` over bytes and a memoryview.

Every expected text and size is written out here from the documented layout (events.py's
docstring), never taken from the module's helpers, so a change to the rule fails a test."""

from __future__ import annotations

import pytest

from dbsvc.errors import PayloadTooLarge
from dbsvc.storage.events import ChangeEvent, EventKind, decode_event, event_payload, size_refusal, write_event

U64 = "18446744073709551615"  # the widest offset and watermark a head reckons with


def worst_head(model: str, id_text: str) -> int:
    """Bytes of an update's payload besides its two records at the widest counters: the
    layout of events.py's docstring with both records empty, less their four bytes."""
    text = (
        f'{{"kind":"update","model":"{model}","offset":{U64},"watermark":{U64},"id":{id_text},'
        f'"record":{{}},"previous":{{}}}}'
    )
    return len(text.encode("utf-8")) - 4


def refused(kind: EventKind, model: str, id_, record: dict, payload_size: int, max_payload: int, text=None):
    refusal = size_refusal(kind, model, id_, record, payload_size, max_payload, text)
    assert refusal is None or isinstance(refusal, PayloadTooLarge)
    return refusal


# -- a record over its limit -----------------------------------------------------------------


def record_of(size: int) -> dict:
    """A record whose compact JSON is exactly `size` bytes."""
    record = {"id": 1, "t": "x" * (size - len('{"id":1,"t":""}'))}
    assert len('{"id":1,"t":""}') + len(record["t"]) == size
    return record


@pytest.mark.parametrize("kind", [EventKind.INSERT, EventKind.UPDATE])
def test_a_record_one_byte_over_its_limit_is_refused_naming_its_size_the_limit_and_the_frame(kind):
    # max_payload 3074: the limit is (3074 - 1024) // 2 = 1025 bytes of JSON
    over = refused(kind, "Doc", 1, record_of(1026), 1500, 3074)
    assert over is not None
    assert (
        str(over)
        == over.detail
        == (
            "record too large: the Doc record is 1026 bytes of JSON, the limit is 1025 "
            "(an update's log frame holds a record and the one it replaces, and a frame holds at most 3074 bytes)"
        )
    )
    assert over.extra == {"model": "Doc", "size": 1026, "limit": 1025}
    assert (over.status, over.code) == (413, "payload_too_large")
    assert refused(kind, "Doc", 1, record_of(1025), 1500, 3074) is None


def test_the_limit_is_rounded_down_to_whole_bytes():
    # (3075 - 1024) // 2 = 1025, not 1025.5: a record of 1026 bytes is over it
    assert refused(EventKind.INSERT, "Doc", 1, record_of(1026), 1500, 3075).extra["limit"] == 1025
    assert refused(EventKind.INSERT, "Doc", 1, record_of(1026), 1500, 3076) is None


def test_a_delete_is_never_refused_for_its_record_only_for_its_frame():
    # a delete stores no record: the same record and payload size an insert is refused for
    assert refused(EventKind.DELETE, "Doc", 1, record_of(1026), 1500, 3074) is None
    assert refused(EventKind.DELETE, "Doc", 1, record_of(5000), 3074, 3074) is None


def test_the_record_is_measured_only_when_its_payload_is_near_half_the_frame():
    # 2 * 1024 + 1024 = 3072, not over 3074: the cheap test lets it through unmeasured;
    # 2 * 1026 + 1024 = 3076 is over it, and the record (the payload's) is measured
    big = record_of(1026)
    assert refused(EventKind.INSERT, "Doc", 1, big, 1025, 3074) is None
    assert refused(EventKind.INSERT, "Doc", 1, big, 1026, 3074).extra == {"model": "Doc", "size": 1026, "limit": 1025}


def test_the_text_handed_is_measured_in_utf8_bytes_instead_of_the_record():
    # the caller's text wins over the record: 342 three-byte characters are 1026 bytes
    text = "\u20ac" * 342
    over = refused(EventKind.INSERT, "Doc", 1, {"id": 1}, 1500, 3074, text)
    assert over.extra == {"model": "Doc", "size": 1026, "limit": 1025}
    assert refused(EventKind.INSERT, "Doc", 1, {"id": 1}, 1500, 3074, "\u20ac" * 341 + "xx") is None
    # and without a text, the record's own compact JSON, characters as UTF-8 bytes
    record = {"id": 1, "t": "\u20ac" * 337}  # {"id":1,"t":""} is 15 bytes, 337 * 3 = 1011
    assert refused(EventKind.INSERT, "Doc", 1, record, 1500, 3074).extra["size"] == 1026


def test_an_id_longer_than_the_head_reserve_lowers_its_records_limit_by_as_much():
    long_id = "k" * 1101
    head = worst_head("Doc", f'"{long_id}"')
    assert head == 1101 + 2 + 122  # the id, its quotes and the rest of the head
    limit = (4096 - head) // 2
    assert limit == 1435  # an odd head: one byte less would give 1436
    over = refused(EventKind.INSERT, "Doc", long_id, record_of(limit + 1), 2000, 4096)
    assert over.extra == {"model": "Doc", "size": limit + 1, "limit": limit}
    assert refused(EventKind.INSERT, "Doc", long_id, record_of(limit), 2000, 4096) is None
    # a short id keeps the reserve's limit
    assert refused(EventKind.INSERT, "Doc", "k", record_of(1536), 2000, 4096) is None
    assert refused(EventKind.INSERT, "Doc", "k", record_of(1537), 2000, 4096).extra["limit"] == 1536


def test_the_head_of_a_long_id_counts_its_model_and_its_id_as_json():
    # a model name and an int id: the head counts their JSON bytes (an int id bare)
    model = "M" * 1001
    head = worst_head(model, "7")
    assert head == 1001 + 1 + 119
    assert refused(EventKind.UPDATE, model, 7, record_of((4096 - head) // 2 + 1), 2000, 4096).extra["limit"] == (
        (4096 - head) // 2
    )


# -- a frame over its limit ------------------------------------------------------------------


def test_a_payload_of_exactly_the_limit_passes_and_one_byte_over_is_refused_naming_the_write():
    assert refused(EventKind.DELETE, "Doc", "k7", {}, 4096, 4096) is None
    over = refused(EventKind.DELETE, "Doc", "k7", {}, 4097, 4096)
    assert str(over) == (
        "record too large: the delete of Doc 'k7' makes a log frame of 4097 bytes, over the limit of 4096 "
        "(the record was stored before the record size limit; it can still be read)"
    )
    assert over.extra == {"model": "Doc", "size": 4097, "limit": 4096}
    # an update of a small record whose frame is over (a previous record stored before the rule)
    update = refused(EventKind.UPDATE, "Doc", 3, {"id": 3}, 5000, 4096)
    assert str(update).startswith("record too large: the update of Doc 3 makes a log frame of 5000 bytes, over ")
    assert update.extra == {"model": "Doc", "size": 5000, "limit": 4096}


# -- heads and decoding ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "model", "expected"),
    [
        (EventKind.INSERT, "User", b'{"kind":"insert","model":"User","offset":5,'),
        (EventKind.UPDATE, "User", b'{"kind":"update","model":"User","offset":5,'),
        (EventKind.DELETE, "User", b'{"kind":"delete","model":"User","offset":5,'),
        (EventKind.INSERT, 'Bl"og\u00e9', b'{"kind":"insert","model":"Bl\\"og\xc3\xa9","offset":5,'),
    ],
)
def test_each_kind_and_model_has_its_own_head_written_as_json(kind, model, expected):
    for _ in range(2):  # the second from the kept head
        payload = event_payload(kind, model, 5, 2, 9, {}, {} if kind is EventKind.UPDATE else None)
        assert payload.startswith(expected)
        assert payload[len(expected) :].startswith(b'"watermark":2,"id":9,"record":{}')


def test_many_models_heads_stay_right_past_the_kept_ones():
    # more kinds-times-models than are kept (1,024): each head is still its own
    for n in range(1100):
        assert event_payload(EventKind.DELETE, f"M{n}", 1, 1, 1, {}) == (
            f'{{"kind":"delete","model":"M{n}","offset":1,"watermark":1,"id":1,"record":{{}}}}'.encode()
        )


def test_an_event_is_decoded_from_bytes_or_a_memoryview():
    payload = b'{"kind":"update","model":"U","offset":4,"watermark":2,"id":"a","record":{"n":2},"previous":{"n":1}}'
    expected = ChangeEvent(EventKind.UPDATE, "U", 4, 2, "a", {"n": 2}, {"n": 1}, None)
    assert decode_event(payload) == expected
    assert decode_event(memoryview(b"xx" + payload)[2:]) == expected


def test_a_batch_rows_event_keeps_its_batchs_bounds_and_a_single_write_has_none():
    new, old = {"id": 1, "n": 2}, {"id": 1, "n": 1}
    for kind, record, previous in [
        (EventKind.INSERT, new, None),
        (EventKind.UPDATE, new, old),
        (EventKind.DELETE, None, old),
    ]:
        event = write_event(kind, "U", 5, 3, 1, record, previous, (4, 6))
        assert event.batch == (4, 6)
        assert event.payload().endswith(b',"batch":{"first":4,"last":6}}')
        assert write_event(kind, "U", 5, 3, 1, record, previous).batch is None
