"""orders.py `head_descending`: the head of an index's (key, id) pairs walked from the top
(keys descending, ids descending in a run of equal keys), as a descending list page wants it
(ties on the id ascending), the last run taken whole. One helper for query.py's walk with a
test and bucketplan.py's buckets kept in a sort field's order; each is checked against the
order written out by hand here."""

from __future__ import annotations

import random

import pytest

from dbsvc.storage.orders import head_descending

# keys 9, 7 (a run of three), 5 (a run of two), 2: as the index walks them from the top
PAIRS = [(9, 4), (7, 8), (7, 3), (7, 1), (5, 6), (5, 2), (2, 5)]


@pytest.mark.parametrize(
    "end, keep, want",
    [
        (0, None, []),
        (1, None, [4]),
        (2, None, [4, 1, 3, 8]),  # the run of 7 taken whole, its ids ascending
        (4, None, [4, 1, 3, 8]),
        (5, None, [4, 1, 3, 8, 2, 6]),
        (99, None, [4, 1, 3, 8, 2, 6, 5]),
        (2, lambda i: i % 2 == 0, [4, 8]),  # 7 holds one kept id: the run ends there
        (3, lambda i: i != 4, [1, 3, 8]),
        (5, lambda i: False, []),
    ],
)
def test_the_head_is_the_first_ends_ids_with_the_last_run_whole_ties_ascending(end, keep, want):
    assert head_descending(iter(PAIRS), keep, end) == want


def test_the_head_is_a_prefix_of_the_descending_order_made_of_whole_runs():
    rng = random.Random(5)
    for _ in range(200):
        ids = rng.sample(range(1, 500), rng.randint(0, 60))
        keyed = [(rng.randint(0, 8), i) for i in ids]
        walk = sorted(keyed, key=lambda p: (-p[0], -p[1]))  # the index walked from the top
        keep = (lambda i: i % 3 != 0) if rng.random() < 0.5 else None
        end = rng.randint(0, 70)
        got = head_descending(iter(walk), keep, end)
        kept = [p for p in walk if keep is None or keep(p[1])]
        order = [i for _, i in sorted(kept, key=lambda p: (-p[0], p[1]))]  # the list's order
        assert got == order[: len(got)]
        assert len(got) >= min(end, len(order))
        if got and len(got) < len(order):  # cut between runs, never inside one
            key = dict((i, k) for k, i in kept)
            assert key[got[-1]] != key[order[len(got)]]
            assert len(got) == end or key[got[end - 1]] == key[got[-1]]
