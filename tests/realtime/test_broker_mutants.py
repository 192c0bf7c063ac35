"""The broker (dbsvc/realtime/broker.py) at the unit where each decision is made: links to the
feeds of a parent model however they are filed (grouped, routed by a filter, unfiltered), the
parent read once for them, the log's own bytes as a live change frame, what /metrics counts,
no work while no socket is open, a session whose turn fails, a fan-out that fails for one
event, the hold after a drain (none after a cheap one), a detached or rebound broker, a
closed session let go of wherever it was filed, a turn used up to its last byte, and a pass
the broker schedules itself that a socket joins. Written for the survivors of a mutation run
(docs/mutation.md). A real store, the broker on a hand-run scheduler, sessions sending into
recording channels."""

from __future__ import annotations

import dataclasses
import gc
import json
import logging

import pytest

from dbsvc.realtime.broker import Broker
from dbsvc.realtime.feeds import FeedKind, FeedSpec
from dbsvc.realtime.init import InitSlices
from dbsvc.realtime.session import FeedSession, ReplicationSession
from dbsvc.rules import EVERYTHING, Scope
from dbsvc.storage import Store
from support.realtime_kit import BLOG, Recorder, Scheduler, open_blog_store, replica_frame, run

USER = BLOG.BY_NAME["User"]
POST = BLOG.BY_NAME["BlogPost"]
JOINED = "2026-01-01T00:00:00Z"


def new_user(i: int, **over) -> dict:
    return USER.validate_create({"email": f"u{i}@x.io", "name": f"n{i}", "joined": JOINED, **over})


def new_post(author: int) -> dict:
    return POST.validate_create({"author_id": author, "title": "t", "body": "b", "score": 1.0})


def payload(frame: bytes) -> bytes:
    n = frame[1] & 0x7F
    return frame[2 if n < 126 else 4 if n == 126 else 10 :]


def attached(store, later=None) -> tuple[Broker, Scheduler]:
    broker = Broker(store, BLOG.BY_NAME, 1024)
    scheduler = Scheduler()
    broker.attach(scheduler, later)
    return broker, scheduler


def feed(broker: Broker, model=USER, kind=FeedKind.SUBSCRIBE, scope=None, **filters) -> tuple[FeedSession, Recorder]:
    query = model.parse_feed_query(list(filters.items()))
    session = FeedSession(
        FeedSpec(kind, model, query.filters, query.projection, scope), broker, broker.store.head_offset
    )
    channel = Recorder()
    session.on_open(channel)
    return session, channel


def link(parent: int, child: int, offset: int) -> bytes:
    return (
        b'{"kind":"link","model":"User","id":%d,"child_model":"BlogPost","child_id":%d,'
        b'"field":"author_id","linked":true,"offset":%d}' % (parent, child, offset)
    )


def unlink(parent: int, child: int, offset: int) -> bytes:
    return link(parent, child, offset).replace(b'"linked":true', b'"linked":false')


def test_a_link_reaches_every_feed_of_the_parent_however_filed_when_its_parent_is_in_view(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1, role="admin"))
        await store.insert("User", new_user(2, role="reader"))
        broker, scheduler = attached(store)
        reads: list = []
        lookup = broker.lookup
        broker.lookup = lambda model, id_: reads.append((model, id_)) or lookup(model, id_)  # type: ignore[method-assign]
        _, plain = feed(broker)  # grouped
        _, admins = feed(broker, role="admin")  # routed by role
        _, readers = feed(broker, role="reader")
        await store.insert("BlogPost", new_post(1))  # offset 3: links User 1
        scheduler.run()
        assert [payload(f) for f in plain.frames] == [link(1, 1, 3)]
        assert [payload(f) for f in admins.frames] == [link(1, 1, 3)]
        assert readers.frames == []
        assert reads == [("User", 1)]  # read once for every routed feed
        await store.insert("BlogPost", new_post(2))
        scheduler.run()
        assert [payload(f) for f in readers.frames] == [link(2, 2, 4)]
        assert len(admins.frames) == 1 and len(plain.frames) == 2
        store.close()

    run(body())


def test_a_link_whose_parent_is_gone_when_it_is_fanned_out_reaches_only_the_unrouted_feeds(tmp_path):
    """The parent is read when the link is fanned out: a post written and deleted and then its
    author, all before the drain, leave its links with no parent. A filtered feed is routed
    by the parent's values and is not asked; a feed filed with no route is (here one that is
    not plain only because it holds a Scope for its links' children)."""

    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2):
            await store.insert("User", new_user(i, role="admin"))
        broker, scheduler = attached(store)
        feed(broker)  # the plain group's spec: no link Scopes
        unrouted = FeedSession(FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None, None, {"BlogPost": EVERYTHING}), broker, 2)
        channel = Recorder()
        unrouted.on_open(channel)

        async def orphan(author: int) -> int:
            created = await store.insert("BlogPost", new_post(author))
            await store.delete("BlogPost", created["id"])
            await store.delete("User", author)
            scheduler.run()
            return created["id"]

        post = await orphan(1)  # offsets 3-5: no routed feed yet
        assert [payload(f) for f in channel.frames[:2]] == [link(1, post, 3), unlink(1, post, 4)]
        _, admins = feed(broker, role="admin")
        post = await orphan(2)  # offsets 6-8
        assert [payload(f) for f in channel.frames[3:5]] == [link(2, post, 6), unlink(2, post, 7)]
        assert [json.loads(payload(f))["offset"] for f in admins.frames] == [8]  # the user's own delete
        store.close()

    run(body())


def test_a_plain_feed_gets_a_link_in_a_drain_with_no_row_of_its_own_model(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1))
        broker, scheduler = attached(store)
        _, channel = feed(broker)
        await store.insert("BlogPost", new_post(1))
        scheduler.run()
        assert [payload(f) for f in channel.frames] == [link(1, 1, 2)]
        store.close()

    run(body())


@pytest.mark.parametrize("grouped", [True, False])
def test_a_live_delete_frame_is_the_logs_fitted_payload(tmp_path, grouped):
    """A record written under a larger max_payload, deleted after a reopen with a smaller
    one: the log holds the delete fitted (`omitted`), and every subscriber gets those bytes,
    as a replay of the log would."""

    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1, profile={"p": "x" * 6000}))
        directory = store.directory
        store.close()
        store = Store.open(directory, BLOG.MODELS, BLOG.DESCRIPTION, sync="off", max_payload=4096)
        broker, scheduler = attached(store)
        _, plain = feed(broker) if grouped else feed(broker, role="reader")
        _, routed = feed(broker, role="reader")
        await store.delete("User", 1)
        scheduler.run()
        expected = (
            b'{"kind":"delete","model":"User","offset":2,"watermark":2,"id":1,"record":{"id":1,"email":"u1@x.io",'
            b'"name":"n1","age":null,"role":"reader","joined":"2026-01-01T00:00:00Z","profile":null},'
            b'"omitted":["profile"]}'
        )
        assert [payload(f) for f in plain.frames] == [expected]
        assert [payload(f) for f in routed.frames] == [expected]
        store.close()

    run(body())


def test_metrics_count_each_kind_of_socket_while_it_is_open(tmp_path):
    store = open_blog_store(tmp_path, replication=True)
    broker, _ = attached(store)
    zero = {"subscriptions": 0, "live_queries": 0, "replication_streams": 0, "events_sent": 0, "lagged_closes": 0}
    assert broker.metrics() == zero
    a, _ = feed(broker)
    b, _ = feed(broker, role="admin")
    init = InitSlices(store, USER, {}, None, store.applied_offset, 10)
    live = FeedSession(FeedSpec(FeedKind.LIVE, USER, {}, None), broker, init.offset, init=init)
    replica = ReplicationSession(broker, 0, iter(()))
    assert broker.metrics() == {**zero, "subscriptions": 2, "live_queries": 1, "replication_streams": 1}
    for session in (a, b, live, replica):
        session.close(1000, "")
    assert broker.metrics() == zero
    store.close()


def test_no_socket_open_means_no_drain_and_the_head_moves_at_once(tmp_path):
    async def body():
        store = open_blog_store(tmp_path, replication=True)
        broker, scheduler = attached(store)
        await store.insert("User", new_user(1))
        assert (scheduler.pending, broker.head) == ([], 1)
        first, _ = feed(broker)
        replica = ReplicationSession(broker, 1, iter(()))
        second, _ = feed(broker)
        for session in (first, replica, second):
            session.close(1000, "")
        await store.insert("User", new_user(2))
        assert (scheduler.pending, broker.head) == ([], 2)
        store.close()

    run(body())


def test_a_session_whose_turn_fails_is_closed_1011_and_the_others_go_on(tmp_path, caplog):
    def broken():
        raise ValueError("bad frame")
        yield b""

    store = open_blog_store(tmp_path, replication=True)
    broker, scheduler = attached(store)
    failing = Recorder()
    ReplicationSession(broker, 0, broken()).on_open(failing)
    fine = Recorder()
    ReplicationSession(broker, 0, iter(())).on_open(fine)
    with caplog.at_level(logging.ERROR, logger="dbsvc.realtime"):
        scheduler.run()
    assert failing.closed == (1011, "internal error")
    assert fine.closed is None
    assert [r.getMessage() for r in caplog.records] == ["realtime session work failed"]
    assert broker.metrics()["replication_streams"] == 1
    store.close()


def test_a_fan_out_that_fails_for_one_event_is_logged_and_the_next_event_goes_out(tmp_path, caplog):
    def match(record, *query):
        if record["name"] == "boom":
            raise ValueError("matcher bug")
        return USER.match(record, *query)

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        query = USER.parse_feed_query([("role", "reader")])
        session = FeedSession(
            FeedSpec(FeedKind.SUBSCRIBE, dataclasses.replace(USER, match=match), query.filters, None), broker, 0
        )
        channel = Recorder()
        session.on_open(channel)
        await store.insert("User", new_user(1, name="boom"))
        await store.insert("User", new_user(2))
        with caplog.at_level(logging.ERROR, logger="dbsvc.realtime"):
            scheduler.run()
        assert [json.loads(payload(f))["offset"] for f in channel.frames] == [2]
        assert [r.getMessage() for r in caplog.records] == ["fan-out of offset 1 failed"]
        assert broker.head == 2
        store.close()

    run(body())


def test_after_a_cheap_drain_the_next_is_not_held(tmp_path):
    holds: list = []

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store, later=lambda delay, callback: holds.append(delay))
        feed(broker)
        for i in (1, 2):  # one socket: a drain of well under 1 ms of CPU time
            await store.insert("User", new_user(i))
            scheduler.run()
        assert holds == []
        store.close()

    run(body())


def test_a_heavy_drain_of_routed_feeds_alone_holds_the_next(tmp_path):
    """The hold counts the drain's own work, not only the delivery of grouped feeds."""
    holds: list = []

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store, later=lambda delay, callback: holds.append(delay) or scheduler(callback))
        channels = [feed(broker, role="reader")[1] for _ in range(3000)]  # routed, none grouped
        await store.insert("User", new_user(1))
        scheduler.run()
        await store.insert("User", new_user(2))
        scheduler.run()
        assert len(holds) == 1 and 0.001 <= holds[0] <= 0.050
        assert all(len(c.frames) == 2 for c in channels)
        store.close()

    run(body())


def test_events_published_during_a_heavy_delivery_are_drained_after_the_hold(tmp_path):
    holds: list = []

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store, later=lambda delay, callback: holds.append(delay) or scheduler(callback))
        channels = [feed(broker)[1] for _ in range(2500)]
        await store.insert("User", new_user(1))
        scheduler.step()  # the hop behind the responses
        scheduler.step()  # the drain and the first slice of its delivery
        await store.insert("User", new_user(2))  # waits for the delivery's end
        scheduler.run()
        assert len(holds) == 1 and 0.001 <= holds[0] <= 0.050
        assert all([json.loads(payload(f))["offset"] for f in c.frames] == [1, 2] for c in channels)
        store.close()

    run(body())


def test_a_broker_used_before_attach_says_so(tmp_path):
    store = open_blog_store(tmp_path, replication=True)
    broker = Broker(store, BLOG.BY_NAME, 16)
    with pytest.raises(RuntimeError) as refused:
        ReplicationSession(broker, 0, iter(())).on_open(Recorder())
    assert str(refused.value) == "the broker is not attached to an event loop (call attach first)"
    store.close()


def test_a_detached_broker_hears_no_more_events(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        Broker(store, BLOG.BY_NAME, 16).detach()  # never attached: nothing to undo
        broker, scheduler = attached(store)
        _, channel = feed(broker)
        broker.detach()
        broker.detach()  # twice is harmless
        await store.insert("User", new_user(1))
        scheduler.run()
        assert channel.frames == [] and broker.head == 0
        store.close()

    run(body())


def test_rebinding_closes_every_socket_and_follows_the_new_store(tmp_path):
    async def body():
        store = open_blog_store(tmp_path / "a", replication=True)
        broker, scheduler = attached(store)
        channels = [feed(broker)[1], feed(broker, role="admin")[1], feed(broker, scope=Scope(nothing=True))[1]]
        replica = Recorder()
        ReplicationSession(broker, 0, iter(())).on_open(replica)
        other = open_blog_store(tmp_path / "b", replication=True)
        await other.insert("User", new_user(1))
        broker.rebind(other, 4000, "rebootstrapped")
        assert [c.closed for c in [*channels, replica]] == [(4000, "rebootstrapped")] * 4
        assert broker.metrics()["subscriptions"] == 0
        _, fresh = feed(broker)
        await store.insert("User", new_user(9))  # the old store: no longer heard
        await other.insert("User", new_user(2))
        scheduler.run()
        assert [json.loads(payload(f))["offset"] for f in fresh.frames] == [2]
        store.close()
        other.close()

    run(body())


def alive_sessions() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, FeedSession))


@pytest.mark.parametrize(
    "kind, filters, scope",
    [
        (FeedKind.SUBSCRIBE, {}, None),  # grouped
        (FeedKind.SUBSCRIBE, {"role": "admin"}, None),  # routed
        (FeedKind.SUBSCRIBE, {}, Scope(where=lambda r: True, where_row=lambda row: True)),  # everyone
        (FeedKind.SUBSCRIBE, {}, Scope(nothing=True)),  # idle
        (FeedKind.LIVE, {}, None),  # with an Init
    ],
)
def test_a_closed_session_is_let_go_of_wherever_it_was_filed(tmp_path, kind, filters, scope):
    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1))
        broker, scheduler = attached(store)
        before = alive_sessions()
        query = USER.parse_feed_query(list(filters.items()))
        init = InitSlices(store, USER, query.filters, None, store.applied_offset, 10) if kind is FeedKind.LIVE else None
        session = FeedSession(FeedSpec(kind, USER, query.filters, None, scope), broker, store.head_offset, init=init)
        session.on_open(Recorder())
        scheduler.run()
        session.close(1000, "")
        del session, init
        assert alive_sessions() == before
        await store.insert("User", new_user(2))
        scheduler.run()
        store.close()

    run(body())


def test_sessions_left_over_by_a_turn_get_the_next_one_and_a_turn_is_one_pass(tmp_path):
    """Each replica has one 200 KB frame to send: three use up a turn's 512 KiB (each asks
    again, to find its replay's end), the rest get the next turn; a socket opened in between
    joins that turn, which is still one bounded pass. (The pass the broker schedules itself,
    when nobody asked again: `test_a_socket_asking_before_the_pass_the_broker_scheduled_...`.)"""

    async def body():
        store = open_blog_store(tmp_path, replication=True)
        await store.insert("User", new_user(1, profile={"pad": "x" * 200_000}))
        broker, scheduler = attached(store)
        channels = []

        def open_replica() -> None:
            channel = Recorder()
            ReplicationSession(broker, 0, store.frames_after(0)).on_open(channel)
            channels.append(channel)

        for _ in range(8):
            open_replica()
        scheduler.step()
        assert [len(c.frames) for c in channels] == [1, 1, 1, 0, 0, 0, 0, 0]
        open_replica()
        scheduler.step()
        assert [len(c.frames) for c in channels] == [1, 1, 1, 1, 1, 1, 0, 0, 0]
        scheduler.run()
        assert [len(c.frames) for c in channels] == [1] * 9
        store.close()

    run(body())


def test_a_live_query_closed_while_its_init_waits_is_forgotten(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1))
        broker, scheduler = attached(store)
        feed(broker)
        await store.insert("User", new_user(2))  # offset 2: published, not drained
        init = InitSlices(store, USER, {}, None, store.applied_offset, 10)
        waiting = FeedSession(FeedSpec(FeedKind.LIVE, USER, {}, None), broker, init.offset, init=init)
        channel = Recorder()
        waiting.on_open(channel)
        waiting.close(1000, "")
        assert broker.metrics()["live_queries"] == 0
        scheduler.run()
        assert (channel.frames, channel.closed) == ([], (1000, ""))
        store.close()

    run(body())


def test_a_turn_used_up_by_an_init_that_is_done_gives_the_next_turn_to_the_rest(tmp_path):
    """A one-record Init of 600 KB uses up a turn and needs no more: nobody asks again, so
    the broker gives the replica waiting behind it the next turn itself."""

    async def body():
        store = open_blog_store(tmp_path, replication=True)
        await store.insert("User", new_user(1, profile={"pad": "x" * 600_000}))
        broker, scheduler = attached(store)
        init = InitSlices(store, USER, {}, None, store.applied_offset, 10)
        live = Recorder()
        FeedSession(FeedSpec(FeedKind.LIVE, USER, {}, None), broker, init.offset, init=init).on_open(live)
        replica = Recorder()
        ReplicationSession(broker, 0, store.frames_after(0)).on_open(replica)
        scheduler.step()
        assert (len(live.frames), len(replica.frames)) == (1, 0)
        scheduler.step()
        assert len(replica.frames) == 1
        scheduler.run()
        assert (len(live.frames), len(replica.frames)) == (1, 1)
        store.close()

    run(body())


def test_a_session_that_asks_twice_before_its_turn_gets_one_turn(tmp_path):
    async def body():
        store = open_blog_store(tmp_path, replication=True)
        store.insert_batch([("User", new_user(i, profile={"pad": "x" * 1000})) for i in range(1, 400)])
        broker, scheduler = attached(store)
        channel = Recorder()
        session = ReplicationSession(broker, 0, store.frames_after(0))
        session.on_open(channel)
        session.on_writable()  # asks again before the turn
        scheduler.step()
        assert 131072 <= sum(map(len, channel.frames)) < 131072 + 1200
        store.close()

    run(body())


def test_an_event_of_another_model_goes_out_while_a_live_query_waits_for_its_init(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1))
        broker, scheduler = attached(store)
        _, posts = feed(broker, model=POST, published="false")
        await store.insert("User", new_user(2))  # offset 2: published, not drained
        init = InitSlices(store, USER, {}, None, store.applied_offset, 10)
        FeedSession(FeedSpec(FeedKind.LIVE, USER, {}, None), broker, init.offset, init=init).on_open(Recorder())
        await store.insert("BlogPost", new_post(1))
        scheduler.run()
        assert [json.loads(payload(f))["offset"] for f in posts.frames] == [3]
        store.close()

    run(body())


class Broken(Recorder):
    def send_frames(self, data: bytes, count: int) -> None:
        raise ConnectionError("transport gone")


def test_a_delivery_that_fails_for_a_socket_is_logged(tmp_path, caplog):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        FeedSession(FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None), broker, 0).on_open(Broken())
        await store.insert("User", new_user(1))
        with caplog.at_level(logging.ERROR, logger="dbsvc.realtime"):
            scheduler.run()
        assert [r.getMessage() for r in caplog.records] == ["fan-out delivery failed"]
        store.close()

    run(body())


def replica_of(broker: Broker, *sizes: int) -> Recorder:
    channel = Recorder()
    ReplicationSession(broker, 0, iter([replica_frame(i, s) for i, s in enumerate(sizes, 1)])).on_open(channel)
    return channel


def test_a_turn_that_ends_on_exactly_512_kib_serves_nobody_else(tmp_path):
    """Four replicas send exactly 128 KiB each: the turn's bytes are used up to the byte, so
    the live query behind them waits for the next turn (its Init ignores the grant and would
    send a slice past the bound), and that turn starts with it."""
    store = open_blog_store(tmp_path, replication=True)
    broker, scheduler = attached(store)
    replicas = [replica_of(broker, 131072, 131072) for _ in range(4)]
    init = InitSlices(store, USER, {}, None, store.applied_offset, 10)
    live = Recorder()
    FeedSession(FeedSpec(FeedKind.LIVE, USER, {}, None), broker, init.offset, init=init).on_open(live)
    scheduler.step()
    assert [[len(f) for f in c.frames] for c in replicas] == [[131072]] * 4
    assert live.frames == []
    scheduler.step()
    assert [payload(f) for f in live.frames] == [
        b'{"type":"Init","model":"User","records":[],"watermark":0,"offset":0,"complete":true}'
    ]
    assert [[len(f) for f in c.frames] for c in replicas] == [[131072, 131072]] * 4
    store.close()


def test_a_socket_asking_before_the_pass_the_broker_scheduled_itself_joins_that_one_pass(tmp_path):
    """A one-record Init of 600 KB uses up a turn and is done, so nobody asks again: the broker
    schedules the next pass itself. A replica opened before that pass runs joins it; the loop
    turn still holds one pass, one 128 KiB frame for each replica."""

    async def body():
        store = open_blog_store(tmp_path, replication=True)
        await store.insert("User", new_user(1, profile={"pad": "x" * 600_000}))
        broker, scheduler = attached(store)
        init = InitSlices(store, USER, {}, None, store.applied_offset, 10)
        live = Recorder()
        FeedSession(FeedSpec(FeedKind.LIVE, USER, {}, None), broker, init.offset, init=init).on_open(live)
        first = replica_of(broker, 131072, 131072, 131072)
        scheduler.step()
        assert (len(live.frames), first.frames, len(scheduler.pending)) == (1, [], 1)
        second = replica_of(broker, 131072, 131072, 131072)  # asks before the pass runs
        assert len(scheduler.pending) == 1
        scheduler.step()
        assert [[len(f) for f in c.frames] for c in (first, second)] == [[131072], [131072]]
        scheduler.run()
        assert [[len(f) for f in c.frames] for c in (first, second)] == [[131072] * 3] * 2
        store.close()

    run(body())
