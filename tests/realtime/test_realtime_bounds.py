"""Issue 30 bounds without sockets: a live query's Init in slices a turn at a time and
exact under writes, a queue bounded in bytes, replays sharing the loop round-robin."""

from __future__ import annotations

import json

from dbsvc.realtime.broker import SESSION_TURN_BYTES, TURN_BYTES, Broker
from dbsvc.realtime.feeds import FeedKind, FeedSpec
from dbsvc.realtime.init import SLICE_BYTES, InitSlices
from dbsvc.realtime.session import FeedSession, ReplicationSession
from support.realtime_kit import BLOG, Recorder, Scheduler, open_blog_store, run

USER = BLOG.BY_NAME["User"]


def new_user(i: int, **over) -> dict:
    return USER.validate_create({"email": f"u{i}@x.io", "name": f"n{i}", **over})


def decoded(frame: bytes) -> dict:
    n = frame[1] & 0x7F
    return json.loads(frame[2 if n < 126 else 4 if n == 126 else 10 :])


def attached(store, capacity: int = 1024, max_bytes: int = 8 << 20) -> tuple[Broker, Scheduler]:
    broker = Broker(store, BLOG.BY_NAME, capacity, max_bytes)
    scheduler = Scheduler()
    broker.attach(scheduler)
    return broker, scheduler


def live_query(broker: Broker, query: dict | None = None) -> tuple[FeedSession, Recorder]:
    parsed = USER.parse_feed_query(list((query or {}).items()))
    spec = FeedSpec(FeedKind.LIVE, USER, parsed.filters, parsed.projection)
    store = broker.store
    init = InitSlices(store, USER, spec.filters, spec.projection, store.applied_offset, broker.capacity)
    session = FeedSession(spec, broker, init.offset, init=init)
    channel = Recorder()
    session.on_open(channel)
    return session, channel


def test_a_large_init_goes_out_in_bounded_slices_one_per_turn(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        store.insert_batch([("User", new_user(i, profile={"pad": "x" * 200})) for i in range(3000)])
        broker, scheduler = attached(store)
        session, channel = live_query(broker)
        scheduler.step()
        assert len(channel.frames) == 1  # one slice in the first turn
        while scheduler.pending:
            before = len(channel.frames)
            scheduler.step()
            assert len(channel.frames) - before <= 1
        inits = [decoded(f) for f in channel.frames]
        assert len(inits) > 5
        assert all(len(f) <= SLICE_BYTES + 2000 for f in channel.frames)
        assert [i["complete"] for i in inits] == [False] * (len(inits) - 1) + [True]
        assert {(i["type"], i["offset"], i["watermark"]) for i in inits} == {("Init", 3000, 3000)}
        ids = [r["id"] for i in inits for r in i["records"]]
        assert ids == list(range(1, 3001))
        store.close()

    run(body())


def test_init_slices_hold_the_state_at_their_offset_while_writes_change_it(tmp_path):
    """Records changed, deleted and added between slices: the Init is the set as of its
    offset, and the deltas after it add up to the truth, nothing repeated or missing."""

    async def body():
        store = open_blog_store(tmp_path)
        store.insert_batch([("User", new_user(i, profile={"pad": "x" * 200})) for i in range(3000)])
        broker, scheduler = attached(store)
        session, channel = live_query(broker, {"role": "reader"})
        truth_at_init = {r["id"]: r for r in _all(store)}
        scheduler.step()  # the first slice is out
        await store.replace("User", 2999, {**truth_at_init[2999], "name": "changed"})
        await store.replace("User", 2998, {**truth_at_init[2998], "role": "admin"})  # leaves
        await store.delete("User", 2997)
        await store.insert("User", new_user(5000))
        await store.replace("User", 1, {**truth_at_init[1], "name": "sent already"})
        scheduler.run()
        frames = [decoded(f) for f in channel.frames]
        inits = [f for f in frames if f["type"] == "Init"]
        assert inits[-1]["complete"] is True
        assert frames[: len(inits)] == inits  # every delta after the last slice
        held = {r["id"]: r for i in inits for r in i["records"]}
        assert held == truth_at_init  # the state at the Init's offset
        for delta in frames[len(inits) :]:
            if delta["type"] == "Removed":
                del held[delta["id"]]
            else:
                held[delta["record"]["id"]] = delta["record"]
        assert held == {r["id"]: r for r in _all(store)}
        store.close()

    run(body())


def _all(store) -> list[dict]:
    from dbsvc.runtime import Query

    records, _total, _wm = store.list_records(
        "User", Query(filters=USER.parse_feed_query([("role", "reader")]).filters, limit=10**9)
    )
    return records


def test_a_stalled_subscriber_is_closed_past_its_byte_budget_before_its_frame_count(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store, capacity=1024, max_bytes=1 << 20)
        session = FeedSession(FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None), broker, store.head_offset)
        channel = Recorder()
        session.on_open(channel)
        channel.open = False  # the peer stopped reading
        for i in range(8):  # 8 frames of 300 KB: far below 1024
            await store.insert("User", new_user(i, profile={"pad": "x" * 300_000}))
            scheduler.run()
        assert channel.closed == (1013, "lagged after 0")
        assert broker.metrics()["lagged_closes"] == 1
        store.close()

    run(body())


def test_a_live_query_lagging_during_its_init_is_told_to_open_again(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        store.insert_batch([("User", new_user(i, profile={"pad": "x" * 200})) for i in range(3000)])
        broker, scheduler = attached(store, capacity=4)
        session, channel = live_query(broker)
        scheduler.step()
        channel.open = False  # stops reading after one slice
        for i in range(6):
            await store.insert("User", new_user(10_000 + i))
            scheduler.run()
        assert channel.closed == (1013, "lagged during init")
        assert session.init is None  # its ids are let go
        store.close()

    run(body())


def test_replays_share_each_turn_round_robin_within_the_byte_budget(tmp_path):
    async def body():
        store = open_blog_store(tmp_path, replication=True)
        store.insert_batch([("User", new_user(i, profile={"pad": "x" * 500})) for i in range(6000)])
        broker, scheduler = attached(store)
        channels = []
        for _ in range(6):
            session = ReplicationSession(broker, 0, store.frames_after(0))
            channel = Recorder()
            session.on_open(channel)
            channels.append(channel)
        scheduler.step()
        sizes = [sum(map(len, c.frames)) for c in channels]
        assert sum(sizes) <= TURN_BYTES + 2 * 1024  # one turn: bounded for all of them
        assert all(s <= SESSION_TURN_BYTES + 1024 for s in sizes)
        assert sum(1 for s in sizes if s) >= TURN_BYTES // SESSION_TURN_BYTES
        turns = 1
        while scheduler.pending and turns < 1000:
            scheduler.step()
            turns += 1
            progress = [len(c.frames) for c in channels]
            assert max(progress) - min(progress) <= 2 * 1000  # nobody runs far ahead
        assert [len(c.frames) for c in channels] == [6000] * 6
        store.close()

    run(body())


def test_the_byte_budget_is_a_checked_setting():
    import pytest

    from dbsvc.config import load_config
    from dbsvc.errors import ConfigError

    assert load_config({}, {}).changefeed_bytes == 8 << 20
    assert load_config({"SERVICE_CHANGEFEED_BYTES": "1048576"}, {}).changefeed_bytes == 1 << 20
    with pytest.raises(ConfigError, match=r"SERVICE_CHANGEFEED_BYTES='1k' is not valid: expected an integer"):
        load_config({"SERVICE_CHANGEFEED_BYTES": "1k"}, {})
