"""versions.py `set_run` and id 0 at their decisions: a run is `set` of each id in turn
(its fast path, one extend from the array's end, only for new int ids in order, none held
in the dict, every version an offset), and id 0 is a slot of the array once it holds it.
tests/replica/test_replica_apply_plain_runs.py compares runs with `set` over more shapes."""

from __future__ import annotations

import pytest

from dbsvc.storage.versions import Versions


def both(held: list, ids: list, versions: list) -> tuple[Versions, Versions]:
    one, run = Versions(), Versions()
    for n, id_ in enumerate(held, start=1):
        one.set(id_, n)
        run.set(id_, n)
    for id_, version in zip(ids, versions):
        one.set(id_, version)
    run.set_run(ids, versions)
    return one, run


@pytest.mark.parametrize(
    "held, ids",
    [
        ([1, 2], []),  # nothing
        ([1, 2], [3]),  # one id
        ([0], [True, 2]),  # True == 1, but not an int id: the dict's
        ([0, 1], [2.0, 3]),
    ],
)
def test_a_run_is_set_of_each_id(held, ids):
    versions = list(range(100, 100 + len(ids)))
    one, run = both(held, ids, versions)
    probe = [*held, *ids, 1, 2, 3, 4]
    assert [run.get(i) for i in probe] == [one.get(i) for i in probe]
    assert len(run) == len(one) == len(set(held) | set(ids))
    assert run.nbytes() == one.nbytes()


def test_a_run_from_the_arrays_end_with_an_id_held_in_the_dict_leaves_it_there():
    held = [1, 5000, 1000, 2000, 3000, 4000, 4999]  # 5000 far when set, then the array grows to it
    one, run = both(held, [5000, 5001], [7, 8])
    assert [run.get(i) for i in (5000, 5001)] == [7, 8]
    assert len(run) == len(one) == 8
    assert run.pop(5000) == 7 and run.get(5000) == 0 and len(run) == 7


def test_a_run_refuses_a_version_that_is_not_an_offset():
    run = Versions()
    run.set(0, 1)
    with pytest.raises(AssertionError, match="offsets start at 1"):
        run.set_run([1, 2], [0, 5])


def test_id_0_held_in_the_array_is_set_and_popped_there():
    versions = Versions.from_ascending([0, 1, 2], [5, 6, 7])
    versions.set(0, 9)
    assert (versions.get(0), len(versions), versions.nbytes()) == (9, 3, 24)
    assert versions.pop(0) == 9
    assert (versions.get(0), len(versions)) == (0, 2)


def test_from_ascending_with_a_gap_of_one_puts_each_version_at_its_id():
    versions = Versions.from_ascending([0, 3], [5, 6])
    assert [versions.get(i) for i in range(5)] == [5, 0, 0, 6, 0]
    assert (len(versions), versions.nbytes()) == (2, 32)


def test_a_run_given_as_tuples_is_set_of_each_id():
    one, run = both([0, 1], [2, 3, 4], [7, 8, 9])
    tuple_run = Versions()
    tuple_run.set(0, 1)
    tuple_run.set(1, 2)
    tuple_run.set_run((2, 3, 4), (7, 8, 9))
    assert [tuple_run.get(i) for i in range(6)] == [one.get(i) for i in range(6)] == [1, 2, 7, 8, 9, 0]
    assert len(tuple_run) == len(run) == 5


def test_a_run_with_a_version_that_is_not_an_int_is_refused_whole():
    # The fast path fills the array in one call that stores nothing when an item is bad,
    # so no id of the refused run is left with a version and the count stays right.
    run = Versions()
    run.set(0, 1)
    with pytest.raises(TypeError):
        run.set_run([1, 2, 3], [5, 6, 7.5])
    assert [run.get(i) for i in range(4)] == [1, 0, 0, 0]
    assert (len(run), run.nbytes()) == (1, 8)
