"""Crashes the replica_frame fuzz harness (fuzz/replica_frame.py) found in the frame check
and a follower's apply path, kept as regression tests.

`check_frame` (the consumer's and the follower's check of every `/replicate` message)
looked an event's `kind` up in a frozenset, so a kind that is a JSON object or array
raised `TypeError: unhashable type` out of the reader instead of `FrameError`. Fixed.

A read replica checks each `/replicate` frame (`check_frame`: CRC, offset, JSON, kind) and
then applies it with `Store.apply_replicated`, which promises a `StreamError` for a frame
that does not fit the store and that nothing is applied when it raises. A frame whose CRC
holds but whose record is not of the model's stored shape (a bad primary, a proxy that
rewrites payloads, a bug on the other side) broke that promise: the row reached the
table and failed in its indexes with a bare `TypeError` or `ValueError`, half applied (counted and
readable by id, missing from the sorted index, the head offset not moved), and the frame
stayed in the log, so the next open of the tenant failed replaying it. Fixed: the record
must pass the model's generated replace validator under its own id first.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from dbsvc.errors import StreamError
from dbsvc.replica.consumer import FrameError, check_frame
from dbsvc.runtime import Query
from dbsvc.storage.logfile import encode_frame
from support.storage import BLOG, open_store

USER = {
    "id": 1,
    "email": "a@b.c",
    "name": "Ann",
    "age": None,
    "role": "reader",
    "joined": "2024-01-01T00:00:00Z",
    "profile": None,
}


def insert_frame(offset: int, record: dict) -> bytes:
    event = {
        "kind": "insert",
        "model": "User",
        "offset": offset,
        "watermark": offset,
        "id": record["id"],
        "record": record,
    }
    return encode_frame(offset, json.dumps(event, separators=(",", ":")).encode())


def apply(store, frame: bytes) -> None:
    async def run() -> None:
        await store.apply_replicated(frame)

    asyncio.run(run())


def snapshot(store) -> tuple:
    return (
        store.head_offset,
        store.watermarks(),
        store.live_counts(),
        [store.list_records(m.name, Query())[0] for m in BLOG.MODELS],
    )


@pytest.mark.parametrize("kind", [{"id": 1}, ["insert"], 1, None, "upsert"], ids=repr)
def test_check_frame_refuses_an_event_kind_that_is_not_a_kind_name(kind):
    event = {"kind": kind, "model": "User", "offset": 1, "watermark": 1, "id": 1, "record": USER}
    frame = encode_frame(1, json.dumps(event).encode())
    with pytest.raises(FrameError) as info:
        check_frame(frame, 1)
    assert info.value.offset == 1
    assert info.value.reason == f"payload is not an insert, update or delete event (kind {kind!r})"


def test_a_well_formed_replicated_insert_is_applied(tmp_path):
    store = open_store(str(tmp_path), sync="off", replication=True)
    try:
        frame = insert_frame(1, USER)
        check_frame(frame, 1)
        apply(store, frame)
        assert store.get("User", 1)[0] == USER
    finally:
        store.close()


@pytest.mark.parametrize(
    "record",
    [
        dict(USER, joined=5),  # a datetime field holding a number: its index key fails
        dict(USER, joined="2024-01-01T00:200:00"),  # a datetime that is no datetime (ValueError)
        dict(USER, name=3),  # a str sort field holding a number: the sorted index compares
        dict(USER, id="x"),  # a str id for an int-id model, next to an int id
        dict(USER, id=[2]),  # an unhashable id
    ],
    ids=["datetime-as-number", "datetime-malformed", "str-as-number", "str-id", "list-id"],
)
def test_a_replicated_record_of_the_wrong_shape_is_a_stream_error(tmp_path, record):
    store = open_store(str(tmp_path), sync="off", replication=True)
    try:
        apply(store, insert_frame(1, USER))
        before = snapshot(store)
        frame = insert_frame(2, dict(record, id=record["id"] if record["id"] != 1 else 2))
        check_frame(frame, 2)  # the stream reader lets it through
        with pytest.raises(StreamError):
            apply(store, frame)
        assert snapshot(store) == before  # nothing applied
    finally:
        store.close()
    store = open_store(str(tmp_path), sync="off", replication=True)  # and nothing logged
    try:
        assert snapshot(store) == before
    finally:
        store.close()
