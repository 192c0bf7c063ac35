"""idmap.py `records_at` (the snapshot thread's records of a chunk of ids) for an IdMap
whose far dict holds an id the list has grown over, and for the id just past the list.
In process, no fixture: an IdMap built through its mapping methods, records as bytes.

Session 24's mutation pass: the older tests reached `records_at` through a compaction
whose far ids lay past the list, so its dict pass (`if far and None in out`) never ran
for an id inside the list, and no chunk asked the id at the list's end; its mutants
(the dict pass, `max(ids) <= len(slots)`) survived.
"""

from __future__ import annotations

from dbsvc.storage.idmap import STEP, IdMap, records_at


def _grown_over_a_far_id() -> tuple[IdMap, int]:
    """An IdMap whose list covers `far`, an id its dict holds (set before the list grew)."""
    records = IdMap()
    records[1] = b"r1"
    far = 3 * STEP  # past the list's end by more than STEP: the dict's
    records[far] = b"far"
    for id_ in range(2, far + 10):  # one at a time: the list grows over `far`
        if id_ != far and id_ % 3:  # every third id left without a record
            records[id_] = b"r%d" % id_
    return records, far


def test_records_at_asks_the_dict_for_an_id_the_grown_list_covers() -> None:
    records, far = _grown_over_a_far_id()
    assert far < len(records.slots) and far in records.far  # the case tested
    asked = [far - 2, far - 1, far, far + 1, far + 3, 1, 3]
    want = [b"r%d" % (far - 2), b"r%d" % (far - 1), b"far", b"r%d" % (far + 1), None, b"r1", None]
    assert [records.get(i) for i in asked] == want
    assert records_at(records, asked) == want


def test_records_at_of_the_id_just_past_the_list_is_none() -> None:
    records = IdMap()
    for id_ in (0, 1, 2):
        records[id_] = b"r%d" % id_
    assert len(records.slots) == 3
    assert records_at(records, [1, 3]) == [b"r1", None]
    assert records_at(records, [0, 1, 2]) == [b"r0", b"r1", b"r2"]
    assert records_at({5: b"x"}, [5, 6]) == [b"x", None]  # a str or uuid table's dict
