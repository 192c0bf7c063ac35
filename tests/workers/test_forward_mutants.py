"""workers/forward.py's read-your-writes at each decision (docs/mutation.md, session 8):
which answer names a written offset (rule 1), when a wait is already over, what releases
it and what a given-up or closed wait leaves, and `ReadAfter`'s refusal word for word
(rule 5); run.py's fronts as `front()` picks them.

Real stores in a directory of each test's own (no pytest fixture: the in-process mutation
runner, bench/mutation_inprocess.py, calls these functions itself).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Awaitable, Callable

import pytest

from dbsvc.errors import BadRequest, NotCaughtUp, WriterUnavailable
from dbsvc.http.types import Request, Response
from dbsvc.http.upstream import Upstream
from dbsvc.replica.consumer import parse_endpoint
from dbsvc.replica.follower import Follower
from dbsvc.storage import Store
from dbsvc.workers import run
from dbsvc.workers.forward import AppliedOffsets, Forwarding, ReadAfter, after_offset, applied_within, written_offset
from support.app_calls import fresh
from support.storage import BLOG, with_stores
from support.storage import user as user_record


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


def test_an_awaitable_answer_is_awaited_once_the_offset_is_applied():
    async def go(store: Store) -> None:
        async def app(req: Request) -> Response:
            await asyncio.sleep(0)
            return Response(201, b"late")

        applied = AppliedOffsets(store)
        answer = await ReadAfter(app, applied, apply_seconds=1)(request(after="0"))
        assert isinstance(answer, Response) and answer.status == 201 and answer.body == b"late"
        applied.close()

    with_stores(go)


def test_a_commit_with_nobody_waiting_leaves_the_waits_working():
    async def go(store: Store) -> None:
        applied = AppliedOffsets(store)
        errors = Warnings(logging.ERROR)  # the store logs a subscriber that raised
        logging.getLogger().addHandler(errors)
        try:
            await store.insert("User", user_record(1))  # an event with no wait
            await store.insert("User", user_record(2))
        finally:
            logging.getLogger().removeHandler(errors)
        assert errors.lines == []
        late = applied.wait(3)
        assert late is not None and applied.head == 2
        await store.insert("User", user_record(3))
        assert late.done() and applied.waiting == 0
        applied.close()

    with_stores(go)


def test_an_offset_has_at_most_18_digits():
    assert after_offset("9" * 18) == 10**18 - 1 and after_offset("0" * 18) == 0
    with pytest.raises(BadRequest):
        after_offset("1" + "0" * 18)


# --- Forwarding: a scripted writer on a loopback port -----------------------------------------


class Meter:
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def observe(self, method: str, status: int, seconds: float) -> None:
        self.seen.append((method, status))


class Warnings(logging.Handler):
    def __init__(self, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def writer_answering(heads: list[bytes]) -> Callable[..., Awaitable[None]]:
    """A writer that answers each request with the next of `heads` (then a 2-byte body)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for head in heads:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(2)
            writer.write(head + b"Content-Length: 2\r\n\r\n{}")
            await writer.drain()
        writer.close()

    return handle


def write(method: str = "POST") -> Request:
    return Request(method, "/api/user", "/api/user", [], [("content-length", "2")], b"{}")


def test_a_forwarded_write_is_answered_once_this_store_applied_its_offset_else_after_the_wait():
    async def go(store: Store) -> None:
        server = await asyncio.start_server(
            writer_answering(
                [
                    b"HTTP/1.1 201 Created\r\nDbsvc-Offset: 1\r\n",
                    b"HTTP/1.1 409 Conflict\r\nDbsvc-Offset: 9\r\n",
                    b"HTTP/1.1 200 OK\r\nDbsvc-Offset: 7\r\n",
                ]
            ),
            "127.0.0.1",
            0,
        )
        port = server.sockets[0].getsockname()[1]
        upstream, applied, meter = Upstream("127.0.0.1", port), AppliedOffsets(store), Meter()
        warnings = Warnings()
        logging.getLogger("dbsvc.workers").addHandler(warnings)
        try:
            local: list[str] = []

            def app(req: Request) -> Response:
                local.append(req.method)
                return Response(200, b"local")

            front = Forwarding(app, upstream, applied, meter, apply_seconds=0.05)  # type: ignore[arg-type]
            for method in ("GET", "HEAD", "OPTIONS"):
                assert front(write(method)).body == b"local"  # answered here, never forwarded
            assert local == ["GET", "HEAD", "OPTIONS"]
            posted = write("POST")
            forwarded = asyncio.ensure_future(front(posted))
            deadline = asyncio.get_running_loop().time() + 5
            while applied.waiting == 0:
                assert asyncio.get_running_loop().time() < deadline, "the answer never waited"
                await asyncio.sleep(0.001)
            assert not forwarded.done() and posted.meter is meter
            await store.insert("User", user_record(1))
            answer = await asyncio.wait_for(forwarded, 5)
            assert answer.status == 201 and warnings.lines == []
            refused = await front(write("PUT"))  # no offset to wait for: at once
            assert refused.status == 409 and warnings.lines == [] and applied.waiting == 0
            late = await front(write("PATCH"))  # offset 7 never applied here: answered anyway
            assert late.status == 200 and applied.waiting == 0
            assert warnings.lines == [
                "a forwarded PATCH was applied by the writer at offset 7, which this reader has not "
                "applied within 0 s (is it following? /metrics says): answering anyway"
            ]
            assert (
                ReadAfter(app, applied).apply_seconds == Forwarding(app, upstream, applied, meter).apply_seconds == 10.0
            )  # type: ignore[arg-type]
        finally:
            logging.getLogger("dbsvc.workers").removeHandler(warnings)
            upstream.close()
            applied.close()
            server.close()

    with_stores(go)


def test_a_writer_not_listening_or_gone_mid_request_is_503_with_retry_after():
    async def go(store: Store) -> None:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.close()

        gone = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        closed = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        closed_port = closed.sockets[0].getsockname()[1]
        closed.close()
        await closed.wait_closed()
        applied = AppliedOffsets(store)
        try:
            down = Forwarding(lambda r: Response(200), Upstream("127.0.0.1", closed_port), applied, Meter())  # type: ignore[arg-type]
            with pytest.raises(WriterUnavailable) as refused:
                await down(write("DELETE"))
            assert str(refused.value) == (
                "the writer of this server is not reachable (it is being restarted): the DELETE was not applied; "
                "retry after 1 s"
            )
            assert refused.value.status == 503 and refused.value.headers == [("Retry-After", "1")]
            port = gone.sockets[0].getsockname()[1]
            lost = Forwarding(lambda r: Response(200), Upstream("127.0.0.1", port), applied, Meter())  # type: ignore[arg-type]
            with pytest.raises(WriterUnavailable) as unknown:
                await lost(write("PATCH"))
            assert str(unknown.value) == (
                "the writer of this server went away before it answered the PATCH: it may or may not have been "
                "applied; read the record before retrying"
            )
            assert unknown.value.headers == [("Retry-After", "1")]
        finally:
            applied.close()
            gone.close()

    with_stores(go)


# --- run.py: the front `front()` picks for a server that is no worker --------------------------


def unstarted_follower(directory: str, on_store: Callable[[Store], None] | None) -> Follower:
    """A Follower as service.py builds one for `--follow`, over a store of its own in
    `directory`, never started (nothing dialled)."""

    def opener(lock: object) -> Store:
        return Store.open(directory, BLOG.MODELS, BLOG.DESCRIPTION, replication=True, lock=lock, sync="off")

    return Follower(parse_endpoint("http://127.0.0.1:9"), directory, opener, "fp", on_store=on_store)


def test_a_plain_server_is_served_by_the_application_itself():
    async def go(store: Store) -> None:
        app = fresh(store)
        front = run.front(app, None, None)
        assert type(front) is run.Front and front.handler is app
        assert await front.start(app, None) is None and await front.stop() is None  # type: ignore[arg-type]

    with_stores(go)


def test_a_read_replica_waits_for_dbsvc_after_and_its_waits_follow_a_bootstrapped_store():
    async def go(store: Store, other: Store) -> None:
        await other.insert("User", user_record(1))
        for previous in (None, []):
            app = fresh(store)
            own = tempfile.mkdtemp(prefix="forward-follower-")
            follower = unstarted_follower(own, None if previous is None else previous.append)
            front = run.front(app, None, follower)
            assert type(front) is run.ReplicaFront
            handler = front.handler
            assert isinstance(handler, ReadAfter) and handler.app is app and handler.apply_seconds == 10.0
            waiting = asyncio.ensure_future(handler(request("GET", after="1")))
            await asyncio.sleep(0.01)
            assert not waiting.done() and handler.applied.waiting == 1
            assert follower.on_store is not None
            follower.on_store(other)  # a bootstrap: the waits follow the new store
            if previous is not None:
                assert previous == [other]  # the follower's own callback still called first
            answer = await asyncio.wait_for(waiting, 5)
            assert answer.status == 200 and handler.applied.head == 1
            pending = handler.applied.wait(5)
            assert pending is not None
            await front.start(app, None)  # type: ignore[arg-type]
            assert not pending.done()
            await front.stop()
            assert pending.done() and handler.applied.waiting == 0
            follower.store.close()
            shutil.rmtree(own, ignore_errors=True)

    with_stores(go, count=2)
