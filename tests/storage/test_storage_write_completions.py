"""A write settled by a completion callback (`Store.insert_then`, `replace_then`,
`delete_then`): applied at once like `apply_*`, and `done(error)` called once it is durable
(error None) or refused by an I/O error (`Unavailable`), a committed group's callbacks all in
one loop callback, in the order the writes were made (storage/commit.py, "Completions")."""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from dbsvc.errors import NotFound, Unavailable
from dbsvc.storage.files import FaultPlan
from support.storage import run, user


@contextmanager
def tenant() -> Iterator[str]:
    """A fresh tenant directory (no fixture: the in-process mutation runner calls these)."""
    with tempfile.TemporaryDirectory() as tmp:
        yield tmp


def test_a_group_of_writes_is_settled_in_order_once_its_fsync_is_done(stores):
    with tenant() as tmp:
        s = stores(tmp)
        seen: list[tuple[int, object, int]] = []

        async def go() -> None:
            loop = asyncio.get_running_loop()
            all_done = loop.create_future()

            def done_for(i: int):
                def done(error: BaseException | None) -> None:
                    # durable: the store acknowledged up to this write's row before it is told
                    seen.append((i, error, s.head_offset))
                    if len(seen) == 5:
                        all_done.set_result(None)

                return done

            for i in range(1, 4):
                record = s.insert_then("User", user(i), done_for(i))
                assert record["id"] == i and s.get("User", i)[0] is not None  # applied at once
            previous, record = s.replace_then("User", 2, {**user(2), "name": "two"}, done_for(4))
            assert previous["name"] != "two" and record["name"] == "two"
            previous = s.delete_then("User", 3, done_for(5))
            assert previous["id"] == 3 and s.get("User", 3)[0] is None
            assert seen == []  # nothing settled before the fsync
            await asyncio.wait_for(all_done, 30)

        run(go())
        assert [(i, error) for i, error, _head in seen] == [(i, None) for i in range(1, 6)]
        assert all(head >= offset for (_i, _e, head), offset in zip(seen, range(1, 6)))
        assert s.stats()["commits"] == 5
        s.close()
        reopened = stores(tmp)
        assert sorted(reopened.tables["User"].records) == [1, 2] and reopened.get("User", 2)[0]["name"] == "two"
        reopened.close()


def test_a_failed_fsync_settles_each_write_of_its_group_with_unavailable(stores):
    with tenant() as tmp:
        s = stores(tmp)
        run(s.insert("User", user(1)))
        size = os.path.getsize(os.path.join(tmp, "log"))
        s.commit_queue.writer.faults = FaultPlan("fsync:1:EIO")
        errors: list[BaseException | None] = []

        async def go() -> None:
            loop = asyncio.get_running_loop()
            settled = loop.create_future()

            def done(error: BaseException | None) -> None:
                errors.append(error)
                if len(errors) == 2 and not settled.done():
                    settled.set_result(None)

            s.insert_then("User", user(2), done)
            s.insert_then("User", user(3), done)
            await asyncio.wait_for(settled, 30)

        run(go())
        assert len(errors) == 2 and all(isinstance(error, Unavailable) for error in errors)
        assert s.get("User", 2)[0] is None and s.get("User", 3)[0] is None  # rolled back
        assert os.path.getsize(os.path.join(tmp, "log")) == size
        s.close()


def test_a_write_refused_by_its_checks_raises_and_never_settles(stores):
    with tenant() as tmp:
        s = stores(tmp)
        run(s.insert("User", user(1)))
        called: list[object] = []

        async def go() -> None:
            try:
                s.insert_then("User", user(1), called.append)
            except Exception as exc:  # noqa: BLE001 - the refusal is the point
                called.append(type(exc).__name__)
            await s.insert("User", user(2))  # a later write's fsync: the refused one is not in it

        run(go())
        assert called == ["UniqueViolation"]
        s.close()


def test_without_a_sync_each_write_is_settled_on_the_next_loop_turn(stores):
    with tenant() as tmp:
        s = stores(tmp, sync="off")
        seen: list[object] = []

        async def go() -> None:
            s.insert_then("User", user(1), seen.append)
            assert seen == []  # never inside the call that made the write
            for _ in range(3):
                await asyncio.sleep(0)
            assert seen == [None]

        run(go())
        s.close()


def test_a_callback_that_raises_keeps_no_other_write_of_its_group_from_its_outcome(stores):
    with tenant() as tmp:
        s = stores(tmp)
        seen: list[object] = []

        def broken(error: BaseException | None) -> None:
            raise RuntimeError("a broken callback")

        async def go() -> None:
            s.insert_then("User", user(1), broken)
            s.insert_then("User", user(2), seen.append)
            await s.insert("User", user(3))  # committed with them or after them
            for _ in range(3):
                await asyncio.sleep(0)

        logged: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: logged.append(record.getMessage() + str(record.exc_info[1]))  # type: ignore[method-assign]
        logging.getLogger("dbsvc.storage").addHandler(handler)
        try:
            run(go())
        finally:
            logging.getLogger("dbsvc.storage").removeHandler(handler)
        assert seen == [None]
        assert logged == ["a write's completion callback raiseda broken callback"]
        s.close()


def test_a_write_queued_when_its_loop_ends_is_settled_by_close(stores):
    with tenant() as tmp:
        s = stores(tmp)
        seen: list[object] = []

        async def go() -> None:
            s.insert_then("User", user(1), seen.append)  # its loop ends before the fsync

        run(go())
        assert seen == []
        s.close()  # the final fsync: the callback is called at once, the loop being closed
        assert seen == [None]
        reopened = stores(tmp)
        assert reopened.get("User", 1)[0] is not None
        reopened.close()


def test_a_write_queued_when_its_loop_ends_hears_its_final_fsync_fail_from_close(stores):
    with tenant() as tmp:
        s = stores(tmp)
        seen: list[object] = []

        async def go() -> None:
            s.insert_then("User", user(1), seen.append)

        run(go())
        s.commit_queue.writer.faults = FaultPlan("fsync:1:EIO")
        s.close()
        assert len(seen) == 1 and isinstance(seen[0], Unavailable)
        reopened = stores(tmp)
        assert reopened.get("User", 1)[0] is None
        reopened.close()


def test_the_apply_writes_still_hand_back_a_future_each(stores):
    with tenant() as tmp:
        s = stores(tmp)

        async def go() -> None:
            record, durable = s.apply_insert("User", user(1))
            assert record["id"] == 1 and isinstance(durable, asyncio.Future)
            previous, record, replaced = s.apply_replace("User", 1, {**user(1), "name": "one"})
            assert previous["name"] != "one" and record == s.get("User", 1)[0]
            assert record["name"] == "one"
            previous, deleted = s.apply_delete("User", 1)
            assert previous == record and s.get("User", 1)[0] is None
            assert await asyncio.wait_for(asyncio.gather(durable, replaced, deleted), 30) == [None, None, None]

        run(go())
        assert s.stats()["commits"] == 3
        s.close()


def test_a_write_told_by_a_callback_refuses_an_unknown_model_as_not_found(stores):
    """`replace_then` and `insert_run_then` look their table up inline (writeapi.py): an
    unknown model is still `NotFound`, as `table()` says it, and nothing is applied."""
    with tenant() as tmp:
        s = stores(tmp)
        for write in (
            lambda: s.replace_then("Nobody", 1, user(1), lambda error: None),
            lambda: s.insert_run_then("Nobody", [user(1)], [lambda error: None]),
        ):
            try:
                write()
            except NotFound as exc:
                assert "unknown model 'Nobody'" in str(exc)
            else:
                raise AssertionError("an unknown model was written")
        assert s.applied_offset == 0
        s.close()
