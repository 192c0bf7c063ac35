"""Shared fan-out without sockets (fanout.py, broker.py rules 9 and 10): plain feeds decide
once per group, each socket gets a drain's frames in one write, and every guarantee of the
per-session path (order, no gap, no duplicate, lag accounting) holds for batches."""

from __future__ import annotations

import dataclasses
import json

from dbsvc.realtime.broker import DRAIN_HOLD_MAX, DRAIN_HOLD_MIN, Broker
from dbsvc.realtime.fanout import DELIVERY_SLICE
from dbsvc.realtime.feeds import FeedKind, FeedSpec
from dbsvc.realtime.session import FeedSession
from support.realtime_kit import BLOG, Recorder, Scheduler, open_blog_store, run

USER = BLOG.BY_NAME["User"]
POST = BLOG.BY_NAME["BlogPost"]


def new_user(i: int, **over) -> dict:
    return USER.validate_create({"email": f"u{i}@x.io", "name": f"n{i}", **over})


def attached(store, capacity: int = 1024, later=None) -> tuple[Broker, Scheduler]:
    broker = Broker(store, BLOG.BY_NAME, capacity)
    scheduler = Scheduler()
    broker.attach(scheduler, later)
    return broker, scheduler


def feed(broker: Broker, kind=FeedKind.SUBSCRIBE, model=USER, query=None, start=None) -> tuple[FeedSession, Recorder]:
    parsed = model.parse_feed_query(list((query or {}).items()))
    spec = FeedSpec(kind, model, parsed.filters, parsed.projection)
    session = FeedSession(spec, broker, broker.store.head_offset if start is None else start)
    channel = Recorder()
    session.on_open(channel)
    return session, channel


def decoded(frame: bytes) -> dict:
    n = frame[1] & 0x7F
    return json.loads(frame[2 if n < 126 else 4 if n == 126 else 10 :])


def offsets(channel: Recorder) -> list[int]:
    return [decoded(f)["offset"] for f in channel.frames]


def test_a_feed_under_a_pinned_scope_is_routed_by_its_keys_not_grouped(tmp_path):
    from dbsvc.realtime.fanout import plain_key
    from dbsvc.rules import EVERYTHING, Scope

    parsed = USER.parse_feed_query([])
    pinned = Scope(field="role", keys=frozenset({"admin"}), key=USER.keys["role"])
    assert plain_key(FeedSpec(FeedKind.SUBSCRIBE, USER, parsed.filters, None, scope=pinned)) is None
    assert plain_key(FeedSpec(FeedKind.SUBSCRIBE, USER, parsed.filters, None, scope=EVERYTHING)) is not None


def test_unfiltered_feeds_make_one_decision_per_event_not_one_per_socket(tmp_path):
    calls = []
    counted = dataclasses.replace(USER, match=lambda record, *query: calls.append(1) or USER.match(record, *query))

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        channels = [feed(broker, model=counted)[1] for _ in range(1000)]
        card = [feed(broker, model=counted, query={"projection": "card"})[1] for _ in range(10)]
        await store.insert("User", new_user(1))
        scheduler.run()
        assert len(calls) == 2  # one per (kind, projection): not 1010
        assert all(offsets(c) == [1] for c in channels + card)
        assert all(c.frames[0] is channels[0].frames[0] for c in channels)  # shared bytes
        assert set(decoded(card[0].frames[0])["record"]) == {"id", "name"}
        assert broker.events_sent == 1010
        store.close()

    run(body())


def test_a_drain_reaches_each_socket_in_one_write(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        channels = [feed(broker)[1] for _ in range(100)]
        for i in range(1, 4):  # three commits before the loop comes round to the drain
            await store.insert("User", new_user(i))
        await store.insert("BlogPost", POST.validate_create({"author_id": 1, "title": "t", "body": "b", "score": 1}))
        scheduler.run()
        for channel in channels:
            assert len(channel.writes) == 1  # one send for four events
            assert offsets(channel) == [1, 2, 3, 4]  # the link of offset 4 (a post by user 1)
            assert decoded(channel.frames[3])["kind"] == "link"
        assert broker.events_sent == 400
        store.close()

    run(body())


def test_a_socket_opened_while_events_wait_gets_only_the_later_ones(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        _early, early = feed(broker)
        await store.insert("User", new_user(1))
        await store.insert("User", new_user(2))
        _late, late = feed(broker)  # starts at offset 2: 1 and 2 are before it
        await store.insert("User", new_user(3))
        scheduler.run()
        assert offsets(early) == [1, 2, 3]
        assert offsets(late) == [3]
        store.close()

    run(body())


def test_a_socket_that_cannot_take_a_batch_whole_queues_and_lags_frame_by_frame(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store, capacity=3)
        slow_session, slow = feed(broker)
        fast_session, fast = feed(broker)
        await store.insert("User", new_user(1))
        scheduler.run()
        slow.open = fast.open = False  # both transports over their high-water mark
        for i in range(2, 5):
            await store.insert("User", new_user(i))
        scheduler.run()
        assert slow.closed is None and fast.closed is None  # 3 queued each: within capacity
        fast.open = True
        fast_session.on_writable()
        assert offsets(fast) == [1, 2, 3, 4]
        await store.insert("User", new_user(5))
        await store.insert("User", new_user(6))
        scheduler.run()
        assert offsets(fast) == [1, 2, 3, 4, 5, 6]
        assert slow.closed == (1013, "lagged after 1")  # the 4th queued frame overflowed
        assert offsets(slow) == [1]
        assert broker.metrics()["lagged_closes"] == 1
        assert broker.metrics()["subscriptions"] == 1
        del slow_session
        store.close()

    run(body())


def test_filtered_and_plain_feeds_each_get_an_event_once(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        _p, plain = feed(broker)
        _f, filtered = feed(broker, query={"role": "admin"})
        _l, live = feed(broker, kind=FeedKind.LIVE)
        await store.insert("User", new_user(1, role="admin"))
        await store.insert("User", new_user(2))
        scheduler.run()
        assert offsets(plain) == [1, 2]
        assert offsets(filtered) == [1]
        assert [decoded(f)["type"] for f in live.frames] == ["Added", "Added"]
        store.close()

    run(body())


def test_closing_a_plain_feed_takes_it_out_of_its_group(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        session, channel = feed(broker)
        _other, other = feed(broker)
        assert broker.metrics()["subscriptions"] == 2
        session.on_close(1000)
        assert broker.metrics()["subscriptions"] == 1
        await store.insert("User", new_user(1))
        scheduler.run()
        assert channel.frames == []
        assert offsets(other) == [1]
        store.close()

    run(body())


def test_after_a_heavy_drain_the_next_waits_at_most_as_long(tmp_path):
    holds = []

    def later(delay, callback):
        holds.append(delay)
        scheduler(callback)

    async def body():
        nonlocal scheduler
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store, later=later)
        channels = [feed(broker)[1] for _ in range(5000)]  # a drain of well over 1 ms
        await store.insert("User", new_user(1))
        scheduler.run()
        assert holds == []  # the first drain is not held
        await store.insert("User", new_user(2))
        await store.insert("User", new_user(3))
        scheduler.run()
        assert len(holds) == 1 and DRAIN_HOLD_MIN <= holds[0] <= DRAIN_HOLD_MAX
        assert all(len(c.writes) == 2 and offsets(c) == [1, 2, 3] for c in channels)
        store.close()

    scheduler = None
    run(body())


def test_a_batch_over_the_write_bound_goes_frame_by_frame(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        _session, channel = feed(broker)
        for i in range(1, 3):  # two 100 KB frames: over BATCH_BYTES together
            await store.insert("User", new_user(i, profile={"pad": "x" * 100_000}))
        scheduler.run()
        assert channel.writes == []  # not one joined write: each frame through `deliver`
        assert offsets(channel) == [1, 2]
        store.close()

    run(body())


def test_a_large_fan_out_is_handed_out_a_slice_a_turn_and_later_events_wait_their_turn(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        channels = [feed(broker)[1] for _ in range(DELIVERY_SLICE * 2 + 500)]
        await store.insert("User", new_user(1))
        scheduler.step()  # the hop behind the responses
        scheduler.step()  # the drain and the first slice
        assert sum(1 for c in channels if c.frames) == DELIVERY_SLICE
        await store.insert("User", new_user(2))  # published while the delivery is under way
        scheduler.step()  # the second slice: offset 1 only
        assert sum(1 for c in channels if c.frames) == DELIVERY_SLICE * 2
        assert all(offsets(c) == [1] for c in channels[: DELIVERY_SLICE * 2])
        scheduler.run()
        assert all(offsets(c) == [1, 2] for c in channels)
        assert broker.events_sent == 2 * len(channels)
        store.close()

    run(body())
