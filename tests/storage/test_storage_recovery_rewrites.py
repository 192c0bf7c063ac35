"""What recovery.py rewrites at open: the compaction rule's edges, a compaction on open (a new
epoch at the head, the old log retained for replicas), the retained segment kept or removed,
and a schema migration that reshapes records.

Each test builds a real tenant with the store, then crafts or damages its files with the
project's own encoders (tests/support/recovery_kit.py). Everything runs in this process
(mutation testing only sees calls made here) and on small logs.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import migrate, recovery, retain
from dbsvc.storage.logfile import HEADER_SIZE, decode_header, encode_header
from dbsvc.storage.snapshotreader import decode_snapshot
from support.recovery_kit import (
    BLOG_TEXT,
    HEAD,
    LOGGER,
    assert_intact,
    expected_users,
    frames_of,
    listing,
    load,
    log_of,
    messages,
    model_image,
    read,
    records,
    segment_of,
    snapshot_of,
)
from support.storage import BLOG, open_store, post, run, user
from support.tree import dir_image

# -- needs_compaction: the rule's edges ------------------------------------------------------


def test_compaction_needs_a_log_strictly_over_the_threshold():
    assert not recovery.needs_compaction(100, 10, 1, 0, 100)  # at the threshold: no
    assert recovery.needs_compaction(101, 10, 1, 0, 100)  # one byte past it: yes
    assert not recovery.needs_compaction(50, 10, 1, 0, 1000)  # under it, however many rows


def test_compaction_by_rows_needs_more_than_twice_the_live_records():
    # bytes alone would not compact here: 1000 is not more than twice a 500 byte snapshot
    assert not recovery.needs_compaction(1000, 3, 2, 500, 10)
    assert not recovery.needs_compaction(1000, 4, 2, 500, 10)  # exactly twice: no
    assert recovery.needs_compaction(1000, 5, 2, 500, 10)  # one more: yes
    assert recovery.needs_compaction(1000, 1, 0, 500, 10)  # any row beside no live record


def test_compaction_by_bytes_needs_more_than_twice_the_snapshot():
    # rows alone would not compact here: 0 rows for 5 live records
    assert not recovery.needs_compaction(1000, 0, 5, 500, 10)  # exactly twice: no
    assert recovery.needs_compaction(1001, 0, 5, 500, 10)  # one byte more: yes
    assert not recovery.needs_compaction(1499, 0, 5, 1000, 10)
    assert recovery.needs_compaction(11, 0, 5, 0, 10)  # no snapshot yet: the log is all


# -- compaction on open ----------------------------------------------------------------------------

USER_FIELDS = list(BLOG.MODELS[0].fields)
POST_FIELDS = list(BLOG.MODELS[1].fields)
COMMENT_FIELDS = list(BLOG.MODELS[2].fields)


def test_compaction_on_open_starts_a_new_epoch_at_the_head(history, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    log, snap = log_of(history), snapshot_of(history)
    old = read(log)
    old_epoch = decode_header(log, old).epoch
    loaded = load(history, compact_bytes=len(old))  # exactly at the threshold
    assert not loaded.compacted and read(log) == old and not os.path.exists(snap)
    assert messages(caplog) == []
    loaded = load(history, compact_bytes=len(old) - 1)  # one byte past it
    assert loaded.compacted and loaded.epoch.id != old_epoch
    assert read(log) == encode_header(loaded.epoch.id, HEAD)
    assert (loaded.epoch.log_base, loaded.head_offset, loaded.log_size, loaded.epoch.checkpoints) == (
        HEAD,
        HEAD,
        HEADER_SIZE,
        [],
    )
    assert loaded.epoch.snapshot_bytes == os.path.getsize(snap) and loaded.epoch.retained is None
    image = decode_snapshot(snap, read(snap))
    assert (image.epoch, image.head_offset) == (loaded.epoch.id, HEAD)
    assert [(m.name, m.fields, m.rows, m.max_id) for m in image.models] == [
        ("User", USER_FIELDS, [list(r.values()) for _i, r in sorted(expected_users().items())], 6),
        ("BlogPost", POST_FIELDS, [list(post(1).values())], 1),
        ("Comment", COMMENT_FIELDS, [], 0),
    ]
    users = loaded.tables["User"]
    assert (users.watermark, users.base_ids, users.rows, users.max_id) == (5, [1, 2, 3, 4, 5], [], 6)
    assert loaded.tables["BlogPost"].watermark == 1 and records(loaded, "User") == expected_users()
    assert messages(caplog) == [
        f"{history}: compacting on open (log of {len(old)} bytes and {HEAD} rows "
        f"for 6 live records, snapshot of 0 bytes)"
    ]
    assert listing(history) == ["LOCK", "history", "log", "schema.json", "snapshot"]
    assert_intact(history)


def test_compaction_on_open_retains_the_old_log_for_replicas(history):
    log = log_of(history)
    old = read(log)
    old_epoch = decode_header(log, old).epoch
    last = frames_of(log)[-1][1]
    loaded = load(history, compact_bytes=1, retain_bytes=1 << 20)
    segment = segment_of(history)
    assert loaded.epoch.retained == retain.Segment(segment, old_epoch, 0, HEAD, len(old), last)
    assert read(segment) == encode_header(old_epoch, 0) + old[HEADER_SIZE:]


def test_a_second_compaction_counts_only_the_rows_after_the_base(history, caplog, stores):
    caplog.set_level(logging.INFO, logger=LOGGER)
    load(history, compact_bytes=1, retain_bytes=1 << 20)  # snapshot at 9, offsets 1-9 retained
    s = stores(history, retain_bytes=1 << 20)
    for n in range(13):  # 13 rows > twice the 6 live records
        run(s.replace("User", 2, user(2, name=f"name {n}")))
    s.close()
    log, snap = log_of(history), snapshot_of(history)
    size, snapshot_bytes = os.path.getsize(log), os.path.getsize(snap)
    caplog.clear()
    loaded = load(history, compact_bytes=1, retain_bytes=1 << 20)
    assert loaded.compacted and (loaded.epoch.log_base, loaded.head_offset) == (HEAD + 13, HEAD + 13)
    assert messages(caplog) == [
        f"{history}: compacting on open (log of {size} bytes and 13 rows for 6 live "
        f"records, snapshot of {snapshot_bytes} bytes)"
    ]
    # the older retained frames (1-9) are kept ahead of the compacted log's (10-22)
    assert (loaded.epoch.retained.base, loaded.epoch.retained.end) == (0, HEAD + 13)
    assert records(loaded, "User") == expected_users() | {2: user(2, name="name 12")}


# -- the retained segment at open -----------------------------------------------------------------


@pytest.fixture
def with_segment(history) -> tuple[str, retain.Segment]:
    """`history` compacted with its old log retained: (tenant, the segment a load must find)."""
    log = log_of(history)
    old = read(log)
    expected = retain.Segment(
        segment_of(history), decode_header(log, old).epoch, 0, HEAD, len(old), frames_of(log)[-1][1]
    )
    load(history, compact_bytes=1, retain_bytes=1 << 20)
    return history, expected


def test_a_writer_load_without_retain_bytes_removes_the_segment(with_segment, caplog):
    tenant, _segment = with_segment
    caplog.set_level(logging.INFO, logger=LOGGER)
    loaded = recovery.load(tenant, BLOG.MODELS, BLOG.DESCRIPTION, readonly=False, ring_capacity=16)
    assert loaded.epoch.retained is None and not os.path.exists(segment_of(tenant))
    assert messages(caplog) == [f"{tenant}: removed the retained log segment (retain_bytes is 0)"]
    assert records(loaded, "User") == expected_users()


def test_a_writer_load_with_a_one_byte_budget_keeps_the_segment(with_segment, caplog):
    tenant, segment = with_segment
    caplog.set_level(logging.INFO, logger=LOGGER)
    before = read(segment.path)
    loaded = load(tenant, retain_bytes=1)
    assert loaded.epoch.retained == segment and read(segment.path) == before
    assert messages(caplog) == []


def test_a_read_only_load_uses_the_segment_and_removes_nothing(with_segment):
    tenant, segment = with_segment
    before, names = dir_image(tenant), listing(tenant)
    loaded = load(tenant, readonly=True)  # retain_bytes 0, as Store.open's default
    assert loaded.epoch.retained == segment
    assert dir_image(tenant) == before and listing(tenant) == names


# -- migrations ---------------------------------------------------------------------------------------


def _module(text: str):
    return compile_schema(parse_schema(text, "evolved.dbs"))


RANKED = _module(BLOG_TEXT.replace("  profile  json?\n", "  profile  json?\n  rank     int     @default(5)\n", 1))
FLAGGED = _module(
    BLOG_TEXT.replace("  body      str\n", "  body      str      @filter\n", 1)
    + "\nmodel Tag {\n  id int @id\n  label str @unique\n}\n"
)


@pytest.fixture
def split(compacted) -> str:
    """Users 1-5 in the snapshot, then a rename of 2 and an insert of 7 in the log (closed
    written or not, and not kept, as `history` is)."""
    s = open_store(compacted)
    try:
        run(s.replace("User", 2, user(2, name="two")))
        run(s.insert("User", user(7)))
    finally:
        s.close()
    return compacted


def ranked_users() -> dict[int, dict]:
    users = expected_users() | {2: user(2, name="two"), 7: user(7)}
    return {i: {**r, "rank": 5} for i, r in users.items()}


def test_a_reshaping_migration_fills_snapshot_and_log_records_and_compacts(split, caplog):
    changes = migrate.plan_migration(split, RANKED.DESCRIPTION).changes  # reads only
    assert changes
    caplog.set_level(logging.INFO, logger=LOGGER)
    loaded = load(split, module=RANKED)
    assert records(loaded, "User") == ranked_users()
    assert loaded.compacted and loaded.head_offset == HEAD + 2
    snap = snapshot_of(split)
    users = model_image(decode_snapshot(snap, read(snap)), "User")
    assert users.fields == list(RANKED.MODELS[0].fields) and users.fields[-1] == "rank"
    assert all(row[-1] == 5 for row in users.rows) and len(users.rows) == 6
    with open(os.path.join(split, "schema.json")) as f:
        assert json.load(f) == RANKED.DESCRIPTION
    assert messages(caplog) == [
        f"{split}: compacting on open (migration reshaped records)",
        f"{split}: schema migrated:\n" + "\n".join(f"  - {c}" for c in changes),
    ]
    again = load(split, module=RANKED)  # migrated once: a plain open now
    assert not again.compacted and records(again, "User") == ranked_users()


def test_a_read_only_load_migrates_in_memory_only(split, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    before, names = dir_image(split), listing(split)
    loaded = load(split, readonly=True, module=RANKED)
    assert records(loaded, "User") == ranked_users() and not loaded.compacted
    assert dir_image(split) == before and listing(split) == names
    assert messages(caplog) == []


def test_a_migration_that_reshapes_nothing_rewrites_only_the_description(history, caplog):
    changes = migrate.plan_migration(history, FLAGGED.DESCRIPTION).changes
    assert changes
    log = log_of(history)
    old = read(log)
    caplog.set_level(logging.INFO, logger=LOGGER)
    loaded = load(history, module=FLAGGED)
    assert not loaded.compacted and read(log) == old
    assert records(loaded, "User") == expected_users() and records(loaded, "Tag") == {}
    with open(os.path.join(history, "schema.json")) as f:
        assert json.load(f) == FLAGGED.DESCRIPTION
    assert messages(caplog) == [f"{history}: schema migrated:\n" + "\n".join(f"  - {c}" for c in changes)]
