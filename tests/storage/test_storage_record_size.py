"""Issue 30 item 2: the writer never acknowledges a frame the reader refuses. Every write
(insert, replace, delete, a batch, a follower's frame) checks its frame's size where it is
built (storage/events.py "Sizes"): a record is at most `record_limit(max_payload)` bytes of
JSON, a frame at most `max_payload`; a write past them is `PayloadTooLarge` (413), changes
nothing, and every acknowledged write is there after a reopen.

The stores here are opened with a small `max_payload`, so records near the limit are a few
KiB; tests/datatools/test_datatools_record_size.py imports one real-size record.

A closed store is dropped (`del`) before the next open, with a refusal caught from it: the
exception's traceback holds the test's frame (a cycle), and the open's `gc.freeze`
(recovery.py) kept that frame and every store it named for good.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbsvc.errors import BatchRejected, PayloadTooLarge, StreamError
from dbsvc.runtime import Query, compact_json
from dbsvc.storage.events import EventKind, event_payload, record_limit
from dbsvc.storage.logfile import FRAME_HEADER_SIZE, HEADER_SIZE, MAX_PAYLOAD, FrameWalk, encode_frame
from dbsvc.storage.tenants import create_tenant
from support.storage import open_store, post, user

LIMIT = 8192  # max_payload of these stores
RECORD = record_limit(LIMIT)  # the largest record they take
ALL = Query(limit=10**6)


_emails = iter(range(10**9))


def sized_user(size: int, i: int | None = None, **over) -> dict:
    """A User whose compact JSON is exactly `size` bytes; with no id, at most `size` once
    the store gives it one (`null` is longer than the ids these tests reach)."""
    if i is None:
        over.setdefault("email", f"e{next(_emails)}@x")
    rec = user(i, profile="", **over)
    rec["profile"] = "x" * (size - len(compact_json(rec).encode()))
    if i is None:
        return rec
    assert len(compact_json(rec).encode()) == size
    return rec


def stored_size(rec: dict) -> int:
    return len(compact_json(rec).encode())


def payloads(tenant: str) -> list[int]:
    """The payload size of every frame of the tenant's log."""
    with open(os.path.join(tenant, "log"), "rb") as f:
        data = f.read()
    return [len(p) for _o, p in FrameWalk(data, HEADER_SIZE, len(data), payloads=True)]


def users(store) -> dict:
    return {r["id"]: r for r in store.list_records("User", ALL)[0]}


def test_an_insert_over_the_record_limit_is_413_naming_model_size_and_limit(tenant):
    s = open_store(tenant, max_payload=LIMIT)
    try:
        asyncio.run(s.insert("User", user(1)))
        big = sized_user(RECORD + 1, 2)
        with pytest.raises(PayloadTooLarge) as info:
            s.apply_insert("User", big)
        err = info.value
        assert err.status == 413 and err.code == "payload_too_large"
        assert err.extra == {"model": "User", "size": RECORD + 1, "limit": RECORD}
        assert err.detail.startswith(
            f"record too large: the User record is {RECORD + 1} bytes of JSON, the limit is {RECORD}"
        )
        assert list(users(s)) == [1] and s.head_offset == 1 and s.applied_offset == 1
        assert asyncio.run(s.insert("User", user(3)))["id"] == 3  # the store goes on
    finally:
        s.close()
    del s, info, err
    again = open_store(tenant, max_payload=LIMIT)
    try:
        assert list(users(again)) == [1, 3] and again.recovered_tail is None
    finally:
        again.close()


def test_a_record_at_the_limit_is_stored_replaced_by_another_and_deleted(tenant):
    s = open_store(tenant, max_payload=LIMIT)
    try:
        first = asyncio.run(s.insert("User", sized_user(RECORD, 1)))
        second = sized_user(RECORD, 1, name="other")
        previous, stored = asyncio.run(s.replace("User", 1, second))
        assert previous == first and stored == second
        asyncio.run(s.delete("User", 1))
    finally:
        s.close()
    del s
    assert max(payloads(tenant)) <= LIMIT
    again = open_store(tenant, max_payload=LIMIT)
    try:
        assert users(again) == {} and again.head_offset == 3 and again.recovered_tail is None
    finally:
        again.close()


def test_a_replace_with_a_record_over_the_limit_is_413_and_keeps_the_old_one(tenant):
    s = open_store(tenant, max_payload=LIMIT)
    try:
        old = asyncio.run(s.insert("User", user(1)))
        with pytest.raises(PayloadTooLarge) as info:
            s.apply_replace("User", 1, sized_user(RECORD + 50, 1))
        assert info.value.extra["model"] == "User" and info.value.extra["limit"] == RECORD
        assert s.get("User", 1)[0] == old and s.applied_offset == 1
    finally:
        s.close()
    del s, info
    again = open_store(tenant, max_payload=LIMIT)
    try:
        assert again.get("User", 1)[0] == old
    finally:
        again.close()


def test_an_update_of_a_record_stored_under_a_larger_limit_is_413_not_acknowledged(tenant):
    # The record was stored by a store allowed larger frames (an older version's log): its
    # update frame (record and previous) would not fit this store's limit. Its delete is
    # always possible: tests/storage/test_storage_oversized_delete.py.
    roomy = open_store(tenant, max_payload=4 * LIMIT)
    try:
        for i in range(1, 9):
            asyncio.run(roomy.insert("User", user(i)))
        # offset 9, watermark 9: its payload exactly LIMIT.
        rec = sized_user(200, 9)
        payload = event_payload(EventKind.INSERT, "User", 9, 9, 9, rec)
        rec = sized_user(200 + LIMIT - len(payload), 9)
        assert len(event_payload(EventKind.INSERT, "User", 9, 9, 9, rec)) == LIMIT
        asyncio.run(roomy.insert("User", rec))
    finally:
        roomy.close()
    del roomy
    s = open_store(tenant, max_payload=LIMIT)
    try:
        with pytest.raises(PayloadTooLarge) as info:
            s.apply_replace("User", 9, dict(rec, name="changed"))
        assert info.value.detail.startswith("record too large: the User record is ")
        assert s.get("User", 9)[0] == rec and s.applied_offset == 9
        asyncio.run(s.delete("User", 1))  # other records are untouched
    finally:
        s.close()
    del s, info
    assert max(payloads(tenant)[9:]) <= LIMIT
    again = open_store(tenant, max_payload=LIMIT)
    try:
        assert again.get("User", 9)[0] == rec and sorted(users(again)) == list(range(2, 10))
    finally:
        again.close()


def test_a_batch_with_a_record_over_the_limit_is_refused_whole_and_names_the_row(tenant):
    s = open_store(tenant, max_payload=LIMIT)
    try:
        rows = [("User", user(1)), ("User", sized_user(RECORD + 1, 2)), ("User", user(3))]
        with pytest.raises(BatchRejected) as info:
            s.insert_batch(rows)
        ((index, error, other),) = info.value.problems
        assert index == 1 and other is None and isinstance(error, PayloadTooLarge)
        assert error.extra == {"model": "User", "size": RECORD + 1, "limit": RECORD}
        with pytest.raises(BatchRejected):
            s.check_batch(rows)
        assert users(s) == {} and s.head_offset == 0
    finally:
        s.close()
    assert payloads(tenant) == []


def test_max_payload_is_bounded_by_what_every_reader_takes(tenant):
    with pytest.raises(ValueError, match="max_payload must be from 4096 to 67108864"):
        open_store(tenant, max_payload=MAX_PAYLOAD + 1)
    assert record_limit(MAX_PAYLOAD) == 33_553_920


# -- the follower ------------------------------------------------------------------------------


def test_a_replicated_frame_over_the_followers_limit_is_a_stream_error_and_nothing_is_applied(tmp_path):
    primary = open_store(create_tenant(str(tmp_path / "p"), "t"), max_payload=4 * LIMIT)
    follower_dir = create_tenant(str(tmp_path / "f"), "t")
    follower = open_store(follower_dir, max_payload=LIMIT)
    frames: list[bytes] = []
    try:
        primary.subscribe(lambda _event, frame: frames.append(bytes(frame)))
        asyncio.run(primary.insert("User", user(1)))
        asyncio.run(primary.insert("User", sized_user(LIMIT + 100, 2)))

        async def follow() -> None:
            await follower.apply_replicated(frames[0])
            with pytest.raises(StreamError) as info:
                follower.apply_replicated(frames[1])
            size = len(frames[1]) - FRAME_HEADER_SIZE
            assert str(info.value).endswith(
                f"record too large: a frame payload of {size} bytes, over this store's limit of {LIMIT}"
            )

        asyncio.run(follow())
        assert list(users(follower)) == [1] and follower.applied_offset == 1
    finally:
        primary.close()
        follower.close()
    primary = follower = None  # dropped before the next open (follow() closes over follower: no `del`)
    again = open_store(follower_dir, max_payload=LIMIT)
    try:
        assert list(users(again)) == [1]
    finally:
        again.close()


def test_a_replicated_frame_over_64_mib_is_refused_before_it_is_decoded(tmp_path):
    # The real limit: a primary (or anything on the wire) sending a frame no open would take.
    follower_dir = create_tenant(str(tmp_path / "f"), "t")
    follower = open_store(follower_dir)
    rec = user(1, profile="")
    payload = event_payload(EventKind.INSERT, "User", 1, 1, 1, rec)
    # A frame whose header says more than MAX_PAYLOAD; its payload is never read.
    frame = encode_frame(1, payload)
    oversized = frame[:12] + (MAX_PAYLOAD + 1).to_bytes(4, "big") + payload + bytes(MAX_PAYLOAD + 1 - len(payload))
    try:
        with pytest.raises(StreamError, match=f"over this store's limit of {MAX_PAYLOAD}"):
            follower.apply_replicated(oversized)
        assert users(follower) == {} and follower.applied_offset == 0
    finally:
        follower.close()
    del follower
    again = open_store(follower_dir)
    try:
        assert again.head_offset == 0
    finally:
        again.close()


# -- the property ------------------------------------------------------------------------------

# Sizes around the limit: just under, at, just over, and far from it.
SIZES = st.one_of(st.integers(RECORD - 40, RECORD + 40), st.integers(200, 2 * LIMIT))
OPS = st.lists(
    st.tuples(st.sampled_from(["insert", "replace", "delete", "batch"]), SIZES, SIZES), min_size=1, max_size=12
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_every_acknowledged_write_near_the_limit_survives_a_reopen(tmp_path_factory, ops):
    tenant = create_tenant(str(tmp_path_factory.mktemp("prop")), "t")
    expected: dict[int, dict] = {}
    s = open_store(tenant, max_payload=LIMIT)
    try:
        for op, size, other in ops:
            try:
                if op == "insert" or (op in ("replace", "delete") and not expected):
                    rec = sized_user(size)
                    stored = asyncio.run(s.insert("User", rec))
                    assert stored_size(stored) <= RECORD
                    expected[stored["id"]] = stored
                elif op == "replace":
                    id_ = min(expected)
                    _prev, stored = asyncio.run(s.replace("User", id_, sized_user(size, id_)))
                    expected[id_] = stored
                elif op == "delete":
                    id_ = max(expected)
                    asyncio.run(s.delete("User", id_))
                    del expected[id_]
                else:
                    rows = [("User", sized_user(size)), ("User", sized_user(other))]
                    for stored in s.insert_batch(rows):
                        expected[stored["id"]] = stored
            except (PayloadTooLarge, BatchRejected):
                assert max(size, other if op == "batch" else 0) > RECORD
            assert users(s) == expected
    finally:
        s.close()
    del s
    assert all(n <= LIMIT for n in payloads(tenant))
    again = open_store(tenant, max_payload=LIMIT)
    try:
        assert users(again) == expected and again.recovered_tail is None
    finally:
        again.close()


def test_posts_of_blog_posts_near_the_limit_follow_the_same_rule(tenant):
    s = open_store(tenant, max_payload=LIMIT)
    try:
        asyncio.run(s.insert("User", user(1)))
        body = post(1, body="")
        body["body"] = "b" * (RECORD - stored_size(body))
        assert stored_size(asyncio.run(s.insert("BlogPost", body))) == RECORD
        over = post(2, body="")
        over["body"] = "b" * (RECORD + 1 - stored_size(over))
        with pytest.raises(PayloadTooLarge) as info:
            s.apply_insert("BlogPost", over)
        assert info.value.extra["model"] == "BlogPost"
    finally:
        s.close()
