"""A field that is @unique and @filter is filtered through its unique map (hashes.py
`UniqueFilter`): the same pages and totals as a bucket per key would give, nulls included,
through writes, undo, reopening from the log and from a snapshot."""

from __future__ import annotations

import random

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.runtime import Query
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from dbsvc.storage.hashes import HashIndex, IdBits, UniqueFilter
from support.storage import check_indexes, reference_list, run

SCHEMA = compile_schema(
    parse_schema(
        """
model Member {
  id     int   @id
  badge  str?  @unique @filter @sort
  team   int   @filter
}
""",
        "members.dbs",
    )
)


def open_members(path: str, **kw) -> Store:
    return Store.open(path, SCHEMA.MODELS, SCHEMA.DESCRIPTION, **kw)


def member(i: int, badge: str | None, team: int = 1) -> dict:
    return {"id": i, "badge": badge, "team": team}


QUERIES = [
    Query(filters={"badge": frozenset({"b3"})}),
    Query(filters={"badge": frozenset({"b3", "b7", "missing"})}, sort=(("badge", True),)),
    Query(filters={"badge": frozenset({None})}, limit=7, offset=2),
    Query(filters={"badge": frozenset({None, "b4"})}, sort=(("badge", False),), limit=50),
    Query(filters={"badge": frozenset({None}), "team": frozenset({2})}, limit=100),
    Query(filters={"badge": frozenset({"b5", "b6"}), "team": frozenset({2})}),
    Query(filters={"team": frozenset({1}), "badge": frozenset({"nobody"})}),
    Query(filters={"team": frozenset({1, 2})}, sort=(("badge", True),), limit=10),
]


def assert_lists_agree(store: Store) -> None:
    table = store.tables["Member"]
    for q in QUERIES:
        got, total, _wm = store.list_records("Member", q)
        want, want_total = reference_list(table.records, table.model, q)
        assert [r["id"] for r in got] == [r["id"] for r in want], q
        assert total == want_total, q
    check_indexes(store)


def test_the_unique_map_answers_the_filter_and_no_bucket_is_kept_per_value(tenant):
    s = open_members(tenant)

    async def go():
        for i in range(1, 41):
            await s.insert("Member", member(i, None if i % 4 == 0 else f"b{i}", team=1 + i % 2))

    run(go())
    index = s.tables["Member"].hashes["badge"]
    assert type(index) is UniqueFilter and index.unique is s.tables["Member"].unique["badge"]
    assert list(index.nulls.buckets) == [None]  # only null has a bucket
    assert sorted(index.nulls.ids((None,))) == list(range(4, 41, 4))
    assert index.count(frozenset({"b1", "b2", "nope"})) == 2
    assert index.count(frozenset({None, "b1"})) == 11
    assert index.ids(frozenset({"b1", None})) == {1, *range(4, 41, 4)}
    assert index.has(frozenset({"b5"}), 5) and not index.has(frozenset({"b5"}), 6)
    assert index.has(frozenset({None}), 8) and not index.has(frozenset({"b5"}), 8)
    keep = index.keeper("b9")
    assert [i for i in range(1, 41) if keep(i)] == [9]
    assert not any(map(index.keeper("nope"), range(1, 41)))
    assert [i for i in range(1, 41) if index.keeper(None)(i)] == list(range(4, 41, 4))
    assert_lists_agree(s)
    s.close()


def test_writes_move_ids_between_a_value_and_null_and_reopening_rebuilds_the_same(tenant):
    rnd = random.Random(11)
    s = open_members(tenant)
    live: dict[int, str | None] = {}

    async def go():
        for i in range(1, 121):
            badge = None if rnd.random() < 0.3 else f"b{i}"
            await s.insert("Member", member(i, badge, team=rnd.randrange(1, 3)))
            live[i] = badge
        for _ in range(150):
            i = rnd.choice(sorted(live))
            roll = rnd.random()
            if roll < 0.15:
                await s.delete("Member", i)
                del live[i]
            else:
                badge = None if roll < 0.5 else f"r{rnd.randrange(10**6)}"
                if badge in live.values() and badge is not None:
                    continue
                await s.replace("Member", i, member(i, badge, team=rnd.randrange(1, 3)))
                live[i] = badge

    run(go())
    assert_lists_agree(s)
    s.close()
    reopened = open_members(tenant)  # replayed from the log
    assert_lists_agree(reopened)
    reopened.close()
    open_members(tenant, compact_bytes=1).close()  # writes a snapshot
    loaded = open_members(tenant)  # built from it (load_base)
    table = loaded.tables["Member"]
    assert table.rows == [] and len(table.base_ids) == len(live)
    assert type(table.hashes["badge"]) is UniqueFilter and table.hashes["badge"].unique is table.unique["badge"]
    assert_lists_agree(loaded)
    assert {i: r["badge"] for i, r in table.records.items()} == live
    loaded.close()


def test_a_taken_value_is_refused_and_the_filter_still_finds_its_holder(tenant):
    from dbsvc.errors import UniqueViolation

    s = open_members(tenant)
    run(s.insert("Member", member(1, "same")))
    with pytest.raises(UniqueViolation):
        run(s.insert("Member", member(2, "same")))
    got, total, _ = s.list_records("Member", Query(filters={"badge": frozenset({"same"})}))
    assert total == 1 and [r["id"] for r in got] == [1]
    assert_lists_agree(s)
    s.close()


def test_null_flags_cover_every_id_even_when_only_values_were_added():
    """Ids added under a value never enter a bucket, yet a walk may test any live id
    against the null bucket's flags: they must reach every id."""
    unique: dict = {}
    index = UniqueFilter(unique, span=0)
    ids = list(range(0, 40_000))
    for i in ids[:20_000]:
        index.add(None, i)
    assert type(index.nulls.buckets[None]) is IdBits
    for i in ids[20_000:]:
        unique[f"v{i}"] = i
        index.add(f"v{i}", i)
    keep = index.keeper(None)
    assert sum(map(bool, map(keep, ids))) == 20_000  # no IndexError past 20,000
    assert index.nulls.span > ids[-1]
    for i in ids[:20_000]:
        index.remove(None, i)
    assert index.nulls.buckets == {} and index.count(frozenset({None})) == 0


def test_a_bucket_index_and_the_unique_filter_answer_alike():
    rnd = random.Random(5)
    keys = [None if rnd.random() < 0.2 else f"k{i}" for i in range(1, 501)]
    ids = list(range(1, 501))
    unique = {k: i for k, i in zip(keys, ids) if k is not None}
    ufilter = UniqueFilter.from_column(unique, keys, ids, span=501)
    buckets = HashIndex.from_columns(keys, ids, span=501)
    asked = [frozenset({None}), frozenset({"k3"}), frozenset({"k3", "k10", None}), frozenset({"zz"})]
    for keyset in asked:
        assert ufilter.count(keyset) == buckets.count(keyset)
        assert ufilter.ids(keyset) == buckets.ids(keyset)
        for id_ in (1, 3, 10, 250, 500):
            assert ufilter.has(keyset, id_) == buckets.has(keyset, id_)
    for key in (None, "k3", "zz"):
        assert [i for i in ids if ufilter.keeper(key)(i)] == [i for i in ids if buckets.keeper(key)(i)]
