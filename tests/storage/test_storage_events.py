"""A change event's payload (events.py): the log's bytes and the `/subscribe` text, made
without the event's dict, must be byte for byte the compact JSON of that dict
(docs/realtime.md's key order), for every kind, id type and record."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dbsvc.runtime import compact_json
from dbsvc.storage.events import ChangeEvent, EventKind, decode_event

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)  # no lone surrogates
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_RECORDS = st.dictionaries(_TEXT, _VALUES, max_size=6)
_IDS = st.integers(-(2**63), 2**63 - 1) | _TEXT


@given(
    kind=st.sampled_from(list(EventKind)),
    model=_TEXT,
    offset=st.integers(1, 2**62),
    watermark=st.integers(0, 2**62),
    id_=_IDS,
    record=_RECORDS,
    previous=_RECORDS,
)
def test_the_payload_is_the_compact_json_of_the_event_dict(kind, model, offset, watermark, id_, record, previous):
    event = ChangeEvent(kind, model, offset, watermark, id_, record, previous if kind is EventKind.UPDATE else None)
    payload = event.payload()
    assert payload == compact_json(event.to_dict()).encode("utf-8")
    assert list(json.loads(payload)) == ["kind", "model", "offset", "watermark", "id", "record"] + (
        ["previous"] if kind is EventKind.UPDATE else []
    )
    assert decode_event(payload) == event


@pytest.mark.parametrize(
    "id_, shown",
    [(7, b'"id":7,'), (-1, b'"id":-1,'), ("a\"b", b'"id":"a\\"b",'), ("caf\u00e9", '"id":"caf\u00e9",'.encode())],
)
def test_ids_of_each_type_are_written_as_json(id_, shown):
    payload = ChangeEvent(EventKind.DELETE, "Note", 3, 1, id_, {"id": id_}).payload()
    assert shown in payload and payload.startswith(b'{"kind":"delete","model":"Note","offset":3,"watermark":1,')


def test_a_value_json_cannot_hold_is_refused_as_before():
    with pytest.raises(ValueError):
        ChangeEvent(EventKind.INSERT, "Note", 1, 1, 1, {"score": float("nan")}).payload()


def test_an_event_is_immutable():
    event = ChangeEvent(EventKind.INSERT, "Note", 1, 1, 1, {"id": 1})
    with pytest.raises(AttributeError):
        event.offset = 2  # type: ignore[misc]
    assert event._replace(watermark=5).watermark == 5 and event.watermark == 1
