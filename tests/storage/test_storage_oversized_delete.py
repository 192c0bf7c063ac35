"""Issue 30: a delete is always possible (storage/events.py "Sizes").

A record stored before the record size limit, or by a store allowed larger frames, may be
so large that its delete frame, which carries the last record, would not fit the limit,
even by the two bytes the delete's longer offset and watermark add. Such a delete's frame
carries the record with its largest values null, named in `omitted`; it is acknowledged,
reopens, replicates, and `as_of` reads before it still show the whole record.

The oversized record is written here through public storage calls only: a store opened
with a larger `max_payload` (what an older version's log holds), then the store reopened
with the limit under test. The end-to-end case, at the real 64 MiB limit through a server,
is tests/app/test_app_record_size.py (slow).
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from dbsvc.storage.events import EventKind, event_payload
from dbsvc.storage.logfile import HEADER_SIZE, FrameWalk
from dbsvc.storage.tenants import create_tenant
from support.storage import open_store, user

LIMIT = 8192


def near_limit_user(i: int, offset: int, payload: int) -> dict:
    """User `i` whose insert payload at `offset` (watermark `offset`) is exactly `payload` bytes."""
    rec = user(i, profile="")
    size = len(event_payload(EventKind.INSERT, "User", offset, offset, i, rec))
    rec["profile"] = "x" * (payload - size)
    assert len(event_payload(EventKind.INSERT, "User", offset, offset, i, rec)) == payload
    return rec


def frames_of(tenant: str) -> list[dict]:
    with open(os.path.join(tenant, "log"), "rb") as f:
        data = f.read()
    return [json.loads(p) for _o, p in FrameWalk(data, HEADER_SIZE, len(data), payloads=True)]


def payload_sizes(tenant: str) -> list[int]:
    with open(os.path.join(tenant, "log"), "rb") as f:
        data = f.read()
    return [len(p) for _o, p in FrameWalk(data, HEADER_SIZE, len(data), payloads=True)]


@pytest.fixture
def oversized(tenant):
    """A tenant whose User 9 (offset 9) has an insert frame of exactly LIMIT bytes, written
    by a store allowed 4 * LIMIT: the delete's frame at offset 10 is 2 bytes over LIMIT."""
    roomy = open_store(tenant, max_payload=4 * LIMIT)
    try:
        for i in range(1, 9):
            asyncio.run(roomy.insert("User", user(i)))
        rec = near_limit_user(9, 9, LIMIT)
        asyncio.run(roomy.insert("User", rec))
    finally:
        roomy.close()
    assert len(event_payload(EventKind.DELETE, "User", 10, 10, 9, rec)) == LIMIT + 2
    return tenant, rec


def test_a_delete_whose_frame_would_be_over_the_limit_is_acknowledged_and_reopens(oversized):
    tenant, rec = oversized
    s = open_store(tenant, max_payload=LIMIT)
    seen = []
    s.subscribe(lambda event, frame: seen.append((event, frame)))
    try:
        previous = asyncio.run(s.delete("User", 9))
        assert previous == rec
        assert s.get("User", 9)[0] is None
        ((event, frame),) = seen
        assert event.kind is EventKind.DELETE and event.record == rec  # in this process: whole
        assert len(frame) - 16 <= LIMIT
    finally:
        s.close()
    assert max(payload_sizes(tenant)) <= LIMIT
    deleted = frames_of(tenant)[-1]
    assert deleted["kind"] == "delete" and deleted["offset"] == 10 and deleted["id"] == 9
    assert deleted["omitted"] == ["profile"]
    assert deleted["record"] == dict(rec, profile=None)  # every field named, the large one null
    again = open_store(tenant, max_payload=LIMIT)
    try:
        assert again.get("User", 9)[0] is None
        assert again.get("User", 9, as_of=9)[0] == rec  # as_of before the delete: the whole record
        assert again.head_offset == 10
        replayed = next(iter(again.frames_after(9)))
        assert json.loads(replayed[16:])["omitted"] == ["profile"]
    finally:
        again.close()


def test_a_delete_that_fits_carries_the_whole_record_and_no_omitted(tenant):
    s = open_store(tenant, max_payload=LIMIT)
    try:
        rec = asyncio.run(s.insert("User", near_limit_user(1, 1, 3000)))
        asyncio.run(s.delete("User", 1))
    finally:
        s.close()
    deleted = frames_of(tenant)[-1]
    assert deleted["record"] == rec and "omitted" not in deleted


def test_the_largest_values_go_first_and_the_id_never(tenant):
    roomy = open_store(tenant, max_payload=4 * LIMIT)
    try:
        rec = user(1, name="n" * 90, profile={"bio": "b" * 2000})
        asyncio.run(roomy.insert("User", rec))
        big = user(2, name="m" * 90, profile={"bio": "b" * (3 * LIMIT // 2)})
        asyncio.run(roomy.insert("User", big))
    finally:
        roomy.close()
    s = open_store(tenant, max_payload=LIMIT)
    try:
        asyncio.run(s.delete("User", 2))
    finally:
        s.close()
    deleted = frames_of(tenant)[-1]
    assert deleted["omitted"] == ["profile"]
    assert deleted["record"]["id"] == 2 and deleted["record"]["name"] == "m" * 90


def test_a_follower_applies_a_fitted_delete(oversized, tmp_path):
    tenant, rec = oversized
    s = open_store(tenant, max_payload=LIMIT)
    try:
        asyncio.run(s.delete("User", 9))
        frames = list(s.frames_after(0))
    finally:
        s.close()
    follower = open_store(create_tenant(str(tmp_path / "f"), "t"), max_payload=4 * LIMIT)
    try:

        async def apply_all():
            last = None
            for frame in frames:
                last = follower.apply_replicated(frame)
            await last

        asyncio.run(apply_all())
        assert follower.get("User", 9)[0] is None and follower.head_offset == 10
    finally:
        follower.close()
