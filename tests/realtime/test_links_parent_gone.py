"""Links whose parent record is gone when the link is delivered (issue 33, cluster 6), sans-IO.

A `link` is judged by its parent as read when it is delivered (docs/realtime.md), and a
parent can be gone by then: a replay (`after=`) of a child's link whose parent was deleted
since, or the delete of a record that referenced itself (its own unlink names a parent the
same delete removed). The decisions, each tested here through feeds.py's public names:

- a feed without a filter and without rules sends it: a link carries ids only, its frame
  needs nothing of the parent, and the parent's own `delete` is in the same feed;
- a filtered feed does not: a parent that is gone matches no filter;
- a feed under a `subscribe` rule does not: a parent that is gone is not in view;
- a live query never gets links, parent or not;
- the parent is read once per link, and not at all by a feed that does not judge it.
"""

from __future__ import annotations

from typing import Any

from dbsvc.realtime.feeds import FeedKind, FeedSpec, LinkFrames, derive_links, replay_frames
from dbsvc.rules import Scope
from dbsvc.storage.events import ChangeEvent, EventKind
from support.realtime_kit import BLOG

USER = BLOG.BY_NAME["User"]
POST = BLOG.BY_NAME["BlogPost"]
MODELS = BLOG.BY_NAME


def user(id_: int, name: str = "Ann") -> dict:
    return {
        "id": id_,
        "email": f"u{id_}@x.io",
        "name": name,
        "age": None,
        "role": "reader",
        "joined": "2026-01-01T00:00:00Z",
        "profile": None,
    }


def post(id_: int, author: int) -> dict:
    return {"id": id_, "author_id": author, "title": "t", "body": "b", "published": False, "score": 1.0, "tags": None}


def feed(kind: FeedKind = FeedKind.SUBSCRIBE, scope: Scope | None = None, **filters: str) -> FeedSpec:
    query = USER.parse_feed_query(list(filters.items()))
    return FeedSpec(kind, USER, query.filters, query.projection, scope)


class Lookups:
    """The store's current records as the broker's lookup sees them, counting the reads."""

    def __init__(self, records: dict[int, dict]) -> None:
        self.records = records
        self.reads: list[tuple[str, Any]] = []

    def __call__(self, model: str, id_: Any) -> dict | None:
        self.reads.append((model, id_))
        return self.records.get(id_)


def payload(frame: bytes | None) -> bytes | None:
    """The text of a server frame (FIN + text, unmasked, short or 16-bit length)."""
    if frame is None:
        return None
    assert frame[0] == 0x81
    return frame[2:] if frame[1] < 126 else frame[4:]


def unlink_of_post_9(lookup: Lookups) -> LinkFrames:
    deleted = ChangeEvent(EventKind.DELETE, "BlogPost", 4, 2, 9, post(9, author=1), None)
    (link,) = derive_links(deleted, POST)
    return LinkFrames(link, lookup)


UNLINK = b'{"kind":"link","model":"User","id":1,"child_model":"BlogPost","child_id":9,"field":"author_id","linked":false,"offset":4}'


def test_a_feed_without_filter_or_rules_sends_the_link_and_never_reads_the_parent():
    gone = Lookups({})
    assert payload(feed().link_frame(unlink_of_post_9(gone))) == UNLINK
    assert gone.reads == []


def test_a_filtered_feed_drops_a_link_whose_parent_is_gone():
    gone, there = Lookups({}), Lookups({1: user(1)})
    assert feed(name="Ann").link_frame(unlink_of_post_9(gone)) is None
    assert payload(feed(name="Ann").link_frame(unlink_of_post_9(there))) == UNLINK  # the same link, parent there
    assert gone.reads == [("User", 1)] and there.reads == [("User", 1)]


def test_a_feed_under_a_rule_drops_a_link_whose_parent_is_gone():
    everyone_named_ann = Scope(where=lambda record: record["name"] == "Ann", where_row=lambda row: row[2] == "Ann")
    gone, there = Lookups({}), Lookups({1: user(1)})
    assert feed(scope=everyone_named_ann).link_frame(unlink_of_post_9(gone)) is None
    assert payload(feed(scope=everyone_named_ann).link_frame(unlink_of_post_9(there))) == UNLINK


def test_a_live_query_never_gets_a_link():
    there = Lookups({1: user(1)})
    assert feed(FeedKind.LIVE).link_frame(unlink_of_post_9(there)) is None
    assert feed(FeedKind.LIVE, name="Ann").link_frame(unlink_of_post_9(there)) is None
    assert there.reads == []


def test_the_parent_is_read_once_however_many_feeds_judge_it():
    gone = Lookups({})
    frames = unlink_of_post_9(gone)
    for _ in range(3):
        assert feed(name="Ann").link_frame(frames) is None
        assert feed(name="Bo").link_frame(frames) is None
    assert gone.reads == [("User", 1)]


def history() -> list[ChangeEvent]:
    """Ann (1) writes post 9; the post is deleted, then Ann: the parent is gone at replay."""
    return [
        ChangeEvent(EventKind.INSERT, "User", 1, 1, 1, user(1), None),
        ChangeEvent(EventKind.INSERT, "BlogPost", 2, 1, 9, post(9, author=1), None),
        ChangeEvent(EventKind.DELETE, "BlogPost", 3, 2, 9, post(9, author=1), None),
        ChangeEvent(EventKind.DELETE, "User", 4, 2, 1, user(1), None),
    ]


def sent(spec: FeedSpec, lookup: Lookups) -> list[tuple[int, bytes | None]]:
    return [(offset, payload(frame)) for offset, frame in replay_frames(spec, iter(history()), MODELS, lookup)]


def test_a_replay_without_filter_sends_the_links_of_a_parent_deleted_since():
    link = b'{"kind":"link","model":"User","id":1,"child_model":"BlogPost","child_id":9,"field":"author_id",'
    got = sent(feed(), Lookups({}))
    assert [(offset, frame[:30] if frame else None) for offset, frame in got] == [
        (1, b'{"kind":"insert","model":"User'),
        (2, link[:30]),
        (2, None),
        (3, link[:30]),
        (3, None),
        (4, b'{"kind":"delete","model":"User'),
    ]
    assert [frame for _offset, frame in got if frame and frame.startswith(link)] == [
        link + b'"linked":true,"offset":2}',
        link + b'"linked":false,"offset":3}',
    ]


def test_a_filtered_replay_drops_the_links_of_a_parent_deleted_since_and_keeps_its_rows():
    got = sent(feed(name="Ann"), Lookups({}))
    assert [(offset, frame is not None and frame[:30]) for offset, frame in got] == [
        (1, b'{"kind":"insert","model":"User'),
        (2, False),
        (3, False),
        (4, b'{"kind":"delete","model":"User'),
    ]
    # the same replay while Ann is still there (before her delete): her links pass
    there = sent(feed(name="Ann"), Lookups({1: user(1)}))
    assert [offset for offset, frame in there if frame and b'"kind":"link"' in frame] == [2, 3]
