"""A committed group that reaches the broker while events wait for their drain and no socket
is open (dbsvc/realtime/broker.py rule 1, `_on_group`): it queues behind them, so the head
moves in offset order and ends at the last event. Written for the survivor wt-rep84 left
open (docs/mutation.md, session 13, wt-mpo3): with the queued events ignored the head jumped
to the group's end and the drain then took it back to the queued event's offset, where a
live query opened at the store's head waited for an Init no drain would release. A real
store, the broker on a hand-run scheduler, sessions sending into recording channels."""

from __future__ import annotations

import json

from dbsvc.realtime.broker import Broker
from dbsvc.realtime.feeds import FeedKind, FeedSpec
from dbsvc.realtime.init import InitSlices
from dbsvc.realtime.session import FeedSession
from support.realtime_kit import BLOG, Recorder, Scheduler, open_blog_store, run

USER = BLOG.BY_NAME["User"]
JOINED = "2026-01-01T00:00:00Z"


def new_user(i: int) -> dict:
    return USER.validate_create({"email": f"u{i}@x.io", "name": f"n{i}", "joined": JOINED})


def payload(frame: bytes) -> bytes:
    n = frame[1] & 0x7F
    return frame[2 if n < 126 else 4 if n == 126 else 10 :]


def _queued_then_closed(tmp_path, writes_after_close: int):
    """A broker whose one socket closed while the event at offset 2 waited for its drain,
    then `writes_after_close` more writes (offsets 3...) with no socket open."""

    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1))  # offset 1
        broker = Broker(store, BLOG.BY_NAME, 1024)
        scheduler = Scheduler()
        broker.attach(scheduler)
        session = FeedSession(FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None), broker, store.head_offset)
        session.on_open(Recorder())
        await store.insert("User", new_user(2))  # offset 2: queued, its drain scheduled
        session.close(1000, "")
        for i in range(writes_after_close):
            await store.insert("User", new_user(3 + i))
        return store, broker, scheduler

    return run(body())


def test_a_group_published_with_no_socket_open_queues_behind_the_events_waiting_for_a_drain(tmp_path):
    store, broker, scheduler = _queued_then_closed(tmp_path, 2)
    assert broker.head == 1  # nothing jumps ahead of the queued offset 2
    scheduler.run()
    assert broker.head == store.head_offset == 4
    scheduler.run()
    assert broker.head == 4
    store.close()


def test_a_live_query_opened_after_that_drain_gets_its_init_with_no_further_write(tmp_path):
    store, broker, scheduler = _queued_then_closed(tmp_path, 1)
    scheduler.run()
    init = InitSlices(store, USER, {}, None, store.applied_offset, 10)
    channel = Recorder()
    FeedSession(FeedSpec(FeedKind.LIVE, USER, {}, None), broker, init.offset, init=init).on_open(channel)
    scheduler.run()
    assert [json.loads(payload(f))["type"] for f in channel.frames] == ["Init"]
    first = json.loads(payload(channel.frames[0]))
    assert (first["watermark"], [r["id"] for r in first["records"]]) == (3, [1, 2, 3])
    store.close()
