"""The store's batch (storage/batchwrite.py) at the unit where each of its decisions is made:
the mark a batch's rows carry (sized or not, one row or more), the events it publishes, its
checkpoints, its size room, its guard against reuse, and a batch while an online compaction
runs. test_storage_batch.py covers what a reader sees (all or none, crash cuts); these pin
the details mutation testing found unpinned (docs/mutation.md)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import PayloadTooLarge
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from dbsvc.storage.logfile import FRAME_HEADER_SIZE, LogScan, frame_offset
from support.storage import check_indexes, open_store, user

TINY = 32 * 1024  # compaction threshold, as tests/storage/test_storage_online.py


def log_rows(tenant: str) -> list[dict]:
    with open(os.path.join(tenant, "log"), "rb") as f:
        scan = LogScan("log", f.read())
    return [json.loads(payload) for _offset, payload in scan.records()]


def run_batch(store, ops, size: int = 0):
    batch = store.begin_batch(size)
    for method, args in ops:
        getattr(batch, method)(*args)
    return batch.commit()


@pytest.mark.parametrize("sized", [False, True], ids=["unsized", "sized"])
def test_a_batch_of_one_is_a_plain_write_and_of_two_is_marked(tenant, sized):
    async def main():
        store = open_store(tenant)
        try:
            one = [("insert", ("User", user(None, email="a@x")))]
            two = [("insert", ("User", user(None, email="b@x"))), ("delete", ("User", 1))]
            await run_batch(store, one, size=len(one) if sized else 0)
            await run_batch(store, two, size=len(two) if sized else 0)
            return [(e.offset, e.batch) for e in store.events_after(0)]
        finally:
            await store.aclose()

    assert asyncio.run(main()) == [(1, None), (2, (2, 3)), (3, (2, 3))]
    assert [row.get("batch") for row in log_rows(tenant)] == [None, {"first": 2, "last": 3}, {"first": 2, "last": 3}]


def test_a_sized_batch_marks_its_rows_as_they_are_built(tenant):
    async def main():
        store = open_store(tenant)
        try:
            await store.insert("User", user(None, email="a@x"))
            ops = [
                ("insert", ("User", user(None, email="b@x"))),
                ("replace", ("User", 1, user(1, email="a@x", name="renamed"))),
                ("delete", ("User", 2)),
            ]
            await run_batch(store, ops, size=3)
            return [(e.offset, e.kind.value, e.id, e.batch, e.previous) for e in store.events_after(0)]
        finally:
            await store.aclose()

    events = asyncio.run(main())
    assert [e[:4] for e in events] == [
        (1, "insert", 1, None),
        (2, "insert", 2, (2, 4)),
        (3, "update", 1, (2, 4)),
        (4, "delete", 2, (2, 4)),
    ]
    assert events[2][4] == dict(user(None, email="a@x"), id=1) and events[3][4] is None
    rows = log_rows(tenant)
    assert [row.get("batch") for row in rows] == [None] + [{"first": 2, "last": 4}] * 3
    assert rows[2]["previous"]["name"] == "user None" and rows[2]["record"]["name"] == "renamed"
    assert (rows[3]["kind"], rows[3]["id"], rows[3]["record"]["email"]) == ("delete", 2, "b@x")


def test_a_sized_batch_must_get_exactly_its_ops(tenant):
    async def main():
        store = open_store(tenant)
        try:
            batch = store.begin_batch(2)
            batch.insert("User", user(None, email="a@x"))
            with pytest.raises(AssertionError, match="^a batch of 2 ops committed after 1$"):
                batch.commit()
        finally:
            await store.aclose()

    asyncio.run(main())


def test_an_empty_batch_commits_to_nothing(tenant):
    async def main():
        store = open_store(tenant)
        try:
            durable = store.begin_batch().commit()
            assert isinstance(durable, asyncio.Future)
            assert await durable is None
            return store.head_offset, store.commit_queue.stats.fsyncs
        finally:
            await store.aclose()

    assert asyncio.run(main()) == (0, 0)


def test_a_batch_is_used_once_and_only_on_its_own(tenant):
    async def main():
        store = open_store(tenant)
        try:
            with pytest.raises(AssertionError, match="^unknown model 'Nope'$"):
                store.begin_batch().insert("Nope", {})
            done = store.begin_batch()
            done.insert("User", user(None, email="a@x"))
            await done.commit()
            for use in (lambda: done.insert("User", user(None)), done.abort, done.commit):
                with pytest.raises(AssertionError, match="^the batch was committed or aborted$"):
                    use()
            aborted = store.begin_batch()
            aborted.abort()
            for use in (aborted.abort, aborted.commit):
                with pytest.raises(AssertionError, match="^the batch was committed or aborted$"):
                    use()
            # A single write between two ops of a batch breaks its consecutive offsets.
            crossed = store.begin_batch()
            crossed.insert("User", user(None, email="b@x"))
            single = store.apply_insert("User", user(None, email="c@x"))[1]
            with pytest.raises(AssertionError, match="^another write ran inside the batch$"):
                crossed.insert("User", user(None, email="d@x"))
            with pytest.raises(AssertionError, match="^another write ran inside the batch$"):
                crossed.commit()
            await single
        finally:
            await store.aclose()

    asyncio.run(main())


def test_a_batch_adds_the_checkpoint_of_each_frame_at_a_multiple_of_1024(tenant):
    async def main():
        store = open_store(tenant)
        try:
            store.insert_batch([("User", user(i)) for i in range(1, 1021)])
            before = list(store.epoch_state.checkpoints)
            await run_batch(store, [("insert", ("User", user(i))) for i in range(1021, 1031)])
            return before, list(store.epoch_state.checkpoints)
        finally:
            await store.aclose()

    before, after = asyncio.run(main())
    assert before == [] and [offset for offset, _position in after] == [1024]
    with open(os.path.join(tenant, "log"), "rb") as f:
        f.seek(after[0][1])
        header = f.read(FRAME_HEADER_SIZE)
    assert frame_offset(header) == 1024


def test_a_batch_rows_payload_leaves_room_for_the_widest_mark(tenant):
    # A record the limit of a single write takes, but not a batch's: the batch's frames are
    # measured with the widest `"batch":{...}` mark's room set aside (batchwrite.py rule 4).
    async def main():
        store = open_store(tenant, max_payload=4096)
        try:
            fits = user(None, email="a@x", name="n" * 100, profile="p" * 1326)
            await store.insert("User", dict(fits))
            with pytest.raises(PayloadTooLarge) as caught:
                store.begin_batch().insert("User", dict(fits, email="b@x"))
            return caught.value.detail
        finally:
            await store.aclose()

    assert asyncio.run(main()) == (
        "record too large: the User record is 1530 bytes of JSON, the limit is 1502 (an update's log frame "
        "holds a record and the one it replaces, and a frame holds at most 4029 bytes)"
    )


def test_batches_during_online_compactions_keep_every_row(tenant, caplog, stores):
    """Batches that insert, replace and delete while online compactions run: each batch
    below comes once a compaction has taken its cut and before its snapshot thread is done
    (the highest ids, read last), so the compaction must have noted its writes in the cut,
    as it does a single write's: every compaction succeeds (one that was not told of a
    delete fails on "User N was live at the cut") and the store reopens with exactly the
    state it served."""
    caplog.set_level(logging.ERROR, logger="dbsvc.storage")
    store = stores(tenant, compact_bytes=TINY, replication=True)

    async def main():
        store.insert_batch([("User", user(i)) for i in range(1, 3001)])
        top = 3000
        for n in range(3):
            store.compactor.compact_now()
            for _ in range(1000):
                if store.compactor.cut is not None:
                    break
                await asyncio.sleep(0)
            assert store.compactor.cut is not None, "no compaction took its cut"
            ops = [
                ("delete", ("User", top)),
                ("replace", ("User", top - 1, user(top - 1, name=f"n{n}"))),
                ("insert", ("User", user(10_000 + n))),
            ]
            top -= 2
            await run_batch(store, ops, size=len(ops))
            while store.compaction is not None:
                await store.compaction

    asyncio.run(main())
    assert store.stats()["compactions"] == 3
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert_reopens_as_it_served(store, tenant)


def test_batches_start_online_compactions_by_the_size_rule(tenant, caplog, stores):
    """Batches alone take the log past the compaction threshold, and a batch's commit asks
    the compactor to run as a single write's does (batchwrite.py rule 3); with batches that
    insert, replace and delete meanwhile, every compaction succeeds and the store reopens
    with exactly the state it served."""
    caplog.set_level(logging.ERROR, logger="dbsvc.storage")
    store = stores(tenant, compact_bytes=TINY, replication=True)

    async def main():
        rnd = random.Random(7)
        for i in range(1, 21):
            await store.insert("User", user(i))
        alive, next_id = set(range(1, 21)), 21
        for n in range(400):
            ops = []
            for _ in range(3):
                i = rnd.choice(sorted(alive))
                ops.append(("replace", ("User", i, user(i, name=f"n{n}"))))
            ops.append(("insert", ("User", user(next_id))))
            alive.add(next_id)
            next_id += 1
            gone = rnd.choice(sorted(alive - {op[1][1] for op in ops[:3]}))
            ops.append(("delete", ("User", gone)))
            alive.discard(gone)
            await run_batch(store, ops, size=len(ops))
            await asyncio.sleep(0)
        while store.compaction is not None:
            await store.compaction

    asyncio.run(main())
    assert store.stats()["compactions"] >= 3
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert_reopens_as_it_served(store, tenant)


def test_a_fitted_delete_in_a_batch_still_ends_with_the_batch_mark(tenant):
    # A record stored under a larger frame limit (an older log): its delete is fitted to this
    # store's limit (events.py "Sizes": values left out, named in `omitted`), and inside a
    # batch its payload still ends with the mark (logfile.py rule 5 reads payloads so).
    roomy = open_store(tenant, max_payload=32768)
    try:
        asyncio.run(roomy.insert("User", user(None, email="big@x", profile="p" * 9000)))
    finally:
        roomy.close()

    async def main():
        store = open_store(tenant, max_payload=8192)
        try:
            ops = [("insert", ("User", user(None, email="small@x"))), ("delete", ("User", 1))]
            await run_batch(store, ops, size=2)
        finally:
            await store.aclose()

    asyncio.run(main())
    with open(os.path.join(tenant, "log"), "rb") as f:
        payloads = [payload for _offset, payload in LogScan("log", f.read()).records()]
    assert bytes(payloads[2]).endswith(b',"omitted":["profile"],"batch":{"first":2,"last":3}}')
    assert json.loads(payloads[2])["record"]["profile"] is None


def assert_reopens_as_it_served(store, tenant):
    """Close `store` and reopen its tenant: the same records, head, watermarks, versions,
    and indexes that agree with the records."""
    want = {name: dict(t.records) for name, t in store.tables.items()}
    head, marks = store.head_offset, store.watermarks()
    versions = {i: store.version("User", i) for i in want["User"]}
    store.close()
    again = open_store(tenant, replication=True)
    try:
        assert {name: dict(t.records) for name, t in again.tables.items()} == want
        assert (again.head_offset, again.watermarks()) == (head, marks)
        assert {i: again.version("User", i) for i in want["User"]} == versions
        check_indexes(again)
    finally:
        again.close()


KEYED = compile_schema(
    parse_schema(
        """
model Note {
  code  str  @id
  body  str
  more  str
}
""",
        "notes.dbs",
    )
)


def test_a_fitted_delete_in_a_batch_never_leaves_out_its_own_id_even_the_largest_value(tenant):
    # events.py "Sizes": a fitted delete nulls its largest values but never the id field,
    # also when the id is the largest value of all (a str id; batchwrite.py passes the id
    # field on, as the single delete does).
    code, body, more = "k" * 3000, "b" * 2900, "m" * 100
    roomy = Store.open(tenant, KEYED.MODELS, KEYED.DESCRIPTION, max_payload=32768)
    try:
        asyncio.run(roomy.insert("Note", {"code": code, "body": body, "more": more}))
    finally:
        roomy.close()

    async def main():
        store = Store.open(tenant, KEYED.MODELS, KEYED.DESCRIPTION, max_payload=8192)
        try:
            ops = [("insert", ("Note", {"code": "a", "body": "x", "more": "y"})), ("delete", ("Note", code))]
            await run_batch(store, ops, size=2)
        finally:
            await store.aclose()

    asyncio.run(main())
    with open(os.path.join(tenant, "log"), "rb") as f:
        payloads = [payload for _offset, payload in LogScan("log", f.read()).records()]
    deleted = json.loads(payloads[-1])
    assert deleted["kind"] == "delete"
    assert deleted["record"] == {"code": code, "body": None, "more": more}
    assert deleted["omitted"] == ["body"]
