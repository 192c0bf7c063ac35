"""Few candidates tested against a filter's buckets at once (hashes.py `holding`), and the
lists whose plans use it or walk another field's order whole (storage/query.py `_count`,
storage/walks.py `_one_key`), against SQLite.

`holding(keys, ids)` must answer what `has(keys, id)` answers for each id, in every form
a bucket takes (a sorted list, its kept set, flags over the id space, a set), for ids
below, between and past a bucket's, for one key, several and an absent one. The lists:
two filters whose smallest holds fewer than KEEPER_AT ids (each other field asked by
`holding`), and a range on one field sorted by another with many matches (the walk of
the whole ascending order, nulls last, testing the range), paged by offset and by cursor.
"""

from __future__ import annotations

import random

import pytest

from dbsvc.cursors import encode_cursor
from dbsvc.storage import Store
from dbsvc.storage.hashes import HashIndex, IdBits, OrderedFilter, UniqueFilter
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.query import KEEPER_AT
from dbsvc.storage.runs import add_hash_run
from support.query_oracle import ITEM, filled_store

SPAN = 1024
PROBES = [0, 1, 2, 5, 9, 17, 31, 32, 33, 50, 62, 63, 996, 1000, 1023]  # below, between, at and past the buckets' ids
KEYS = [("a",), ("b",), ("c",), ("zz",), ("a", "c"), ("b", "zz"), ("a", "b", "c")]


def _index() -> HashIndex:
    """Bucket "a" a sorted list (143 ids: asked of 15 ids it bisects each), "b" a list with
    a kept set, "c" flags, "d" a set."""
    index = HashIndex(SPAN)
    index.buckets = {
        "a": list(range(2, 1000, 7)),
        "b": [1, 31, 32, 62],
        "c": IdBits(range(0, SPAN, 2), SPAN),
        "d": {3, 50},
    }
    index.keeper("b")  # kept from now on, while the bucket is unchanged
    return index


@pytest.mark.parametrize("keys", KEYS)
def test_holding_answers_as_has_in_every_bucket_form(keys):
    index = _index()
    assert type(index.buckets["b"]) is list and index.kept_sets.keys() == {"b"}
    ids = PROBES[:]
    assert index.holding(keys, ids) == [i for i in ids if index.has(keys, i)]
    random.Random(7).shuffle(ids)  # any order in, the same order out
    assert index.holding(keys, ids) == [i for i in ids if index.has(keys, i)]
    assert index.holding(keys, []) == []


def test_holding_by_bisect_tells_ids_on_either_side_of_a_bucket():
    index = HashIndex(SPAN)
    for id_ in range(50, 150):
        index.add("k", id_)
    assert index.holding(("k",), [0, 49, 50, 149, 150]) == [50, 149]  # 0: no id below it
    assert not index.kept_sets  # answered by bisects
    assert index.holding(("d",), [3, 50]) == []


def test_holding_compares_ids_by_value_not_identity():
    """Large ints are separate objects when made apart (a parsed id, a bucket's own): the
    bisect's last id not above one is compared by value."""
    index = HashIndex()
    for id_ in range(2**40, 2**40 + 400, 4):  # 100 ids: 12 asked are bisected, no set made
        index.add("k", id_)
    probes = [int(str(2**40 + i)) for i in range(12)]  # equal values, other objects
    assert all(p is not b for p in probes for b in index.buckets["k"])
    assert index.holding(("k",), probes) == [2**40, 2**40 + 4, 2**40 + 8]
    assert not index.kept_sets


def test_a_list_bucket_asked_often_enough_gets_its_set_until_it_changes():
    """The ids bisected since the bucket changed reaching 1/ASKED_SHARE of it, `holding`
    makes the bucket's set (`keeper`'s) and answers from it; a write drops both."""
    index = HashIndex(1000)
    for id_ in range(0, 800, 2):  # 400 ids: the set is made once 50 have been asked
        index.add("k", id_)
    probes = list(range(0, 20))  # 20 ids an ask: the third ask reaches 50
    want = list(range(0, 20, 2))
    for _ in range(2):
        assert index.holding(("k",), probes) == want
        assert "k" not in index.kept_sets
    assert index.holding(("k",), probes) == want
    assert index.kept_sets["k"] == set(range(0, 800, 2))
    index.add("k", 1)  # the bucket changes: its set and the asks so far are dropped
    assert "k" not in index.kept_sets
    for _ in range(2):
        assert index.holding(("k",), probes) == [0, 1] + want[1:]
        assert "k" not in index.kept_sets
    index.remove("k", 1)
    assert index.holding(("k",), probes) == want and "k" not in index.kept_sets
    assert index.holding(("k",), probes) == want and "k" not in index.kept_sets
    assert index.holding(("k",), probes) == want and "k" in index.kept_sets


def test_the_set_is_made_when_the_asks_reach_an_eighth_of_the_bucket_exactly():
    index = HashIndex(1000)
    for id_ in range(400):
        index.add("k", id_)
    assert index.holding(("k",), list(range(25))) == list(range(25))  # 25 of the 50
    assert "k" not in index.kept_sets
    assert index.holding(("k",), list(range(500, 525))) == []  # 50 * 8 == 400: made
    assert index.kept_sets["k"] == set(range(400))


def test_unique_and_ordered_filters_hold_what_they_have():
    unique = UniqueFilter({"x": 4, "y": 7}, SPAN)
    unique.add(None, 9)
    unique.add(None, 12)
    ordered = OrderedFilter(OrderedIndex([(1, 4), (1, 5), (3, 7), (None, 9), (2, 12)]))
    cases = [(unique, [("x",), ("x", None), (None,), ("q",), ("x", "y")]), (ordered, [(1,), (1, 3, None), (2,), (9,)])]
    for index, key_sets in cases:
        for keys in key_sets:
            ids = [12, 4, 5, 7, 9] + ([0] if index is unique else [])  # the ordered index's own ids only
            held = index.holding(frozenset(keys), ids)
            assert held == [i for i in ids if index.has(frozenset(keys), i)] and (held or keys in [("q",), (9,)])


def _rows(count: int) -> list[dict]:
    rng = random.Random(count)
    return [
        {
            "n": rng.choice([None, 0, 1, 2, 7]),
            "f": rng.choice([None, 0.5, 1.0, 2.0, 3.0]),
            "s": rng.choice([None, "a", "ab", "b", "é"]),
            "t": rng.choice(["a", "b", "ab", "Z"]),
            "b": rng.random() < 0.5,
            "dt": None,
            "g": rng.choice([None, 0, 1, 2]) if rng.random() < 0.9 else 5,
            "w": None,
        }
        for _ in range(count)
    ]


def _pages(store: Store, params: list[tuple[str, str]], limit: int) -> list[int]:
    """Every page by cursor, the ids in order."""
    ids: list[int] = []
    cursor = None
    for _ in range(1000):
        query = ITEM.parse_list_query(params + [("limit", str(limit))] + ([("cursor", cursor)] if cursor else []))
        records, _total, _watermark, more = store.list_page("Item", query)
        ids += [r["id"] for r in records]
        if not more:
            return ids
        last = records[-1]
        cursor = encode_cursor("Item", query.sort, [ITEM.keys[f](last[f]) for f, _d in query.sort], last["id"])
    raise AssertionError("a cursor walk that does not end")


# (params, SQL where, args, SQL order)
TWO_FILTERS = [
    ([("g", "5"), ("b", "true")], "g = 5 AND b = 1", [], "id"),  # g=5 under KEEPER_AT ids
    ([("g", "5"), ("b", "false"), ("sort", "-f")], "g = 5 AND b = 0", [], "f DESC NULLS FIRST, id"),
    ([("g", "5"), ("n", "7")], "g = 5 AND n = 7", [], "id"),  # the other field an ordered filter
    ([("g", "5"), ("n", "1"), ("n", "null")], "g = 5 AND (n = 1 OR n IS NULL)", [], "id"),
    ([("g", "5"), ("s", "a"), ("s", "b"), ("sort", "t")], "g = 5 AND s IN ('a', 'b')", [], "t, id"),
    ([("g", "5"), ("g", "0"), ("b", "true"), ("n", "2")], "g IN (5, 0) AND b = 1 AND n = 2", [], "id"),
]
RANGE_ANOTHER_SORT = [
    ([("f", "1.0"), ("sort", "s")], "f > 1.0", [], "s ASC NULLS LAST, id"),  # nulls of s last
    ([("f__gte", "1.0"), ("sort", "s")], "f >= 1.0", [], "s ASC NULLS LAST, id"),
    ([("f__gte", "1.0"), ("sort", "-s")], "f >= 1.0", [], "s DESC NULLS FIRST, id"),
    ([("n__lt", "7"), ("sort", "t")], "n < 7", [], "t, id"),
]


@pytest.mark.parametrize(
    "params, where, args, order, kind",
    [(*case, "few") for case in TWO_FILTERS] + [(*case, "many") for case in RANGE_ANOTHER_SORT],
)
def test_lists_agree_with_sqlite(params, where, args, order, kind):
    params = [("f__gt", v) if k == "f" else (k, v) for k, v in params]
    with filled_store(_rows(400)) as (store, _ids, twin):
        want = twin.expected(where, args, order)
        if kind == "few":  # the smallest filter holds a few ids, some of them matching
            assert 0 < store.table("Item").hashes["g"].count((5,)) < KEEPER_AT and want
        else:  # many matches: the plan walks the sort order, testing each id
            assert len(want) * len(want) > 2 * 22 * 400
        for limit, offset in ((20, 0), (3, 2), (1, 0), (0, 0), (500, 0)):
            query = ITEM.parse_list_query(params + [("limit", str(limit)), ("offset", str(offset))])
            page, total, _watermark, more = store.list_page("Item", query)
            assert ([r["id"] for r in page], total) == (want[offset : offset + limit], len(want)), params
            assert more == (limit > 0 and offset + limit < len(want))
        assert _pages(store, params, 7) == want


@pytest.mark.parametrize("write", ["add", "remove", "run"])
def test_a_write_to_the_bucket_starts_the_asks_over(write):
    index = HashIndex(1000)
    for id_ in range(0, 800, 2):  # 400 ids: the set is made once 50 have been asked
        index.add("k", id_)
    for _ in range(2):
        index.holding(("k",), list(range(20)))  # 40 asked
    if write == "run":  # a replica's run past the bucket's last id: the list extended at once
        add_hash_run(index, ["k"] * 3, [800, 802, 804])
    else:
        index.add("k", 1) if write == "add" else index.remove("k", 0)
    index.holding(("k",), list(range(20)))  # 20 since the write: still bisected
    assert "k" not in index.kept_sets


def test_a_walk_of_the_whole_order_reaches_the_nulls_after_the_values():
    """A range matching most records, sorted by a field that is mostly null: the first page
    of the walk runs past the few values into the nulls (last, ascending)."""
    rows = _rows(400)
    for i, row in enumerate(rows):
        row["s"] = None if i % 40 else "a"  # 10 values, 390 nulls
        row["f"] = None if i % 5 == 1 else 2.0
    with filled_store(rows) as (store, _ids, twin):
        want = twin.expected("f > 1.0", [], "s ASC NULLS LAST, id")
        assert len(want) * len(want) > 2 * 21 * 400
        query = ITEM.parse_list_query([("f__gt", "1.0"), ("sort", "s"), ("limit", "20")])
        page, total, _watermark, more = store.list_page("Item", query)
        assert ([r["id"] for r in page], total, more) == (want[:20], len(want), True)
        assert page[-1]["s"] is None and page[0]["s"] == "a"
