"""runs.py `add_ordered_run` at each way a sublist takes its share of a run (session 9,
rep80): pairs that are an eighth of the sublist or more merged into it at once, a newer
run of one key put after that key's run in one slice, newer pairs of several keys placed
by key alone, older ids among equal keys placed by id, and a sublist grown past several
LOADs cut into pieces. Each is held to `add` of each pair in turn, for str keys (a list)
and int keys (an array)."""

from __future__ import annotations

import pytest

from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.runs import MERGE_AT
from dbsvc.storage.sortedlist import LOAD
from tests.replica.test_runs_units import check_run

HELD = 5 * LOAD  # three sublists or more: every case lands in a middle one


def held_pairs(typecode: str) -> list[tuple[object, int]]:
    """Keys 0, 10, 20, ... (as zero-padded str for a list index), each on four ids."""
    key = (lambda k: k) if typecode else (lambda k: f"{k:08d}")
    return [(key(10 * (n // 4)), n + 1) for n in range(HELD)]


def check(typecode: str, keys: list[object], ids: list[int]) -> OrderedIndex:
    one, many = OrderedIndex(typecode=typecode), OrderedIndex(typecode=typecode)
    for key, id_ in held_pairs(typecode):
        one.add(key, id_)
        many.add(key, id_)
    assert len(many.key_sublists) >= 3
    check_run(one, many, keys, ids)
    return many


def typed(typecode: str, keys: list[int]) -> list[object]:
    return list(keys) if typecode else [f"{k:08d}" for k in keys]


@pytest.mark.parametrize("typecode", ["", "q"])
@pytest.mark.parametrize(
    "case",
    [
        "merged: many newer pairs into one sublist",
        "merged: past several LOADs, cut into pieces",
        "one key, newer ids: one slice after its run",
        "several keys, newer ids: placed by key",
        "older ids among equal keys: placed by id",
        "older ids, one place: one slice",
        "older ids at a sublist's last key: placed by id",
    ],
)
def test_an_ordered_run_into_a_middle_sublist_is_add_one_at_a_time(case, typecode):
    middle = 10 * (HELD // 8)  # a key held in a middle sublist
    newer = list(range(HELD + 1, HELD + 1 + 4 * LOAD))
    if case.startswith("merged: many"):
        count = LOAD // MERGE_AT + 3
        check(typecode, typed(typecode, [middle + 1 + n % 9 for n in range(count)]), newer[:count])
    elif case.startswith("merged: past"):
        for count in (3 * LOAD + 100, 4 * LOAD):  # the rest under LOAD joins the piece before it, or not
            many = check(typecode, typed(typecode, [middle + n % 7 for n in range(count)]), newer[:count])
            # cut into pieces of LOAD, the rest joining the last: none smaller, none over 2 * LOAD
            assert LOAD <= min(map(len, many.key_sublists)) <= max(map(len, many.key_sublists)) <= 2 * LOAD
    elif case.startswith("one key"):
        check(typecode, typed(typecode, [middle] * 5), newer[:5])
    elif case.startswith("several keys"):
        check(typecode, typed(typecode, [middle, middle + 3, middle + 10, middle + 10]), newer[:4])
    elif case.startswith("older ids among"):
        # ids 0 and below every id held, so not newer: each goes first in its key's run
        check(typecode, typed(typecode, [middle, middle, middle + 10]), [-3, 0, -1])
    elif case.startswith("older ids, one place"):
        check(typecode, typed(typecode, [middle + 5, middle + 5]), [-2, -1])
    else:
        scratch = OrderedIndex(typecode=typecode)
        for key, id_ in held_pairs(typecode):
            scratch.add(key, id_)
        last = scratch.last_keys[1]  # the second sublist ends on this key
        check(typecode, [last, last], [-5, 10**7])


def test_an_ordered_run_of_str_ids_is_add_one_at_a_time():
    """A str-id table's run (no key column slots to compare new ids with)."""
    one, many = OrderedIndex(), OrderedIndex()
    for key, id_ in [(5, "a"), (7, "b"), (9, "c")]:
        one.add(key, id_)
        many.add(key, id_)
    check_run(one, many, [6, 7, 12], ["d", "e", "f"])


@pytest.mark.parametrize("typecode", ["", "q"])
@pytest.mark.parametrize(
    "case",
    [
        "keys that never fall, past the last entry: appended as they come",
        "the first key equal to the last one held, on a newer id",
        "keys that never fall, the first inside: merged",
        "a key that falls: sorted first",
        "past the end with a null among them",
        "past the end, more than 2 * LOAD: cut as appending cuts",
    ],
)
def test_a_run_of_ids_known_ascending_is_add_one_at_a_time(case, typecode):
    """A follower's run told its ids ascend (tableruns.py): keys that never fall (a
    timestamp's) after the last entry take the last sublist at once, no pair made; any
    other run takes the sorted pairs' way. Both are `add` of each pair in turn."""
    last = 10 * ((HELD - 1) // 4)  # the last key held
    newer = list(range(HELD + 1, HELD + 1 + 3 * LOAD))
    if case.startswith("keys that never fall, past"):
        keys = [last + 1, last + 1, last + 5, last + 9, last + 9, last + 9]
    elif case.startswith("the first key equal"):
        keys = [last, last, last + 2]
    elif case.startswith("keys that never fall, the first inside"):
        keys = [last - 15, last - 15, last + 3]
    elif case.startswith("a key that falls"):
        keys = [last + 7, last + 3, last + 3, last + 8]
    elif case.startswith("past the end with a null"):
        keys = [last + 1, None, last + 2]
    else:
        keys = [last + 1 + n // 3 for n in range(2 * LOAD + 7)]
    typed_keys = [None if k is None else (k if typecode else f"{k:08d}") for k in keys]
    one, many = OrderedIndex(typecode=typecode), OrderedIndex(typecode=typecode)
    for key, id_ in held_pairs(typecode):
        one.add(key, id_)
        many.add(key, id_)
    check_run(one, many, typed_keys, newer[: len(keys)], ascending=True)
    assert max(map(len, many.key_sublists)) <= 2 * LOAD
    assert [many.column.get(id_) for id_ in newer[: len(keys)]] == typed_keys
