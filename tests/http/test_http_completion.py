"""`Completion`: the one-shot outcome a `Deferred` waits on when the work's owner settles it
with a call (the store settles a committed group's writes together), in place of an asyncio
future: its callbacks run once, in order, with what `Future` answers (`exception()`,
`cancelled()`), and it can be awaited (http/types.py)."""

from __future__ import annotations

import asyncio

import pytest

from dbsvc.errors import Unavailable
from dbsvc.http.types import Completion


def test_callbacks_added_before_the_outcome_run_when_it_is_settled_in_order():
    completion = Completion()
    seen: list[tuple[str, object, bool]] = []
    completion.add_done_callback(lambda c: seen.append(("a", c.exception(), c.cancelled())))
    completion.add_done_callback(lambda c: seen.append(("b", c.exception(), c.done())))
    assert not completion.done() and seen == []
    completion.settle(None)
    assert seen == [("a", None, False), ("b", None, True)]
    assert completion.done() and completion.result() is None


def test_a_settled_error_is_what_exception_and_result_give():
    completion = Completion()
    errors: list[BaseException | None] = []
    completion.add_done_callback(lambda c: errors.append(c.exception()))
    error = Unavailable("write not stored")
    completion.settle(error)
    assert errors == [error] and completion.exception() is error
    with pytest.raises(Unavailable):
        completion.result()


def test_a_callback_added_after_the_outcome_runs_on_the_next_loop_turn():
    async def go() -> list[str]:
        completion = Completion()
        completion.settle(None)
        seen: list[str] = []
        completion.add_done_callback(lambda c: seen.append("late"))
        assert seen == []  # never inside add_done_callback
        await asyncio.sleep(0)
        return seen

    assert asyncio.run(go()) == ["late"]


def test_awaiting_gives_the_outcome_settled_before_or_after():
    async def go() -> None:
        loop = asyncio.get_running_loop()
        early = Completion()
        early.settle(None)
        assert await early is None
        later = Completion()
        loop.call_soon(later.settle, Unavailable("no room"))
        with pytest.raises(Unavailable):
            await later

    asyncio.run(go())
