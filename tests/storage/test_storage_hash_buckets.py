"""`HashIndex` buckets: sorted lists of ids while small; past SET_AT ids, flags over the id
space (`IdBits`) when the ids are ints and the bucket holds an eighth of them, sets
otherwise; the same answers in every form (hashes.py, `HashIndex`), and list pages whose
walks test ids against each form return what a brute-force list returns."""

from __future__ import annotations

import asyncio
import random

import pytest

from dbsvc.runtime import Query
from dbsvc.storage import hashes
from dbsvc.storage.hashes import HashIndex, IdBits
from support.storage import BLOG, check_indexes, open_store, post, reference_list, user

BLOG_POST = BLOG.BY_NAME["BlogPost"]


@pytest.fixture
def small_set_at(monkeypatch):
    monkeypatch.setattr(hashes, "SET_AT", 8)
    return 8


def test_a_bucket_is_a_sorted_list_whatever_order_ids_come_in():
    index = HashIndex()
    for id_ in (5, 1, 9, 3, 7):
        index.add("k", id_)
    assert index.buckets == {"k": [1, 3, 5, 7, 9]}
    index.remove("k", 5)
    index.remove("k", 4)  # absent: nothing happens, as with a set's discard
    index.remove("k", 99)  # absent and past the last id too
    assert index.buckets == {"k": [1, 3, 7, 9]}
    assert index.has(["x", "k"], 7) and not index.has(["k"], 5) and not index.has(["x"], 7)
    assert not index.has(["k"], 99) and not index.has(["k"], 0)
    assert index.count(["k", "x"]) == 4 and index.ids(["k", "x"]) == {1, 3, 7, 9}
    for id_ in (1, 3, 7, 9):
        index.remove("k", id_)
    assert index.buckets == {}  # an emptied bucket is dropped


def test_a_bucket_past_set_at_becomes_a_set_and_stays_one(small_set_at):
    index = HashIndex()
    for id_ in range(small_set_at):
        index.add(True, id_)
    assert type(index.buckets[True]) is list
    index.add(True, 100)  # no id space known (span -1): a set
    assert index.buckets[True] == set(range(small_set_at)) | {100}
    for id_ in range(small_set_at):
        index.remove(True, id_)
    assert index.buckets[True] == {100}  # still a set: no flapping around the limit
    assert index.has([True], 100)
    assert index.keeper(True) == index.buckets[True].__contains__


@pytest.mark.parametrize("build", ["from_columns", "from_runs"])
def test_bulk_builds_choose_lists_and_sets_by_size(small_set_at, build):
    ids = list(range(1, 40))
    keys = ["big" if i % 2 else f"small{i % 6}" for i in ids]  # 20 ids vs 3-4 each
    if build == "from_columns":
        index = HashIndex.from_columns(keys, ids)
    else:
        index = HashIndex.from_runs((k, [i for i, kk in zip(ids, keys) if kk == k]) for k in dict.fromkeys(keys))
    assert type(index.buckets["big"]) is set and len(index.buckets["big"]) == 20
    smalls = {k: v for k, v in index.buckets.items() if k != "big"}
    assert all(type(v) is list and v == sorted(v) for v in smalls.values())
    assert sum(map(len, smalls.values())) == 19


def _kept(keep, ids=range(12)) -> list:
    return [i for i in ids if keep(i)]


def test_the_keeper_of_a_list_bucket_is_a_set_kept_until_its_bucket_changes():
    index = HashIndex()
    for id_ in (1, 2, 3):
        index.add("a", id_)
    index.add("b", 4)
    first = index.keeper("a")
    assert _kept(first) == [1, 2, 3] and index.keeper("a") == first  # the same set's test
    index.add("b", 5)
    assert index.keeper("a") == first  # another key's change
    index.add("a", 9)
    assert _kept(index.keeper("a")) == [1, 2, 3, 9]  # made afresh
    index.remove("a", 1)
    assert _kept(index.keeper("a")) == [2, 3, 9]
    assert _kept(index.keeper("nobody")) == []


def test_keepers_keep_a_bounded_number_of_sets():
    index = HashIndex()
    for key in range(3 * hashes.KEPT_SETS):
        index.add(key, key)
        assert _kept(index.keeper(key), range(100)) == [key]
        assert len(index.kept_sets) <= hashes.KEPT_SETS


def test_a_big_bucket_of_int_ids_is_flags_over_the_id_space(small_set_at):
    ids = list(range(0, 40))
    keys = [i % 2 == 0 for i in ids]  # 20 ids each: past SET_AT (8), half the space
    index = HashIndex.from_columns(keys, ids, HashIndex.span_of(True, ids))
    bits = index.buckets[True]
    assert type(bits) is IdBits and len(bits) == 20 and list(bits) == ids[::2]
    assert bytes(bits.flags) == bytes([1, 0] * 20)
    assert index.keeper(True) == bits.flags.__getitem__  # the walk's test, in C
    assert index.has([True], 4) and not index.has([True], 5) and not index.has([True], 400)
    assert 0 in bits and 4 in bits and 1 not in bits
    assert "4" not in bits and -2 not in bits and 40 not in bits
    index.remove(True, 4)
    index.remove(True, 4)  # absent: nothing happens
    assert len(bits) == 19 and not bits.flags[4] and index.count([True, False]) == 39
    assert index.ids([True]) == set(ids[::2]) - {4}


@pytest.mark.parametrize(
    "size, span, form",
    [
        (8, 100, list),  # SET_AT ids exactly: still a list
        (9, 72, IdBits),  # 9 * 8 = 72: flags cost what a list would
        (9, 73, set),  # one id more of space: a set
        (10, 80, IdBits),
        (10, 81, set),
    ],
)
def test_the_form_of_a_bucket_built_whole(small_set_at, size, span, form):
    ids = list(range(span - size, span))
    index = HashIndex.from_runs([("k", ids)], span)
    assert type(index.buckets["k"]) is form and sorted(index.buckets["k"]) == ids


def test_flags_grow_with_the_ids_and_every_live_id_indexes_them(small_set_at):
    ids = list(range(1, 41))
    index = HashIndex.from_columns([i % 2 == 0 for i in ids], ids, HashIndex.span_of(True, ids))
    assert index.span == 41 and {type(b) for b in index.buckets.values()} == {IdBits}
    for id_ in range(41, 2000):  # new records, ids in order
        index.add(id_ % 2 == 0, id_)
        assert index.span > id_
        assert all(len(b.flags) == index.span for b in index.buckets.values())
    assert index.span < 2 * 2000  # grown by an eighth at a time, not doubled
    assert _kept(index.keeper(True), range(2000)) == list(range(2, 2000, 2))
    assert _kept(index.keeper(False), range(2000)) == list(range(1, 2000, 2))


def test_flags_that_would_cost_more_than_twice_a_list_become_a_set(small_set_at):
    ids = list(range(1, 41))
    index = HashIndex.from_columns([i % 2 == 0 for i in ids], ids, HashIndex.span_of(True, ids))
    index.add(True, 10_000)  # a client's id far past the others
    assert {type(b) for b in index.buckets.values()} == {set}
    assert index.buckets[True] == set(range(2, 41, 2)) | {10_000}
    assert _kept(index.keeper(True), [2, 3, 10_000]) == [2, 10_000]


def test_a_negative_id_ends_flags_for_the_index(small_set_at):
    ids = list(range(1, 41))
    index = HashIndex.from_columns([True] * 40, ids, HashIndex.span_of(True, ids))
    assert type(index.buckets[True]) is IdBits
    index.add(True, -5)
    assert index.span == -1 and index.buckets[True] == set(ids) | {-5}
    index.add(False, 7_000)  # no flags any more, whatever the id
    assert index.span == -1 and index.buckets[False] == [7_000]


@pytest.mark.parametrize("ids, span", [([], 0), ([0, 5], 6), ([-1, 5], -1)])
def test_the_span_of_int_ids_is_one_past_the_largest(ids, span):
    assert HashIndex.span_of(True, ids) == span
    assert HashIndex.span_of(False, ids) == -1  # str or uuid ids: never flags


def test_str_ids_never_get_flags(small_set_at):
    ids = [f"k{i:03}" for i in range(40)]
    index = HashIndex.from_columns([True] * 40, ids, HashIndex.span_of(False, ids))
    assert index.buckets[True] == set(ids)
    index.add(True, "k999")
    assert "k999" in index.buckets[True]


@pytest.mark.parametrize("seed", range(3))
def test_walks_and_counts_over_list_buckets_match_a_brute_force_list(tmp_path, monkeypatch, seed):
    """300 posts, 4 scores (about 75 posts each) and SET_AT 80: buckets on both sides of
    the limit, lists below it and flags above (a bucket past 80 ids holds over an eighth of
    the 300 ids). A one-value filter with a short page walks a sort order against the
    bucket (75 * 75 > KEPT_WALK_FACTOR * page end * 300), a list bucket's kept set; two
    filters count through `has`. Every page and total matches the brute-force list,
    before and after updates move records between buckets (dropping the kept sets)."""
    monkeypatch.setattr(hashes, "SET_AT", 80)
    rnd = random.Random(seed)
    store = open_store(str(tmp_path), sync="off")
    table = store.tables["BlogPost"]
    walked = 0
    forms: set[str] = set()

    async def run() -> None:
        nonlocal walked
        for i in range(1, 6):
            await store.insert("User", user(i))
        for i in range(1, 301):
            await store.insert(
                "BlogPost",
                post(
                    i,
                    author=rnd.randint(1, 5),
                    title=f"t{rnd.randrange(50)}",
                    published=rnd.random() < 0.3,
                    score=float(rnd.randrange(4)),
                ),
            )
        for round_ in range(4):
            for q in _queries(rnd):
                page, total, _watermark = store.list_records("BlogPost", q)
                assert (page, total) == reference_list(table.records, BLOG_POST, q), (round_, q)
            walked += len(table.hashes["score"].kept_sets)
            forms.update(type(b).__name__ for h in table.hashes.values() for b in h.buckets.values())
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
    assert {"list", "IdBits"} <= forms, forms


def _queries(rnd: random.Random) -> list[Query]:
    out = []
    for _ in range(16):
        filters = {"score": frozenset([float(rnd.randrange(4))])}
        if rnd.random() < 0.3:
            filters["published"] = frozenset([True])
        sort = rnd.choice([(), (("title", False),), (("title", True),)])
        out.append(Query(filters=filters, sort=sort, limit=rnd.choice([1, 2, 20]), offset=rnd.choice([0, 1, 30])))
    return out


def test_first_after_slices_a_list_bucket_and_declines_other_forms(small_set_at):
    """The first `end` ids of one key's list bucket after an id (session 13: a filter's page
    in id order at a cursor, which made a set of the whole bucket before)."""
    index = HashIndex()
    for id_ in (9, 3, 5, 1, 7):
        index.add("k", id_)
    assert index.first_after(["k"], None, 3) == [1, 3, 5]
    assert index.first_after(["k"], 3, 2) == [5, 7] and index.first_after(["k"], 4, 9) == [5, 7, 9]
    assert index.first_after(["k"], 9, 5) == [] and index.first_after(["absent"], None, 5) == []
    assert index.first_after(["k", "x"], None, 5) is None  # several keys: the set path
    for id_ in range(20, 21 + small_set_at):  # one past SET_AT: a set (no id space known)
        index.add("big", id_)
    assert type(index.buckets["big"]) is not list and index.first_after(["big"], None, 2) is None


@pytest.mark.parametrize("seed", range(3))
def test_a_filtered_page_in_id_order_at_a_cursor_matches_the_brute_force(tmp_path, seed):
    """One filter, no sort, a cursor (an id) and an offset: the page is the bucket's ids
    after the cursor, from the offset, and the total is the bucket's size, before and after
    deletes and moves between buckets."""
    rnd = random.Random(seed)
    store = open_store(str(tmp_path), sync="off")
    table = store.tables["BlogPost"]

    async def run() -> None:
        for i in range(1, 6):
            await store.insert("User", user(i))
        for i in range(1, 201):
            await store.insert("BlogPost", post(i, author=rnd.randint(1, 5), score=float(rnd.randrange(4))))
        for round_ in range(3):
            for _ in range(30):
                author, after = rnd.randint(1, 5), rnd.choice([None, rnd.randint(0, 210)])
                limit, offset = rnd.choice([1, 3, 20]), rnd.choice([0, 1, 7])
                query = Query(
                    filters={"author_id": frozenset([author])},
                    limit=limit,
                    offset=offset,
                    cursor=None if after is None else ((), after),
                )
                page, total, _watermark = store.list_records("BlogPost", query)
                bucket = sorted(i for i, r in table.records.items() if r["author_id"] == author)
                expected = [i for i in bucket if after is None or i > after][offset : offset + limit]
                assert ([r["id"] for r in page], total) == (expected, len(bucket)), (round_, query)
            for _ in range(20):
                target = rnd.choice(sorted(table.live))
                await store.replace("BlogPost", target, dict(table.records[target], author_id=rnd.randint(1, 5)))
            await store.delete("BlogPost", rnd.choice(sorted(table.live)))

    try:
        asyncio.run(run())
    finally:
        store.close()


def test_a_write_to_one_key_after_a_question_about_another_keeps_both_answers():
    """`holding` counts the ids it asked of a key's list bucket (`_asked`); an add or a
    remove on another key, or on that key, changes nothing of what the next question says."""
    index = HashIndex()
    for id_ in range(1, 201):
        index.add("even" if id_ % 2 == 0 else "odd", id_)
    assert index.holding(["even"], [1, 2, 3, 4]) == [2, 4]  # asked: a bisect an id
    index.add("odd", 201)  # another key than the one asked about
    index.add("even", 202)
    index.remove("odd", 3)
    assert index.holding(["even"], [2, 3, 202]) == [2, 202]
    assert index.holding(["odd"], [1, 3, 201]) == [1, 201]
