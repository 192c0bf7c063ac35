"""A page asked with texts (storage/shown.py `ShownDicts.page`, session 27): every record but
the last is its stored text itself (a stored record is its record's JSON), picked and
never looked up, cut, decoded or kept; the last is a `SentRecord`, the dict its `Link`
reads carrying its stored text (`text`): a copy of the kept dict when this version's is
kept, else `one`'s dict made (the model's decode, the one way a dict is made here, session
28) and kept by its rule; in id order (`keyed=False`) it holds its id alone. A record that may hold a lone surrogate comes as its dict. What is kept
does not change. No store and no fixture, as test_storage_shown_units.py."""

from __future__ import annotations

from dbsvc.runtime import json_bytes
from dbsvc.storage.keycolumns import KeyColumn
from dbsvc.storage.shown import SentRecord, ShownDicts
from support.shownkit import FIELDS, Counted, decoded, stored

KEPT = [stored(9001), stored(9002)]  # the stored records of the dicts `full` keeps


def full(decode=decoded) -> ShownDicts:  # noqa: ANN001 (a decode)
    """A cache of 2 dicts (9001 and 9002), full: a record read once is refused from now on."""
    dicts = ShownDicts(decode, capacity=2, window=64, fields=FIELDS, id_field="id")
    dicts.page([9001, 9002], KEPT)
    return dicts


def test_a_page_with_texts_is_its_stored_texts_and_touches_no_cache():
    decode = Counted()
    dicts = full(decode)
    made, refused = decode.calls, dicts.refused
    page = [stored(1), stored(2, 'a,"b",[c]'), stored(3)]
    out = dicts.page([1, 2, 3], page, texts=True, keyed=False)
    assert out[0] is page[0] and out[1] is page[1]  # the stored bytes themselves
    assert out[1] == json_bytes({"id": 2, "name": 'a,"b",[c]'})
    assert decode.calls == made and dicts.refused == refused and list(dicts.ids) == [9001, 9002]


def test_a_last_record_not_kept_comes_as_one_s_dict_carrying_its_text():
    decode = Counted()
    dicts = full(decode)
    made = decode.calls
    page = [stored(1), stored(2), stored(3, 'a,"b",[c]')]
    last = dicts.page([1, 2, 3], page, texts=True)[2]
    assert type(last) is SentRecord and last == {"id": 3, "name": 'a,"b",[c]'}  # its Link reads it
    assert last.text is page[2] and decode.calls == made + 1  # the model's decode, once
    assert 3 not in dicts.ids and dicts.refused == 1  # read once: refused, as `one` refuses it
    again = dicts.page([1, 2, 3], page, texts=True)[2]  # its second read: its dict kept
    assert again == last and 3 in dicts.ids and dicts.one(3, page[2]) is not again
    assert decode.calls == made + 2
    assert dicts.page([3], [page[2]], texts=True)[0] == last and decode.calls == made + 2  # the kept dict copied


def test_a_kept_last_record_is_a_copy_of_the_kept_dict_carrying_its_text():
    dicts = full()
    kept = dicts.page([9001, 9002], KEPT)
    out = dicts.page([5, 9002], [stored(5), KEPT[1]], texts=True)
    assert type(out[1]) is SentRecord and out[1] == kept[1] and out[1] is not kept[1]
    assert out[1].text is KEPT[1] and dicts.one(9002, KEPT[1]) is kept[1]
    newer = stored(9002, "newer")  # another version of 9002: its own dict made, not the kept one
    again = dicts.page([9002], [newer], texts=True)[0]
    assert again == {"id": 9002, "name": "newer"} and again.text is newer


def test_a_record_that_may_hold_a_lone_surrogate_is_a_plain_dict():
    dicts = full()
    out = dicts.page([1, 2, 3], [stored(1), stored(2, "\ud800,b"), stored(3, "\ud800")], texts=True)
    assert type(out[0]) is bytes and out[1] == {"id": 2, "name": "\ud800,b"} and type(out[1]) is dict
    assert type(out[2]) is dict and out[2] == {"id": 3, "name": "\ud800"} and dicts.refused == 2


def test_without_texts_the_last_record_is_a_plain_dict():
    dicts = full()
    out = dicts.page([1, 2], [stored(1), stored(2)])
    assert [type(r) for r in out] == [dict, dict] and dicts.refused == 2


def test_a_last_record_in_id_order_is_its_id_beside_its_text_and_never_decoded():
    decode = Counted()
    dicts = full(decode)
    made = decode.calls
    page = [stored(1), stored(2), stored(3, 'a,"b",[c]')]
    out = dicts.page([1, 2, 3], page, texts=True, keyed=False)
    assert out[:2] == [json_bytes({"id": 1, "name": "r1"}), json_bytes({"id": 2, "name": "r2"})]
    last = out[2]
    assert type(last) is SentRecord and last == {"id": 3}  # its Link reads its id alone
    assert last.text is page[2] and decode.calls == made and dicts.refused == 0
    again = dicts.page([5, 9002], [stored(5), KEPT[1]], texts=True, keyed=False)  # its dict kept
    assert type(again[1]) is SentRecord and again[1] == {"id": 9002} and again[1].text is KEPT[1]


def test_a_last_record_in_id_order_with_no_id_field_is_its_whole_dict():
    dicts = ShownDicts(decoded, capacity=2, window=64, fields=FIELDS)  # no id field given
    out = dicts.page([1, 2], [stored(1), stored(2)], texts=True, keyed=False)
    assert type(out[1]) is SentRecord and out[1] == {"id": 2, "name": "r2"}


def test_a_model_without_fields_hands_every_page_out_as_dicts():
    dicts = ShownDicts(decoded, capacity=2, window=64)
    out = dicts.page([1, 2], [stored(1), stored(2)], texts=True)
    assert out == [{"id": 1, "name": "r1"}, {"id": 2, "name": "r2"}] and [type(r) for r in out] == [dict, dict]


def test_a_sorted_last_record_with_its_key_columns_is_its_id_and_keys_never_decoded():
    """Given the sort fields' key columns (session 32), the last record is its id and the
    keys read from them (`sort_keys`, in the columns' order, None for a null): no dict is
    made, looked up or kept for it, read once or again; without columns `sort_keys` is None."""
    decode = Counted()
    dicts = full(decode)
    made, refused = decode.calls, dicts.refused
    score = KeyColumn.from_pairs([(2.5, 1), (7.0, 3)], "d")
    title = KeyColumn.from_pairs([("b", 1), (None, 3)])
    page = [stored(1), stored(3, "x")]
    for _ in range(2):  # a second read keeps nothing either
        last = dicts.page([1, 3], page, texts=True, columns=(score, title))[1]
        assert type(last) is SentRecord and last == {"id": 3} and last.sort_keys == (7.0, None)
        assert last.text is page[1]
    assert decode.calls == made and dicts.refused == refused and list(dicts.ids) == [9001, 9002]
    first = dicts.page([3, 1], page[::-1], texts=True, columns=(title,))[1]
    assert first == {"id": 1} and first.sort_keys == ("b",)
    plain = dicts.page([1, 3], page, texts=True)[1]
    assert plain == {"id": 3, "name": "x"} and plain.sort_keys is None
