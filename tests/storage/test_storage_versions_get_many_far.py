"""Versions.get_many (storage/versions.py) for ids inside the array whose version the dict
holds: an id set while it lay far past the array's end stays in the dict when the array
later grows over it (its slot stays 0), so the mapped lookup's 0 for it must ask the dict.
In process, no fixture.

Session 24's mutation pass: the older case set its far id (10**9) past every array the
test grew, so `get_many`'s dict pass (`if self._far and 0 in out`) was never reached with
an id the array covers; its mutants 28-42 survived.
"""

from __future__ import annotations

from dbsvc.storage.versions import STEP, Versions


def _grown_over_a_far_id() -> tuple[Versions, int]:
    """Versions whose array covers `far`, an id the dict holds (set before the array grew)."""
    versions = Versions()
    versions.set(1, 101)
    far = 3 * STEP  # past the array's end by more than STEP: the dict's
    versions.set(far, 77)
    for id_ in range(2, far + 10):  # one at a time: the array grows over `far`
        if id_ != far and id_ % 3:  # every third id left without a version
            versions.set(id_, 1000 + id_)
    return versions, far


def test_get_many_asks_the_dict_for_an_id_the_grown_array_covers() -> None:
    versions, far = _grown_over_a_far_id()
    asked = [far - 2, far - 1, far, far + 1, far + 3, 1, 3]
    assert max(asked) < far + 10
    want = [1000 + far - 2, 1000 + far - 1, 77, 1000 + far + 1, 0, 101, 0]
    assert [versions.get(i) for i in asked] == want  # the dict answers `get` for `far`
    assert versions.get_many(asked) == want


def test_get_many_with_a_dict_that_holds_no_id_asked() -> None:
    """The dict is not empty but holds none of the ids asked: their 0s stay 0 and the rest
    are the array's."""
    versions, far = _grown_over_a_far_id()
    asked = [far - 3, far - 2, far + 3, far + 4]
    assert versions.get_many(asked) == [0, 1000 + far - 2, 0, 1000 + far + 4]
    assert versions.get_many([far]) == [77]


def test_get_many_of_the_id_just_past_the_array_is_zero() -> None:
    """Ids 0, 1, 2 set in turn make an array of three slots; id 3, the next, has no
    version and lies past it (the mapped lookup must not be asked for it: mutant 16,
    `max(ids) > len(slots)`, an IndexError)."""
    versions = Versions()
    for id_ in (0, 1, 2):
        versions.set(id_, 10 + id_)
    assert versions.get_many([1, 3]) == [11, 0] == [versions.get(1), versions.get(3)]
    assert versions.get_many([0, 1, 2]) == [10, 11, 12]
