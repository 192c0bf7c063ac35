"""`Dbsvc-After` (forward.py rule 5) on a real store: a read that names an offset is
answered once the store has applied it, refused with 503 if it is not applied within the
wait, and refused with 400 if the value is no offset; anything else passes untouched."""

from __future__ import annotations

import asyncio

import pytest

from dbsvc.errors import BadRequest, NotCaughtUp
from dbsvc.http.types import Request, Response
from dbsvc.workers.forward import AppliedOffsets, ReadAfter, after_offset
from support.storage import open_store
from support.storage import user as user_record


def request(method: str = "GET", after: str | None = None) -> Request:
    headers = [("host", "x")] + ([("dbsvc-after", after)] if after is not None else [])
    return Request(method=method, target="/api/user/1", path="/api/user/1", query=[], headers=headers)


@pytest.mark.parametrize("value, offset", [("0", 0), ("7", 7), (" 42 ", 42), ("9" * 18, 10**18 - 1)])
def test_an_offset_is_a_decimal_integer(value, offset):
    assert after_offset(value) == offset


@pytest.mark.parametrize("value", ["", "-1", "1.0", "0x10", "1e3", "١٢", "9" * 19, "12 3", "+5"])
def test_anything_else_is_a_bad_request_naming_the_header_and_what_it_expects(value):
    with pytest.raises(BadRequest) as refused:
        after_offset(value)
    detail = str(refused.value)
    assert (
        detail.startswith("Dbsvc-After ")
        and "is not an offset: expected a decimal integer of at most 18 digits" in detail
    )


def test_a_read_waits_for_the_offset_it_names_and_a_write_or_no_header_passes(tmp_path):
    answered: list[str] = []

    def app(req: Request) -> Response:
        answered.append(req.method)
        return Response(200, b"{}")

    async def body():
        store = open_store(str(tmp_path), sync="off")
        applied = AppliedOffsets(store)
        front = ReadAfter(app, applied, apply_seconds=5)
        assert front(request()).status == 200  # no header: the application at once
        assert front(request("POST", after="99")).status == 200  # not a read: the header is not looked at
        assert front(request("OPTIONS", after="x")).status == 200
        assert answered == ["GET", "POST", "OPTIONS"]
        assert (await front(request(after="0"))).status == 200  # applied already
        waiting = asyncio.ensure_future(front(request("HEAD", after="2")))
        await asyncio.sleep(0.05)
        assert not waiting.done() and answered == ["GET", "POST", "OPTIONS", "GET"]
        await store.insert("User", user_record(1))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # offset 1 is not offset 2
        await store.insert("User", user_record(2))
        assert (await asyncio.wait_for(waiting, 5)).status == 200
        assert answered[-1] == "HEAD"
        applied.close()
        store.close()

    asyncio.run(asyncio.wait_for(body(), 20))


def test_a_read_whose_offset_is_not_applied_in_time_is_503_with_retry_after(tmp_path):
    async def body():
        store = open_store(str(tmp_path), sync="off")
        await store.insert("User", user_record(1))
        applied = AppliedOffsets(store)
        front = ReadAfter(lambda req: Response(200), applied, apply_seconds=0.05)
        with pytest.raises(NotCaughtUp) as refused:
            await front(request(after="5"))
        error = refused.value
        assert error.status == 503 and error.code == "unavailable" and error.headers == [("Retry-After", "1")]
        assert str(error) == (
            "this server has applied the writes up to offset 1 and not offset 5 (Dbsvc-After) within 0.05 s: "
            "retry after 1 s, or read from the primary"
        )
        assert applied.waiting == 0  # the wait given up leaves nothing behind
        applied.close()
        store.close()

    asyncio.run(asyncio.wait_for(body(), 10))


def test_an_awaitable_answer_is_awaited_after_the_wait(tmp_path):
    async def app(req: Request) -> Response:
        await asyncio.sleep(0)
        return Response(201)

    async def body():
        store = open_store(str(tmp_path), sync="off")
        front = ReadAfter(app, AppliedOffsets(store), apply_seconds=1)
        assert (await front(request(after="0"))).status == 201
        store.close()

    asyncio.run(asyncio.wait_for(body(), 10))
