"""The workers' `WriterPrimary` against a real writer's private port, in process: a reader's
follower bootstraps from it, follows its writes, and is refused without the key.

tests/workers/test_run_fronts.py reaches the private port with `epoch_snapshot` only, and
test_workers_serve.py follows it from child processes, which the mutation runners do not
see (docs/mutation.md, session 26, wt-mpo18): so nothing in process asked the port's
`/snapshot` (the kept connection `WriterPrimary.snapshot` makes, with its key) or opened
`/replicate` through `WriterPrimary.replicate`. Here the writer is `run.front` over a real
blog store on a loopback port, and the reader is tests/support/follower_kit.py's `Replica`
(a real `Follower` over a real store in a temporary directory, its own loop) given a
`WriterPrimary` as its primary. No fixture but `tmp_path`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from dbsvc.config import load_config
from dbsvc.errors import HandshakeRefused
from dbsvc.storage import Store
from dbsvc.workers import run
from dbsvc.workers.private import WriterPrimary
from dbsvc.workers.role import WorkerRole
from support.app_calls import fresh
from support.follower_kit import Replica
from support.ports import free_port, listening
from support.storage import user as user_record
from support.storage import with_stores

SETTINGS = load_config({}).http  # the public side's settings; the private port replaces host and port
KEY = "the-key"


def a_writer(go_on: Callable[[Store, int], Awaitable[None]]) -> None:
    """Serve a blog writer's private port (key `KEY`) over a fresh store holding User 1,
    and run `go_on(store, port)` beside it."""

    async def go(store: Store) -> None:
        await store.insert("User", user_record(1))
        app = fresh(store)
        loop = asyncio.get_running_loop()
        app.broker.attach(loop.call_soon, loop.call_later)  # as service.py does: the streams' turns
        port = free_port()
        front = run.front(app, WorkerRole(0, 2, port, KEY), None)
        await front.start(app, SETTINGS)
        await listening(port)
        try:
            await go_on(store, port)
        finally:
            await front.stop()
            app.broker.detach()

    with_stores(go)


def test_a_reader_bootstraps_from_the_writers_private_port_and_follows_its_writes(tmp_path):
    async def go_on(writer: Store, port: int) -> None:
        loop = asyncio.get_running_loop()
        (tmp_path / "reader").mkdir()
        node = Replica(str(tmp_path / "reader"), WriterPrimary(port, KEY))  # type: ignore[arg-type]
        node.primary = None  # the writer is real: no scripted stream to wake at close
        try:
            await loop.run_in_executor(None, node.start)  # the bootstrap asks the writer's loop
            await loop.run_in_executor(None, node.wait, "bootstrapped", lambda: node.store.head_offset == 1)
            assert node.status.error is None and node.status.synced
            for uid in (2, 3):
                await writer.insert("User", user_record(uid))
            await loop.run_in_executor(
                None,
                node.wait,
                "following to 3",
                lambda: node.store.head_offset == 3 and node.status.state == "following",
            )
            ids = await loop.run_in_executor(None, node.user_ids)
            assert ids == [1, 2, 3]
            assert node.store.epoch == writer.epoch
            # The stream came through `replicate(after)`: the frames are the writer's own.
            frames = await loop.run_in_executor(None, lambda: node.on_loop(lambda: list(node.store.frames_after(0))))
            assert frames == list(writer.frames_after(0))
        finally:
            await loop.run_in_executor(None, node.close)

    a_writer(go_on)


def test_the_private_port_answers_writer_primarys_snapshot_and_stream_with_the_key_only():
    async def go_on(writer: Store, port: int) -> None:
        loop = asyncio.get_running_loop()

        def ask() -> tuple[dict, bytes | str | None]:
            primary = WriterPrimary(port, KEY)
            try:
                answer = primary.snapshot()
                with primary.replicate(0) as stream:
                    first = stream.receive(timeout=5)
            finally:
                primary.close()
            return answer, first

        answer, first = await loop.run_in_executor(None, ask)
        assert answer["epoch"] == writer.epoch and answer["offset"] == 1
        assert first == next(iter(writer.frames_after(0)))

        def refused() -> None:
            primary = WriterPrimary(port, "not-the-key")
            try:
                with pytest.raises(OSError, match="403"):
                    primary.snapshot()
                with pytest.raises(HandshakeRefused) as caught:
                    primary.replicate(0)
                assert caught.value.status == 403
                assert caught.value.code == "forbidden"
            finally:
                primary.close()

        await loop.run_in_executor(None, refused)

    a_writer(go_on)
