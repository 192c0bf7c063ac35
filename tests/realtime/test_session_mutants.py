"""One socket's stream (dbsvc/realtime/session.py) at the unit where each decision is made: a
replica that falls behind goes back to the log (no gap, no duplicate, never closed), a replay
that fails on the disk or loses its offsets, a snapshot stream that fails or is closed, a
socket closed before it opened, queued frames leaving joined up to the write bound, a
drain's batch taken whole or frame by frame, and an Init a compaction made stale at its turn.
Written for the survivors of a mutation run (docs/mutation.md). A real store, the broker on a
hand-run scheduler, recording channels."""

from __future__ import annotations

import json
import logging
import zlib

import pytest

from dbsvc.errors import OffsetGone
from dbsvc.http.frames import text_frame
from dbsvc.realtime.broker import Broker
from dbsvc.realtime.fanout import Batch
from dbsvc.realtime.feeds import FeedKind, FeedSpec
from dbsvc.realtime.init import InitSlices
from dbsvc.realtime.session import FeedSession, ReplicationSession, SnapshotSession
from dbsvc.storage.logfile import encode_frame
from support.realtime_kit import BLOG, Recorder, Scheduler, open_blog_store, replica_frame, run, split_frames

USER = BLOG.BY_NAME["User"]
JOINED = "2026-01-01T00:00:00Z"


def new_user(i: int, **over) -> dict:
    return USER.validate_create({"email": f"u{i}@x.io", "name": f"n{i}", "joined": JOINED, **over})


def payload(frame: bytes) -> bytes:
    n = frame[1] & 0x7F
    return frame[2 if n < 126 else 4 if n == 126 else 10 :]


def attached(store, capacity: int = 1024, max_bytes: int = 8 << 20) -> tuple[Broker, Scheduler]:
    broker = Broker(store, BLOG.BY_NAME, capacity, max_bytes)
    scheduler = Scheduler()
    broker.attach(scheduler)
    return broker, scheduler


def feed(broker: Broker, **kw) -> tuple[FeedSession, Recorder]:
    session = FeedSession(
        FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None), broker, kw.pop("start", broker.store.head_offset), **kw
    )
    channel = Recorder()
    session.on_open(channel)
    return session, channel


def offsets(channel: Recorder) -> list[int]:
    return [json.loads(payload(f))["offset"] for f in channel.frames]


def test_a_replica_that_falls_behind_reads_on_from_the_log_from_the_last_frame_sent(tmp_path):
    async def body():
        store = open_blog_store(tmp_path, replication=True)
        broker, scheduler = attached(store, capacity=2)
        await store.insert("User", new_user(1))
        session = ReplicationSession(broker, 0, store.frames_after(0))
        channel = Recorder()
        session.on_open(channel)
        scheduler.run()
        await store.insert("User", new_user(2))
        scheduler.run()
        assert [payload(f) for f in channel.frames] == list(store.frames_after(0))  # live now
        channel.open = False
        for i in range(3, 7):  # 4 frames for a queue of 2: back to the log
            await store.insert("User", new_user(i))
        scheduler.run()
        assert channel.closed is None and len(channel.frames) == 2
        await store.insert("User", new_user(7))  # while replaying: left to the replay
        scheduler.run()
        channel.open = True
        await store.insert("User", new_user(8))  # published; drained after the replay has read it
        session.on_writable()
        scheduler.run()
        assert [payload(f) for f in channel.frames] == list(store.frames_after(0))  # 1-8, once each
        channel.open = False  # live again: a frame that waits is queued, not replayed
        await store.insert("User", new_user(9))
        scheduler.run()
        channel.open = True
        session.on_writable()
        assert [payload(f) for f in channel.frames] == list(store.frames_after(0))
        assert channel.closed is None and broker.metrics()["lagged_closes"] == 0
        store.close()

    run(body())


def test_a_replay_that_fails_on_the_disk_closes_1011_naming_where_it_was(tmp_path, caplog):
    def failing():
        raise OSError(5, "Input/output error")
        yield b""

    store = open_blog_store(tmp_path, replication=True)
    broker, scheduler = attached(store)
    channel = Recorder()
    ReplicationSession(broker, 0, failing()).on_open(channel)
    with caplog.at_level(logging.ERROR, logger="dbsvc.realtime"):
        scheduler.run()
    assert channel.closed == (1011, "replay failed")
    assert [r.getMessage() for r in caplog.records] == ["replay after 0 failed: [Errno 5] Input/output error"]
    assert broker.metrics()["replication_streams"] == 0
    store.close()


def test_a_replay_whose_offsets_are_gone_is_a_lag_close_naming_the_last_offset_sent(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2):
            await store.insert("User", new_user(i))
        broker, scheduler = attached(store)

        def compacted_away():
            yield from store.events_after(0)
            raise OffsetGone("offset 2 is no longer retained")

        _, channel = feed(broker, start=0, replay=compacted_away())
        scheduler.run()
        assert offsets(channel) == [1, 2]
        assert channel.closed == (1013, "lagged after 2")
        assert broker.metrics()["lagged_closes"] == 1
        _, again = feed(broker, start=0, replay=compacted_away())
        scheduler.run()
        assert again.closed == (1013, "lagged after 2")
        assert broker.metrics()["lagged_closes"] == 2
        store.close()

    run(body())


def test_a_snapshot_stream_that_fails_to_read_closes_1011_after_its_header(tmp_path, caplog):
    def chunks():
        yield b"line 1\n"
        raise OSError(5, "Input/output error")

    channel = Recorder()
    session = SnapshotSession("e1", 4, "fp", chunks())
    with caplog.at_level(logging.ERROR, logger="dbsvc.realtime"):
        session.on_open(channel)
    assert payload(channel.frames[0]) == (
        b'{"type":"snapshot","format":1,"epoch":"e1","offset":4,"fingerprint":"fp","history":null}'
    )
    assert payload(channel.frames[1]) == b"line 1\n" and len(channel.frames) == 2
    assert channel.closed == (1011, "snapshot read failed")
    assert [r.getMessage() for r in caplog.records] == ["snapshot stream failed: [Errno 5] Input/output error"]
    session.on_writable()  # failed: nothing more, not even the end message
    assert len(channel.frames) == 2


def test_a_snapshot_stream_goes_at_the_sockets_pace_and_lets_its_file_go_on_close():
    closed = []

    def chunks():
        try:
            yield from (b"a", b"bc", b"def")
        finally:
            closed.append(True)

    channel = Recorder()
    session = SnapshotSession("e1", 4, "fp", chunks(), {"id": "h", "forks": []})
    channel.open = False
    session.on_open(channel)
    assert len(channel.frames) == 1  # the header only
    channel.open = True
    session.on_writable()
    assert [payload(f) for f in channel.frames[1:]] == [
        b"a",
        b"bc",
        b"def",
        b'{"type":"end","bytes":6,"crc32":%d}' % zlib.crc32(b"abcdef"),
    ]
    assert payload(channel.frames[0]).endswith(b',"history":{"id":"h","forks":[]}}')
    assert channel.closed == (1000, "")
    session.on_writable()  # done: nothing more
    assert len(channel.frames) == 5
    session.on_close(1000)
    assert closed == [True]  # read to its end
    unread = SnapshotSession("e1", 4, "fp", chunks())
    unread.on_open(FillsUp(2))  # the header and one chunk: the file is open, half read
    assert closed == [True]
    unread.on_close(1006)
    assert closed == [True, True]
    unread.on_writable()  # after the close: a no-op
    listed = SnapshotSession("e1", 4, "fp", iter([b"a", b"b"]))  # an iterator without close()
    listed.on_open(FillsUp(2))
    listed.on_close(1006)


def test_a_socket_closed_before_it_opened_is_closed_with_that_code_at_once(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1))
        broker, scheduler = attached(store)
        session = FeedSession(FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None), broker, 0, replay=store.events_after(0))
        session.close(4000, "rebootstrapped")
        channel = Recorder()
        session.on_open(channel)
        scheduler.run()
        assert (channel.frames, channel.closed) == ([], (4000, "rebootstrapped"))
        assert broker.metrics()["subscriptions"] == 0
        store.close()

    run(body())


def test_queued_frames_leave_joined_up_to_the_write_bound(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store, capacity=100)
        query = USER.parse_feed_query([("role", "reader")])  # routed: frame by frame, not a group's batch
        session = FeedSession(FeedSpec(FeedKind.SUBSCRIBE, USER, query.filters, None), broker, 0)
        channel = Recorder()
        session.on_open(channel)
        channel.open = False
        for i in range(1, 4):  # three 30 KB frames: two fit under 64 KiB joined, the third goes alone
            await store.insert("User", new_user(i, profile={"pad": "x" * 30_000}))
        await store.insert("User", new_user(4))
        scheduler.run()
        channel.open = True
        session.on_writable()
        assert [len(split) for split in map(split_frames, channel.writes)] == [3, 1]
        assert offsets(channel) == [1, 2, 3, 4]
        assert broker.events_sent == 4
        await store.insert("User", new_user(5))
        scheduler.run()
        assert offsets(channel)[-1] == 5 and len(channel.writes) == 2  # straight to the channel
        store.close()

    run(body())


def test_a_batch_at_or_below_the_last_offset_taken_goes_frame_by_frame(tmp_path):
    """A plain feed opened at offset N while N is still waiting to be drained: the drain's
    batch starts at N, so it is not written whole; only the frames after N go out."""

    async def body():
        store = open_blog_store(tmp_path)
        broker, scheduler = attached(store)
        _, first = feed(broker)
        await store.insert("User", new_user(1))
        _, second = feed(broker)  # starts at 1, which the broker has not drained
        await store.insert("User", new_user(2))
        scheduler.run()
        assert (offsets(first), len(first.writes)) == ([1, 2], 1)
        assert (offsets(second), len(second.writes)) == ([2], 0)
        store.close()

    run(body())


def test_a_filtered_replay_that_reads_on_past_its_first_reader_still_judges_links_by_the_parent(tmp_path):
    async def body():
        store = open_blog_store(tmp_path, replication=True)
        await store.insert("User", new_user(1, role="admin"))
        await store.insert("User", new_user(2, role="reader"))
        post = BLOG.BY_NAME["BlogPost"]
        await store.insert("BlogPost", post.validate_create({"author_id": 1, "title": "t", "body": "b", "score": 1.0}))
        broker, scheduler = attached(store)
        query = USER.parse_feed_query([("role", "admin")])
        session = FeedSession(
            FeedSpec(FeedKind.SUBSCRIBE, USER, query.filters, None), broker, 0, replay=store.events_after(0)
        )
        channel = Recorder()
        session.on_open(channel)
        for author in (1, 2):  # after the replay's first reader was made
            await store.insert(
                "BlogPost", post.validate_create({"author_id": author, "title": "t", "body": "b", "score": 1.0})
            )
        scheduler.run()
        sent = [json.loads(payload(f)) for f in channel.frames]
        assert [(f["kind"], f["offset"]) for f in sent] == [("insert", 1), ("link", 3), ("link", 4)]
        store.close()

    run(body())


# -- exact bounds and counts, with frames of chosen sizes handed to a session directly


def text_of(size: int) -> bytes:
    """A text frame of exactly `size` bytes (a 4-byte header: 126 <= payload < 65536)."""
    return text_frame(b"x" * (size - 4))


def routed_feed(broker: Broker) -> tuple[FeedSession, Recorder]:
    query = USER.parse_feed_query([("role", "reader")])
    session = FeedSession(FeedSpec(FeedKind.SUBSCRIBE, USER, query.filters, None), broker, 0)
    channel = Recorder()
    session.on_open(channel)
    return session, channel


def test_every_frame_sent_is_counted_once_whichever_way_it_leaves(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2):
            await store.insert("User", new_user(i))
        broker, scheduler = attached(store)
        query = USER.parse_feed_query([("role", "reader")])  # routed: `deliver`, not a group's batch
        spec = FeedSpec(FeedKind.SUBSCRIBE, USER, query.filters, None)
        session = FeedSession(spec, broker, 0, replay=store.events_after(0))
        channel = Recorder()
        session.on_open(channel)
        scheduler.run()
        assert broker.events_sent == 2  # replayed
        for i in (3, 4):
            await store.insert("User", new_user(i))
            scheduler.run()
        assert broker.events_sent == 4  # live, straight to the channel
        channel.open = False
        for i in (5, 6):
            await store.insert("User", new_user(i))
        scheduler.run()
        channel.open = True
        session.on_writable()
        assert (broker.events_sent, offsets(channel)) == (6, [1, 2, 3, 4, 5, 6])  # queued, then written
        store.close()

    run(body())


def test_the_queue_holds_exactly_max_bytes_and_a_write_frees_them(tmp_path):
    store = open_blog_store(tmp_path)
    broker, _ = attached(store, max_bytes=2000)
    session, channel = routed_feed(broker)
    channel.open = False
    session.deliver(1, text_of(1000))
    session.deliver(2, text_of(1000))  # 2000 bytes queued: at the bound, not past it
    assert channel.closed is None
    channel.open = True
    session.on_writable()
    channel.open = False
    session.deliver(3, text_of(1000))
    session.deliver(4, text_of(1000))  # the first 2000 were written: 2000 again
    assert channel.closed is None
    session.deliver(5, text_of(1))
    assert channel.closed == (1013, "lagged after 2")
    store.close()


@pytest.mark.parametrize(
    "sizes, writes",
    [
        ((32768, 32768, 32768), [2, 1]),  # the second makes exactly 64 KiB: the write ends there
        ((32767, 32768, 200), [3]),  # 65,535 bytes: under the bound, one more joins
    ],
)
def test_queued_frames_are_joined_until_a_write_reaches_64_kib(tmp_path, sizes, writes):
    store = open_blog_store(tmp_path)
    broker, _ = attached(store)
    session, channel = routed_feed(broker)
    channel.open = False
    for offset, size in enumerate(sizes, 1):
        session.deliver(offset, text_of(size))
    channel.open = True
    session.on_writable()
    assert [len(split_frames(w)) for w in channel.writes] == writes
    assert [len(f) for f in channel.frames] == list(sizes)
    store.close()


@pytest.mark.parametrize("size, whole", [(65536, True), (65537, False)])
def test_a_batch_of_at_most_64_kib_is_written_whole(tmp_path, size, whole):
    store = open_blog_store(tmp_path)
    broker, _ = attached(store)
    session, channel = feed(broker)
    batch = Batch()
    batch.add(1, text_of(32768))
    batch.add(2, text_of(size - 32768))
    session.deliver_batch(batch)
    assert len(channel.writes) == (1 if whole else 0)
    assert [len(f) for f in channel.frames] == [32768, size - 32768]
    store.close()


def tiny_log(count: int) -> list[bytes]:
    return [encode_frame(offset, b"x") for offset in range(1, count + 1)]


def test_a_replay_turn_sends_at_most_2000_events(tmp_path):
    store = open_blog_store(tmp_path, replication=True)
    broker, scheduler = attached(store)
    channel = Recorder()
    ReplicationSession(broker, 0, iter(tiny_log(4500))).on_open(channel)
    counts = []
    while scheduler.pending and len(counts) < 10:
        scheduler.step()
        counts.append(len(channel.frames))
    assert counts == [2000, 4000, 4500]
    store.close()


class FillsUp(Recorder):
    """A channel whose transport stops taking writes after `room` frames."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    @property
    def writable(self) -> bool:
        return super().writable and len(self.frames) < self.room


def test_a_replay_stops_asking_for_turns_while_its_channel_is_full(tmp_path):
    store = open_blog_store(tmp_path, replication=True)
    broker, scheduler = attached(store)
    channel = FillsUp(10)
    session = ReplicationSession(broker, 0, iter(tiny_log(30)))
    session.on_open(channel)
    for _ in range(5):
        scheduler.step()
    assert (len(channel.frames), scheduler.pending) == (10, [])
    channel.room = 30
    session.on_writable()
    scheduler.run()
    assert len(channel.frames) == 30
    store.close()


def test_an_init_turn_sends_nothing_to_a_channel_that_filled_up_meanwhile(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1))
        broker, scheduler = attached(store)
        init = InitSlices(store, USER, {}, None, store.applied_offset, 10)
        session = FeedSession(FeedSpec(FeedKind.LIVE, USER, {}, None), broker, init.offset, init=init)
        channel = Recorder()
        session.on_open(channel)  # its offset is drained: a turn is asked for at once
        channel.open = False
        scheduler.run()
        assert channel.frames == []
        channel.open = True
        session.on_writable()
        scheduler.run()
        assert [json.loads(payload(f))["type"] for f in channel.frames] == ["Init"]
        store.close()

    run(body())


class ReentrantChannel(Recorder):
    """A channel whose transport reports room again from inside a write (a resume that runs
    synchronously): the session is asked to pump while it is pumping."""

    def __init__(self) -> None:
        super().__init__()
        self.session: FeedSession | None = None

    def send_frames(self, data: bytes, count: int) -> None:
        super().send_frames(data, count)
        session, self.session = self.session, None
        if session is not None:
            session.on_writable()


def test_a_pump_asked_for_again_while_it_writes_keeps_order_and_the_last_offset_sent(tmp_path):
    store = open_blog_store(tmp_path)
    broker, _ = attached(store, capacity=2)
    query = USER.parse_feed_query([("role", "reader")])
    session = FeedSession(FeedSpec(FeedKind.SUBSCRIBE, USER, query.filters, None), broker, 0)
    channel = ReentrantChannel()
    session.on_open(channel)
    channel.open = False
    for offset in (1, 2):  # 64 KiB each: one write each
        session.deliver(offset, text_of(65536))
    channel.open = True
    channel.session = session
    session.on_writable()
    assert [len(split_frames(w)) for w in channel.writes] == [1, 1]
    channel.open = False
    for offset in (3, 4, 5):
        session.deliver(offset, text_of(200))
    assert channel.closed == (1013, "lagged after 2")
    store.close()


def test_a_turn_grants_exactly_512_kib_and_a_session_that_sends_nothing_costs_nothing(tmp_path):
    store = open_blog_store(tmp_path, replication=True)
    broker, scheduler = attached(store)

    def replica(*sizes: int) -> Recorder:
        channel = Recorder()
        ReplicationSession(broker, 0, iter([replica_frame(i, s) for i, s in enumerate(sizes, 1)])).on_open(channel)
        return channel

    closed = ReplicationSession(broker, 0, iter([replica_frame(1, 200)]))
    closed.on_open(Recorder())
    closed.close(1000, "")  # asked for a turn, then closed: its turn sends nothing
    init = InitSlices(store, USER, {}, None, store.applied_offset, 10)
    waiting = FeedSession(FeedSpec(FeedKind.LIVE, USER, {}, None), broker, init.offset, init=init)
    full = Recorder()
    waiting.on_open(full)  # asks for a turn for its Init ...
    full.open = False  # ... and its transport is full when the turn comes
    channels = [replica(131072, 200), replica(131072), replica(131072), replica(131071), replica(200)]
    scheduler.step()
    assert [[len(f) for f in c.frames] for c in channels] == [[131072], [131072], [131072], [131071], [200]]
    assert full.frames == []
    store.close()


def test_an_init_lagged_by_a_compaction_at_its_turn_costs_the_turn_nothing(tmp_path):
    """The same 512 KiB turn with a live query first in line whose Init a compaction made
    stale between its ask and its turn: it is closed 1013 and costs no byte, so four replicas
    still leave 1 byte and the fifth is served."""

    async def body():
        store = open_blog_store(tmp_path, replication=True)
        await store.insert("User", new_user(1))
        broker, scheduler = attached(store)
        init = InitSlices(store, USER, {}, None, store.applied_offset, 10)
        stale = Recorder()
        FeedSession(FeedSpec(FeedKind.LIVE, USER, {}, None), broker, init.offset, init=init).on_open(stale)
        epoch = store.epoch
        await store.compact_now()
        assert store.epoch != epoch

        def replica(*sizes: int) -> Recorder:
            channel = Recorder()
            frames = iter([replica_frame(i, s) for i, s in enumerate(sizes, 1)])
            ReplicationSession(broker, 0, frames).on_open(channel)
            return channel

        channels = [replica(131072, 200), replica(131072), replica(131072), replica(131071), replica(200)]
        scheduler.step()
        assert (stale.frames, stale.closed) == ([], (1013, "lagged during init"))
        assert [[len(f) for f in c.frames] for c in channels] == [[131072], [131072], [131072], [131071], [200]]
        assert broker.metrics()["lagged_closes"] == 1
        store.close()

    run(body())
