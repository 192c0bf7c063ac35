"""An update's encoding at its one decision (tests/support/packing.py `pack_update`, rows.py's
parts composed as writes.py `apply_replace` composes them): the previous record's JSON is made from the
new record's value texts only when that record is in the record form of the same fields
(every field, in order); a previous dict of other keys, fewer keys or the same keys in
another order is encoded as it is. Literal bytes: the JSON a PUT's or PATCH's event and log
payload carry for `previous` (docs/realtime.md)."""

from __future__ import annotations

from support.packing import pack_shown, pack_update

FIELDS = ("id", "name", "n")


def test_a_previous_record_in_another_key_order_is_encoded_as_it_is():
    values, was = (1, "b", 2), (1, "a", 2)
    record = dict(zip(FIELDS, values))
    previous = {"n": 2, "name": "a", "id": 1}
    assert pack_update(FIELDS, record, values, previous, was) == (
        b'{"id":1,"name":"b","n":2}',
        '{"id":1,"name":"b","n":2}',
        '{"n":2,"name":"a","id":1}',
    )


def test_a_previous_record_of_other_or_fewer_keys_is_encoded_as_it_is():
    values = (1, "b", 2)
    record = dict(zip(FIELDS, values))
    assert pack_update(FIELDS, record, values, {"id": 1, "name": "a"}, (1, "a"))[2] == '{"id":1,"name":"a"}'
    assert (
        pack_update(FIELDS, record, values, {"id": 1, "nom": "a", "n": 2}, (1, "a", 2))[2] == '{"id":1,"nom":"a","n":2}'
    )
    previous = {"id": 1, "name": "a", "n": 2, "x": None}
    assert pack_update(FIELDS, record, values, previous, (1, "a", 2, None))[2] == '{"id":1,"name":"a","n":2,"x":null}'


def test_a_previous_record_in_the_record_form_reuses_the_unchanged_texts():
    values, was = (1, "b", [1, 2]), (1, "a", [1, 2])
    record = dict(zip(FIELDS, values))
    assert pack_update(FIELDS, record, values, dict(zip(FIELDS, was)), was) == (
        b'{"id":1,"name":"b","n":[1,2]}',
        '{"id":1,"name":"b","n":[1,2]}',
        '{"id":1,"name":"a","n":[1,2]}',
    )
    values, was = (1, "b\u00e9", 2.5), (1, "b\u00e9", 2)
    record = dict(zip(FIELDS, values))
    assert pack_update(FIELDS, record, values, dict(zip(FIELDS, was)), was) == (
        '{"id":1,"name":"b\u00e9","n":2.5}'.encode(),
        '{"id":1,"name":"b\u00e9","n":2.5}',
        '{"id":1,"name":"b\u00e9","n":2}',
    )
    assert pack_shown(("id", "a b"), {"id": 1, "a b": "x,\u0000y"}, (1, "x,\u0000y")) == (
        b'{"id":1,"a b":"x,\\u0000y"}',
        '{"id":1,"a b":"x,\\u0000y"}',
    )
