"""The generated client's feed decisions, sans-IO: frames in, what the caller sees out.

`EventState` (a subscription) and `LiveState` (a live query) are the state machines the
feed thread feeds (dbsvc/clients/py_realtime.py): batches held to their `end`, a resume
point that loses nothing and repeats nothing, and a live set that stays whole. Driven here
through a generated client, with frames shaped as the server sends them (docs/realtime.md).
"""

from __future__ import annotations

import pytest

from support.client_kit import SCHEMAS, client_module


@pytest.fixture(scope="module")
def blog(tmp_path_factory):
    return client_module(SCHEMAS / "blog.dbs", tmp_path_factory.mktemp("feed_state"), "feed_state_blog")


def insert(offset: int, id: int, batch: dict | None = None) -> dict:
    frame = {"kind": "insert", "model": "User", "offset": offset, "watermark": offset, "id": id, "record": {"id": id}}
    if batch is not None:
        frame["batch"] = batch
    return frame


def link(offset: int, parent: int, child: int) -> dict:
    return {
        "kind": "link",
        "model": "User",
        "id": parent,
        "child_model": "BlogPost",
        "child_id": child,
        "field": "author_id",
        "linked": True,
        "offset": offset,
    }


def test_a_subscription_hands_over_frames_outside_batches_at_once(blog):
    state = blog.EventState(0)
    assert state.take(insert(1, 1)) == [insert(1, 1)]
    assert state.take(insert(2, 2)) == [insert(2, 2)]
    assert state.offset == 2


def test_a_subscription_holds_a_batch_until_its_end_frame(blog):
    state = blog.EventState(4)
    first = insert(5, 5, {"first": 5, "last": 7})
    last = insert(7, 7, {"first": 5, "last": 7, "end": True})
    assert state.take(first) == []
    assert state.offset == 4  # nothing handed over yet: a reconnect resumes before the batch
    assert state.take(last) == [first, last]
    assert state.offset == 7


def test_a_drop_inside_a_batch_forgets_the_held_frames_and_resumes_before_the_batch(blog):
    state = blog.EventState(4)
    state.take(insert(5, 5, {"first": 5, "last": 6}))
    state.disconnected()
    assert state.resume_after() == 4
    replayed = [insert(5, 5, {"first": 5, "last": 6}), insert(6, 6, {"first": 5, "last": 6, "end": True})]
    assert state.take(replayed[0]) == []
    assert state.take(replayed[1]) == replayed


def test_a_resume_asks_one_offset_early_and_drops_only_what_was_handed_over(blog):
    """A row's link events share its offset: a drop between them must not lose the link."""
    state = blog.EventState(0)
    state.take(insert(1, 1))
    state.take(insert(2, 2))  # the row at offset 2 also caused a link, not yet received
    state.disconnected()
    assert state.resume_after() == 1
    assert state.take(insert(2, 2)) == []  # replayed: handed over before the drop
    assert state.take(link(2, 2, 9)) == [link(2, 2, 9)]
    assert state.take(insert(3, 3)) == [insert(3, 3)]


def test_a_fresh_start_resumes_after_its_start_offset(blog):
    state = blog.EventState(7)
    assert state.resume_after() == 7
    state.restart(12)  # 410 offset_gone: start again at the head
    assert (state.offset, state.resume_after()) == (12, 12)


def test_a_live_query_fills_its_set_from_init_slices_and_applies_deltas(blog):
    state = blog.LiveState("id")
    assert state.resume_after() is None  # no set yet: the first connection asks for an Init
    assert not state.take({"type": "Init", "records": [{"id": 1}], "offset": 3, "complete": False})
    assert state.records == {} and not state.complete
    assert state.take({"type": "Init", "records": [{"id": 2}], "offset": 3, "complete": True})
    assert set(state.records) == {1, 2} and state.resume_after() == 3
    assert state.take({"type": "Added", "offset": 4, "record": {"id": 3}})
    assert state.take({"type": "Updated", "offset": 5, "record": {"id": 1, "x": 1}})
    assert state.take({"type": "Removed", "offset": 6, "id": 2})
    assert state.records == {1: {"id": 1, "x": 1}, 3: {"id": 3}}
    assert state.resume_after() == 6


def test_a_live_query_applies_a_batch_at_its_end_only(blog):
    state = blog.LiveState("id")
    state.take({"type": "Init", "records": [{"id": 2}], "offset": 6})
    assert not state.take({"type": "Added", "offset": 7, "record": {"id": 5}, "batch": {"first": 7, "last": 9}})
    assert state.records == {2: {"id": 2}}
    assert state.take({"type": "Removed", "offset": 8, "id": 2, "batch": {"first": 7, "last": 9, "end": True}})
    assert state.records == {5: {"id": 5}} and state.offset == 8


def test_a_live_query_dropped_during_its_init_starts_over(blog):
    state = blog.LiveState("id")
    state.take({"type": "Init", "records": [{"id": 1}], "offset": 3, "complete": False})
    state.disconnected()
    assert state.resume_after() is None
    state.take({"type": "Init", "records": [{"id": 2}], "offset": 4, "complete": True})
    assert state.records == {2: {"id": 2}}  # the half Init's record is not kept


def test_a_live_query_ignores_a_delta_it_already_applied(blog):
    state = blog.LiveState("id")
    state.take({"type": "Init", "records": [], "offset": 1})
    state.take({"type": "Added", "offset": 2, "record": {"id": 1}})
    state.take({"type": "Removed", "offset": 3, "id": 1})
    assert not state.take({"type": "Added", "offset": 2, "record": {"id": 1}})
    assert state.records == {}


def test_offset_gone_makes_a_live_query_ask_for_a_fresh_init(blog):
    state = blog.LiveState("id")
    state.take({"type": "Init", "records": [{"id": 1}], "offset": 3})
    state.restart()
    assert state.resume_after() is None
