"""The record cache's summed weight (storage/shown.py `weighs`): a page with texts keeps
nothing and weighs nothing (session 27: its records are their stored texts), and past its
floor the cache evicts the oldest dicts down to its share. The figures are written from the weight's parts (ENTRY_WEIGHT, DICT_WEIGHT, the lengths), not
through `weight` itself, so an entry's estimate and the running sum are held to the same
numbers: a sum that drifts by a byte an entry never returns to 0 and bounds the cache past
its floor wrongly (session 24 mutation pass)."""

from __future__ import annotations

from dbsvc.storage import shown
from dbsvc.storage.shown import DICT_WEIGHT, ENTRY_WEIGHT, ShownDicts
from support.shownkit import FIELDS, decoded, json_of, stored


def _kept(dicts: ShownDicts, ids: list[int]) -> None:
    """`remember` each id's dict (a write's, as `Table.prime` gives it)."""
    for i in ids:
        dicts.remember(i, stored(i), decoded((i, f"r{i}")))


def test_a_page_with_texts_leaves_the_weight_as_it_was():
    """A page with texts in id order keeps nothing (its records are their stored texts, its
    last its id): the sum is the dicts' kept before, each weighed exactly, and returns to 0 as they are forgotten."""
    dicts = ShownDicts(decoded, capacity=16, window=64, fields=FIELDS, id_field="id", sized=lambda: 1000)
    kept = {i: stored(i) for i in (1, 2, 3)}
    dicts.page([1, 2, 3], [kept[i] for i in (1, 2, 3)])  # a page of dicts (a projection's)
    weighs = sum(ENTRY_WEIGHT + DICT_WEIGHT + len(kept[i]) for i in (1, 2, 3))
    assert dicts.weighs == weighs
    page = dicts.page([1, 2, 3, 4], [kept[1], kept[2], kept[3], stored(4)], texts=True, keyed=False)
    assert page[0] is kept[1] and page[2] is kept[3] and page[3].text == json_of(4)
    assert dicts.weighs == weighs and sorted(dicts.ids) == [1, 2, 3]
    for i in (1, 2, 3):
        dicts.forget(i)
    assert dicts.weighs == 0 and not dicts.ids


def test_a_table_that_shrank_evicts_the_oldest_down_to_its_share_at_the_next_new_id():
    """Past the floor the cache holds what the table's share allowed when it was read; once
    the table holds fewer records (deletes), the next new id evicts the oldest entries, not
    the newest, until the rest weigh no more than the new share, and the summed weight is
    the rest's (`remember`'s loop: its `popitem(last=True)` and a sum set to the last
    evicted entry's weight survived every earlier test)."""
    records = [1000]
    dicts = ShownDicts(decoded, capacity=2, window=64, fields=FIELDS, id_field="id", sized=lambda: records[0])
    each = ENTRY_WEIGHT + DICT_WEIGHT + len(stored(10))  # ids 10-99 kept as dicts weigh the same
    _kept(dicts, list(range(10, 20)))
    assert list(dicts.ids) == list(range(10, 20)) and dicts.weighs == 10 * each
    records[0] = 23  # 23 * SHOWN_SHARE = 2,944 bytes: five entries of 582 and no sixth
    assert 5 * each <= 23 * shown.SHOWN_SHARE < 6 * each
    dicts.one(20, stored(20))  # a first read past the floor: refused
    assert 20 not in dicts.ids and dicts.weighs == 10 * each
    dicts.one(20, stored(20))  # its second read: kept, the oldest evicted
    assert list(dicts.ids) == [15, 16, 17, 18, 19, 20]
    assert dicts.weighs == 6 * each


def _filled_then_shrunk(capacity: int, entries: int, records: int) -> tuple[ShownDicts, int]:
    """A cache past its floor holding `entries` ids' dicts (the table big enough to allow
    them), then the table shrunk to `records` and a new id read twice (its second read
    kept), so `remember` evicts from above; answers the cache and the new id."""
    count = [100_000]
    dicts = ShownDicts(decoded, capacity=capacity, window=256, fields=FIELDS, id_field="id", sized=lambda: count[0])
    ids = list(range(10, 10 + entries))
    _kept(dicts, ids)
    assert list(dicts.ids) == ids
    count[0] = records
    new = 10 + entries
    for _ in range(2):
        dicts.one(new, stored(new))
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
    assert dicts.weighs == 2 * (ENTRY_WEIGHT + DICT_WEIGHT + len(stored(10)))


def test_a_cache_weighing_exactly_its_share_after_an_eviction_evicts_one_more():
    """At exactly its share a cache is full (`_within` is strict), so `remember` evicts
    while the rest weigh the share or more: 64 entries of 582 bytes weigh 291 records'
    share, so a cache of 70 shrunk to a table of 291 keeps 63 and the new id (a loop that
    stopped at exactly the share kept 65; `remember` 22)."""
    each = ENTRY_WEIGHT + DICT_WEIGHT + len(stored(10))
    assert 64 * each == 291 * shown.SHOWN_SHARE
    dicts, new = _filled_then_shrunk(capacity=2, entries=70, records=291)
    assert list(dicts.ids) == [*range(17, 80), new]
    assert dicts.weighs == 64 * each
