"""broker.py and session.py without sockets: a real store, the broker on a hand-run
scheduler, sessions sending into recording channels."""

from __future__ import annotations

import dataclasses
import json

from dbsvc.realtime.broker import SESSION_TURN_BYTES, Broker
from dbsvc.realtime.feeds import FeedKind, FeedSpec
from dbsvc.realtime.init import InitSlices
from dbsvc.realtime.session import REPLAY_BATCH, FeedSession
from support.realtime_kit import BLOG, Recorder, Scheduler, open_blog_store, run

USER = BLOG.BY_NAME["User"]


def new_user(i: int, **over) -> dict:
    return USER.validate_create({"email": f"u{i}@x.io", "name": f"n{i}", **over})


def attached(store, capacity: int = 1024) -> tuple[Broker, Scheduler]:
    broker = Broker(store, BLOG.BY_NAME, capacity)
    scheduler = Scheduler()
    broker.attach(scheduler)
    return broker, scheduler


def feed(broker: Broker, kind: FeedKind = FeedKind.SUBSCRIBE, model=USER, **kw) -> tuple[FeedSession, Recorder]:
    query = model.parse_feed_query(list(kw.pop("query", {}).items()))
    session = FeedSession(
        FeedSpec(kind, model, query.filters, query.projection), broker, kw.pop("start", broker.store.head_offset), **kw
    )
    channel = Recorder()
    session.on_open(channel)
    return session, channel


def offsets(channel: Recorder) -> list[int]:
    return [json.loads(f[2:] if f[1] < 126 else f[4:])["offset"] for f in channel.frames]


def test_publishing_only_enqueues_and_the_drain_sends(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        _session, channel = feed(broker)
        await store.insert("User", new_user(1))
        assert channel.frames == []  # nothing sent on the commit path
        assert scheduler.run() == 2  # a hop behind the responses, then the drain
        assert offsets(channel) == [1]
        store.close()

    run(body())


def test_every_receiver_gets_the_same_frame_bytes(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        channels = [feed(broker)[1] for _ in range(50)]
        await store.insert("User", new_user(1))
        scheduler.run()
        first = channels[0].frames[0]
        assert all(c.frames[0] is first for c in channels)
        assert broker.events_sent == 50
        store.close()

    run(body())


def test_routing_runs_the_matcher_only_for_feeds_the_event_may_reach(tmp_path):
    calls = []
    counted = dataclasses.replace(USER, match=lambda record, *query: calls.append(1) or USER.match(record, *query))

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        channels = {i: feed(broker, model=counted, query={"name": f"n{i}"})[1] for i in range(1000)}
        await store.insert("User", new_user(500))
        scheduler.run()
        assert len(calls) == 1  # not 1000
        assert [i for i, c in channels.items() if c.frames] == [500]
        calls.clear()
        await store.replace("User", 1, {**new_user(500), "id": 1, "name": "n7"})  # old n500, new n7
        scheduler.run()
        assert len(calls) <= 4
        assert [i for i, c in channels.items() if len(c.frames) == 2] == [500]
        assert len(channels[7].frames) == 1
        store.close()

    run(body())


def test_closing_unregisters_from_the_routes(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        session, channel = feed(broker, query={"role": "admin"})
        assert broker.metrics()["subscriptions"] == 1
        session.on_close(1000)
        assert broker.metrics()["subscriptions"] == 0
        await store.insert("User", new_user(1, role="admin"))
        scheduler.run()
        assert channel.frames == []
        store.close()

    run(body())


def test_a_full_queue_closes_1013_naming_the_last_offset_sent(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store, capacity=3)
        _session, channel = feed(broker)
        await store.insert("User", new_user(1))
        scheduler.run()
        channel.open = False  # the transport is over its high-water mark
        for i in range(2, 5):
            await store.insert("User", new_user(i))
        scheduler.run()
        assert channel.closed is None  # 3 queued: still within capacity
        await store.insert("User", new_user(5))
        scheduler.run()
        assert channel.closed == (1013, "lagged after 1")
        assert broker.metrics() == {
            "subscriptions": 0,
            "live_queries": 0,
            "replication_streams": 0,
            "events_sent": 1,
            "lagged_closes": 1,
        }
        store.close()

    run(body())


def test_queued_frames_leave_when_the_channel_drains(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store, capacity=10)
        session, channel = feed(broker)
        channel.open = False
        for i in range(1, 4):
            await store.insert("User", new_user(i))
        scheduler.run()
        assert channel.frames == []
        channel.open = True
        session.on_writable()
        assert offsets(channel) == [1, 2, 3]
        store.close()

    run(body())


def test_replay_goes_at_the_sockets_pace_and_in_batches(tmp_path):
    async def body():
        store = open_blog_store(tmp_path, replication=True)  # replay from the log
        broker, scheduler = attached(store)
        for i in range(REPLAY_BATCH + 10):
            await store.insert("User", new_user(i))
        scheduler.run()
        channel = Recorder()
        channel.open = False
        session = FeedSession(FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None), broker, 0, replay=store.events_after(0))
        session.on_open(channel)
        assert channel.frames == []  # not writable: nothing read yet
        channel.open = True
        session.on_writable()
        assert channel.frames == []  # the broker hands out turns ...
        scheduler.step()
        first = len(channel.frames)
        assert 0 < first <= REPLAY_BATCH  # ... one bounded batch a turn ...
        assert sum(map(len, channel.frames)) <= SESSION_TURN_BYTES + max(map(len, channel.frames))
        await store.insert("User", new_user(99999))  # ... while writes go on
        scheduler.run()  # next batches, then the live event
        assert offsets(channel) == list(range(1, REPLAY_BATCH + 12))
        store.close()

    run(body())


def test_live_query_init_waits_until_its_offset_is_published(tmp_path):
    async def body():
        store = open_blog_store(tmp_path, sync="full")
        broker, scheduler = attached(store)
        _record, durable = store.apply_insert("User", new_user(1))  # applied, fsync in flight
        offset = store.applied_offset
        spec = FeedSpec(FeedKind.LIVE, USER, {}, None)
        session = FeedSession(spec, broker, offset, init=InitSlices(store, USER, {}, None, offset, 1024))
        channel = Recorder()
        session.on_open(channel)
        assert channel.frames == []  # the write is not durable yet
        await durable
        scheduler.run()
        init = json.loads(channel.frames[0][2:] if channel.frames[0][1] < 126 else channel.frames[0][4:])
        assert (init["type"], init["offset"], len(init["records"])) == ("Init", 1, 1)
        await store.insert("User", new_user(2))
        scheduler.run()
        assert len(channel.frames) == 2  # Added, not a repeat of offset 1
        store.close()

    run(body())


def test_a_lag_close_never_splits_the_frames_of_one_row(tmp_path):
    """A ref change makes two link frames at one offset; `lagged after N` must mean every
    frame of N was sent."""
    post_model = BLOG.BY_NAME["BlogPost"]

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store, capacity=2)
        await store.insert("User", new_user(1))
        await store.insert("User", new_user(2))
        record = post_model.validate_create({"author_id": 1, "title": "t", "body": "b", "score": 1})
        await store.insert("BlogPost", record)
        scheduler.run()
        session, channel = feed(broker)
        channel.open = False
        await store.replace("BlogPost", 1, {**record, "id": 1, "author_id": 2})  # offset 4: two links
        scheduler.run()
        assert channel.frames == [] and channel.closed is None  # both queued
        channel.open = True
        # Send exactly one frame, as if the transport filled again right after it.
        queue_head = session._queue.popleft()
        channel.send_frame(queue_head[1])
        session.sent = queue_head[0]
        channel.open = False
        await store.insert("User", new_user(3))
        await store.insert("User", new_user(4))
        scheduler.run()
        assert channel.closed == (1013, "lagged after 4")
        links = [json.loads(f[2:]) for f in channel.frames]
        assert [(m["id"], m["linked"], m["offset"]) for m in links] == [(1, False, 4), (2, True, 4)]
        store.close()

    run(body())


def test_a_closed_session_lets_go_of_its_channel(tmp_path):
    """The channel refers to the session and the session to the channel; on_close breaks
    the cycle so both are freed by reference counting, not by a rare full GC."""
    import gc
    import weakref

    async def body():
        store = open_blog_store(tmp_path)
        broker, _scheduler = attached(store)
        session, channel = feed(broker)
        channel.session = session  # the cycle a real channel makes
        gone = weakref.ref(channel)
        session.on_close(1000)
        del channel
        gc.disable()
        try:
            assert gone() is None
        finally:
            gc.enable()
        store.close()

    run(body())
