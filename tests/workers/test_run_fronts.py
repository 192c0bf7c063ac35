"""run.py's worker fronts in process (`serve --workers N`): the writer's private listener and
a reader's forwarding front and catch-up, built by `front()` from public parts (the blog
application over a real store, a Follower never started, the writer played by a script on
a loopback port). tests/workers/test_workers_serve.py runs them end to end in child
processes, which mutation testing cannot see (docs/mutation.md, "config.py,
storage/tenants.py, workers/run.py"). No fixture: the in-process mutation runner calls these.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import tempfile
from collections.abc import Callable

import pytest

from dbsvc.config import load_config
from dbsvc.errors import StorageError
from dbsvc.http.types import Request
from dbsvc.replica.consumer import parse_endpoint
from dbsvc.replica.follower import Follower
from dbsvc.storage import Store
from dbsvc.workers import run
from dbsvc.workers.forward import Forwarding
from dbsvc.workers.role import WorkerRole
from support.app_calls import fresh
from support.ports import free_port, listening
from support.storage import BLOG, with_stores
from support.storage import user as user_record

SETTINGS = load_config({}).http  # the public side's settings; the private port replaces host and port


async def ask(port: int, method: str, path: str, key: str | None, body: bytes = b"") -> tuple[int, bytes]:
    """One request on its own connection: (status, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
    if body:
        head += "Content-Type: application/json\r\n"
    if key is not None:
        head += f"Dbsvc-Worker-Key: {key}\r\n"
    writer.write(head.encode() + b"\r\n" + body)
    answer = await reader.read()
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


class Lines(logging.Handler):
    def __init__(self, name: str) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger(name)
        self.level_before = self.logger.level

    def __enter__(self) -> Lines:
        self.logger.addHandler(self)
        self.logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_before)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def unstarted_follower(directory: str, on_store: Callable[[Store], None] | None = None) -> Follower:
    """A Follower as service.py builds a reader's, over a store of its own, never started."""

    def opener(lock: object) -> Store:
        return Store.open(directory, BLOG.MODELS, BLOG.DESCRIPTION, replication=True, lock=lock, sync="off")

    return Follower(parse_endpoint("http://127.0.0.1:9"), directory, opener, "fp", on_store=on_store)


# --- front(): which front a worker gets


def test_the_writer_is_worker_0_and_every_other_index_a_reader():
    async def go(store: Store) -> None:
        app = fresh(store)
        writer = run.front(app, WorkerRole(0, 3, 1, "k"), None)
        assert type(writer) is run.WriterFront and writer.handler is app and writer.worker == WorkerRole(0, 3, 1, "k")
        for index in (1, 2):
            own = tempfile.mkdtemp(prefix="run-fronts-")
            follower = unstarted_follower(own)
            try:
                reader = run.front(app, WorkerRole(index, 3, 1, "k"), follower)
                assert type(reader) is run.ReaderFront and reader.follower is follower
                assert isinstance(reader.handler, Forwarding) and reader.handler.app is app
            finally:
                follower.store.close()
                shutil.rmtree(own, ignore_errors=True)

    with_stores(go)


# --- the writer: its private listener


def test_the_writers_private_port_serves_the_app_to_holders_of_the_key_and_closes_at_stop():
    async def go(store: Store) -> None:
        app = fresh(store)
        port = free_port()
        await run.front(app, WorkerRole(0, 2, free_port(), "k"), None).stop()  # never started: nothing to stop
        front = run.front(app, WorkerRole(0, 2, port, "the-key"), None)
        with Lines("dbsvc.http.request") as spans:
            await front.start(app, SETTINGS)
            assert "(the workers' private port)" in app.meters.routes
            await listening(port)
            created, body = await ask(port, "POST", "/api/user", "the-key", json.dumps(user_record(5)).encode())
            assert created == 201 and json.loads(body)["id"] == 5 and store.head_offset == 1
            assert (await ask(port, "GET", "/api/user/5", "wrong"))[0] == 403
            assert (await ask(port, "GET", "/api/user/5", None))[0] == 403
            assert (await ask(port, "GET", "/api/user/5", "the-key"))[0] == 200
            assert spans.lines == []  # no span lines on the private port
        meter = app.meters.routes["(the workers' private port)"]
        assert sum(sum(by_status.values()) for by_status in meter.counts.values()) >= 1
        await front.stop()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)  # closed once stop returns

    with_stores(go)


def test_the_private_port_streams_the_log_to_a_reader_with_the_writers_fingerprint():
    async def go(store: Store) -> None:
        await store.insert("User", user_record(1))
        app = fresh(store)
        port = free_port()
        front = run.front(app, WorkerRole(0, 2, port, "the-key"), None)
        await front.start(app, SETTINGS)
        await listening(port)
        try:
            from dbsvc.workers.private import WriterPrimary

            def first_message() -> bytes | str | None:
                with WriterPrimary(port, "the-key").epoch_snapshot() as socket_:
                    return socket_.receive(timeout=5)

            message = await asyncio.get_running_loop().run_in_executor(None, first_message)
            assert isinstance(message, str) and json.loads(message)["fingerprint"] == app.fingerprint
        finally:
            await front.stop()

    with_stores(go)


def test_a_private_port_in_use_fails_the_writers_start_itself():
    async def go(store: Store) -> None:
        app = fresh(store)
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            front = run.front(app, WorkerRole(0, 2, holder.getsockname()[1], "k"), None)
            with pytest.raises(OSError):
                await front.start(app, SETTINGS)  # bound in start, not later in the listener's task
            await front.stop()

    with_stores(go)


@pytest.mark.slow
def test_the_writers_stop_waits_at_most_15_seconds_for_a_request_that_never_ends():
    """With SERVICE_SHUTDOWN_TIMEOUT=0 (no limit) the private listener would wait for a body
    that never comes; `stop` gives up after STOP_SECONDS (15 s) so the writer still exits."""

    async def go(store: Store) -> None:
        app = fresh(store)
        port = free_port()
        front = run.front(app, WorkerRole(0, 2, port, "k"), None)
        settings = load_config({"SERVICE_SHUTDOWN_TIMEOUT": "0", "SERVICE_MIN_BODY_RATE": "0"}).http
        await front.start(app, settings)
        await listening(port)
        _, stuck = await asyncio.open_connection("127.0.0.1", port)
        stuck.write(b"POST /api/user HTTP/1.1\r\nHost: x\r\nDbsvc-Worker-Key: k\r\nContent-Length: 10\r\n\r\n{")
        await stuck.drain()
        await asyncio.sleep(0.1)
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(front.stop(), 30)
        assert 14 < asyncio.get_running_loop().time() - started < 30
        stuck.close()

    with_stores(go)


# --- a reader: forwarding, the catch-up, the stop


def writer_script(seen: list[bytes], offset: int) -> Callable[..., object]:
    """The writer's private port, played: records each request head, answers 201 at `offset`."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        seen.append(head)
        writer.write(f"HTTP/1.1 201 Created\r\nDbsvc-Offset: {offset}\r\nContent-Length: 2\r\n\r\n{{}}".encode())
        await writer.drain()
        writer.close()

    return handle


def test_a_reader_forwards_writes_to_the_private_port_with_the_key_and_follows_a_bootstrap():
    async def go(store: Store, other: Store) -> None:
        await store.insert("User", user_record(1))
        app = fresh(store)
        seen: list[bytes] = []
        server = await asyncio.start_server(writer_script(seen, 1), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        own = tempfile.mkdtemp(prefix="run-fronts-")
        calls: list[Store] = []
        follower = unstarted_follower(own, calls.append)
        try:
            front = run.front(app, WorkerRole(1, 2, port, "the-key"), follower)
            request = Request("POST", "/api/user", "/api/user", [], [("content-length", "2")], b"{}")
            answer = await front.handler(request)
            assert answer.status == 201
            assert b"\r\nDbsvc-Worker-Key: the-key\r\n" in seen[0] and seen[0].startswith(
                b"POST /api/user HTTP/1.1\r\n"
            )
            assert request.meter is app.meters.routes["(forwarded to the writer)"]
            assert front.applied.wait(1) is None  # this store holds offset 1 already
            pending = front.applied.wait(2)
            assert pending is not None
            assert follower.on_store is not None
            follower.on_store(other)  # a bootstrap: the waits follow the new store
            assert calls == [other] and front.applied.head == 0 and not pending.done()
            await other.insert("User", user_record(1))
            await store.insert("User", user_record(2))  # the old store: no longer followed
            await asyncio.sleep(0.01)
            assert not pending.done()
            await other.insert("User", user_record(2))
            await asyncio.wait_for(pending, 5)
            later = front.applied.wait(3)
            assert later is not None
            await front.stop()
            assert later.done()  # the stop releases the waits
        finally:
            server.close()
            follower.store.close()
            shutil.rmtree(own, ignore_errors=True)

    with_stores(go, count=2)


def test_a_reader_listens_only_once_synced_and_caught_up_with_the_writers_head():
    async def go(store: Store) -> None:
        app = fresh(store)
        own = tempfile.mkdtemp(prefix="run-fronts-")
        follower = unstarted_follower(own)
        try:
            front = run.front(app, WorkerRole(1, 2, free_port(), "k"), follower)
            status = follower.status
            with Lines("dbsvc.workers") as lines:
                status.synced, status.primary_offset = True, 0
                await asyncio.wait_for(front.start(app, SETTINGS), 5)  # synced and at the head: at once
                assert lines.lines == []
                status.synced = False
                starting = asyncio.ensure_future(front.start(app, SETTINGS))
                await asyncio.sleep(0.05)
                assert not starting.done()  # not synced yet
                status.synced = True
                await asyncio.wait_for(starting, 5)
                status.primary_offset = 2
                starting = asyncio.ensure_future(front.start(app, SETTINGS))
                await asyncio.sleep(0.05)
                assert not starting.done() and lines.lines == ["catching up with the writer: offset 0 of 2"]
                await store.insert("User", user_record(1))
                await asyncio.sleep(0.05)
                assert not starting.done()  # one behind
                await store.insert("User", user_record(2))
                await asyncio.wait_for(starting, 5)  # at the head: listening
        finally:
            follower.store.close()
            shutil.rmtree(own, ignore_errors=True)

    with_stores(go)


@pytest.mark.parametrize("state", ["stopped", "diverged"])
def test_a_reader_whose_follower_stops_while_it_catches_up_ends_its_start(state):
    async def go(store: Store) -> None:
        app = fresh(store)
        own = tempfile.mkdtemp(prefix="run-fronts-")
        follower = unstarted_follower(own)
        try:
            front = run.front(app, WorkerRole(1, 2, free_port(), "k"), follower)
            follower.status.primary_offset = 3
            starting = asyncio.ensure_future(front.start(app, SETTINGS))
            await asyncio.sleep(0.05)
            assert not starting.done()
            follower.status.state, follower.status.error = state, "the primary's history differs"
            with pytest.raises(StorageError) as stopped:
                await asyncio.wait_for(starting, 5)
            assert str(stopped.value) == "this reader stopped following its writer: the primary's history differs"
        finally:
            follower.store.close()
            shutil.rmtree(own, ignore_errors=True)

    with_stores(go)
