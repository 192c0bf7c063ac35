"""`HashIndex` buckets: sorted lists of ids while small, sets past SET_AT ids, with the same
answers either way (indexes.py, `HashIndex`), and a list page whose walk tests ids against a
list bucket returns what a brute-force list returns."""

from __future__ import annotations

import asyncio
import random

import pytest
from support.storage import BLOG, check_indexes, open_store, post, reference_list, user

from dbsvc.runtime import Query
from dbsvc.storage import indexes
from dbsvc.storage.indexes import HashIndex

BLOG_POST = BLOG.BY_NAME["BlogPost"]

@pytest.fixture
def small_set_at(monkeypatch):
    monkeypatch.setattr(indexes, "SET_AT", 8)
    return 8


def test_a_bucket_is_a_sorted_list_whatever_order_ids_come_in():
    index = HashIndex()
    for id_ in (5, 1, 9, 3, 7):
        index.add("k", id_)
    assert index.buckets == {"k": [1, 3, 5, 7, 9]}
    index.remove("k", 5)
    index.remove("k", 4)                     # absent: nothing happens, as with a set's discard
    assert index.buckets == {"k": [1, 3, 7, 9]}
    assert index.has(["x", "k"], 7) and not index.has(["k"], 5) and not index.has(["x"], 7)
    assert index.count(["k", "x"]) == 4 and index.ids(["k", "x"]) == {1, 3, 7, 9}
    for id_ in (1, 3, 7, 9):
        index.remove("k", id_)
    assert index.buckets == {}                # an emptied bucket is dropped


def test_a_bucket_past_set_at_becomes_a_set_and_stays_one(small_set_at):
    index = HashIndex()
    for id_ in range(small_set_at):
        index.add(True, id_)
    assert type(index.buckets[True]) is list
    index.add(True, 100)
    assert index.buckets[True] == set(range(small_set_at)) | {100}
    for id_ in range(small_set_at):
        index.remove(True, id_)
    assert index.buckets[True] == {100}       # still a set: no flapping around the limit
    assert index.has([True], 100) and index.member(True) is index.buckets[True]


@pytest.mark.parametrize("build", ["from_columns", "from_runs"])
def test_bulk_builds_choose_lists_and_sets_by_size(small_set_at, build):
    ids = list(range(1, 40))
    keys = ["big" if i % 2 else f"small{i % 6}" for i in ids]      # 20 ids vs 3-4 each
    if build == "from_columns":
        index = HashIndex.from_columns(keys, ids)
    else:
        index = HashIndex.from_runs((k, [i for i, kk in zip(ids, keys) if kk == k]) for k in dict.fromkeys(keys))
    assert type(index.buckets["big"]) is set and len(index.buckets["big"]) == 20
    smalls = {k: v for k, v in index.buckets.items() if k != "big"}
    assert all(type(v) is list and v == sorted(v) for v in smalls.values())
    assert sum(map(len, smalls.values())) == 19


def test_member_is_a_set_kept_until_its_bucket_changes():
    index = HashIndex()
    for id_ in (1, 2, 3):
        index.add("a", id_)
    index.add("b", 4)
    first = index.member("a")
    assert first == {1, 2, 3} and index.member("a") is first       # kept
    index.add("b", 5)
    assert index.member("a") is first                              # another key's change
    index.add("a", 9)
    assert index.member("a") == {1, 2, 3, 9}                       # made afresh
    index.remove("a", 1)
    assert index.member("a") == {2, 3, 9}
    assert index.member("nobody") == () and 1 not in index.member("nobody")


def test_member_keeps_a_bounded_number_of_sets():
    index = HashIndex()
    for key in range(3 * indexes.KEPT_SETS):
        index.add(key, key)
        assert index.member(key) == {key}
    assert len(index._sets) <= indexes.KEPT_SETS


@pytest.mark.parametrize("seed", range(3))
def test_walks_and_counts_over_list_buckets_match_a_brute_force_list(tmp_path, monkeypatch, seed):
    """300 posts, 4 scores (about 75 posts each) and SET_AT 80: buckets on both sides of
    the limit. A one-value filter with a short page walks a sort order against the
    bucket (75 * 75 > WALK_FACTOR * page end * 300), a list bucket's kept set; two
    filters count through `has`. Every page and total matches the brute-force list,
    before and after updates move records between buckets (dropping the kept sets)."""
    monkeypatch.setattr(indexes, "SET_AT", 80)
    rnd = random.Random(seed)
    store = open_store(str(tmp_path), sync="off")
    table = store._tables["BlogPost"]
    walked = 0

    async def run() -> None:
        nonlocal walked
        for i in range(1, 6):
            await store.insert("User", user(i))
        for i in range(1, 301):
            await store.insert("BlogPost", post(i, author=rnd.randint(1, 5), title=f"t{rnd.randrange(50)}",
                                                published=rnd.random() < 0.3, score=float(rnd.randrange(4))))
        for round_ in range(4):
            for q in _queries(rnd):
                page, total, _watermark = store.list("BlogPost", q)
                assert (page, total) == reference_list(table.records, BLOG_POST, q), (round_, q)
            walked += len(table.hashes["score"]._sets)
            for _ in range(40):
                target = rnd.choice(sorted(table.live))
                record = dict(table.records[target], score=float(rnd.randrange(4)), published=rnd.random() < 0.5)
                await store.replace("BlogPost", target, record)
            await store.delete("BlogPost", rnd.choice(sorted(table.live)))
        check_indexes(store)

    try:
        asyncio.run(run())
    finally:
        store.close()
    assert walked > 0, "no query walked a list bucket"


def _queries(rnd: random.Random) -> list[Query]:
    out = []
    for _ in range(16):
        filters = {"score": frozenset([float(rnd.randrange(4))])}
        if rnd.random() < 0.3:
            filters["published"] = frozenset([True])
        sort = rnd.choice([(), (("title", False),), (("title", True),)])
        out.append(Query(filters=filters, sort=sort, limit=rnd.choice([1, 2, 20]), offset=rnd.choice([0, 1, 30])))
    return out
