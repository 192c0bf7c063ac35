"""`Versions` (dbsvc/storage/versions.py) decision by decision: where a version is kept (the
array indexed by id, or the dict for ids the array would hold badly), what `get`, `set`,
`pop` and `len` answer in each, and the array's bytes (`nbytes`), which the memory figures
count. Literals only: ids, offsets and byte counts written out."""

from __future__ import annotations

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
