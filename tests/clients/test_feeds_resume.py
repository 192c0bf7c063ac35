"""The generated client's feeds across disconnects, against real servers.

- The server restarted mid-stream: a subscription hands over every event of the log once, in
  order (checked against `/replicate`), and a live query's set equals a fresh list.
- A token that expires on an open socket (close 4401): the feed asks the token function for
  a new one and goes on, missing nothing.
- An `after` the server no longer holds (410 `offset_gone`): the feed says so through
  `on_reset` and goes on from the head.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

from support.client_kit import SCHEMAS, client_module, log_events
from support.idp import TestIdp
from support.server import start_server


@pytest.fixture(scope="module")
def blog(tmp_path_factory):
    return client_module(SCHEMAS / "blog.dbs", tmp_path_factory.mktemp("client"), "feeds_resume_blog")


def write_users(client, prefix: str, count: int) -> None:
    """Creates, a merge, a delete and a batch: every kind of row, some in and some out of
    the live query's filter (role=admin)."""
    ids = []
    for i in range(count):
        ids.append(
            client.user.create(
                {"email": f"{prefix}{i}@example.com", "name": f"{prefix}{i}", "role": "admin" if i % 2 else "reader"}
            )
        )
    client.user.patch(ids[0], {"role": "admin"})  # into the filter
    client.user.patch(ids[1], {"role": "editor"})  # out of it
    client.user.delete(ids[3])
    client.batch(
        [client.user.create_op({"email": f"{prefix}b{i}@example.com", "name": "B", "role": "admin"}) for i in range(3)]
    )


def test_a_subscription_and_a_live_query_survive_a_restart_mid_stream(blog, tmp_path):
    data = tmp_path / "data"
    server = start_server(SCHEMAS / "blog.dbs", data)
    port = server.port
    client = blog.Client(f"http://127.0.0.1:{port}")
    events: list[dict] = []
    resets: list[object] = []
    subscription = client.user.subscribe(events.append, on_reset=resets.append)
    live = client.user.live_query(role="admin", on_reset=resets.append)
    try:
        assert live.wait_until(lambda records: True, 10)
        write_users(client, "before", 20)
        # stop while the feeds may still be reading: the server closes them with 1001
        assert server.stop(signal.SIGTERM, timeout=30) == 0
        server = start_server(SCHEMAS / "blog.dbs", data, {"SERVICE_PORT": str(port)})
        write_users(client, "after", 20)  # likely before the feeds are back: they replay it
        head = client.user.head()
        assert subscription.wait_for_offset(head, 30), (subscription.offset, head, subscription.error)
        fresh = {r["id"]: r for r in client.user.iterate(role="admin")}
        assert live.wait_until(lambda records: records == fresh, 30), (live.records(), fresh, live.error)
        logged = [e for e in log_events(port, head) if e["model"] == "User"]
    finally:
        subscription.close()
        live.close()
        server.stop()
    assert subscription.error is None and live.error is None and resets == []
    assert subscription.connects >= 2 and live.connects >= 2  # they did reconnect
    seen = [(e["offset"], e["kind"], e["id"]) for e in events]
    assert seen == [(e["offset"], e["kind"], e["id"]) for e in logged]
    assert [e["record"] for e in events] == [e["record"] for e in logged]


def test_a_feed_whose_token_expires_asks_for_a_new_one_and_misses_nothing(blog, tmp_path):
    idp = TestIdp(tmp_path)
    server = start_server(SCHEMAS / "blog.dbs", idp.data_dir(), idp.server_env(SERVICE_JWT_LEEWAY="0"))
    issued: list[str] = []

    def token() -> str:  # each token lives 2 s: the first socket is closed with 4401
        issued.append(idp.token(exp=int(time.time()) + 2))
        return issued[-1]

    client = blog.Client(f"http://127.0.0.1:{server.port}", token=token)
    events: list[dict] = []
    try:
        with client.user.subscribe(events.append) as subscription:
            first = client.user.create({"email": "t1@example.com", "name": "T1"})
            deadline = time.monotonic() + 20
            while subscription.connects < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # a poll with a deadline: the expiry closes the socket (4401)
            second = client.user.create({"email": "t2@example.com", "name": "T2"})
            assert subscription.wait_for_offset(client.user.head(), 20), subscription.error
        assert subscription.connects >= 2 and subscription.error is None
        assert [e["id"] for e in events] == [first, second]
    finally:
        server.stop()


def test_an_offset_the_server_no_longer_holds_resets_the_feed_and_says_so(tmp_path):
    inventory = client_module(SCHEMAS / "inventory.dbs", tmp_path, "feeds_resume_inventory")
    server = start_server(SCHEMAS / "inventory.dbs", tmp_path / "data")  # no broker: a ring of 256
    client = inventory.Client(f"http://127.0.0.1:{server.port}")
    try:
        client.batch(
            [client.warehouse.create_op({"code": f"W{i:03}", "city": "X", "opened": "2026-01-01"}) for i in range(300)]
        )
        resets: list[object] = []
        events: list[dict] = []
        with client.warehouse.subscribe(events.append, after=1, on_reset=resets.append) as subscription:
            deadline = time.monotonic() + 10
            while not resets and time.monotonic() < deadline:
                time.sleep(0.05)
            assert [type(r).__name__ for r in resets] == ["OffsetGoneError"]
            client.warehouse.create({"code": "LAST", "city": "Y", "opened": "2026-01-02"})
            assert subscription.wait_for_offset(client.warehouse.head(), 10), subscription.error
        assert [e["id"] for e in events] == ["LAST"]
    finally:
        server.stop()


@pytest.mark.slow
def test_a_subscription_closed_as_lagged_resumes_with_nothing_lost(blog, tmp_path):
    """A handler slower than the writes: the server closes the socket 1013 (its queue is
    held to 64 KiB here) and the feed resumes after the last event it handed over."""
    server = start_server(SCHEMAS / "blog.dbs", tmp_path / "data", {"SERVICE_CHANGEFEED_BYTES": "65536"})
    client = blog.Client(f"http://127.0.0.1:{server.port}")
    release = threading.Event()
    events: list[dict] = []

    def slow(event: dict) -> None:
        release.wait(30)  # the first event holds the reader until every write is done
        events.append(event)

    profile = {"text": "x" * 200_000}
    try:
        with client.user.subscribe(slow) as subscription:
            for i in range(80):  # 16 MB of events: more than the socket's buffers hold
                client.user.create({"email": f"lag{i}@example.com", "name": "Lag", "profile": profile})
            release.set()
            head = client.user.head()
            assert subscription.wait_for_offset(head, 60), (subscription.offset, head, subscription.error)
        logged = [e for e in log_events(server.port, head) if e["model"] == "User"]
    finally:
        server.stop()
    assert subscription.connects >= 2, "the server never closed the slow feed: nothing was resumed"
    assert [(e["offset"], e["id"]) for e in events] == [(e["offset"], e["id"]) for e in logged]
