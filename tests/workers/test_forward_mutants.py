"""workers/forward.py's read-your-writes at each decision (docs/mutation.md, session 8):
which answer names a written offset (rule 1), when a wait is already over, what releases
it and what a given-up or closed wait leaves, and `ReadAfter`'s refusal word for word
(rule 5); run.py's fronts as `front()` picks them.

Real stores in a directory of each test's own (no pytest fixture: the in-process mutation
runner, bench/mutation_inprocess.py, calls these functions itself).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable

import pytest

from dbsvc.errors import BadRequest, NotCaughtUp
from dbsvc.http.types import Request, Response
from dbsvc.storage import Store
from dbsvc.workers.forward import AppliedOffsets, ReadAfter, after_offset, applied_within, written_offset
from support.storage import open_store
from support.storage import user as user_record


def with_stores(go: Callable[..., Awaitable[None]], count: int = 1) -> None:
    """Run `go(*stores)` over `count` fresh stores, closed and removed after."""
    directory = tempfile.mkdtemp(prefix="forward-")
    stores: list[Store] = []
    try:
        for n in range(count):
            os.mkdir(f"{directory}/{n}")
            stores.append(open_store(f"{directory}/{n}", sync="off"))
        asyncio.run(asyncio.wait_for(go(*stores), 30))
    finally:
        for store in stores:
            store.close()
        shutil.rmtree(directory, ignore_errors=True)


def request(method: str = "GET", after: str | None = None) -> Request:
    # names in lower case, as the http layer hands them over
    headers = [("host", "x")] + ([("dbsvc-after", after)] if after is not None else [])
    return Request(method=method, target="/api/user", path="/api/user", query=[], headers=headers)


@pytest.mark.parametrize(
    "status, headers, offset",
    [
        (200, [("Dbsvc-Offset", "12")], 12),
        (201, [("content-type", "application/json"), ("dbsvc-offset", "3")], 3),
        (299, [("DBSVC-OFFSET", "0")], 0),
        (199, [("Dbsvc-Offset", "12")], None),
        (300, [("Dbsvc-Offset", "12")], None),
        (409, [("Dbsvc-Offset", "12")], None),
        (200, [("Dbsvc-Offset", "-1")], None),
        (200, [("Dbsvc-Offset", "x"), ("Dbsvc-Offset", "5")], None),  # the first one names it
        (200, [("Dbsvc-Offsets", "5"), ("Dbsvc-Offset", "6")], 6),
        (204, [], None),
    ],
)
def test_only_a_2xx_answer_with_a_decimal_offset_names_a_written_offset(status, headers, offset):
    assert written_offset(Response(status, b"", headers)) == offset


def test_a_refusal_quotes_at_most_40_characters_of_the_stripped_value():
    with pytest.raises(BadRequest) as refused:
        after_offset("  " + "a" * 39 + "bcd  ")
    assert str(refused.value) == (
        f"Dbsvc-After {'a' * 39 + 'b'!r} is not an offset: expected a decimal integer of at most 18 digits, "
        "the Dbsvc-Offset of a write's answer"
    )


def test_a_wait_for_an_applied_offset_is_over_before_it_starts_and_one_ahead_waits():
    async def go(store: Store) -> None:
        await store.insert("User", user_record(1))
        await store.insert("User", user_record(2))
        applied = AppliedOffsets(store)
        assert applied.head == 2
        assert applied.wait(1) is None and applied.wait(2) is None and applied.waiting == 0
        three, five, four = applied.wait(3), applied.wait(5), applied.wait(4)
        assert three is not None and five is not None and four is not None and applied.waiting == 3
        await store.insert("User", user_record(3))
        assert three.done() and not four.done() and not five.done() and applied.waiting == 2
        await store.insert("User", user_record(4))
        assert four.done() and not five.done() and applied.waiting == 1
        applied.forget(five)
        assert five.cancelled() and applied.waiting == 0
        applied.close()
        await store.insert("User", user_record(5))  # closed: no longer subscribed
        assert applied.waiting == 0

    with_stores(go)


def test_forgetting_one_wait_keeps_the_others_in_order():
    async def go(store: Store) -> None:
        applied = AppliedOffsets(store)
        waits = [applied.wait(n) for n in (3, 1, 2, 1)]
        assert all(w is not None for w in waits) and applied.waiting == 4
        applied.forget(waits[1])  # type: ignore[arg-type]
        assert applied.waiting == 3 and waits[1].cancelled()  # type: ignore[union-attr]
        await store.insert("User", user_record(1))
        assert [w.done() for w in waits] == [False, True, False, True]  # type: ignore[union-attr]
        assert not waits[3].cancelled() and applied.waiting == 2  # type: ignore[union-attr]
        await store.insert("User", user_record(2))
        assert waits[2].done() and not waits[0].done() and applied.waiting == 1  # type: ignore[union-attr]
        applied.close()
        assert waits[0].done() and not waits[0].cancelled() and applied.waiting == 0  # type: ignore[union-attr]

    with_stores(go)


def test_a_rebound_wait_follows_the_new_store_and_releases_what_it_has_applied():
    async def go(old: Store, new: Store) -> None:
        for n in (1, 2, 3):
            await new.insert("User", user_record(n))
        applied = AppliedOffsets(old)
        two, five = applied.wait(2), applied.wait(5)
        assert two is not None and five is not None
        applied.rebind(new)
        assert two.done() and not five.done() and applied.head == 3 and applied.waiting == 1
        await old.insert("User", user_record(1))  # the old store's stream is no longer heard
        await old.insert("User", user_record(2))
        await old.insert("User", user_record(3))
        await old.insert("User", user_record(4))
        await old.insert("User", user_record(5))
        assert not five.done()
        await new.insert("User", user_record(4))
        await new.insert("User", user_record(5))
        assert five.done() and applied.waiting == 0
        applied.close()

    with_stores(go, count=2)


def test_applied_within_says_true_at_once_after_the_write_and_false_leaving_nothing():
    async def go(store: Store) -> None:
        applied = AppliedOffsets(store)
        assert await applied_within(applied, 0, 0.01) is True
        assert await applied_within(applied, 1, 0.01) is False and applied.waiting == 0
        waiting = asyncio.ensure_future(applied_within(applied, 1, 5))
        await asyncio.sleep(0)
        assert applied.waiting == 1
        await store.insert("User", user_record(1))
        assert await waiting is True and applied.waiting == 0
        applied.close()

    with_stores(go)


def test_read_after_answers_reads_that_name_an_offset_and_passes_the_rest():
    async def go(store: Store) -> None:
        seen: list[str] = []

        def app(req: Request) -> Response:
            seen.append(req.method)
            return Response(200, req.method.encode())

        applied = AppliedOffsets(store)
        front = ReadAfter(app, applied, apply_seconds=0.02)
        for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
            assert front(request(method, after="junk")).body == method.encode()  # the header not read
        assert front(request("GET")).body == b"GET"
        with pytest.raises(BadRequest):
            front(request("HEAD", after="junk"))
        with pytest.raises(NotCaughtUp) as refused:
            await front(request("GET", after="1"))
        assert str(refused.value) == (
            "this server has applied the writes up to offset 0 and not offset 1 (Dbsvc-After) within 0.02 s: "
            "retry after 1 s, or read from the primary"
        )
        assert refused.value.headers == [("Retry-After", "1")]
        assert seen == ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "GET"]
        assert (await front(request("HEAD", after="0"))).body == b"HEAD"
        assert front.apply_seconds == 0.02 and ReadAfter(app, applied).apply_seconds == 10.0
        applied.close()

    with_stores(go)
