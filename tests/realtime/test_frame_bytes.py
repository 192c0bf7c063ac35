"""The change-feed and live-query frames as bytes, at the unit that builds them
(feeds.py's `EventFrames` and `LinkEvent`), each against a literal: key order of the
event, records in declaration order, a projection in the order its `@projection` lists
its fields (here against declaration order, so a dict comparison or a projection built in
declaration order would still pass). In process: mutmut sees these (docs/mutation.md).
tests/app/test_exact_bytes.py checks the same texts through a real server."""

from __future__ import annotations

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.realtime.feeds import Delta, EventFrames, LinkEvent
from dbsvc.schema import parse_schema
from dbsvc.storage.events import ChangeEvent, EventKind

SHOP = compile_schema(
    parse_schema(
        """\
model Author {
  id    int   @id
  name  str   @filter @sort
  born  date?
  @projection(rev, name, id)
}
""",
        "shop.dbs",
    )
)
AUTHOR = SHOP.BY_NAME["Author"]

OLD = {"id": 1, "name": "Ann", "born": None}
NEW = {"id": 1, "name": "Anna", "born": "1900-01-02"}


def text(frame: bytes) -> bytes:
    """The payload of one server frame: FIN + text, unmasked, its length exact (RFC 6455 §5.2)."""
    assert frame[0] == 0x81
    if frame[1] < 126:
        head, size = 2, frame[1]
    else:
        assert frame[1] == 126
        head, size = 4, int.from_bytes(frame[2:4], "big")
    assert len(frame) == head + size
    return frame[head:]


def frames(kind: EventKind) -> EventFrames:
    record, previous = {EventKind.INSERT: (OLD, None), EventKind.UPDATE: (NEW, OLD), EventKind.DELETE: (NEW, None)}[
        kind
    ]
    return EventFrames(ChangeEvent(kind, "Author", 7, 3, 1, record, previous), AUTHOR)


@pytest.mark.parametrize(
    ("kind", "projection", "expected"),
    [
        (
            EventKind.INSERT,
            None,
            b'{"kind":"insert","model":"Author","offset":7,"watermark":3,"id":1,'
            b'"record":{"id":1,"name":"Ann","born":null}}',
        ),
        (
            EventKind.INSERT,
            "rev",
            b'{"kind":"insert","model":"Author","offset":7,"watermark":3,"id":1,"record":{"name":"Ann","id":1}}',
        ),
        (
            EventKind.UPDATE,
            None,
            b'{"kind":"update","model":"Author","offset":7,"watermark":3,"id":1,'
            b'"record":{"id":1,"name":"Anna","born":"1900-01-02"},"previous":{"id":1,"name":"Ann","born":null}}',
        ),
        (
            EventKind.UPDATE,
            "rev",
            b'{"kind":"update","model":"Author","offset":7,"watermark":3,"id":1,'
            b'"record":{"name":"Anna","id":1},"previous":{"name":"Ann","id":1}}',
        ),
        (
            EventKind.DELETE,
            "rev",
            b'{"kind":"delete","model":"Author","offset":7,"watermark":3,"id":1,"record":{"name":"Anna","id":1}}',
        ),
    ],
)
def test_change_frames(kind, projection, expected):
    assert text(frames(kind).change(projection)) == expected


@pytest.mark.parametrize(
    ("delta", "projection", "expected"),
    [
        (
            Delta.ADDED,
            None,
            b'{"type":"Added","model":"Author","offset":7,"watermark":3,'
            b'"record":{"id":1,"name":"Anna","born":"1900-01-02"}}',
        ),
        (
            Delta.UPDATED,
            "rev",
            b'{"type":"Updated","model":"Author","offset":7,"watermark":3,"record":{"name":"Anna","id":1}}',
        ),
        (Delta.REMOVED, "rev", b'{"type":"Removed","model":"Author","offset":7,"watermark":3,"id":1}'),
    ],
)
def test_live_query_delta_frames(delta, projection, expected):
    assert text(frames(EventKind.UPDATE).delta(delta, projection)) == expected


def test_an_update_shown_as_an_insert_or_a_delete_is_that_frame_at_the_updates_offset():
    update = frames(EventKind.UPDATE)
    assert text(update.as_kind(EventKind.INSERT, "rev")) == (
        b'{"kind":"insert","model":"Author","offset":7,"watermark":3,"id":1,"record":{"name":"Anna","id":1}}'
    )
    assert text(update.as_kind(EventKind.DELETE, None)) == (
        b'{"kind":"delete","model":"Author","offset":7,"watermark":3,"id":1,"record":{"id":1,"name":"Ann","born":null}}'
    )


def test_link_frame():
    frame = LinkEvent("Author", 1, "Book", 9, "author_id", True, 12).frame()
    assert text(frame) == (
        b'{"kind":"link","model":"Author","id":1,"child_model":"Book","child_id":9,'
        b'"field":"author_id","linked":true,"offset":12}'
    )
