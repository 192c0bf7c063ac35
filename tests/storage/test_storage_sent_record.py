"""A page's last record asked with texts (storage/shown.py `ShownDicts.page`): when its dict
is not kept it comes as a `SentRecord`, the dict its `Link` reads carrying its JSON cut from
its stored text (`text`), so the application joins bytes and encodes nothing of it; a kept
last record is a copy of the kept dict carrying the JSON kept beside it (session 21,
wt-rand8), and one whose text may hold a lone surrogate a plain dict.
In id order (`keyed=False`) it holds its id alone, never decoded (session 22, wt-rand10).
What is kept does not change: the same dicts, the same refusals as before (issue 36 item 2,
wt-rand6). No store and no fixture, as test_storage_shown_units.py."""

from __future__ import annotations

from dbsvc.runtime import json_bytes
from dbsvc.storage.shown import SentRecord, ShownDicts
from support.shownkit import FIELDS, Counted, decoded, stored

KEPT = [stored(9001), stored(9002)]  # the stored records of the dicts `full` keeps


def full() -> ShownDicts:
    """A cache of 2 dicts (9001 and 9002), full: a record read once is refused from now on."""
    dicts = ShownDicts(decoded, capacity=2, window=64, fields=FIELDS)
    dicts.page([9001, 9002], KEPT)
    return dicts


def test_a_last_record_not_kept_comes_as_its_dict_carrying_its_json():
    dicts = full()
    out = dicts.page([1, 2, 3], [stored(1), stored(2), stored(3, 'a,"b",[c]')], texts=True)
    last = out[2]
    assert type(last) is SentRecord and last == {"id": 3, "name": 'a,"b",[c]'}  # its Link reads it
    assert last.text == json_bytes({"id": 3, "name": 'a,"b",[c]'})
    assert dicts.refused == 3 and list(dicts.ids) == [9001, 9002]  # nothing kept, as before


def test_a_kept_last_record_is_a_copy_of_the_kept_dict_carrying_its_kept_json():
    dicts = full()
    kept = dicts.page([9001, 9002], KEPT)
    out = dicts.page([5, 9002], [stored(5), KEPT[1]], texts=True)
    assert type(out[1]) is SentRecord and out[1] == kept[1] and out[1] is not kept[1]
    assert out[1].text == json_bytes(kept[1]) and dicts.one(9002, KEPT[1]) is kept[1]
    assert dicts.page([9002], [KEPT[1]], texts=True)[0].text is out[1].text  # kept beside the dict
    six = stored(6)
    again = dicts.page([5, 6], [stored(5), six], texts=True)  # 6 once: refused
    assert type(again[1]) is SentRecord and 6 not in dicts.ids
    last = dicts.page([6], [six], texts=True)[0]  # its second read: kept, a copy handed out
    assert type(last) is SentRecord and 6 in dicts.ids and type(dicts.one(6, six)) is dict


def test_a_last_record_that_may_hold_a_lone_surrogate_is_a_plain_dict():
    dicts = full()
    out = dicts.page([1, 2], [stored(1), stored(2, "\ud800,b")], texts=True)
    assert type(out[1]) is dict and out[1] == {"id": 2, "name": "\ud800,b"} and dicts.refused == 2


def test_without_texts_the_last_record_is_a_plain_dict():
    dicts = full()
    out = dicts.page([1, 2], [stored(1), stored(2)])
    assert [type(r) for r in out] == [dict, dict] and dicts.refused == 2


def test_a_last_record_in_id_order_is_its_id_beside_its_json_and_never_decoded():
    decode = Counted()
    dicts = ShownDicts(decode, capacity=2, window=64, fields=FIELDS, id_field="id")
    dicts.page([9001, 9002], KEPT)
    made = decode.calls
    out = dicts.page([1, 2, 3], [stored(1), stored(2), stored(3, 'a,"b",[c]')], texts=True, keyed=False)
    assert out[:2] == [json_bytes({"id": 1, "name": "r1"}), json_bytes({"id": 2, "name": "r2"})]
    last = out[2]
    assert type(last) is SentRecord and last == {"id": 3}  # its Link reads its id alone
    assert last.text == json_bytes({"id": 3, "name": 'a,"b",[c]'})
    assert decode.calls == made and dicts.refused == 3  # refused as before, nothing decoded
    again = dicts.page([5, 9002], [stored(5), KEPT[1]], texts=True, keyed=False)  # its dict kept
    assert type(again[1]) is SentRecord and again[1] == {"id": 9002}
    assert again[1].text == json_bytes({"id": 9002, "name": "r9002"}) and decode.calls == made


def test_a_page_in_id_order_and_the_same_page_sorted_are_kept_apart():
    decode = Counted()
    dicts = ShownDicts(decode, window=64, fields=FIELDS, id_field="id")
    page = [stored(4), stored(5)]
    for _ask in range(3):  # kept as JSON alone from the first ask, the page from its second
        out = dicts.page([4, 5], page, texts=True, keyed=False)
        assert out[0] == json_bytes({"id": 4, "name": "r4"}) and out[1] == {"id": 5}
        assert out[1].text == json_bytes({"id": 5, "name": "r5"}) and decode.calls == 0
    for _ask in range(3):  # a sorted page's Link reads its keys: the whole record
        out = dicts.page([4, 5], page, texts=True)
        assert type(out[1]) is SentRecord and out[1] == {"id": 5, "name": "r5"}
        assert out[1].text == json_bytes({"id": 5, "name": "r5"})
    assert decode.calls == 1  # the last record's dict, decoded once and kept
    assert dicts.page([4, 5], page, texts=True, keyed=False)[1] == {"id": 5}


def test_a_last_record_in_id_order_with_no_cut_or_no_id_field_is_its_whole_dict():
    dicts = ShownDicts(decoded, capacity=2, window=64, fields=FIELDS, id_field="id")
    out = dicts.page([1, 2], [stored(1), stored(2, "\ud800,b")], texts=True, keyed=False)
    assert type(out[1]) is dict and out[1] == {"id": 2, "name": "\ud800,b"}
    out = full().page([1, 2], [stored(1), stored(2)], texts=True, keyed=False)  # no id field given
    assert type(out[1]) is SentRecord and out[1] == {"id": 2, "name": "r2"}
