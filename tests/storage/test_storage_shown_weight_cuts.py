"""The record cache's summed weight (storage/shown.py `weighs`) when a JSON is cut into an
entry that held its dict alone: a page with texts cuts it for a record inside the page
(`_json`) and for its last one (`_sent`), and adds the JSON's length to the sum. The
figures are written from the weight's parts (ENTRY_WEIGHT, DICT_WEIGHT, the lengths), not
through `weight` itself, so an entry's estimate and the running sum are held to the same
numbers: a sum that drifts by a byte an entry never returns to 0 and bounds the cache past
its floor wrongly (session 24 mutation pass: `weight`'s `else 1` and the `+=` of the
two cuts made `=` or `-=` survived every earlier test)."""

from __future__ import annotations

from dbsvc.storage import shown
from dbsvc.storage.shown import DICT_WEIGHT, ENTRY_WEIGHT, ShownDicts
from support.shownkit import FIELDS, decoded, json_of, stored


def _dicts_alone(ids: list[int]) -> tuple[ShownDicts, dict[int, bytes]]:
    """A cache holding `ids` as dicts without their JSON (a page of dicts, as a projection
    asks), each weighed exactly."""
    dicts = ShownDicts(decoded, capacity=16, window=64, fields=FIELDS, id_field="id", sized=lambda: 1000)
    kept = {i: stored(i) for i in ids}
    dicts.page(ids, [kept[i] for i in ids])
    assert dicts.weighs == sum(ENTRY_WEIGHT + DICT_WEIGHT + len(kept[i]) for i in ids)
    return dicts, kept


def test_a_json_cut_into_a_kept_dict_inside_a_page_adds_its_length():
    dicts, kept = _dicts_alone([1, 2, 3])
    # a sorted page (keyed): records 1 and 2 go through `_json`, 3, the last, through `_sent`
    page = dicts.page([1, 2, 3], [kept[1], kept[2], kept[3]], texts=True)
    assert page[0] == json_of(1) and page[1] == json_of(2) and page[2].text == json_of(3)
    assert dicts.weighs == sum(ENTRY_WEIGHT + DICT_WEIGHT + len(kept[i]) + len(json_of(i)) for i in (1, 2, 3))
    for i in (1, 2, 3):
        dicts.forget(i)
    assert dicts.weighs == 0 and not dicts.ids


def test_a_json_cut_into_the_kept_dict_of_a_page_s_last_record_adds_its_length():
    dicts, kept = _dicts_alone([7])
    (last,) = dicts.page([7], [kept[7]], texts=True)
    assert last.text == json_of(7) and last == {"id": 7, "name": "r7"}
    assert dicts.weighs == ENTRY_WEIGHT + DICT_WEIGHT + len(kept[7]) + len(json_of(7))
    dicts.forget(7)
    assert dicts.weighs == 0


def test_a_record_kept_as_its_json_alone_weighs_its_json_and_then_its_dict():
    dicts = ShownDicts(decoded, capacity=16, window=64, fields=FIELDS, id_field="id", sized=lambda: 1000)
    kept = {i: stored(i) for i in (4, 5)}
    dicts.page([4, 5], [kept[4], kept[5]], texts=True, keyed=False)  # id order: JSON alone
    assert dicts.weighs == 2 * ENTRY_WEIGHT + len(json_of(4)) + len(json_of(5))
    assert dicts.one(4, kept[4]) == {"id": 4, "name": "r4"}  # its dict decoded into its entry
    assert dicts.weighs == 2 * ENTRY_WEIGHT + len(json_of(4)) + len(json_of(5)) + DICT_WEIGHT + len(kept[4])
    dicts.forget(4)
    dicts.forget(5)
    assert dicts.weighs == 0


def test_a_table_that_shrank_evicts_the_oldest_down_to_its_share_at_the_next_new_id():
    """Past the floor the cache holds what the table's share allowed when it was read; once
    the table holds fewer records (deletes), the next new id evicts the oldest entries, not
    the newest, until the rest weigh no more than the new share, and the summed weight is
    the rest's (`remember`'s loop: its `popitem(last=True)` and a sum set to the last
    evicted entry's weight survived every earlier test)."""
    records = [1000]
    dicts = ShownDicts(decoded, capacity=2, window=64, fields=FIELDS, id_field="id", sized=lambda: records[0])
    each = ENTRY_WEIGHT + len(json_of(10))  # ids 10-99 kept as their JSON alone weigh the same
    dicts.page(list(range(10, 20)), [stored(i) for i in range(10, 20)], texts=True, keyed=False)
    assert list(dicts.ids) == list(range(10, 20)) and dicts.weighs == 10 * each
    records[0] = 8  # 8 * SHOWN_SHARE = 1,024 bytes: five entries of 182 and no sixth
    assert 5 * each <= 8 * shown.SHOWN_SHARE < 6 * each
    dicts.page([20], [stored(20)], texts=True, keyed=False)  # a first read past the floor: refused
    assert 20 not in dicts.ids and dicts.weighs == 10 * each
    dicts.page([20], [stored(20)], texts=True, keyed=False)  # its second read: kept, the oldest evicted
    assert list(dicts.ids) == [15, 16, 17, 18, 19, 20]
    assert dicts.weighs == 6 * each


def test_a_cache_weighing_exactly_its_share_is_full():
    """The share is a strict bound (`_within`: less than SHOWN_SHARE a record): 64 entries
    of 182 bytes weigh 11,648, exactly 91 records' share, so the 65th id of a page is
    refused on its first read past the floor, as a cache over its share refuses it (a
    `<=` there survived every earlier test)."""
    dicts = ShownDicts(decoded, capacity=2, window=256, fields=FIELDS, id_field="id", sized=lambda: 91)
    each = ENTRY_WEIGHT + len(json_of(10))
    assert 64 * each == 91 * shown.SHOWN_SHARE
    dicts.page(list(range(10, 74)), [stored(i) for i in range(10, 74)], texts=True, keyed=False)
    assert list(dicts.ids) == list(range(10, 74)) and dicts.weighs == 91 * shown.SHOWN_SHARE
    dicts.page([74], [stored(74)], texts=True, keyed=False)
    assert 74 not in dicts.ids and dicts.refused == 1


def _filled_then_shrunk(capacity: int, entries: int, records: int) -> tuple[ShownDicts, int]:
    """A cache past its floor holding `entries` ids' JSON (the table big enough to allow
    them), then the table shrunk to `records` and a new id read twice (its second read
    kept), so `remember` evicts from above; answers the cache and the new id."""
    count = [100_000]
    dicts = ShownDicts(decoded, capacity=capacity, window=256, fields=FIELDS, id_field="id", sized=lambda: count[0])
    ids = list(range(10, 10 + entries))
    dicts.page(ids, [stored(i) for i in ids], texts=True, keyed=False)
    assert list(dicts.ids) == ids
    count[0] = records
    new = 10 + entries
    for _ in range(2):
        dicts.page([new], [stored(new)], texts=True, keyed=False)
    assert new in dicts.ids
    return dicts, new


def test_a_cache_over_its_share_comes_down_to_its_floor_and_no_further():
    """`capacity` is what the cache keeps at most while over its share: a table shrunk to
    nothing brings a cache of 10 down to its floor of 2 at the next new id, the new one
    included (the loop once evicted while *more* than `capacity` were kept and settled at
    `capacity + 1`; session 24's mutation pass, `remember` 21, named the disagreement with
    the docstring)."""
    dicts, new = _filled_then_shrunk(capacity=2, entries=10, records=0)
    assert list(dicts.ids) == [19, new]
    assert dicts.weighs == 2 * (ENTRY_WEIGHT + len(json_of(10)))


def test_a_cache_weighing_exactly_its_share_after_an_eviction_evicts_one_more():
    """At exactly its share a cache is full (`_within` is strict), so `remember` evicts
    while the rest weigh the share or more: 64 entries of 182 bytes weigh 91 records'
    share, so a cache of 70 shrunk to a table of 91 keeps 63 and the new id (a loop that
    stopped at exactly the share kept 65; `remember` 22)."""
    each = ENTRY_WEIGHT + len(json_of(10))
    assert 64 * each == 91 * shown.SHOWN_SHARE
    dicts, new = _filled_then_shrunk(capacity=2, entries=70, records=91)
    assert list(dicts.ids) == [*range(17, 80), new]
    assert dicts.weighs == 64 * each
