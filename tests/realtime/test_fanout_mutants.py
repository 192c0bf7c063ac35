"""The pieces of shared fan-out (dbsvc/realtime/fanout.py) at the unit where each decision
is made: a `Batch`'s bookkeeping, a `Group`'s take, `Delivery`'s slicing across batches,
`plain_key` and `PlainFeeds`' one-place rule. Written for the survivors of a mutation run
(docs/mutation.md); the receivers are plain recorders of what a session is handed, the
`Receiver` protocol fanout.py names (the end-to-end behaviour is test_realtime_fanout.py's)."""

from __future__ import annotations

from dbsvc.realtime.fanout import Batch, Delivery, Group, PlainFeeds, plain_key
from dbsvc.realtime.feeds import FeedKind, FeedSpec
from dbsvc.rules import Scope
from support.realtime_kit import BLOG

USER = BLOG.BY_NAME["User"]
PLAIN = FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None)


class Taker:
    """A receiver that keeps (its name, the batch's offsets) for every batch it is handed."""

    def __init__(self, name: str, log: list, spec: FeedSpec = PLAIN) -> None:
        self.name, self.log, self.spec = name, log, spec

    def deliver_batch(self, batch: Batch) -> None:
        self.log.append((self.name, tuple(batch.offsets)))


def test_a_batch_keeps_offsets_frames_and_size_and_joins_its_frames_once():
    batch = Batch()
    assert (batch.offsets, batch.frames, batch.size, batch.count, batch.data) == ([], [], 0, 0, b"")
    batch.add(5, b"ab")
    assert (batch.first, batch.last, batch.count, batch.size) == (5, 5, 1, 2)
    assert batch.data == b"ab"
    batch.add(7, b"cde")
    assert (batch.first, batch.last, batch.count, batch.size) == (5, 7, 2, 5)
    joined = batch.data
    assert joined == b"abcde"  # the join made before the second frame is dropped
    assert batch.data is joined  # built once
    batch.add(7, b"f")
    assert batch.data == b"abcdef"
    assert list(batch.items()) == [(5, b"ab"), (7, b"cde"), (7, b"f")]


def test_a_group_takes_its_batch_once_with_the_sessions_in_it_now():
    log: list = []
    group: Group[Taker] = Group(PLAIN)
    assert group.take() is None
    a, b = Taker("a", log), Taker("b", log)
    group.sessions[a] = None
    group.add(1, b"x")
    group.add(2, b"y")
    group.sessions[b] = None
    taken = group.take()
    assert taken is not None
    batch, sessions = taken
    assert (batch.offsets, sessions) == ([1, 2], (a, b))
    assert group.batch is None and group.take() is None
    group.add(3, b"z")
    taken = group.take()
    assert taken is not None and taken[0].offsets == [3]  # a new batch, not the old one grown


def batch_of(*offsets: int) -> Batch:
    batch = Batch()
    for offset in offsets:
        batch.add(offset, b"f")
    return batch


def test_delivery_serves_at_most_the_budget_a_call_in_order_across_batches():
    log: list = []
    first = tuple(Taker(f"a{i}", log) for i in range(5))
    second = tuple(Taker(f"b{i}", log) for i in range(2))
    delivery: Delivery[Taker] = Delivery()
    assert not delivery
    delivery.add(batch_of(1), first)
    delivery.add(batch_of(2, 3), second)
    assert bool(delivery) is True
    delivery.run(0)
    assert log == []
    delivery.run(3)
    assert log == [("a0", (1,)), ("a1", (1,)), ("a2", (1,))]
    delivery.run(3)  # the rest of the first batch, then the second's first session
    assert log[3:] == [("a3", (1,)), ("a4", (1,)), ("b0", (2, 3))]
    assert bool(delivery) is True
    delivery.run(1)
    assert log[6:] == [("b1", (2, 3))]
    assert not delivery
    delivery.run(5)
    assert len(log) == 7


def test_delivery_moves_to_the_next_batch_exactly_when_one_is_done():
    log: list = []
    delivery: Delivery[Taker] = Delivery()
    delivery.add(batch_of(1), (Taker("a0", log), Taker("a1", log)))
    delivery.add(batch_of(2), (Taker("b0", log), Taker("b1", log)))
    delivery.run(2)  # exactly the first batch
    assert log == [("a0", (1,)), ("a1", (1,))]
    delivery.run(1)
    assert log[2:] == [("b0", (2,))]  # the second starts at its first session
    delivery.run(10)
    assert log[3:] == [("b1", (2,))]
    assert not delivery


def test_a_batch_without_sessions_is_passed_over():
    log: list = []
    delivery: Delivery[Taker] = Delivery()
    delivery.add(batch_of(1), ())
    delivery.add(batch_of(2), (Taker("b0", log),))
    delivery.run(1)
    assert log == [("b0", (2,))] and not delivery


def test_a_cleared_delivery_starts_the_next_batch_from_its_first_session():
    log: list = []
    delivery: Delivery[Taker] = Delivery()
    delivery.add(batch_of(1), tuple(Taker(f"a{i}", log) for i in range(3)))
    delivery.run(2)
    delivery.clear()
    assert not delivery
    delivery.add(batch_of(2), tuple(Taker(f"b{i}", log) for i in range(3)))
    delivery.run(1)
    assert log[2:] == [("b0", (2,))]


def test_plain_key_is_kind_and_projection_without_filters_or_a_narrowing_scope():
    assert plain_key(PLAIN) == (FeedKind.SUBSCRIBE, None)
    assert plain_key(FeedSpec(FeedKind.LIVE, USER, {}, "card")) == (FeedKind.LIVE, "card")
    assert plain_key(FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None, scope=Scope(everything=True))) == (
        FeedKind.SUBSCRIBE,
        None,
    )
    filtered = FeedSpec(FeedKind.SUBSCRIBE, USER, {"role": frozenset({"admin"})}, None)
    assert plain_key(filtered) is None
    assert plain_key(FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None, scope=Scope(nothing=True))) is None
    assert plain_key(FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None, scope=Scope(where=lambda r: True))) is None


def test_plain_feeds_hold_a_session_in_one_group_and_forget_an_empty_group():
    log: list = []
    feeds: PlainFeeds[Taker] = PlainFeeds()
    a, b = Taker("a", log), Taker("b", log)
    card = Taker("c", log, FeedSpec(FeedKind.SUBSCRIBE, USER, {}, "card"))
    assert (feeds.add(a), feeds.add(b), feeds.add(card)) == (True, True, True)
    assert list(feeds.groups) == [(FeedKind.SUBSCRIBE, None), (FeedKind.SUBSCRIBE, "card")]
    assert list(feeds.sessions()) == [a, b, card]
    # the same key, another spec (a scope that shows everything is not "no rules"): not plain here
    other = Taker("o", log, FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None, scope=Scope(everything=True)))
    assert feeds.add(other) is False
    assert feeds.remove(other) is False  # it is in no group
    filtered = Taker("f", log, FeedSpec(FeedKind.SUBSCRIBE, USER, {"role": frozenset({"admin"})}, None))
    assert feeds.add(filtered) is False and feeds.remove(filtered) is False
    assert feeds.remove(a) is True
    assert feeds.remove(a) is False
    assert list(feeds.groups) == [(FeedKind.SUBSCRIBE, None), (FeedKind.SUBSCRIBE, "card")]
    assert feeds.remove(b) is True
    assert list(feeds.groups) == [(FeedKind.SUBSCRIBE, "card")]  # emptied: gone, its batch with it
    assert feeds.remove(Taker("x", log)) is False  # its group no longer exists
    assert list(feeds.sessions()) == [card]
