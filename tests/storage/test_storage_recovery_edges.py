"""recovery.py, branch by branch: every refusal with its exact path, byte and message, the
edges of the compaction rule, what a good load returns, and what a read-only load leaves.

Each test builds a real tenant with the store, then crafts or damages its files with the
project's own encoders (`encode_frame`, `encode_header`, `encode_snapshot`). A refused open
must leave every byte of the directory as it found it, and once the damage is undone the
same tenant opens with every record. Everything runs in this process (mutation testing
only sees calls made here) and on small logs, so the file takes a few seconds.
"""

from __future__ import annotations

import gc
import json
import logging
import os
from collections import deque
from collections.abc import Callable

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import CorruptLog, TenantError
from dbsvc.schema import parse_schema
from dbsvc.storage import Store, migrate, recovery, retain
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.logfile import HEADER_SIZE, Damage, LogScan, decode_header, encode_frame, encode_header
from dbsvc.storage.rows import unpack
from dbsvc.storage.snapshot import ModelImage, SnapshotImage, encode_snapshot
from dbsvc.storage.snapshotreader import decode_snapshot
from support.storage import BLOG, ROOT, open_store, post, run, user
from support.tree import dir_image

LOGGER = "dbsvc.storage"
HEAD = 9  # rows of the `history` tenant
NEXT_USER_WATERMARK = 9  # User rows 1..8 are in its log (6 inserts, 1 update, 1 delete)
BLOG_TEXT = (ROOT / "schemas" / "blog.dbs").read_text()


# -- the tenant and its files ---------------------------------------------------------------


def expected_users() -> dict[int, dict]:
    """The User records the `history` tenant holds: 1..5 (6 was deleted), 3 renamed."""
    users = {i: user(i) for i in range(1, 6)}
    users[3] = user(3, name="renamed")
    return users


@pytest.fixture
def history(tenant) -> str:
    """Offsets 1-6 insert users 1-6, 7 renames user 3, 8 deletes user 6 (the highest id),
    9 inserts post 1."""
    s = open_store(tenant)

    async def go():
        for i in range(1, 7):
            await s.insert("User", user(i))
        await s.replace("User", 3, user(3, name="renamed"))
        await s.delete("User", 6)
        await s.insert("BlogPost", post(1))

    run(go())
    s.close()
    return tenant


@pytest.fixture
def compacted(history) -> str:
    """`history` compacted on open: a snapshot at offset 9 and a log holding only its header."""
    load(history, compact_bytes=1)
    assert os.path.getsize(log_of(history)) == HEADER_SIZE
    return history


def load(tenant: str, *, readonly: bool = False, ring_capacity: int = 16, module=BLOG, **kw) -> recovery.Loaded:
    return recovery.load(
        tenant, module.MODELS, module.DESCRIPTION, readonly=readonly, ring_capacity=ring_capacity, **kw
    )


def log_of(tenant: str) -> str:
    return os.path.join(tenant, "log")


def snapshot_of(tenant: str) -> str:
    return os.path.join(tenant, "snapshot")


def segment_of(tenant: str) -> str:
    return os.path.join(tenant, "log.retained")


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def frames_of(path: str) -> list[tuple[int, int, bytes]]:
    """(offset, byte position, payload) of every frame of a sound log file."""
    scan = LogScan(path, read(path))
    frames = [(offset, scan.end, bytes(payload)) for offset, payload in scan.records()]
    assert scan.damage is None
    return frames


def append_event(path: str, event: ChangeEvent) -> int:
    """Append `event` as one well-formed frame (good offset, CRC and length); returns the
    byte position it starts at."""
    position = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(encode_frame(event.offset, event.payload()))
    return position


def rewrite_snapshot(tenant: str, change: Callable[[SnapshotImage], None]) -> bytes:
    """Decode the snapshot, let `change` edit it, write it back with good checksums and
    counts; returns the original bytes. Written without keys, so that an open parses and
    checks every row (snapshotreader.py, "From the rows"); test_storage_snapshot_keys.py
    damages the keys."""
    path = snapshot_of(tenant)
    original = read(path)
    image = decode_snapshot(path, original)
    for m in image.models:
        m.keys = []
    change(image)
    write(path, b"".join(encode_snapshot(image)))
    return original


def model_image(image: SnapshotImage, name: str) -> ModelImage:
    return next(m for m in image.models if m.name == name)


def records(loaded: recovery.Loaded, model: str) -> dict:
    table = loaded.tables[model].records
    return {i: table[i] for i in table}


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def listing(tenant: str) -> list[str]:
    return sorted(os.listdir(tenant))


def assert_refused(tenant: str, path: str, position: int, reason: str, module=BLOG) -> None:
    """Both a writer and a read-only open refuse with exactly this CorruptLog, and neither
    changes a byte or a name in the directory."""
    before, names = dir_image(tenant), listing(tenant)
    for readonly in (False, True):
        with pytest.raises(CorruptLog) as info:
            Store.open(tenant, module.MODELS, module.DESCRIPTION, readonly=readonly)
        exc = info.value
        assert (exc.path, exc.offset, exc.reason) == (path, position, reason)
        assert str(exc) == f"{path}: corrupt at byte {position}: {reason}"
        assert dir_image(tenant) == before and listing(tenant) == names


def assert_intact(tenant: str, head: int = HEAD) -> None:
    """A writer open of the repaired tenant reads every record of the history."""
    s = open_store(tenant)
    try:
        assert s.head_offset == head
        assert dict(s.tables["User"].records.items()) == expected_users()
        assert dict(s.tables["BlogPost"].records.items()) == {1: post(1)}
    finally:
        s.close()


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


def test_a_checkpoint_is_kept_for_every_1024th_offset(tenant):
    s = open_store(tenant)
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
def test_load_replays_the_log_after_the_snapshot(compacted, readonly):
    s = open_store(compacted)
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


# -- refusals of the log ------------------------------------------------------------------------


def _without(record: dict, field: str) -> dict:
    return {k: v for k, v in record.items() if k != field}


LOG_REFUSALS = {
    "insert without a field": (
        ChangeEvent(EventKind.INSERT, "User", HEAD + 1, NEXT_USER_WATERMARK, 7, _without(user(7), "email")),
        f"record without its field 'email': {_without(user(7), 'email')!r}",
    ),
    "update without a field": (
        ChangeEvent(EventKind.UPDATE, "User", HEAD + 1, NEXT_USER_WATERMARK, 2, _without(user(2), "name"), user(2)),
        f"record without its field 'name': {_without(user(2), 'name')!r}",
    ),
    "insert of a value no index can take": (
        ChangeEvent(EventKind.INSERT, "User", HEAD + 1, NEXT_USER_WATERMARK, 7, user(7, role=["a", "list"])),
        "insert of User 7 holds a value its indexes cannot take (unhashable type: 'list')",
    ),
    "update of a value no index can take": (
        ChangeEvent(
            EventKind.UPDATE, "User", HEAD + 1, NEXT_USER_WATERMARK, 2, user(2, name={"an": "object"}), user(2)
        ),
        # name is filtered through its sort index (OrderedFilter), which compares keys
        "update of User 2 holds a value its indexes cannot take ('<' not supported between instances of 'str' and 'dict')",
    ),
    "insert of a float where an int sort key goes": (  # its sublists are arrays (OrderedIndex)
        ChangeEvent(EventKind.INSERT, "User", HEAD + 1, NEXT_USER_WATERMARK, 7, user(7, age=30.5)),
        "insert of User 7 holds a value its indexes cannot take ('float' object cannot be interpreted as an integer)",
    ),
    "update of an int past 64 bits where an int sort key goes": (
        ChangeEvent(EventKind.UPDATE, "User", HEAD + 1, NEXT_USER_WATERMARK, 2, user(2, age=2**64), user(2)),
        "update of User 2 holds a value its indexes cannot take (int too big to convert)",
    ),
    "undeclared model": (
        ChangeEvent(EventKind.INSERT, "Ghost", HEAD + 1, 1, 1, {"id": 1}),
        "row for model 'Ghost', which the schema does not declare",
    ),
    "watermark skipped": (
        ChangeEvent(EventKind.INSERT, "User", HEAD + 1, 10, 7, user(7)),
        "row watermark 10, expected 9 for User",
    ),
    "watermark repeated": (
        ChangeEvent(EventKind.INSERT, "User", HEAD + 1, 8, 7, user(7)),
        "row watermark 8, expected 9 for User",
    ),
    "watermark of another model": (
        ChangeEvent(EventKind.INSERT, "BlogPost", HEAD + 1, 1, 2, post(2)),
        "row watermark 1, expected 2 for BlogPost",
    ),
    "insert of a live id": (
        ChangeEvent(EventKind.INSERT, "User", HEAD + 1, NEXT_USER_WATERMARK, 2, user(2)),
        "insert of User 2 does not fit the records replayed so far",
    ),
    "update of a deleted id": (
        ChangeEvent(EventKind.UPDATE, "User", HEAD + 1, NEXT_USER_WATERMARK, 6, user(6), user(6)),
        "update of User 6 does not fit the records replayed so far",
    ),
    "delete of a deleted id": (
        ChangeEvent(EventKind.DELETE, "User", HEAD + 1, NEXT_USER_WATERMARK, 6, user(6)),
        "delete of User 6 does not fit the records replayed so far",
    ),
}


@pytest.mark.parametrize("case", list(LOG_REFUSALS))
def test_a_log_row_that_does_not_fit_is_refused_at_its_frame(history, case):
    event, reason = LOG_REFUSALS[case]
    log = log_of(history)
    good = read(log)
    position = append_event(log, event)
    assert position == len(good)
    assert_refused(history, log, position, reason)
    write(log, good)
    assert_intact(history)


def test_a_bad_row_before_good_ones_is_refused_at_its_own_frame(history):
    log = log_of(history)
    good = read(log)
    position = append_event(log, ChangeEvent(EventKind.INSERT, "User", HEAD + 1, 10, 7, user(7)))
    append_event(log, ChangeEvent(EventKind.INSERT, "User", HEAD + 2, 9, 8, user(8)))
    assert_refused(history, log, position, "row watermark 10, expected 9 for User")
    write(log, good)
    assert_intact(history)


def test_an_empty_log_file_is_refused_at_byte_0(history):
    log = log_of(history)
    good = read(log)
    write(log, b"")
    assert_refused(history, log, 0, f"log header is 0 bytes, expected {HEADER_SIZE}")
    write(log, good)
    assert_intact(history)


def test_a_log_that_starts_after_offset_0_without_a_snapshot_is_refused(history):
    log = log_of(history)
    good = read(log)
    write(log, encode_header(decode_header(log, good).epoch, 5))
    assert_refused(history, log, 0, "log starts after offset 5 but there is no snapshot")
    write(log, good)
    assert_intact(history)


def test_a_log_missing_beside_a_snapshot_is_refused(compacted):
    log = log_of(compacted)
    good = read(log)
    os.unlink(log)
    assert_refused(compacted, log, 0, "the log is missing beside a snapshot")
    write(log, good)
    assert_intact(compacted)


def test_a_log_of_another_epoch_than_the_snapshot_is_refused(compacted):
    log = log_of(compacted)
    good = read(log)
    epoch = decode_header(log, good).epoch
    other = "ab" * 16
    write(log, encode_header(other, HEAD))
    assert_refused(
        compacted,
        log,
        0,
        f"log (epoch {other}, base {HEAD}) does not continue the snapshot (epoch {epoch}, head {HEAD})",
    )
    write(log, good)
    assert_intact(compacted)


# -- refusals of the snapshot -----------------------------------------------------------------------


def _ghost(image: SnapshotImage) -> None:
    image.models.append(ModelImage("Ghost", ["id"], [[1]], 1))


def _rename_id(image: SnapshotImage) -> None:
    m = model_image(image, "User")
    m.fields = ["ident", *m.fields[1:]]


def _row(change: Callable[[list], object]) -> Callable[[SnapshotImage], None]:
    def edit(image: SnapshotImage) -> None:
        m = model_image(image, "User")
        rows = [list(r) for r in m.rows]
        rows[3] = change(rows)
        m.rows = rows

    return edit


def _swap(image: SnapshotImage) -> None:
    m = model_image(image, "User")
    rows = list(m.rows)
    rows[2], rows[3] = rows[3], rows[2]
    m.rows = rows


NOT_LISTS = "snapshot rows of User are not lists of its 7 fields"
NOT_ASCENDING = "snapshot rows of User are not in strictly ascending id order"
SNAPSHOT_REFUSALS = {
    "undeclared model": (_ghost, "snapshot holds model 'Ghost', which the schema does not declare"),
    "no id field": (_rename_id, "snapshot rows of User have no 'id' field"),
    "short row": (_row(lambda rows: rows[3][:-1]), NOT_LISTS),
    "long row": (_row(lambda rows: [*rows[3], None]), NOT_LISTS),
    "object of 7 keys": (_row(lambda rows: {f"k{i}": v for i, v in enumerate(rows[3])}), NOT_LISTS),
    "string of 7 characters": (_row(lambda rows: "abcdefg"), NOT_LISTS),
    "ids swapped": (_swap, NOT_ASCENDING),
    "id repeated": (_row(lambda rows: list(rows[2])), NOT_ASCENDING),
    "ids that do not compare": (_row(lambda rows: ["5", *rows[3][1:]]), NOT_ASCENDING),
}


def test_a_snapshot_line_failing_its_checksum_is_refused_at_that_line(compacted):
    snap = snapshot_of(compacted)
    original = read(snap)
    user_line = original.index(b"\n") + 1  # the header lists User first
    broken = bytearray(original)
    broken[user_line + 12] ^= 0x01  # inside the line's JSON
    write(snap, bytes(broken))
    assert_refused(compacted, snap, user_line, "snapshot line checksum mismatch")
    write(snap, original)
    assert_intact(compacted)


@pytest.mark.parametrize("case", list(SNAPSHOT_REFUSALS))
def test_a_snapshot_that_does_not_fit_the_schema_is_refused(compacted, case):
    change, reason = SNAPSHOT_REFUSALS[case]
    snap = snapshot_of(compacted)
    original = rewrite_snapshot(compacted, change)
    # What the header says is refused at byte 0, rows out of shape at their line (User's).
    position = 0 if case in ("undeclared model", "no id field") else read(snap).index(b"\n") + 1
    assert_refused(compacted, snap, position, reason)
    write(snap, original)
    assert_intact(compacted)


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


def test_a_second_compaction_counts_only_the_rows_after_the_base(history, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    load(history, compact_bytes=1, retain_bytes=1 << 20)  # snapshot at 9, offsets 1-9 retained
    s = Store.open(history, BLOG.MODELS, BLOG.DESCRIPTION, retain_bytes=1 << 20)
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
    """Users 1-5 in the snapshot, then a rename of 2 and an insert of 7 in the log."""
    s = open_store(compacted)
    run(s.replace("User", 2, user(2, name="two")))
    run(s.insert("User", user(7)))
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
