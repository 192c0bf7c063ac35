"""recovery.py's loads that succeed: what a good load returns, from a log or from a snapshot,
what a read-only load leaves (no file created, a torn tail and an interrupted compaction left
as found) and its retries, which read the files again.

Each test builds a real tenant with the store, then crafts or damages its files with the
project's own encoders (tests/support/recovery_kit.py). Everything runs in this process
(mutation testing only sees calls made here) and on small logs.
"""

from __future__ import annotations

import gc
import json
import logging
import os
from collections import deque

import pytest

from dbsvc.errors import CorruptLog, TenantError
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.logfile import HEADER_SIZE, Damage, decode_header, encode_frame, encode_header
from dbsvc.storage.rows import unpack
from dbsvc.storage.snapshot import SnapshotImage
from dbsvc.storage.snapshotreader import decode_snapshot
from support.recovery_kit import (
    HEAD,
    LOGGER,
    NEXT_USER_WATERMARK,
    append_event,
    expected_users,
    frames_of,
    listing,
    load,
    log_of,
    messages,
    model_image,
    read,
    records,
    rewrite_snapshot,
    snapshot_of,
    write,
)
from support.storage import BLOG, post, run, user
from support.tree import dir_image

# -- a good load: what it returns -------------------------------------------------------------


@pytest.mark.parametrize("readonly", [False, True])
def test_load_returns_the_logs_position_and_every_record(history, readonly):
    log = log_of(history)
    data = read(log)
    before = dir_image(history)
    loaded = load(history, readonly=readonly)
    assert (loaded.epoch.id, loaded.epoch.log_path, loaded.epoch.log_base, loaded.head_offset, loaded.log_size) == (
        decode_header(log, data).epoch,
        log,
        0,
        HEAD,
        len(data),
    )
    assert (
        loaded.damage,
        loaded.compacted,
        loaded.epoch.snapshot_bytes,
        loaded.epoch.checkpoints,
        loaded.epoch.retained,
    ) == (None, False, 0, [], None)
    assert records(loaded, "User") == expected_users()
    assert records(loaded, "BlogPost") == {1: post(1)}
    assert {name: t.watermark for name, t in loaded.tables.items()} == {
        "User": NEXT_USER_WATERMARK - 1,
        "BlogPost": 1,
        "Comment": 0,
    }
    assert (loaded.tables["User"].max_id, loaded.tables["BlogPost"].max_id) == (6, 1)  # 6 was deleted
    assert dir_image(history) == before  # a sound tenant is left as it was


@pytest.mark.parametrize("readonly", [False, True])
@pytest.mark.parametrize("capacity", [0, 3, 20])
def test_recent_holds_the_last_payloads_up_to_the_ring_capacity(history, capacity, readonly):
    payloads = [payload for _offset, _pos, payload in frames_of(log_of(history))]
    loaded = load(history, readonly=readonly, ring_capacity=capacity)
    assert list(loaded.recent) == (payloads[-capacity:] if capacity else [])
    assert loaded.recent.maxlen == capacity
    assert all(type(p) is bytes for p in loaded.recent)


def test_a_checkpoint_is_kept_for_every_1024th_offset(tenant, stores):
    s = stores(tenant)
    s.insert_batch([("User", user(i)) for i in range(1, 1031)])
    s.close()
    want = [(offset, pos) for offset, pos, _payload in frames_of(log_of(tenant)) if offset % 1024 == 0]
    assert [offset for offset, _pos in want] == [1024]
    for readonly in (False, True):
        loaded = load(tenant, readonly=readonly)
        assert loaded.epoch.checkpoints == want and loaded.head_offset == 1030


def test_a_fresh_writer_load_creates_the_first_log_and_stores_the_schema(tenant, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    loaded = load(tenant)
    log = log_of(tenant)
    assert len(loaded.epoch.id) == 32 and loaded.epoch.id != "0" * 32
    assert read(log) == encode_header(loaded.epoch.id, 0)
    assert (loaded.epoch.log_path, loaded.epoch.log_base, loaded.head_offset, loaded.log_size, loaded.damage) == (
        log,
        0,
        0,
        HEADER_SIZE,
        None,
    )
    assert (loaded.compacted, loaded.epoch.snapshot_bytes, loaded.epoch.checkpoints, loaded.epoch.retained) == (
        False,
        0,
        [],
        None,
    )
    assert loaded.recent == deque() and all(not t.live for t in loaded.tables.values())
    assert listing(tenant) == ["history", "log", "schema.json"]
    assert loaded.history is not None and loaded.history.forks == ()  # a fresh tenant's own history
    with open(os.path.join(tenant, "schema.json")) as f:
        assert json.load(f) == BLOG.DESCRIPTION
    assert messages(caplog) == []  # a first description is no migration


def test_a_read_only_load_of_a_never_opened_tenant_is_empty_and_creates_nothing(tenant, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    loaded = load(tenant, readonly=True)
    assert (
        loaded.epoch.id,
        loaded.epoch.log_path,
        loaded.epoch.log_base,
        loaded.head_offset,
        loaded.log_size,
        loaded.damage,
    ) == ("0" * 32, log_of(tenant), 0, 0, 0, None)
    assert type(loaded.recent) is deque and len(loaded.recent) == 0
    assert (loaded.compacted, loaded.epoch.snapshot_bytes, loaded.epoch.checkpoints, loaded.epoch.retained) == (
        False,
        0,
        [],
        None,
    )
    assert set(loaded.tables) == {"User", "BlogPost", "Comment"}
    assert all(not t.live and t.watermark == 0 for t in loaded.tables.values())
    assert listing(tenant) == [] and messages(caplog) == []


@pytest.mark.parametrize("readonly", [False, True])
def test_load_of_a_missing_directory_names_it(tmp_path, readonly):
    path = str(tmp_path / "absent")
    with pytest.raises(TenantError) as info:
        load(path, readonly=readonly)
    assert str(info.value) == f"tenant directory {path!r} does not exist"
    assert not os.path.exists(path)


def test_load_leaves_the_collector_as_it_found_it(history):
    gc.enable()
    load(history)
    assert gc.isenabled()
    gc.disable()
    try:
        load(history, readonly=True)
        assert not gc.isenabled()
    finally:
        gc.enable()
    append_event(log_of(history), ChangeEvent(EventKind.INSERT, "Ghost", HEAD + 1, 1, 1, {"id": 1}))
    with pytest.raises(CorruptLog):
        load(history)
    assert gc.isenabled()  # a refusal re-enables it too


# -- loads from a snapshot ---------------------------------------------------------------------


@pytest.mark.parametrize("readonly", [False, True])
def test_load_from_a_snapshot_keeps_its_max_id_and_epoch(compacted, readonly):
    snap = snapshot_of(compacted)
    image = decode_snapshot(snap, read(snap))
    loaded = load(compacted, readonly=readonly)
    assert (loaded.epoch.id, loaded.epoch.log_base, loaded.head_offset, loaded.log_size) == (
        image.epoch,
        HEAD,
        HEAD,
        HEADER_SIZE,
    )
    assert loaded.epoch.snapshot_bytes == os.path.getsize(snap) and not loaded.compacted
    assert records(loaded, "User") == expected_users() and records(loaded, "BlogPost") == {1: post(1)}
    users = loaded.tables["User"]
    assert (users.watermark, users.max_id, users.base_ids, users.rows) == (5, 6, [1, 2, 3, 4, 5], [])


@pytest.mark.parametrize("readonly", [False, True])
def test_load_replays_the_log_after_the_snapshot(compacted, readonly, stores):
    s = stores(compacted)
    run(s.insert("User", user(7)))
    run(s.replace("User", 1, user(1, name="first")))
    s.close()
    loaded = load(compacted, readonly=readonly)
    want = expected_users() | {7: user(7), 1: user(1, name="first")}
    assert records(loaded, "User") == want
    assert (loaded.epoch.log_base, loaded.head_offset) == (HEAD, HEAD + 2)
    assert loaded.log_size == os.path.getsize(log_of(compacted))
    users = loaded.tables["User"]
    assert (users.watermark, users.max_id, len(users.rows)) == (7, 7, 2)


def test_snapshot_columns_in_another_order_are_read_by_name(compacted):
    def reverse(image: SnapshotImage) -> None:
        m = model_image(image, "User")
        m.fields = m.fields[::-1]
        m.rows = [row[::-1] for row in m.rows]

    rewrite_snapshot(compacted, reverse)
    for readonly in (True, False):
        loaded = load(compacted, readonly=readonly)
        assert records(loaded, "User") == expected_users()
        assert unpack(loaded.tables["User"].live[2]) == list(user(2).values())  # stored in the model's order


# -- the read-only retries -----------------------------------------------------------------------------


def test_a_read_only_load_tries_three_times_and_a_writer_once(history, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    append_event(log_of(history), ChangeEvent(EventKind.INSERT, "Ghost", HEAD + 1, 1, 1, {"id": 1}))
    with pytest.raises(CorruptLog):
        load(history, readonly=True)
    assert messages(caplog) == [f"{history}: files changed while opening read-only; retrying"] * 2
    caplog.clear()
    with pytest.raises(CorruptLog):
        load(history)
    assert messages(caplog) == []


class _RepairOnRetry(logging.Handler):
    """Stands for a writer that finishes its change while a reader is refused: at the
    reader's retry line the file gets its sound bytes back."""

    def __init__(self, path: str, data: bytes) -> None:
        super().__init__(logging.INFO)
        self.path, self.data, self.repairs = path, data, 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().endswith("retrying"):
            write(self.path, self.data)
            self.repairs += 1


def test_a_read_only_retry_reads_the_files_again(history):
    log = log_of(history)
    good = read(log)
    append_event(log, ChangeEvent(EventKind.INSERT, "Ghost", HEAD + 1, 1, 1, {"id": 1}))
    handler = _RepairOnRetry(log, good)
    logger = logging.getLogger(LOGGER)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        loaded = load(history, readonly=True)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert handler.repairs == 1
    assert loaded.head_offset == HEAD and records(loaded, "User") == expected_users()


# -- torn tails ----------------------------------------------------------------------------------------


def tear(tenant: str) -> tuple[bytes, bytes, str]:
    """Append the first half of the next frame; (bytes before, bytes after, the scan's reason)."""
    log = log_of(tenant)
    good = read(log)
    payload = ChangeEvent(EventKind.INSERT, "User", HEAD + 1, NEXT_USER_WATERMARK, 7, user(7)).payload()
    half = encode_frame(HEAD + 1, payload)[: (16 + len(payload)) // 2]
    write(log, good + half)
    return good, good + half, f"truncated payload ({len(half) - 16} of {len(payload)} bytes)"


def test_a_writer_load_cuts_a_torn_tail_and_says_where(history, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    good, torn, reason = tear(history)
    log = log_of(history)
    loaded = load(history)
    assert loaded.damage == Damage(len(good), len(torn), reason)
    assert (loaded.head_offset, loaded.log_size) == (HEAD, len(good))
    assert read(log) == good  # cut at the first bad byte
    assert messages(caplog) == [
        f"{log}: torn tail at byte {len(good)} ({len(torn) - len(good)} bytes, {reason}); truncated"
    ]
    assert records(loaded, "User") == expected_users()


def test_a_read_only_load_leaves_a_torn_tail_and_every_byte(history, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    good, torn, reason = tear(history)
    log = log_of(history)
    before, names = dir_image(history), listing(history)
    loaded = load(history, readonly=True)
    assert loaded.damage == Damage(len(good), len(torn), reason)
    assert (loaded.head_offset, loaded.log_size) == (HEAD, len(good))
    assert dir_image(history) == before and listing(history) == names and read(log) == torn
    assert messages(caplog) == [f"{log}: torn tail at byte {len(good)} ({len(torn) - len(good)} bytes, {reason})"]
    assert records(loaded, "User") == expected_users()


def test_a_read_only_load_leaves_an_interrupted_compaction_as_it_found_it(compacted):
    snap = snapshot_of(compacted)
    write(snap + ".new", read(snap))  # a compaction before its commit point
    before, names = dir_image(compacted), listing(compacted)
    loaded = load(compacted, readonly=True)
    assert records(loaded, "User") == expected_users()
    assert dir_image(compacted) == before and listing(compacted) == names
    load(compacted)  # a writer discards it
    assert "snapshot.new" not in listing(compacted)
