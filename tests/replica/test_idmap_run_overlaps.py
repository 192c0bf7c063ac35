"""IdMap.extend_run (storage/idmap.py) given a run that starts among the ids the map holds
already: the run's tail may look like the next ids (its last is n + count - 1) or the whole
run may be exactly the ids held (0 .. n - 1), and neither is a run of new ids. Each must be
`self[ids[k]] = records[k]` of each, as for any other run.

Why: test_replica_apply_bulk.py's cases of held ids again start at an id whose run cannot end
at n + count - 1; a first-id test turned into "not the next id" (`extend_run` 9) and a
compare with `range(n)` instead of `range(n, n + count)` (`extend_run` 31) both extended the
slots with records of ids already held and passed every earlier case (docs/mutation.md,
session 23)."""

from __future__ import annotations

import pytest

from dbsvc.storage.idmap import IdMap


def _shape(live: IdMap) -> tuple:
    return (sorted(live.items(), key=repr), len(live), list(live.slots), dict(live.far))


def _each(held: list[int], ids: list[int], records: list[bytes]) -> IdMap:
    one = IdMap((id_, b"old") for id_ in held)
    for id_, record in zip(ids, records):
        one[id_] = record
    return one


@pytest.mark.parametrize("ascending", [True, False])
@pytest.mark.parametrize(
    "held, ids",
    [
        ([0, 1, 2, 3, 4], [3, 6, 7]),  # the last is n + count - 1, the first is held
        ([0, 1, 2, 3, 4], [1, 2, 7]),
        ([0, 1, 2], [0, 1, 2]),  # exactly the held ids: range(n), not range(n, 2n)
        ([0, 1, 2], [2]),
    ],
)
def test_a_run_that_begins_among_the_held_ids_is_setitem_of_each(held, ids, ascending):
    records = [f"r{n}".encode() for n in range(len(ids))]
    bulk = IdMap((id_, b"old") for id_ in held)
    bulk.extend_run(list(ids), records, ascending)
    assert _shape(bulk) == _shape(_each(held, ids, records))
    assert len(bulk) == len(set(held) | set(ids))
