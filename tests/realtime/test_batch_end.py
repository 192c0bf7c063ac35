"""Where a batch ends for a feed (issue 35: "a live query applies the batch's deltas and only
then is consistent again"), sans-IO: a real store, the broker on a hand-run scheduler,
sessions sending into recording channels, and the replay of the same events.

The rule (docs/realtime.md, "Batches"): of the frames one socket gets from one batch, the
last carries `"end":true` in its `batch` object, whatever row of the batch made it (a filtered
feed may get nothing from the batch's last row), so a client applies what it buffered when it
reads a frame with `batch.end`, never by guessing. Frames of the batch before it have no
`end`; a socket that gets nothing from a batch gets nothing (its set did not change). Expected
bytes are literals here.
"""

from __future__ import annotations

import json

from dbsvc.realtime.broker import Broker
from dbsvc.realtime.feeds import FeedKind, FeedSpec, replay_frames
from dbsvc.realtime.session import FeedSession
from support.realtime_kit import BLOG, Recorder, Scheduler, open_blog_store, run

USER = BLOG.BY_NAME["User"]
POST = BLOG.BY_NAME["BlogPost"]
JOINED = "2026-01-01T00:00:00Z"


def new_user(i: int, role: str = "reader") -> dict:
    return USER.validate_create({"email": f"u{i}@x.io", "name": f"n{i}", "joined": JOINED, "role": role})


def new_post(author: int) -> dict:
    return POST.validate_create({"author_id": author, "title": "t", "body": "b", "score": 1.0})


def payload(frame: bytes) -> bytes:
    n = frame[1] & 0x7F
    return frame[2 if n < 126 else 4 if n == 126 else 10 :]


def attached(store) -> tuple[Broker, Scheduler]:
    broker = Broker(store, BLOG.BY_NAME, 1024)
    scheduler = Scheduler()
    broker.attach(scheduler)
    return broker, scheduler


def feed(broker: Broker, kind: FeedKind, model=USER, **filters) -> tuple[FeedSession, Recorder]:
    query = model.parse_feed_query(list(filters.items()))
    session = FeedSession(FeedSpec(kind, model, query.filters, query.projection), broker, broker.store.head_offset)
    channel = Recorder()
    session.on_open(channel)
    return session, channel


async def batch(store, ops) -> None:
    """`ops` ((method, args) pairs) as one batch (`Store.begin_batch`), committed and durable."""
    write = store.begin_batch()
    for method, args in ops:
        getattr(write, method)(*args)
    await write.commit()


def sent(channel: Recorder) -> list[bytes]:
    return [payload(f) for f in channel.frames]


def user_row(i: int, role: str = "reader") -> bytes:
    return (
        b'{"id":%d,"email":"u%d@x.io","name":"n%d","age":null,"role":"%s","joined":"2026-01-01T00:00:00Z",'
        b'"profile":null}' % (i, i, i, role.encode())
    )


def test_a_filtered_live_query_whose_last_delta_is_not_the_batchs_last_row_is_told_the_batch_ended(tmp_path):
    """The gap: a batch whose last row is outside the filter. The query's one delta (the
    batch's first row) carries `end`: its set is consistent again once it is applied."""

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        _admins, channel = feed(broker, FeedKind.LIVE, role="admin")  # filed by its filter
        await batch(store, [("insert", ("User", new_user(1, "admin"))), ("insert", ("User", new_user(2)))])
        scheduler.run()
        assert sent(channel) == [
            b'{"type":"Added","model":"User","offset":1,"watermark":1,"record":'
            + user_row(1, "admin")
            + b',"batch":{"first":1,"last":2,"end":true}}'
        ]
        store.close()

    run(body())


def test_only_the_last_frame_a_socket_gets_from_a_batch_carries_end_and_other_batches_are_apart(tmp_path):
    """Three rows into the filter, one out of it, then a second batch in the same drain: the
    first batch's third frame ends it for this query, the second batch's own last frame ends
    that one; a single write between them carries no batch at all."""

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        _admins, channel = feed(broker, FeedKind.LIVE, role="admin")
        await batch(
            store,
            [
                ("insert", ("User", new_user(1, "admin"))),
                ("insert", ("User", new_user(2, "admin"))),
                ("insert", ("User", new_user(3, "admin"))),
                ("insert", ("User", new_user(4))),
            ],
        )
        await store.insert("User", new_user(5, "admin"))
        await batch(store, [("insert", ("User", new_user(6))), ("insert", ("User", new_user(7, "admin")))])
        scheduler.run()
        marks = [json.loads(p).get("batch") for p in sent(channel)]
        assert [json.loads(p)["offset"] for p in sent(channel)] == [1, 2, 3, 5, 7]
        assert marks == [
            {"first": 1, "last": 4},
            {"first": 1, "last": 4},
            {"first": 1, "last": 4, "end": True},
            None,
            {"first": 6, "last": 7, "end": True},
        ]
        store.close()

    run(body())


def test_a_query_that_gets_nothing_from_a_batch_gets_no_frame(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        _editors, channel = feed(broker, FeedKind.LIVE, role="editor")
        await batch(store, [("insert", ("User", new_user(1, "admin"))), ("insert", ("User", new_user(2)))])
        scheduler.run()
        assert channel.frames == []
        store.close()

    run(body())


def test_an_unfiltered_feed_of_a_batch_over_two_models_is_told_the_end_on_its_models_last_row(tmp_path):
    """A plain (grouped) live query and change feed of User, a batch whose last row is a
    BlogPost: the User row's frame ends the batch for them. The change feed's frame is the
    log's payload with the end added; the post's link to its author, a frame of the same
    batch, comes after it on the change feed and ends the batch there instead."""

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        _live, live = feed(broker, FeedKind.LIVE)
        _posts, posts = feed(broker, FeedKind.LIVE, model=POST)
        _changes, changes = feed(broker, FeedKind.SUBSCRIBE)
        await batch(store, [("insert", ("User", new_user(1))), ("insert", ("BlogPost", new_post(1)))])
        scheduler.run()
        assert sent(live) == [
            b'{"type":"Added","model":"User","offset":1,"watermark":1,"record":'
            + user_row(1)
            + b',"batch":{"first":1,"last":2,"end":true}}'
        ]
        assert [json.loads(p)["batch"] for p in sent(posts)] == [{"first": 1, "last": 2, "end": True}]
        assert sent(changes) == [
            b'{"kind":"insert","model":"User","offset":1,"watermark":1,"id":1,"record":'
            + user_row(1)
            + b',"batch":{"first":1,"last":2}}',
            b'{"kind":"link","model":"User","id":1,"child_model":"BlogPost","child_id":1,"field":"author_id",'
            b'"linked":true,"offset":2,"batch":{"first":1,"last":2,"end":true}}',
        ]
        store.close()

    run(body())


def test_a_filtered_change_feed_ends_the_batch_on_its_last_event_and_a_projection_keeps_the_mark(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1, "admin"))  # offset 1
        broker, scheduler = attached(store)
        _changes, changes = feed(broker, FeedKind.SUBSCRIBE, role="admin", projection="card")
        await batch(
            store,
            [
                ("replace", ("User", 1, {**new_user(1, "admin"), "id": 1, "name": "Ann"})),
                ("insert", ("User", new_user(2))),
            ],
        )
        scheduler.run()
        assert sent(changes) == [
            b'{"kind":"update","model":"User","offset":2,"watermark":2,"id":1,'
            b'"record":{"id":1,"name":"Ann"},"previous":{"id":1,"name":"n1"},'
            b'"batch":{"first":2,"last":3,"end":true}}'
        ]
        store.close()

    run(body())


def test_a_replay_marks_the_same_frames_as_live_delivery(tmp_path):
    """`after=` replays the batches with the same `end` marks, on a filtered and a plain
    feed of either kind; a step with no frame still moves the replay's offset on."""

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        specs = [(kind, filters) for kind in FeedKind for filters in ({}, {"role": "admin"})]
        live = [feed(broker, kind, **filters)[1] for kind, filters in specs]
        await batch(
            store,
            [
                ("insert", ("User", new_user(1, "admin"))),
                ("insert", ("User", new_user(2))),
                ("insert", ("BlogPost", new_post(2))),
            ],
        )
        await store.insert("User", new_user(3, "admin"))
        await batch(store, [("insert", ("User", new_user(4, "admin"))), ("insert", ("BlogPost", new_post(4)))])
        scheduler.run()
        for (kind, filters), channel in zip(specs, live, strict=True):
            query = USER.parse_feed_query(list(filters.items()))
            spec = FeedSpec(kind, USER, query.filters, query.projection)
            steps = list(replay_frames(spec, store.events_after(0), BLOG.BY_NAME, broker.lookup))
            assert [payload(f) for _o, f in steps if f is not None] == sent(channel), (kind, filters)
            assert [o for o, _f in steps][-1] == 6
        ends = [json.loads(p)["batch"] for p in sent(live[1]) if b'"end"' in p]  # the admins' change feed
        assert ends == [{"first": 1, "last": 3, "end": True}, {"first": 5, "last": 6, "end": True}]
        store.close()

    run(body())


def test_a_replay_resumed_inside_a_batch_ends_it_on_the_last_frame_after_the_resume(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        await batch(
            store,
            [
                ("insert", ("User", new_user(1, "admin"))),
                ("insert", ("User", new_user(2, "admin"))),
                ("insert", ("User", new_user(3))),
            ],
        )
        query = USER.parse_feed_query([("role", "admin")])
        spec = FeedSpec(FeedKind.LIVE, USER, query.filters, query.projection)
        steps = list(replay_frames(spec, store.events_after(1), BLOG.BY_NAME, lambda m, i: None))
        assert [(o, None if f is None else json.loads(payload(f))["batch"]) for o, f in steps] == [
            (2, {"first": 1, "last": 3, "end": True}),
            (3, None),
        ]
        store.close()

    run(body())
