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

import pytest

from dbsvc.http.frames import text_frame
from dbsvc.realtime.broker import Broker
from dbsvc.realtime.fanout import Batch
from dbsvc.realtime.feeds import EventFrames, FeedKind, FeedSpec, end_of_batch, replay_frames
from dbsvc.realtime.session import FeedSession
from dbsvc.rules import Scope
from dbsvc.storage.events import ChangeEvent, EventKind
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


def test_an_unlink_a_batch_row_causes_carries_the_batch_and_can_end_it(tmp_path):
    """A batch that deletes a post: the author's change feed gets the unlink, marked as the
    batch's frame and its end; the post's own feed gets the delete."""

    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1))
        await store.insert("BlogPost", new_post(1))
        broker, scheduler = attached(store)
        _changes, changes = feed(broker, FeedKind.SUBSCRIBE)  # grouped
        _readers, readers = feed(broker, FeedKind.SUBSCRIBE, role="reader")  # routed: links held per session
        await batch(store, [("delete", ("BlogPost", 1)), ("insert", ("BlogPost", new_post(1)))])
        scheduler.run()
        link = (
            b'{"kind":"link","model":"User","id":1,"child_model":"BlogPost","child_id":%d,"field":"author_id",'
            b'"linked":%s,"offset":%d,"batch":{"first":3,"last":4%s}}'
        )
        assert sent(changes) == [link % (1, b"false", 3, b""), link % (2, b"true", 4, b',"end":true')]
        assert sent(readers) == sent(changes)
        store.close()

    run(body())


def test_a_query_that_gets_nothing_from_a_batch_replays_only_steps(tmp_path):
    """Replayed, a batch that makes no frame for the feed is one step at its last offset;
    one whose last row makes the frame ends on that frame, with no step after it."""

    async def body():
        store = open_blog_store(tmp_path)
        await batch(store, [("insert", ("User", new_user(1))), ("insert", ("User", new_user(2)))])
        await batch(store, [("insert", ("User", new_user(3))), ("insert", ("User", new_user(4, "admin")))])
        query = USER.parse_feed_query([("role", "admin")])
        spec = FeedSpec(FeedKind.LIVE, USER, query.filters, query.projection)
        steps = list(replay_frames(spec, store.events_after(0), BLOG.BY_NAME, lambda m, i: None))
        assert [(o, None if f is None else json.loads(payload(f))["batch"]) for o, f in steps] == [
            (2, None),
            (4, {"first": 3, "last": 4, "end": True}),
        ]
        store.close()

    run(body())


@pytest.mark.parametrize("size", [100, 125, 126, 1000, 65535, 65536, 70000])
def test_the_end_mark_goes_inside_the_batch_object_whatever_the_frames_header(size):
    """Frames of 2, 4 and 10 header bytes (payloads under 126, under 65,536, and larger)."""
    head = b'{"type":"Removed","model":"User","offset":7,"watermark":5,"id":"'
    tail = b'","batch":{"first":7,"last":9}}'
    body = head + b"x" * (size - len(head) - len(tail)) + tail
    assert len(body) == size
    end = end_of_batch(text_frame(body))
    assert end == text_frame(body[:-2] + b',"end":true}}')
    assert payload(end).endswith(b'"batch":{"first":7,"last":9,"end":true}}')


@pytest.mark.parametrize("body", [b'{"kind":"insert","record":{"id":1}}', b'{"batch":{"first":1,"last":2}'])
def test_only_a_frame_of_a_batchs_row_can_be_marked(body):
    with pytest.raises(AssertionError, match=r"^not a frame of a batch's row$"):
        end_of_batch(text_frame(body))


def test_a_batch_rows_update_shown_as_a_delete_or_an_insert_keeps_its_batch():
    """Under access rules an update out of (into) the token's view is the delete (insert) of
    that record (feeds.py "Access rules"): still a row of the batch, so still marked."""
    scope = Scope(field="author_id", keys=frozenset({POST.keys["author_id"](1)}), key=POST.keys["author_id"])
    feed = FeedSpec(FeedKind.SUBSCRIBE, POST, {}, None, scope)
    mine, theirs = new_post(1) | {"id": 9}, new_post(2) | {"id": 9}
    left = ChangeEvent(EventKind.UPDATE, "BlogPost", 5, 3, 9, theirs, mine, (5, 6))
    came = ChangeEvent(EventKind.UPDATE, "BlogPost", 6, 4, 9, mine, theirs, (5, 6))
    row = b'"id":9,"record":{"id":9,"author_id":%d,"title":"t","body":"b","published":false,"score":1.0,"tags":null}'
    assert payload(feed.row_frame(EventFrames(left, POST))) == (
        b'{"kind":"delete","model":"BlogPost","offset":5,"watermark":3,' + row % 1 + b',"batch":{"first":5,"last":6}}'
    )
    assert payload(feed.row_frame(EventFrames(came, POST))) == (
        b'{"kind":"insert","model":"BlogPost","offset":6,"watermark":4,' + row % 1 + b',"batch":{"first":5,"last":6}}'
    )


def test_a_batch_keeps_its_size_when_its_last_frame_is_replaced():
    group_batch = Batch()
    group_batch.add(3, b"abc")
    group_batch.add(4, b"de")
    assert group_batch.data == b"abcde"
    group_batch.replace_last(b"wxyz")
    assert (group_batch.offsets, group_batch.frames, group_batch.size, group_batch.data) == (
        [3, 4],
        [b"abc", b"wxyz"],
        7,
        b"abcwxyz",
    )


def test_the_end_frame_is_built_once_and_shared_by_the_sockets_that_share_the_frame(tmp_path):
    """feeds.py: frames are encoded once and shared; the end frame too, for a grouped feed
    and two routed ones that got the same delta."""

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        channels = [feed(broker, FeedKind.LIVE, **filters)[1] for filters in ({}, {"role": "admin"}, {"role": "admin"})]
        await batch(store, [("insert", ("User", new_user(1, "admin"))), ("insert", ("User", new_user(2)))])
        scheduler.run()
        plain, first, second = (channel.frames for channel in channels)
        assert (len(first), len(second)) == (1, 1)
        assert b'"end":true' in first[0]
        assert first[0] is second[0]
        assert plain[0] == text_frame(
            b'{"type":"Added","model":"User","offset":1,"watermark":1,"record":'
            + user_row(1, "admin")
            + b',"batch":{"first":1,"last":2}}'
        )
        assert payload(plain[1]).endswith(b',"batch":{"first":1,"last":2,"end":true}}')
        store.close()

    run(body())
