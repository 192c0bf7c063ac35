"""feeds.py without sockets: the change-feed and live-query decisions, links, shared frames."""

from __future__ import annotations

import json

import pytest

from dbsvc.http.frames import text_frame
from dbsvc.realtime.feeds import Delta, EventFrames, FeedKind, FeedSpec, LinkEvent, derive_links
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.logfile import encode_frame
from support.realtime_kit import BLOG

USER = BLOG.BY_NAME["User"]
POST = BLOG.BY_NAME["BlogPost"]


def user(role: str, id_: int = 7) -> dict:
    return {
        "id": id_,
        "email": "a@x.io",
        "name": "A",
        "age": None,
        "role": role,
        "joined": "2026-01-01T00:00:00Z",
        "profile": None,
    }


def event(kind: EventKind, record: dict, previous: dict | None = None, offset: int = 5) -> ChangeEvent:
    return ChangeEvent(kind, "User", offset, 3, record["id"], record, previous)


def spec(kind: FeedKind, projection: str | None = None, **filters: str) -> FeedSpec:
    query = USER.parse_feed_query(list(filters.items()) + ([("projection", projection)] if projection else []))
    return FeedSpec(kind, USER, query.filters, query.projection)


def decoded(frame: bytes | None) -> dict | None:
    if frame is None:
        return None
    assert frame[0] == 0x81  # FIN + text, unmasked
    return json.loads(frame[2:] if frame[1] < 126 else frame[4:])


# (kind, role before, role after) -> what a `role=admin` change feed / live query sends
CASES = [
    (EventKind.INSERT, None, "admin", "insert", Delta.ADDED),
    (EventKind.INSERT, None, "reader", None, None),
    (EventKind.UPDATE, "reader", "admin", "update", Delta.ADDED),
    (EventKind.UPDATE, "admin", "admin", "update", Delta.UPDATED),
    (EventKind.UPDATE, "admin", "reader", "update", Delta.REMOVED),
    (EventKind.UPDATE, "reader", "editor", None, None),
    (EventKind.DELETE, None, "admin", "delete", Delta.REMOVED),
    (EventKind.DELETE, None, "reader", None, None),
]


@pytest.mark.parametrize("kind, before, after, change, delta", CASES)
def test_feed_decisions_follow_the_matcher(kind, before, after, change, delta):
    previous = user(before) if before is not None else None
    ev = event(kind, user(after), previous)
    frames = EventFrames(ev, USER)
    got = decoded(spec(FeedKind.SUBSCRIBE, role="admin").row_frame(frames))
    assert (got["kind"] if got else None) == change
    live = decoded(spec(FeedKind.LIVE, role="admin").row_frame(frames))
    assert (live["type"] if live else None) == (delta.value if delta else None)
    if delta is Delta.REMOVED:
        assert live == {"type": "Removed", "model": "User", "offset": 5, "watermark": 3, "id": 7}
    elif delta is not None:
        assert live["record"] == user(after)


def test_unfiltered_feeds_share_the_logs_payload_bytes():
    ev = event(EventKind.INSERT, user("reader"))
    log_frame = encode_frame(ev.offset, ev.payload())
    frames = EventFrames(ev, USER, log_frame)
    a = spec(FeedKind.SUBSCRIBE).row_frame(frames)
    b = spec(FeedKind.SUBSCRIBE).row_frame(frames)
    assert a is b  # encoded once, shared
    assert a == text_frame(log_frame[16:])
    assert json.loads(log_frame[16:]) == ev.to_dict()
    assert EventFrames(ev, USER).change(None) == a  # a replay encodes the same bytes


def test_projection_is_encoded_once_per_projection_and_applies_to_previous():
    ev = event(EventKind.UPDATE, user("admin"), user("reader"))
    frames = EventFrames(ev, USER)
    one = spec(FeedKind.SUBSCRIBE, projection="card").row_frame(frames)
    two = spec(FeedKind.SUBSCRIBE, projection="card").row_frame(frames)
    assert one is two
    body = decoded(one)
    assert body["record"] == {"id": 7, "name": "A"} and body["previous"] == {"id": 7, "name": "A"}
    assert list(body) == ["kind", "model", "offset", "watermark", "id", "record", "previous"]


def post_record(author: int | None, id_: int = 9) -> dict:
    return {"id": id_, "author_id": author, "title": "t", "body": "b", "published": False, "score": 1.0, "tags": None}


@pytest.mark.parametrize(
    "kind, before, after, expected",
    [
        (EventKind.INSERT, None, 1, [(1, True)]),
        (EventKind.UPDATE, 1, 2, [(1, False), (2, True)]),
        (EventKind.UPDATE, 1, 1, []),
        (EventKind.DELETE, None, 1, [(1, False)]),
    ],
)
def test_links_are_derived_from_ref_changes(kind, before, after, expected):
    previous = post_record(before) if before is not None else None
    ev = ChangeEvent(kind, "BlogPost", 12, 4, 9, post_record(after), previous)
    links = list(derive_links(ev, POST))
    assert [(link.id, link.linked) for link in links] == expected
    for link in links:
        assert link == LinkEvent("User", link.id, "BlogPost", 9, "author_id", link.linked, 12)


def test_link_frame_layout():
    frame = LinkEvent("User", 1, "BlogPost", 9, "author_id", True, 12).frame()
    assert decoded(frame) == {
        "kind": "link",
        "model": "User",
        "id": 1,
        "child_model": "BlogPost",
        "child_id": 9,
        "field": "author_id",
        "linked": True,
        "offset": 12,
    }
