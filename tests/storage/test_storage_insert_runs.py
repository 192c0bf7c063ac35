"""A run of inserts handed to the commit queue together (storage/writes.py rule 7).

`Store.insert_run_then` is `insert_then` of each record in turn: each checked against the
table as the ones before it left it (a later record's unique value or given id against an
earlier one's), a refused one changing nothing and the run going on, and their frames held
as one chunk with one entry in the commit queue. What must hold is what inserting them one
by one leaves: the same outcomes, the same log bytes, offsets, versions, checkpoints and
indexes, each write told once it is durable; and a run whose write call fails is rolled
back whole, each of its writes hearing `Unavailable`.
"""

from __future__ import annotations

import asyncio

import pytest

from dbsvc.errors import Unavailable
from dbsvc.storage import loghealth, recovery
from dbsvc.storage.tenants import create_tenant
from support.storage import check_indexes, open_store, run, user


def records() -> list[dict]:
    """A run with refusals in its middle: a unique email and a given id that an earlier
    record of the run holds, and an automatic id after a given one."""
    return [
        user(None, email="a@x"),
        user(5, email="b@x"),
        user(None, email="a@x"),  # 409: the run's first record holds it
        user(None, email="c@x"),  # automatic: 6, past the run's given 5
        user(5, email="d@x"),  # 409: the run's second record holds id 5
        user(None, email="e@x"),
    ]


def outcome(result) -> object:
    if isinstance(result, Exception):
        return (type(result).__name__, getattr(result, "status", None), str(result))
    return result


async def one_by_one(store, rows: list[dict], heard: list) -> list:
    results: list = []
    for i, row in enumerate(rows):
        try:
            results.append((store.insert_then("User", row, lambda error, i=i: heard.append((i, error))), None))
        except Exception as exc:
            results.append(exc)
    return results


def settled_by(count: int, heard: list) -> asyncio.Future:
    done = asyncio.get_running_loop().create_future()

    def check() -> None:
        if len(heard) >= count and not done.done():
            done.set_result(None)
        elif not done.done():
            asyncio.get_running_loop().call_later(0.001, check)

    check()
    return done


def test_a_run_leaves_what_its_inserts_one_by_one_leave(tmp_path, monkeypatch):
    """Fails before: the store had no `insert_run_then`."""
    monkeypatch.setattr(recovery, "CHECKPOINT_EVERY", 2)  # checkpoints inside the run
    alone = open_store(create_tenant(str(tmp_path / "a"), "t"))
    ran = open_store(create_tenant(str(tmp_path / "b"), "t"))
    try:
        heard_alone: list = []
        heard_run: list = []

        async def go() -> tuple[list, list]:
            first = await one_by_one(alone, records(), heard_alone)
            dones = [lambda error, i=i: heard_run.append((i, error)) for i in range(len(records()))]
            second = ran.insert_run_then("User", records(), dones)
            assert ran.writes.commit is not None and ran.writes.commit.pending == 1  # one hand-over
            await settled_by(4, heard_alone)
            await settled_by(4, heard_run)
            return first, second

        first, second = run(go())
        assert [outcome(r) for r in second] == [
            outcome(r if isinstance(r, Exception) else (r[0], offset))
            for r, offset in zip(first, (1, 2, None, 3, None, 4), strict=True)
        ]
        assert [r[0]["id"] for r in second if not isinstance(r, Exception)] == [1, 5, 6, 7]
        assert heard_run == [(0, None), (1, None), (3, None), (5, None)]  # the refused never hear
        assert heard_alone == heard_run
        assert list(ran.frames_after(0)) == list(alone.frames_after(0))
        assert ran.epoch_state.checkpoints == alone.epoch_state.checkpoints != []
        assert [ran.version("User", i) for i in (1, 5, 6, 7)] == [1, 2, 3, 4]
        assert ran.applied_offset == ran.head_offset == 4
        assert ran.stats()["commits"] == alone.stats()["commits"] == 4
        check_indexes(ran)
    finally:
        alone.close()
        ran.close()


def test_a_run_whose_write_call_finds_no_room_is_rolled_back_whole(tenant, monkeypatch):
    monkeypatch.setattr(loghealth, "RETRY_INTERVAL", 0)
    monkeypatch.setenv("DBSVC_FAULT", "write:2:ENOSPC")  # write call 2: the run's
    s = open_store(tenant)
    try:
        run(s.insert("User", user(1)))
        heard: list = []

        async def go() -> list:
            dones = [lambda error, i=i: heard.append((i, error)) for i in range(3)]
            results = s.insert_run_then("User", [user(None, email=f"r{k}@x") for k in range(3)], dones)
            await settled_by(3, heard)
            return results

        results = run(go())
        assert [r[1] for r in results] == [2, 3, 4]  # applied to memory, then undone
        assert [i for i, _error in heard] == [0, 1, 2]
        assert all(isinstance(error, Unavailable) for _i, error in heard)
        assert s.head_offset == s.applied_offset == 1 and s.watermarks()["User"] == 1
        assert [s.get("User", i)[0] for i in (2, 3, 4)] == [None, None, None]
        assert s.health(retry=True).state.name == "OK"
        heard.clear()
        results = run(go())
        assert [r[0]["id"] for r in results] == [2, 3, 4]
        assert heard == [(0, None), (1, None), (2, None)]
        check_indexes(s)
    finally:
        s.close()


def test_a_run_on_a_store_that_takes_no_writes_refuses_each_write(tenant, monkeypatch):
    monkeypatch.setenv("DBSVC_FAULT", "fsync:1:EIO")  # the first group's fsync: fail-stop
    s = open_store(tenant)
    try:
        with pytest.raises(Unavailable):
            run(s.insert("User", user(1)))
        results = s.insert_run_then("User", [user(2), user(3)], [print, print])
        assert [type(r) for r in results] == [Unavailable, Unavailable]
        assert s.writes.commit is not None and s.writes.commit.pending == 0
    finally:
        s.close()


def test_a_replace_told_by_a_callback_on_a_store_that_takes_no_writes_is_refused(tenant, monkeypatch):
    """`replace_then` tests the commit queue inline (writes.py): a fail-stopped store
    refuses it with `Unavailable`, changing nothing and never telling its callback."""
    monkeypatch.setenv("DBSVC_FAULT", "fsync:2:EIO")  # the second group's fsync: fail-stop
    s = open_store(tenant)
    try:
        run(s.insert("User", user(1)))
        with pytest.raises(Unavailable):
            run(s.insert("User", user(2)))
        told: list = []
        with pytest.raises(Unavailable):
            s.replace_then("User", 1, user(1, name="one"), told.append)
        assert s.get("User", 1)[0]["name"] != "one" and told == []
        assert s.writes.commit is not None and s.writes.commit.pending == 0
    finally:
        s.close()


def test_a_run_of_every_kind_of_write_leaves_what_they_leave_one_by_one(tmp_path):
    """Fails before: the store had no `begin_run`. Replaces and deletes told by a callback
    inside a run are held in it, after the inserts before them, in offset order."""
    alone = open_store(create_tenant(str(tmp_path / "a"), "t"))
    ran = open_store(create_tenant(str(tmp_path / "b"), "t"))
    try:
        heard: dict[str, list] = {"alone": [], "ran": []}

        def writes(store, name: str) -> None:
            def done(error, tag=name) -> None:
                heard[tag].append(error)

            store.insert_run_then("User", [user(1), user(2)], [done, done])
            store.replace_then("User", 1, user(1, name="one"), done)
            with pytest.raises(Exception, match="already used"):
                store.replace_then("User", 2, user(2, email="u1@example.com"), done)
            store.delete_then("User", 2, done)
            store.insert_run_then("User", [user(None, email="n@x")], [done])

        async def go() -> None:
            writes(alone, "alone")
            ran.begin_run()
            writes(ran, "ran")
            assert ran.writes.commit is not None and ran.writes.commit.pending == 0  # held
            ran.end_run()
            assert ran.writes.commit.pending == 1
            await settled_by(5, heard["alone"])
            await settled_by(5, heard["ran"])

        run(go())
        assert heard["ran"] == heard["alone"] == [None] * 5
        assert list(ran.frames_after(0)) == list(alone.frames_after(0))
        assert ran.get("User", 1)[0]["name"] == "one" and ran.get("User", 2)[0] is None
        assert ran.get("User", 3)[0]["email"] == "n@x"
        assert [ran.version("User", i) for i in (1, 3)] == [alone.version("User", i) for i in (1, 3)] == [3, 5]
        check_indexes(ran)
    finally:
        alone.close()
        ran.close()


def test_a_mixed_run_that_finds_no_room_is_undone_last_write_first(tenant, monkeypatch):
    monkeypatch.setattr(loghealth, "RETRY_INTERVAL", 0)
    monkeypatch.setenv("DBSVC_FAULT", "write:3:ENOSPC")  # write call 3: the run's
    s = open_store(tenant)
    try:
        run(s.insert("User", user(1)))
        run(s.insert("User", user(2)))
        heard: list = []

        async def go() -> None:
            s.begin_run()
            s.replace_then("User", 1, user(1, name="changed"), heard.append)
            s.delete_then("User", 2, heard.append)
            s.insert_run_then("User", [user(None, email="x@x")], [heard.append])
            s.end_run()
            await settled_by(3, heard)

        run(go())
        assert len(heard) == 3 and all(isinstance(error, Unavailable) for error in heard)
        assert s.get("User", 1)[0]["name"] == "user 1" and s.get("User", 2)[0] is not None
        assert s.get("User", 3)[0] is None and s.applied_offset == s.head_offset == 2
        check_indexes(s)
    finally:
        s.close()


def test_a_run_under_sync_off_is_acknowledged_at_once(tenant):
    s = open_store(tenant, sync="off")
    try:
        heard: list = []

        async def go() -> None:
            results = s.insert_run_then("User", [user(1), user(2)], [heard.append, heard.append])
            assert [r[1] for r in results] == [1, 2]
            assert s.writes.commit is not None and s.writes.commit.pending == 0  # written and acknowledged
            assert s.head_offset == 2
            await settled_by(2, heard)

        run(go())
        assert heard == [None, None]
        assert len(list(s.frames_after(0))) == 2
    finally:
        s.close()


def test_a_run_whose_write_call_fails_under_sync_off_is_undone_and_heard(tenant, monkeypatch):
    monkeypatch.setenv("DBSVC_FAULT", "write:2:EIO")  # sync off: write call n is write n; 2 is the run's
    s = open_store(tenant, sync="off")
    try:
        run(s.insert("User", user(1)))
        heard: list = []

        async def go() -> None:
            s.insert_run_then("User", [user(2), user(3)], [heard.append, heard.append])
            await settled_by(2, heard)

        run(go())
        assert len(heard) == 2 and all(isinstance(error, Unavailable) for error in heard)
        assert s.head_offset == s.applied_offset == 1
        assert [s.get("User", i)[0] for i in (2, 3)] == [None, None]
        assert s.health().state.name == "FAILED"
        check_indexes(s)
    finally:
        s.close()


def test_a_run_that_takes_the_log_past_the_size_rule_starts_a_compaction(tenant):
    """`end_run` asks the compactor's size rule once a run is handed over, as `submit`
    asks it after each write; what the run stored survives the compaction and a reopen."""
    s = open_store(tenant, compact_bytes=1)
    heard: list = []
    try:

        async def go() -> None:
            s.begin_run()
            s.insert_run_then("User", [user(1), user(2), user(3)], [heard.append] * 3)
            for i in (1, 2, 3, 1):  # 7 rows for 3 records: over twice the live ones
                s.replace_then("User", i, user(i, name=f"again {i}"), heard.append)
            s.end_run()
            compactor = s.writes.compactor
            assert compactor is not None and compactor.task is not None  # started by the run
            await asyncio.wait_for(compactor.task, 30)
            await settled_by(7, heard)

        run(go())
        assert heard == [None] * 7
    finally:
        s.close()
    again = open_store(tenant)
    try:
        assert [again.get("User", i)[0]["name"] for i in (1, 2, 3)] == ["again 1", "again 2", "again 3"]
        check_indexes(again)
    finally:
        again.close()
