"""What a feed sends (dbsvc/realtime/feeds.py) at the unit where each decision is made: the
links of a model with two refs, the log's own payload as the change frame, each form encoded
once, projections in every form (change, insert/delete under a Scope, Added/Updated), an
update whose old side is visible but filtered out, and a replay's steps one by one (events of
a model the schema no longer has, links, the `None` step of an event that sends nothing).
Frames are compared as exact bytes: the interface promises their key order. Written for the
survivors of a mutation run (docs/mutation.md)."""

from __future__ import annotations

from dbsvc.compiler import compile_schema
from dbsvc.realtime.feeds import Delta, EventFrames, FeedKind, FeedSpec, LinkEvent, derive_links, replay_frames
from dbsvc.rules import Scope
from dbsvc.schema import parse_schema
from dbsvc.storage.events import ChangeEvent, EventKind, fitted_delete_payload
from dbsvc.storage.logfile import encode_frame
from support.realtime_kit import BLOG

USER = BLOG.BY_NAME["User"]
POST = BLOG.BY_NAME["BlogPost"]
COMMENT = BLOG.BY_NAME["Comment"]


def payload(frame: bytes | None) -> bytes | None:
    if frame is None:
        return None
    assert frame[0] == 0x81
    n = frame[1] & 0x7F
    return frame[2 if n < 126 else 4 if n == 126 else 10 :]


def user(id_: int = 7, role: str = "reader", name: str = "A") -> dict:
    return {
        "id": id_,
        "email": "a@x.io",
        "name": name,
        "age": None,
        "role": role,
        "joined": "2026-01-01T00:00:00Z",
        "profile": None,
    }


def post(id_: int = 9, author: int = 1, published: bool = False) -> dict:
    return {
        "id": id_,
        "author_id": author,
        "title": "t",
        "body": "b",
        "published": published,
        "score": 1.0,
        "tags": None,
    }


def comment(id_: int = 3, post_id: int = 9, author: int = 1) -> dict:
    return {"id": id_, "post_id": post_id, "author_id": author, "body": "c", "created": "2026-01-01T00:00:00Z"}


def spec(
    model, kind: FeedKind = FeedKind.SUBSCRIBE, scope: Scope | None = None, projection=None, **filters
) -> FeedSpec:
    pairs = list(filters.items()) + ([("projection", projection)] if projection else [])
    query = model.parse_feed_query(pairs)
    return FeedSpec(kind, model, query.filters, query.projection, scope)


def test_a_change_of_the_second_ref_alone_links_and_unlinks_on_that_field():
    ev = ChangeEvent(EventKind.UPDATE, "Comment", 20, 5, 3, comment(author=2), comment(author=1))
    assert list(derive_links(ev, COMMENT)) == [
        LinkEvent("User", 1, "Comment", 3, "author_id", False, 20),
        LinkEvent("User", 2, "Comment", 3, "author_id", True, 20),
    ]


def test_a_link_frame_is_its_fields_in_the_documented_order():
    frame = LinkEvent("User", 1, "BlogPost", 9, "author_id", True, 12).frame()
    assert payload(frame) == (
        b'{"kind":"link","model":"User","id":1,"child_model":"BlogPost","child_id":9,'
        b'"field":"author_id","linked":true,"offset":12}'
    )


def test_an_unprojected_change_frame_is_the_logs_payload_as_written():
    """A delete too large for a log frame is written fitted (its largest values null and
    named in `omitted`): the live frame is what the log holds, not the event encoded again."""
    record = user(name="x" * 90)
    ev = ChangeEvent(EventKind.DELETE, "User", 30, 6, 7, record)
    fitted = fitted_delete_payload(ev, "id", 150)
    assert fitted != ev.payload()
    assert payload(EventFrames(ev, USER, encode_frame(30, fitted)).change(None)) == fitted
    assert payload(EventFrames(ev, USER).change(None)) == ev.payload()  # a replay's event: no log frame


def test_every_form_of_an_event_is_encoded_once_and_shared():
    ev = ChangeEvent(EventKind.UPDATE, "User", 5, 3, 7, user(role="admin"), user(role="reader"))
    frames = EventFrames(ev, USER)
    assert frames.as_kind(EventKind.INSERT, None) is frames.as_kind(EventKind.INSERT, None)
    assert frames.as_kind(EventKind.DELETE, "card") is frames.as_kind(EventKind.DELETE, "card")
    assert frames.delta(Delta.UPDATED, "card") is frames.delta(Delta.UPDATED, "card")
    assert frames.delta(Delta.REMOVED, None) is frames.delta(Delta.REMOVED, None)


def test_live_query_deltas_carry_the_projected_record():
    live = spec(USER, FeedKind.LIVE, projection="card", role="admin")
    added = ChangeEvent(EventKind.INSERT, "User", 5, 3, 7, user(role="admin"))
    assert payload(live.row_frame(EventFrames(added, USER))) == (
        b'{"type":"Added","model":"User","offset":5,"watermark":3,"record":{"id":7,"name":"A"}}'
    )
    updated = ChangeEvent(EventKind.UPDATE, "User", 6, 4, 7, user(role="admin", name="B"), user(role="admin"))
    assert payload(live.row_frame(EventFrames(updated, USER))) == (
        b'{"type":"Updated","model":"User","offset":6,"watermark":4,"record":{"id":7,"name":"B"}}'
    )
    removed = ChangeEvent(EventKind.UPDATE, "User", 7, 5, 7, user(role="reader"), user(role="admin"))
    assert payload(live.row_frame(EventFrames(removed, USER))) == (
        b'{"type":"Removed","model":"User","offset":7,"watermark":5,"id":7}'
    )


OWN = Scope(field="author_id", keys=frozenset({1}), key=POST.keys["author_id"])


def test_a_projection_applies_to_every_frame_of_a_feed_under_a_scope():
    feed = spec(POST, scope=OWN, projection="summary")
    inserted = ChangeEvent(EventKind.INSERT, "BlogPost", 12, 4, 9, post())
    assert payload(feed.row_frame(EventFrames(inserted, POST))) == (
        b'{"kind":"insert","model":"BlogPost","offset":12,"watermark":4,"id":9,'
        b'"record":{"id":9,"title":"t","score":1.0}}'
    )
    updated = ChangeEvent(EventKind.UPDATE, "BlogPost", 13, 5, 9, post(published=True), post())
    assert payload(feed.row_frame(EventFrames(updated, POST))) == (
        b'{"kind":"update","model":"BlogPost","offset":13,"watermark":5,"id":9,'
        b'"record":{"id":9,"title":"t","score":1.0},"previous":{"id":9,"title":"t","score":1.0}}'
    )
    left = ChangeEvent(EventKind.UPDATE, "BlogPost", 14, 6, 9, post(author=2), post())
    assert payload(feed.row_frame(EventFrames(left, POST))) == (
        b'{"kind":"delete","model":"BlogPost","offset":14,"watermark":6,"id":9,'
        b'"record":{"id":9,"title":"t","score":1.0}}'
    )


def test_an_update_whose_old_side_is_visible_but_filtered_out_keeps_previous():
    """Both sides visible to the token: an update with `previous`, though only the new side
    passes the query's filter (the table of feeds.py's docstring reads visibility)."""
    feed = spec(POST, scope=OWN, published="true")
    ev = ChangeEvent(EventKind.UPDATE, "BlogPost", 13, 5, 9, post(published=True), post(published=False))
    assert payload(feed.row_frame(EventFrames(ev, POST))) == ev.payload()


def replayed(feed: FeedSpec, events: list[ChangeEvent], parents: dict | None = None) -> list:
    lookup = (parents or {}).get
    steps = replay_frames(feed, iter(events), BLOG.BY_NAME, lambda model, id_: lookup((model, id_)))
    return [(offset, payload(frame)) for offset, frame in steps]


def test_a_replay_steps_over_an_event_of_a_model_the_schema_no_longer_has():
    events = [
        ChangeEvent(EventKind.INSERT, "Gone", 1, 1, 1, {"id": 1}),
        ChangeEvent(EventKind.INSERT, "User", 2, 1, 7, user()),
    ]
    assert replayed(spec(USER), events) == [(1, None), (2, events[1].payload())]


def test_a_replay_of_a_change_feed_sends_its_links_and_a_none_step_for_the_rest():
    events = [
        ChangeEvent(EventKind.INSERT, "User", 1, 1, 1, user(1)),
        ChangeEvent(EventKind.INSERT, "BlogPost", 2, 1, 9, post(author=1)),
        ChangeEvent(EventKind.INSERT, "Comment", 3, 1, 3, comment(author=1)),
    ]
    link = (
        b'{"kind":"link","model":"User","id":1,"child_model":"%s","child_id":%d,'
        b'"field":"author_id","linked":true,"offset":%d}'
    )
    parents = {("User", 1): user(1, role="admin")}
    assert replayed(spec(USER, role="admin"), events, parents) == [
        (1, None),  # role reader: not in view
        (2, link % (b"BlogPost", 9, 2)),
        (2, None),
        (3, link % (b"Comment", 3, 3)),
        (3, None),
    ]
    assert replayed(spec(USER, role="editor"), events, parents) == [(1, None), (2, None), (3, None)]
    live = spec(USER, FeedKind.LIVE, projection="card")
    assert replayed(live, events, parents) == [
        (1, b'{"type":"Added","model":"User","offset":1,"watermark":1,"record":{"id":1,"name":"A"}}'),
        (2, None),
        (3, None),
    ]


NOTES = compile_schema(
    parse_schema(
        """\
model Note {
  id    int   @id
  title str   @search
  kind  str   @filter
  rank  int?  @sort
}
""",
        "notes.dbs",
    )
).BY_NAME["Note"]


def test_search_words_are_tested_with_the_filters_the_ranges_and_the_null_tests():
    """A feed with `search=` runs the matcher with every other condition of its query too:
    a record that has the word but fails a filter, a range or a null test does not match."""
    query = NOTES.parse_feed_query([("search", "caf"), ("kind", "a"), ("rank__gte", "2"), ("rank__null", "false")])
    feed = FeedSpec(
        FeedKind.SUBSCRIBE,
        NOTES,
        query.filters,
        query.projection,
        ranges=query.ranges,
        nulls=query.nulls,
        search=query.search,
    )
    base = {"id": 1, "title": "cafe", "kind": "a", "rank": 3}
    assert feed.matches(base)
    assert [
        feed.matches({**base, **change}) for change in ({"title": "tea"}, {"kind": "b"}, {"rank": 1}, {"rank": None})
    ] == [False, False, False, False]
    unbounded = NOTES.parse_feed_query([("search", "caf"), ("rank__null", "true")])
    nulls = FeedSpec(FeedKind.SUBSCRIBE, NOTES, unbounded.filters, None, nulls=unbounded.nulls, search=unbounded.search)
    assert (nulls.matches({**base, "rank": None}), nulls.matches(base)) == (True, False)
