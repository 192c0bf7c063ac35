"""runs.py `add_ordered_run` told that the run's ids ascend (`ascending=True`, as
tableruns.py tells it once a run): the result is `add` of each pair, also where the run is
not all above the ids the index holds. Its `newer` (every id above those held, so a pair
goes after every entry of its key) must then be false: a held far id above the run's ids
(`column.far`), or a run whose first id fills a hole below the column's end while the
second is past it.

Why: test_replica_apply_runs.py's units never pass `ascending`, and the stores' runs are a
follower's new ids past the end; `newer` read with `column.far` for `not column.far`
(`add_ordered_run` 17) or from the run's second id (18, which also fails on a run of one id)
put pairs after a held entry of their key with a higher id, and passed every earlier test
(docs/mutation.md, session 23)."""

from __future__ import annotations

import pytest

from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.runs import add_ordered_run

K = 7  # the key the held entry and the run share


def _shape(index: OrderedIndex, held: list[int]) -> tuple:
    return list(index), len(index), list(index.pairs_descending()), sorted((i, index.column.get(i)) for i in held)


@pytest.mark.parametrize(
    "held, run",
    [
        ({0: 1, 1: 2, 2: K, 10**9: K}, [3, 4]),  # a far id of the run's key above the run
        ({0: 1, 1: 2, 2: 3, 4: K}, [3, 7]),  # 3 fills a hole below the column's end, 7 is past it
        ({0: 1, 1: 2, 2: 3, 4: K}, [3]),  # a run of one id
        ({0: 1, 1: 2, 2: 3}, [3, 4, 5]),  # all past the end: appended after every held id
    ],
)
@pytest.mark.parametrize("typecode", ["", "q"])
def test_an_ascending_run_among_held_ids_is_add_of_each(held, run, typecode):
    one, many = OrderedIndex(typecode=typecode), OrderedIndex(typecode=typecode)
    for id_, key in held.items():
        one.add(key, id_)
        many.add(key, id_)
    keys = [K] * len(run)
    for id_ in run:
        one.add(K, id_)
    add_ordered_run(many, keys, list(run), True)
    ids = [*held, *run]
    assert _shape(many, ids) == _shape(one, ids)
    ordered = [i for k, i in many if k == K]
    assert ordered == sorted(ordered)  # a run of one key holds its ids ascending
