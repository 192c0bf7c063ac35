"""`Versions` (dbsvc/storage/versions.py) decision by decision: where a version is kept (the
array indexed by id, or the dict for ids the array would hold badly), what `get`, `set`,
`pop` and `len` answer in each, and the array's bytes (`nbytes`), which the memory figures
count. Literals only: ids, offsets and byte counts written out."""

from __future__ import annotations

import pytest

from dbsvc.storage.versions import Versions


def test_set_get_pop_and_len_of_ids_in_the_array_and_in_the_dict():
    v = Versions()
    v.set(0, 5)
    v.set(1, 6)
    v.set(-3, 7)  # negative: the dict
    v.set("k", 8)  # not an int: the dict
    assert [v.get(i) for i in (0, 1, -3, "k", 2, 99)] == [5, 6, 7, 8, 0, 0]
    assert len(v) == 4 and v.nbytes() == 16
    v.set(1, 9)  # a new version of a live record
    assert v.get(1) == 9 and len(v) == 4
    assert v.pop(1) == 9 and v.get(1) == 0 and len(v) == 3
    assert v.pop(1) == 0 and v.pop(-3) == 7 and v.pop("k") == 8 and v.pop("nope") == 0
    assert len(v) == 1 and v.get(0) == 5


def test_from_ascending_without_gaps_fills_the_array_from_the_first_id():
    v = Versions.from_ascending([3, 4, 5], [30, 40, 50])
    assert [v.get(i) for i in range(7)] == [0, 0, 0, 30, 40, 50, 0]
    assert len(v) == 3 and v.nbytes() == 8 * 6  # slots 0..5
    v = Versions.from_ascending([0], [7])
    assert v.get(0) == 7 and len(v) == 1 and v.nbytes() == 8


def test_from_ascending_with_gaps_puts_each_version_at_its_id():
    v = Versions.from_ascending([1, 4, 9], [10, 40, 90])
    assert [v.get(i) for i in range(11)] == [0, 10, 0, 0, 40, 0, 0, 0, 0, 90, 0]
    assert len(v) == 3 and v.nbytes() == 8 * 10


def test_from_ascending_takes_the_array_while_the_last_id_is_below_twice_the_count_or_1024():
    # 1023 is below 1024: the array, whatever the count
    assert Versions.from_ascending([1, 1023], [1, 2]).nbytes() == 8 * 1024
    # 1030 records from 1030 up: below twice the count (2060), so the array too
    ids = list(range(1030, 2060))
    v = Versions.from_ascending(ids, list(range(1, 1031)))
    assert v.nbytes() == 8 * 2060 and len(v) == 1030 and v.get(2059) == 1030 and v.get(1030) == 1
    # one more id than twice the count allows: the dict (set() keeps ids past 1024 out of an
    # empty array)
    ids = list(range(1030, 2059)) + [2060]
    v = Versions.from_ascending(ids, list(range(1, 1031)))
    assert v.nbytes() == 0 and len(v) == 1030 and v.get(2060) == 1030 and v.get(1030) == 1
    # a negative first id, or ids that are not ints: the dict, id by id (set's own rule)
    v = Versions.from_ascending([-1, 0, 1], [5, 6, 7])
    assert [v.get(i) for i in (-1, 0, 1)] == [5, 6, 7] and len(v) == 3 and v.nbytes() == 16
    v = Versions.from_ascending(["a", "b"], [1, 2])
    assert (v.get("a"), v.get("b"), len(v), v.nbytes()) == (1, 2, 2, 0)
    v = Versions.from_ascending([], [])
    assert (len(v), v.nbytes(), v.get(0)) == (0, 0, 0)


def test_set_grows_the_array_to_an_id_within_1024_past_its_end_or_twice_its_count():
    v = Versions()
    v.set(1023, 1)  # an empty array: within 0 + 1024
    assert v.nbytes() == 8 * 1024 and len(v) == 1
    v = Versions()
    v.set(1024, 1)  # past it: the dict
    assert v.nbytes() == 0 and len(v) == 1 and v.get(1024) == 1
    v = Versions()
    for i in range(1, 1025):
        v.set(i, i)  # ascending ids: the array grows by one each time
    assert v.nbytes() == 8 * 1025 and len(v) == 1024
    v.set(2048, 5)  # twice the count (2048) is not below it, and 1025 + 1024 = 2049 is above
    assert v.nbytes() == 8 * 2049
    v.set(3073, 6)  # 2049 + 1024 = 3073 is not above it, nor twice the count (2050)
    assert v.nbytes() == 8 * 2049 and v.get(3073) == 6 and len(v) == 1026


def test_an_id_held_in_the_dict_stays_there_when_the_array_grows_past_it():
    v = Versions()
    v.set(2000, 1)  # the dict
    v.set(1000, 2)  # the array, slots 0..1000
    v.set(1500, 3)  # the array, slots 0..1500
    v.set(2000, 4)  # within 1501 + 1024, but the dict holds it: updated there, no growth
    assert v.get(2000) == 4 and len(v) == 3 and v.nbytes() == 8 * 1501
    v.set(1800, 5)
    assert v.nbytes() == 8 * 1801
    v.set(2000, 6)
    v.set(1900, 7)
    assert v.nbytes() == 8 * 1901
    v.set(2000, 8)
    assert v.get(2000) == 8 and len(v) == 5
    assert v.pop(2000) == 8 and v.get(2000) == 0 and len(v) == 4


def test_an_id_inside_the_array_but_held_in_the_dict_is_updated_in_the_dict():
    v = Versions()
    v.set(1500, 1)  # the dict: past 0 + 1024
    v.set(1000, 2)  # the array: slots 0..1000
    v.set(1400, 3)  # slots 0..1400
    v.set(1450, 4)  # slots 0..1450
    v.set(2500, 9)  # the dict: past 1451 + 1024 = 2475
    v.set(2300, 9)  # within 2475: the array grows to 2300, past 1500
    assert v.nbytes() == 8 * 2301
    v.set(1500, 10)  # in range of the array now, but held by the dict: updated there
    assert v.get(1500) == 10 and len(v) == 6
    assert v.pop(1500) == 10 and v.get(1500) == 0 and len(v) == 5
    v.set(1500, 11)  # gone from the dict: now into the array's free slot
    assert v.get(1500) == 11 and len(v) == 6
    assert v.pop(1500) == 11 and len(v) == 5


def test_a_version_must_be_an_offset():
    v = Versions()
    with pytest.raises(AssertionError) as caught:
        v.set(1, 0)
    assert str(caught.value) == "offsets start at 1"


def test_an_id_just_past_the_arrays_end_has_no_version_and_pops_nothing():
    v = Versions.from_ascending([0, 1, 2], [5, 6, 7])
    assert v.nbytes() == 24
    assert v.get(3) == 0 and v.pop(3) == 0 and len(v) == 3
    assert v.pop(2) == 7 and v.pop(2) == 0 and len(v) == 2


def test_id_0_is_a_slot_of_the_array():
    v = Versions()
    v.set(0, 5)
    assert v.nbytes() == 8 and v.get(0) == 5 and len(v) == 1
    # from a snapshot: 0 and then ids past 1024, below twice the count: all in the array
    ids = [0, *range(1030, 2060)]
    v = Versions.from_ascending(ids, list(range(1, 1032)))
    assert v.nbytes() == 8 * 2060 and len(v) == 1031 and v.get(0) == 1 and v.get(2059) == 1031


def test_the_next_id_and_an_id_past_a_gap_both_land_in_the_array():
    v = Versions()
    v.set(0, 5)
    v.set(1, 6)  # the next id: appended
    v.set(4, 7)  # past a gap: the gap's slots are zeros
    v.set(5, 8)  # the next id again
    assert [v.get(i) for i in range(7)] == [5, 6, 0, 0, 7, 8, 0]
    assert len(v) == 4 and v.nbytes() == 48
