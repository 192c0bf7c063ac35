"""storage/writes.py where mutation testing found the write path's promises unpinned
(docs/mutation.md, "... (session 10, wt-mcm)"):

- Rule 3: every CHECKPOINT_EVERY-th offset gets a checkpoint (offset, byte position of its
  frame) as it is written, the same list a reopen rebuilds from the log, and replay reads
  (`frames_after`) start at them. Nothing compared the running store's list with the one
  recovery makes: a checkpoint at every write, at none, at the wrong offsets or one frame
  off all survived.
- Rule 2: a write that failed gives back what it took, its id included: the next insert
  without an id gets the same one; a replace that failed leaves the record it replaced,
  and a write that was never applied (`sync="off"`, its own write call failed) leaves no
  checkpoint behind.
- Rule 1: a delete's frame fitted under the limit keeps its id whatever its size: with a
  `str` @id longer than every other value, the id field is still never the one left out.
- An update's event carries the record and the one it replaced, as published and as logged;
  an insert's its id; the record replaced is what reads give at once.

CHECKPOINT_EVERY is lowered to 4 through `monkeypatch` (writes.py and recovery.py read it at
each use), so a dozen writes cross three checkpoints."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import Unavailable
from dbsvc.runtime import Query
from dbsvc.schema import load_schema
from dbsvc.storage import Store, loghealth, recovery
from dbsvc.storage.logfile import HEADER_SIZE, FrameWalk
from dbsvc.storage.logwriter import WriteState
from support.storage import open_store, run, user

EVERY = 4


@pytest.fixture
def every(monkeypatch) -> int:
    monkeypatch.setattr(recovery, "CHECKPOINT_EVERY", EVERY)
    return EVERY


def _write_some(s, count: int) -> None:
    async def go() -> None:
        for i in range(1, count + 1):
            await s.insert("User", user(i))
        await s.replace("User", 2, user(2, name="two"))
        await s.delete("User", 3)

    run(go())


def test_the_running_store_checkpoints_the_frames_a_reopen_checkpoints(tenant, every, stores):
    s = stores(tenant)
    _write_some(s, 10)  # offsets 1-12: checkpoints at 4, 8, 12
    live = list(s.epoch_state.checkpoints)
    s.close()
    reopened = stores(tenant)
    try:
        assert live == reopened.epoch_state.checkpoints
        assert [offset for offset, _ in live] == [4, 8, 12]
    finally:
        reopened.close()


def test_frames_after_each_offset_of_the_running_store_are_the_log_s_frames_after_it(tenant, every, stores):
    s = stores(tenant)
    _write_some(s, 10)
    live = {after: list(s.frames_after(after)) for after in range(13)}
    s.close()
    reopened = stores(tenant)
    try:
        for after in range(13):
            assert live[after] == list(reopened.frames_after(after)), after
            assert len(live[after]) == 12 - after
    finally:
        reopened.close()


def test_a_write_refused_for_room_gives_its_id_back(tenant, monkeypatch):
    monkeypatch.setattr(loghealth, "RETRY_INTERVAL", 0)
    monkeypatch.setenv("DBSVC_FAULT", "write:3:ENOSPC")
    s = open_store(tenant)
    try:
        assert run(s.insert("User", user(1)))["id"] == 1
        assert run(s.insert("User", user(2)))["id"] == 2
        with pytest.raises(Unavailable, match="no space"):
            run(s.insert("User", user(None, email="late@x")))
        assert s.health(retry=True).state is WriteState.OK
        assert run(s.insert("User", user(None, email="late@x")))["id"] == 3
    finally:
        s.close()


def test_an_update_is_published_and_logged_with_its_record_and_the_one_it_replaced(tenant, stores):
    s = stores(tenant)
    seen = []
    s.subscribe(lambda event, frame: seen.append(event))

    async def go() -> None:
        await s.insert("User", user(1))
        await s.replace("User", 1, user(1, name="renamed"))

    run(go())
    s.close()
    inserted, updated = seen
    assert (inserted.id, inserted.record, inserted.previous) == (1, user(1), None)
    assert (updated.id, updated.record, updated.previous) == (1, user(1, name="renamed"), user(1))
    reopened = stores(tenant)
    try:
        assert list(reopened.events_after(0)) == seen
    finally:
        reopened.close()


def test_a_replaced_record_is_what_reads_give_at_once(tenant):
    s = open_store(tenant)
    try:

        async def go() -> None:
            for i in (1, 2, 3):
                await s.insert("User", user(i))
            await s.replace("User", 2, user(2, name="zed"))

        run(go())
        assert s.get("User", 2)[0] == user(2, name="zed")
        names = [r["name"] for r in s.list_records("User", Query(sort=(("name", False),), limit=10))[0]]
        assert names == ["user 1", "user 3", "zed"]
    finally:
        s.close()


def test_a_fitted_delete_never_leaves_out_a_str_id_longer_than_every_value(tmp_path, tenant):
    schema = tmp_path / "docs.dbs"
    schema.write_text("model Doc {\n  key str @id\n  body str\n}\n")
    docs = compile_schema(load_schema(str(schema)))
    key, limit = "k" * 3000, 8192
    roomy = Store.open(tenant, docs.MODELS, docs.DESCRIPTION, max_payload=4 * limit)
    try:
        asyncio.run(roomy.insert("Doc", {"key": key, "body": "b" * 2900}))
    finally:
        roomy.close()
    s = Store.open(tenant, docs.MODELS, docs.DESCRIPTION, max_payload=limit)
    try:
        asyncio.run(s.delete("Doc", key))
    finally:
        s.close()
    with open(os.path.join(tenant, "log"), "rb") as f:
        data = f.read()
    deleted = json.loads(list(FrameWalk(data, HEADER_SIZE, len(data), payloads=True))[-1][1])
    assert deleted["omitted"] == ["body"] and deleted["record"] == {"key": key, "body": None}


def test_a_replace_that_finds_no_room_leaves_the_record_it_replaced(tenant, monkeypatch):
    monkeypatch.setattr(loghealth, "RETRY_INTERVAL", 0)
    monkeypatch.setenv("DBSVC_FAULT", "write:2:ENOSPC")
    s = open_store(tenant)
    try:
        run(s.insert("User", user(1)))
        with pytest.raises(Unavailable, match="no space"):
            run(s.replace("User", 1, user(1, name="lost")))
        assert s.get("User", 1)[0] == user(1)
        assert s.health(retry=True).state is WriteState.OK
        assert run(s.replace("User", 1, user(1, name="kept")))[1] == user(1, name="kept")
        assert s.get("User", 1)[0] == user(1, name="kept")
    finally:
        s.close()


def test_a_write_not_applied_under_sync_off_leaves_no_checkpoint(tenant, monkeypatch, every):
    monkeypatch.setattr(loghealth, "RETRY_INTERVAL", 0)
    monkeypatch.setenv("DBSVC_FAULT", "write:4:ENOSPC")  # sync off: write call n is insert n
    s = open_store(tenant, sync="off")
    try:
        for i in (1, 2, 3):
            run(s.insert("User", user(i)))
        with pytest.raises(Unavailable, match="no space"):
            run(s.insert("User", user(4)))
        assert s.epoch_state.checkpoints == []
        assert s.health(retry=True).state is WriteState.OK
        run(s.insert("User", user(4)))
        live = list(s.epoch_state.checkpoints)
    finally:
        s.close()
    reopened = open_store(tenant)
    try:
        assert live == reopened.epoch_state.checkpoints and [o for o, _ in live] == [4]
    finally:
        reopened.close()


def test_a_record_inserted_alone_has_its_version_at_once_and_after_a_reopen(tenant, stores):
    """`Store.insert` (`apply_insert` -> `insert_then`) stamps the record's version, its
    ETag, with the offset of its row, as a run's insert does (writes.py rule 6)."""
    s = stores(tenant)

    async def go() -> list[tuple[int, int]]:
        seen = []
        for i in (1, 2):
            await s.insert("User", user(i))
            seen.append((s.version("User", i), s.applied_offset))
        return seen

    seen = run(go())
    assert seen == [(1, 1), (2, 2)]
    s.close()
    s = stores(tenant)
    assert (s.version("User", 1), s.version("User", 2)) == (1, 2)
