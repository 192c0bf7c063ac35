"""Store API: CRUD, constraints, atomicity, ordering, list plans, events, reopen."""

from __future__ import annotations

import asyncio
import random

import pytest

from dbsvc.errors import (
    ForeignKeyViolation,
    NotFound,
    OffsetGone,
    OffsetOutOfRange,
    Referenced,
    Unavailable,
    UniqueViolation,
)
from dbsvc.runtime import Query
from dbsvc.storage import ChangeEvent, EventKind, query
from support.storage import post, reference_list, run, user
from support.tree import dir_image


def test_insert_assigns_max_ever_used_plus_one(tenant, stores):
    s = stores(tenant)

    async def go():
        a = await s.insert("User", user(None, email="a@x"))
        b = await s.insert("User", user(10, email="b@x"))
        await s.delete("User", 10)
        c = await s.insert("User", user(None, email="c@x"))
        return a["id"], b["id"], c["id"]

    assert run(go()) == (1, 10, 11)
    s.close()
    s = stores(tenant)
    assert run(s.insert("User", user(None, email="d@x")))["id"] == 12


def test_unique_violation_on_primary_key_and_unique_field(tenant, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    with pytest.raises(UniqueViolation, match="id 1 is already used by user 1"):
        run(s.insert("User", user(1, email="other@x")))
    with pytest.raises(UniqueViolation, match="email 'u1@example.com' is already used by user 1"):
        run(s.insert("User", user(2, email="u1@example.com")))
    run(s.insert("User", user(2)))
    with pytest.raises(UniqueViolation):
        run(s.replace("User", 2, user(2, email="u1@example.com")))
    run(s.replace("User", 2, user(2, email="u2@example.com", name="same email kept")))


def test_refused_write_changes_nothing_in_memory_or_on_disk(tenant, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    before = dir_image(tenant)
    state = (s.watermarks(), s.head_offset, dict(s.tables["User"].records))
    for attempt in (
        s.insert("User", user(1)),
        s.insert("BlogPost", post(1, author=99)),
        s.replace("User", 5, user(5)),
        s.delete("User", 77),
    ):
        with pytest.raises((UniqueViolation, ForeignKeyViolation, NotFound)):
            run(attempt)
    assert (s.watermarks(), s.head_offset, dict(s.tables["User"].records)) == state
    assert dir_image(tenant) == before


def test_foreign_keys_and_referenced_count(tenant, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    with pytest.raises(ForeignKeyViolation, match="author_id 2 does not match any user"):
        run(s.insert("BlogPost", post(1, author=2)))
    run(s.insert("BlogPost", post(1, author=1)))
    run(s.insert("BlogPost", post(2, author=1)))
    with pytest.raises(ForeignKeyViolation):
        run(s.replace("BlogPost", 1, post(1, author=3)))
    with pytest.raises(Referenced, match="referenced by 2 record") as info:
        run(s.delete("User", 1))
    assert info.value.extra["count"] == 2
    run(s.delete("BlogPost", 1))
    run(s.delete("BlogPost", 2))
    assert run(s.delete("User", 1))["id"] == 1


def test_filters_are_typed_so_3_and_3_0_are_one_key(tenant, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    run(s.insert("BlogPost", post(1, score=3.0)))
    run(s.insert("BlogPost", post(2, score=3)))
    records, total, _ = s.list_records("BlogPost", Query(filters={"score": frozenset({3})}))
    assert [r["id"] for r in records] == [1, 2] and total == 2


def _random_posts(s, n, seed=7):
    rnd = random.Random(seed)

    async def go():
        await s.insert("User", user(1))
        await s.insert("User", user(2))
        for i in range(1, n + 1):
            await s.insert(
                "BlogPost",
                post(
                    rnd.choice([None, i]) and rnd.randint(1, 10**6),
                    author=rnd.choice([1, 2]),
                    title=rnd.choice(["a", "b", "c", "d"]) + str(rnd.randint(0, 3)),
                    published=rnd.random() < 0.3,
                    score=float(rnd.randint(0, 5)),
                ),
            )

    run(go())


def assert_list_agrees_with_a_full_sort(s, model, q):
    """The store's planned list equals filtering and sorting every live record."""
    got, total, wm = s.list_records(model, q)
    want, want_total = reference_list(s.tables[model].records, s.tables[model].model, q)
    assert [r["id"] for r in got] == [r["id"] for r in want]
    assert total == want_total
    assert wm == s.watermarks()[model]


QUERIES = [
    Query(),
    Query(sort=(("score", False),), limit=20),
    Query(sort=(("score", True),), limit=20, offset=13),
    Query(sort=(("title", True), ("score", False)), limit=50),
    Query(sort=(("score", True), ("title", True)), limit=7, offset=3),
    Query(filters={"published": frozenset({True})}, sort=(("score", True),), limit=20),
    Query(filters={"published": frozenset({False})}, sort=(("title", False),), limit=20, offset=40),
    Query(filters={"author_id": frozenset({1}), "published": frozenset({True})}, limit=10),
    Query(
        filters={"score": frozenset({1.0, 2.0}), "author_id": frozenset({2})},
        sort=(("title", False), ("score", True)),
        limit=30,
    ),
    Query(filters={"score": frozenset({9.0})}),
    Query(limit=0),
    Query(offset=10_000),
    # Large buckets and small pages: these take the walk plan (bucket^2 > factor*end*n),
    # one value (bucket membership) and several values (the generated matcher).
    Query(filters={"published": frozenset({False})}, sort=(("score", True),), limit=5, offset=2),
    Query(filters={"published": frozenset({False})}, sort=(("score", False),), limit=5),
    Query(filters={"published": frozenset({False})}, limit=5, offset=1),
    Query(filters={"author_id": frozenset({1, 2})}, sort=(("score", True),), limit=5),
    Query(filters={"published": frozenset({False})}, sort=(("title", True), ("score", False)), limit=4),
]


@pytest.mark.parametrize("q", QUERIES)
def test_indexed_list_agrees_with_a_full_sort(tenant, q, stores):
    s = stores(tenant, sync="off")
    _random_posts(s, 600)
    assert_list_agrees_with_a_full_sort(s, "BlogPost", q)


def _random_users(s, n, seed=11):
    rnd = random.Random(seed)

    async def go():
        for i in rnd.sample(range(1, 10 * n), n):  # ids out of insertion order
            await s.insert(
                "User",
                user(
                    i,
                    age=rnd.choice([None, 20, 30, 30, 40, rnd.randint(0, 150)]),
                    role=rnd.choice(["admin", "editor", "reader", "reader"]),
                    name=rnd.choice(["ann", "bob", "cy"]),
                ),
            )

    run(go())


# One sort key (or none): the itertools walk (query._one_key_page), filtered by a hash
# bucket or by the generated matcher. Nullable `age` with long runs of equal values: pages
# that start and end inside runs, inside the nulls, and past the end.
ONE_KEY_QUERIES = [
    Query(sort=(("age", desc),), filters=filters, limit=limit, offset=offset)
    for desc in (False, True)
    for filters in ({}, {"role": frozenset({"reader"})}, {"role": frozenset({"admin"})})
    for limit, offset in ((1, 0), (7, 0), (7, 3), (25, 40), (3, 61), (1000, 0), (10, 10_000))
] + [
    Query(filters={"role": frozenset({"editor"})}, limit=9, offset=4),
    Query(filters={"role": frozenset({"editor"})}, sort=(("name", True),), limit=30, offset=2),
    Query(filters={"role": frozenset({"editor"})}, sort=(("name", False),), limit=30, offset=2),
    # Not one value of one field: the walk tests the generated matcher instead of a bucket.
    Query(filters={"role": frozenset({"admin", "editor"})}, sort=(("age", True),), limit=7, offset=3),
    Query(filters={"role": frozenset({"admin", "editor"})}, sort=(("age", False),), limit=40, offset=30),
    Query(
        filters={"role": frozenset({"reader"}), "name": frozenset({"ann"})}, sort=(("age", True),), limit=25, offset=5
    ),
    Query(filters={"role": frozenset({"admin", "editor"})}, limit=9, offset=4),
]


@pytest.mark.parametrize("walk_factor", [0, query.WALK_FACTOR], ids=["always-walk", "planned"])
@pytest.mark.parametrize("q", ONE_KEY_QUERIES)
def test_one_key_walk_agrees_with_a_full_sort(tenant, q, walk_factor, monkeypatch, stores):
    monkeypatch.setattr(query, "WALK_FACTOR", walk_factor)
    monkeypatch.setattr(query, "KEPT_WALK_FACTOR", walk_factor and query.KEPT_WALK_FACTOR)
    s = stores(tenant, sync="off")
    _random_users(s, 400)
    assert_list_agrees_with_a_full_sort(s, "User", q)


def test_ties_break_on_id_ascending_in_both_directions(tenant, stores):
    s = stores(tenant, sync="off")
    run(s.insert("User", user(1, age=30)))
    run(s.insert("User", user(2, age=None)))
    run(s.insert("User", user(3, age=30)))
    run(s.insert("User", user(4, age=20)))
    asc, _, _ = s.list_records("User", Query(sort=(("age", False),)))
    desc, _, _ = s.list_records("User", Query(sort=(("age", True),)))
    assert [r["id"] for r in asc] == [4, 1, 3, 2]  # nulls last ascending
    assert [r["id"] for r in desc] == [2, 1, 3, 4]  # nulls first descending, ids ascending in ties


def test_events_reach_subscribers_after_commit_in_offset_order(tenant, stores):
    s = stores(tenant)
    seen: list[ChangeEvent] = []
    unsubscribe = s.subscribe(lambda event, frame: seen.append(event))

    async def go():
        await s.insert("User", user(1))
        await asyncio.gather(*(s.insert("BlogPost", post(i)) for i in range(1, 21)))
        await s.replace("BlogPost", 3, post(3, title="new"))
        await s.delete("BlogPost", 4)

    run(go())
    assert [e.offset for e in seen] == list(range(1, 24))
    last = seen[-2]
    assert last.kind is EventKind.UPDATE and last.previous["title"] == "title 3"
    assert last.to_dict() == {
        "kind": "update",
        "model": "BlogPost",
        "offset": 22,
        "watermark": 21,
        "id": 3,
        "record": post(3, title="new"),
        "previous": post(3),
    }
    assert seen[-1].to_dict()["kind"] == "delete" and "previous" not in seen[-1].to_dict()
    unsubscribe()
    run(s.insert("BlogPost", post(99)))
    assert len(seen) == 23


def test_event_frame_is_the_log_record(tenant, stores):
    s = stores(tenant, replication=True)
    run(s.insert("User", user(1)))
    frames = list(s.frames_after(0))
    with open(s.epoch_state.log_path, "rb") as f:
        assert f.read()[40:] == frames[0]
    assert frames[0] == next(iter(s.events_after(0))).frame()


@pytest.mark.parametrize("replication", [False, True])
def test_events_after_ring_and_log(tenant, replication, stores):
    s = stores(tenant, ring_capacity=5, replication=replication)

    async def go():
        for i in range(1, 11):
            await s.insert("User", user(i))

    run(go())
    assert [e.offset for e in s.events_after(7)] == [8, 9, 10]
    assert list(s.events_after(10)) == []
    with pytest.raises(OffsetOutOfRange):
        list(s.events_after(11))
    if replication:
        assert [e.offset for e in s.events_after(0)] == list(range(1, 11))
    else:
        with pytest.raises(OffsetGone):
            list(s.events_after(2))
    s.close()
    s = stores(tenant, ring_capacity=5, replication=replication)
    assert [e.offset for e in s.events_after(6)] == [7, 8, 9, 10]


def test_events_after_reads_from_checkpoints(tenant, monkeypatch, stores):
    from dbsvc.storage import recovery

    monkeypatch.setattr(recovery, "CHECKPOINT_EVERY", 4)
    s = stores(tenant, replication=True, sync="off")

    async def go():
        for i in range(1, 40):
            await s.insert("User", user(i))

    run(go())
    for after in (0, 3, 4, 5, 17, 38, 39):
        assert [e.offset for e in s.events_after(after)] == list(range(after + 1, 40))
    s.close()
    s = stores(tenant, replication=True)
    assert [e.offset for e in s.events_after(21)] == list(range(22, 40))


def test_readonly_open_sees_writer_state_and_refuses_writes(tenant, stores):
    s = stores(tenant)
    run(s.insert("User", user(1)))
    r = stores(tenant, readonly=True)
    assert r.get("User", 1)[0]["id"] == 1
    with pytest.raises(Unavailable):
        run(r.insert("User", user(2)))
    r.close()


def test_reopen_restores_everything(tenant, stores):
    s = stores(tenant)
    _random_posts(s, 300)
    run(s.replace("BlogPost", next(iter(s.tables["BlogPost"].records)), post(None, title="x")))
    state = {m: dict(t.records) for m, t in s.tables.items()}
    marks, head, epoch = s.watermarks(), s.head_offset, s.epoch
    s.close()
    s = stores(tenant)
    assert {m: dict(t.records) for m, t in s.tables.items()} == state
    assert (s.watermarks(), s.head_offset, s.epoch) == (marks, head, epoch)
