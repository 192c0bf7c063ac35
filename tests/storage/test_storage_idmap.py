"""`IdMap`, the id -> stored record map of an int-id table: a list indexed by id, with the
ids it would hold badly (negative, far past its end) in a dict beside it. Whatever the ids,
it answers as a dict of the same entries would."""

from __future__ import annotations

import random

import pytest

from dbsvc.storage.idmap import STEP, IdMap


def _agree(m: IdMap, model: dict) -> None:
    assert len(m) == len(model) and set(m) == set(model) and m.copy() == model
    assert dict(m.items()) == model
    for id_, record in model.items():
        assert m[id_] == record and m.get(id_) == record and id_ in m
    ids = list(model)
    assert m.pick(ids) == [model[i] for i in ids]


@pytest.mark.parametrize("seed", range(6))
def test_random_writes_agree_with_a_dict(seed):
    """Ids in order (a table's automatic ids), negative ones, ones far past the list's end,
    and the list later growing past an id the dict holds: every read agrees with a dict."""
    rnd = random.Random(seed)
    m, model = IdMap(), {}
    top = 0
    for step in range(4000):
        roll = rnd.random()
        if model and roll < 0.3:
            id_ = rnd.choice(list(model))
            del m[id_]
            del model[id_]
        elif model and roll < 0.45:
            id_ = rnd.choice(list(model))
            m[id_] = model[id_] = b"[%d,%d]" % (id_, step)  # a replace
        else:
            kind = rnd.random()
            if kind < 0.8:
                top += 1
                id_ = top
            elif kind < 0.9:
                id_ = -rnd.randrange(1, 10**6)
            else:
                id_ = top + STEP + rnd.randrange(10**9)  # far ahead
            m[id_] = model[id_] = b"[%d]" % id_
        if step % 250 == 0:
            _agree(m, model)
    _agree(m, model)
    assert m.far, "the run put ids in the dict beside the list"


def test_absent_ids_and_ids_of_other_types_are_absent():
    m = IdMap.from_ascending([1, 2, 3], [b"[1]", b"[2]", b"[3]"])
    for id_ in (0, 4, -1, 10**12, "1", 1.5, None):
        assert id_ not in m and m.get(id_) is None and m.get(id_, "x") == "x"
        with pytest.raises(KeyError):
            m[id_]
        with pytest.raises(KeyError):
            del m[id_]
    with pytest.raises(TypeError):  # unhashable, as a dict says
        m.get([1])
    assert len(m) == 3


def test_from_ascending_takes_the_list_only_for_ids_it_holds_well():
    dense = IdMap.from_ascending(list(range(1, 1001)), [b"[%d]" % i for i in range(1, 1001)])
    assert len(dense.slots) == 1001 and not dense.far
    sparse_ids = [10**9 + i for i in range(5)]
    sparse = IdMap.from_ascending(sparse_ids, [b"[%d]" % i for i in sparse_ids])
    assert sparse.slots == [] and sorted(sparse.far) == sparse_ids
    gaps = IdMap.from_ascending([2, 3, 7, 40], [b"[2]", b"[3]", b"[7]", b"[40]"])
    assert len(gaps.slots) == 41 and not gaps.far and gaps.slots[4] is None
    contiguous = IdMap.from_ascending([5, 6, 7], [b"[5]", b"[6]", b"[7]"])
    assert contiguous.slots == [None] * 5 + [b"[5]", b"[6]", b"[7]"]
    negative = IdMap.from_ascending([-3, 1, 2], [b"[-3]", b"[1]", b"[2]"])
    assert negative.copy() == {-3: b"[-3]", 1: b"[1]", 2: b"[2]"}
    for m in (dense, sparse, gaps, contiguous, negative):
        _agree(m, m.copy())


def test_the_list_grows_past_an_id_the_dict_holds():
    m = IdMap()
    far = STEP + 10
    m[far] = b"[far]"  # past the list's end: the dict
    assert far in m.far
    for i in range(1, 2 * far):  # the list grows past it
        m[i if i != far else far + 10**6] = b"[%d]" % i
    assert len(m.slots) > far and m.slots[far] is None
    assert m[far] == b"[far]" and m.get(far) == b"[far]" and far in m
    m[far] = b"[again]"  # a replace stays where the id is
    assert m.far[far] == b"[again]" and m.slots[far] is None
    del m[far]
    assert far not in m
