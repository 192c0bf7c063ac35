"""The batch mark (events.py "Batches") at the units where it is decided: the bytes a batch's
row carries, and what replay (recovery.py) makes of a log that ends inside a batch, of a log
without marks, and of a mark that does not fit the offsets it names (logfile.py rule 5).
The payload a write puts in the log is test_storage_write_payload_units.py; an import's
batch (batch.py) is test_storage_import_batch_units.py.

Logs are built here frame by frame, their payloads written out as the documented JSON text
(events.py's layout), never with the event module's helpers, so a change to the writer's
bytes and a change to the reader's decisions each fail a test of their own."""

from __future__ import annotations

import os

import pytest

from dbsvc.errors import CorruptLog
from dbsvc.storage import Store, recovery
from dbsvc.storage.events import BATCH_MARK_MAX, ChangeEvent, EventKind, decode_event
from dbsvc.storage.logfile import HEADER_SIZE, encode_frame
from support.storage import BLOG, open_store, text, user
from support.tree import dir_image


def row(offset: int, kind: str, id_: int, record: dict, previous: dict | None = None, mark: str | None = None) -> bytes:
    """The payload of a User row, as events.py's docstring lays it out; every row here is a
    User row, so its watermark is its offset. `mark`: the batch mark's JSON text, or None."""
    out = f'{{"kind":"{kind}","model":"User","offset":{offset},"watermark":{offset},"id":{id_},"record":{text(record)}'
    if previous is not None:
        out += f',"previous":{text(previous)}'
    if mark is not None:
        out += f',"batch":{mark}'
    return (out + "}").encode("utf-8")


RENAMED = user(1, name="renamed")
BATCH = '{"first":3,"last":6}'
# Rows 1-2 single inserts, 3-6 one batch (an update, a delete, two inserts past the largest
# id), 7 a single insert.
ROWS = [
    row(1, "insert", 1, user(1)),
    row(2, "insert", 2, user(2)),
    row(3, "update", 1, RENAMED, user(1), BATCH),
    row(4, "delete", 2, user(2), None, BATCH),
    row(5, "insert", 6, user(6), None, BATCH),
    row(6, "insert", 7, user(7), None, BATCH),
    row(7, "insert", 3, user(3)),
]
# The User records after each whole row count (never inside the batch).
BEFORE_BATCH = {1: user(1), 2: user(2)}
AFTER_BATCH = {1: RENAMED, 6: user(6), 7: user(7)}
WHOLE = {0: {}, 1: {1: user(1)}, 2: BEFORE_BATCH, 6: AFTER_BATCH, 7: {**AFTER_BATCH, 3: user(3)}}


@pytest.fixture
def base(tenant) -> bytes:
    """The tenant's log as a first open leaves it: its header alone."""
    open_store(tenant).close()
    with open(log_of(tenant), "rb") as f:
        image = f.read()
    assert len(image) == HEADER_SIZE
    return image


def log_of(tenant: str) -> str:
    return os.path.join(tenant, "log")


def write_log(tenant: str, header: bytes, payloads: list[bytes], first: int = 1) -> list[int]:
    """The log of `header` and a frame per payload (offsets from `first` on); returns each
    frame's byte position and, last, the file's size."""
    positions = [len(header)]
    frames = []
    for offset, payload in enumerate(payloads, first):
        frames.append(encode_frame(offset, payload))
        positions.append(positions[-1] + len(frames[-1]))
    with open(log_of(tenant), "wb") as f:
        f.write(header + b"".join(frames))
    return positions


def load(tenant: str, *, readonly: bool = False, ring_capacity: int = 16) -> recovery.Loaded:
    return recovery.load(tenant, BLOG.MODELS, BLOG.DESCRIPTION, readonly=readonly, ring_capacity=ring_capacity)


def users(loaded: recovery.Loaded) -> dict:
    table = loaded.tables["User"].records
    return {i: table[i] for i in table}


# -- the mark's bytes ------------------------------------------------------------------------


def test_a_batch_row_ends_with_its_mark_after_the_records():
    event = ChangeEvent(EventKind.INSERT, "User", 2, 2, 2, {"id": 2}, None, (2, 4))
    assert event.payload() == (
        b'{"kind":"insert","model":"User","offset":2,"watermark":2,"id":2,"record":{"id":2},'
        b'"batch":{"first":2,"last":4}}'
    )


# -- a log that ends inside a batch ----------------------------------------------------------


@pytest.mark.parametrize("rows", range(len(ROWS) + 1))
def test_a_log_ending_at_each_frame_boundary_reopens_with_all_of_the_batch_or_none(tenant, base, rows):
    positions = write_log(tenant, base, ROWS[:rows])
    loaded = load(tenant)
    table = loaded.tables["User"]
    if 3 <= rows <= 5:  # inside the batch: cut from row 3's first byte
        assert loaded.head_offset == 2 and loaded.log_size == positions[2]
        assert users(loaded) == BEFORE_BATCH
        assert table.max_id == 2
        assert (table.versions.get(1), table.versions.get(2)) == (1, 2)
        damage = loaded.damage
        assert (damage.position, damage.size) == (positions[2], positions[-1])
        assert damage.reason == f"unfinished batch: rows 3 to 6, the log ends after row {rows}"
        assert os.path.getsize(log_of(tenant)) == positions[2]
        assert list(loaded.recent) == ROWS[:2]
    else:
        assert loaded.head_offset == rows and loaded.log_size == positions[-1] and loaded.damage is None
        assert users(loaded) == WHOLE[rows]
        assert table.max_id == {0: 0, 1: 1, 2: 2, 6: 7, 7: 7}[rows]
        assert list(loaded.recent) == ROWS[:rows]
    again = load(tenant)
    assert again.damage is None and again.head_offset == loaded.head_offset


@pytest.mark.parametrize(
    ("frame", "into", "after", "torn"),
    [
        (3, 5, 3, "truncated frame header (5 of 16 bytes)"),
        (3, 16 + 10, 3, "truncated payload (10 of {n} bytes)"),
        (5, 1, 5, "truncated frame header (1 of 16 bytes)"),
    ],
)
def test_a_log_torn_inside_a_later_frame_of_a_batch_cuts_the_whole_batch_and_says_why(
    tenant, base, frame, into, after, torn
):
    """`frame` is the index in ROWS of the torn one (row frame + 1)."""
    positions = write_log(tenant, base, ROWS)
    with open(log_of(tenant), "r+b") as f:
        f.truncate(positions[frame] + into)
    loaded = load(tenant)
    assert loaded.head_offset == 2 and users(loaded) == BEFORE_BATCH
    reason = torn.format(n=len(ROWS[frame]))
    assert loaded.damage.position == positions[2]
    assert loaded.damage.size == positions[frame] + into
    assert loaded.damage.reason == f"unfinished batch: rows 3 to 6, the log ends after row {after} ({reason} there)"
    assert os.path.getsize(log_of(tenant)) == positions[2]


def test_a_log_torn_inside_a_batchs_first_frame_is_a_plain_torn_tail(tenant, base):
    positions = write_log(tenant, base, ROWS)
    with open(log_of(tenant), "r+b") as f:
        f.truncate(positions[2] + 20)
    loaded = load(tenant)
    assert loaded.head_offset == 2 and users(loaded) == BEFORE_BATCH
    assert loaded.damage.position == positions[2] and loaded.damage.size == positions[2] + 20
    assert loaded.damage.reason == f"truncated payload (4 of {len(ROWS[2])} bytes)"


def test_a_read_only_open_sees_none_of_an_unfinished_batch_and_cuts_nothing(tenant, base):
    positions = write_log(tenant, base, ROWS[:5])
    loaded = load(tenant, readonly=True)
    assert loaded.head_offset == 2 and users(loaded) == BEFORE_BATCH
    assert loaded.damage.reason == "unfinished batch: rows 3 to 6, the log ends after row 5"
    assert os.path.getsize(log_of(tenant)) == positions[-1]


@pytest.mark.parametrize(("capacity", "kept"), [(16, 2), (4, 1), (3, 0), (2, 0), (0, 0)])
def test_the_recent_ring_loses_the_cut_rows_and_keeps_what_came_before(tenant, base, capacity, kept):
    """Rows 1-5 are replayed into a ring of `capacity`; the cut takes rows 3-5 back out of it,
    leaving what of rows 1-2 the ring still held."""
    write_log(tenant, base, ROWS[:5])
    loaded = load(tenant, ring_capacity=capacity)
    assert list(loaded.recent) == ROWS[2 - kept : 2]


def _singles(count: int) -> list[bytes]:
    return [row(i, "insert", i, user(i)) for i in range(1, count + 1)]


@pytest.mark.parametrize(("first", "kept"), [(1024, []), (1023, []), (1025, [1024])])
def test_a_cut_batch_takes_back_the_checkpoints_from_its_first_row_on(tenant, base, first, kept):
    """A checkpoint is kept for every 1024th offset; a batch of rows `first` to `first + 2`
    cut after its second row gives back every checkpoint at or after its first row."""
    mark = f'{{"first":{first},"last":{first + 2}}}'
    batch = [row(i, "insert", i, user(i), None, mark) for i in (first, first + 1)]
    positions = write_log(tenant, base, _singles(first - 1) + batch)
    loaded = load(tenant)
    assert loaded.head_offset == first - 1
    assert loaded.epoch.checkpoints == [(offset, positions[offset - 1]) for offset in kept]


# -- a log without marks ---------------------------------------------------------------------


def test_a_log_without_marks_reads_every_row_as_a_row_of_one(tenant, base):
    """An older log (before batches) holds no marks: every row stands alone, and a torn last
    frame cuts only that frame."""
    unmarked = [row(1, "insert", 1, user(1)), row(2, "insert", 2, user(2)), row(3, "update", 1, RENAMED, user(1))]
    positions = write_log(tenant, base, unmarked)
    loaded = load(tenant)
    assert loaded.head_offset == 3 and loaded.damage is None
    assert users(loaded) == {1: RENAMED, 2: user(2)}
    with open(log_of(tenant), "r+b") as f:
        f.truncate(positions[-1] - 1)
    loaded = load(tenant)
    assert loaded.head_offset == 2 and users(loaded) == BEFORE_BATCH
    assert loaded.damage.position == positions[2]


# -- a mark that does not fit its offsets ----------------------------------------------------


def _marked(marks: dict[int, str | None]) -> list[bytes]:
    """Rows 1-5, single inserts, with `marks[offset]` as the mark of those rows (None: none)."""
    return [row(i, "insert", i, user(i), None, marks.get(i)) for i in range(1, 6)]


@pytest.mark.parametrize(
    ("marks", "bad", "reason"),
    [
        # a mark of a batch of one, or whose last row comes before its first
        (
            {3: '{"first":3,"last":3}'},
            3,
            'row 3: batch mark {"first":3,"last":3} is not {"first":F,"last":L} with integers F < L',
        ),
        (
            {3: '{"first":3,"last":2}'},
            3,
            'row 3: batch mark {"first":3,"last":2} is not {"first":F,"last":L} with integers F < L',
        ),
        # not two integers
        ({3: "[3,4]"}, 3, 'row 3: batch mark [3,4] is not {"first":F,"last":L} with integers F < L'),
        (
            {3: '{"first":"3","last":4}'},
            3,
            'row 3: batch mark {"first":"3","last":4} is not {"first":F,"last":L} with integers F < L',
        ),
        ({3: '{"first":3}'}, 3, 'row 3: batch mark {"first":3} is not {"first":F,"last":L} with integers F < L'),
        (
            {3: '{"first":3,"last":4.0}'},
            3,
            'row 3: batch mark {"first":3,"last":4.0} is not {"first":F,"last":L} with integers F < L',
        ),
        (
            {1: '{"first":true,"last":2}'},
            1,
            'row 1: batch mark {"first":true,"last":2} is not {"first":F,"last":L} with integers F < L',
        ),
        # a batch's later row where no batch is open
        (
            {3: '{"first":2,"last":4}', 4: '{"first":2,"last":4}'},
            3,
            'row 3: batch mark {"first":2,"last":4} names rows 2 to 4, but no batch is open and row 3 does not start one',
        ),
        (
            {3: '{"first":4,"last":5}'},
            3,
            'row 3: batch mark {"first":4,"last":5} names rows 4 to 5, but no batch is open and row 3 does not start one',
        ),
        # inside an open batch: a row without its mark, with another batch's, with another last row
        (
            {2: '{"first":2,"last":4}', 4: '{"first":2,"last":4}'},
            3,
            'row 3: no batch mark, expected {"first":2,"last":4}: row 3 is inside the batch of rows 2 to 4',
        ),
        (
            {2: '{"first":2,"last":4}', 3: '{"first":3,"last":4}'},
            3,
            'row 3: batch mark {"first":3,"last":4}, expected {"first":2,"last":4}: row 3 is inside the batch of rows 2 to 4',
        ),
        (
            {2: '{"first":2,"last":4}', 3: '{"first":2,"last":5}'},
            3,
            'row 3: batch mark {"first":2,"last":5}, expected {"first":2,"last":4}: row 3 is inside the batch of rows 2 to 4',
        ),
        (
            {2: '{"first":2,"last":4}', 3: '{"first":1,"last":4}'},
            3,
            'row 3: batch mark {"first":1,"last":4}, expected {"first":2,"last":4}: row 3 is inside the batch of rows 2 to 4',
        ),
        # the last row of a log: its wrong mark is refused, never taken as a batch to cut
        (
            {5: '{"first":5,"last":4}'},
            5,
            'row 5: batch mark {"first":5,"last":4} is not {"first":F,"last":L} with integers F < L',
        ),
    ],
)
def test_a_mark_that_does_not_fit_its_offsets_is_refused_at_its_frame_and_nothing_is_cut(
    tenant, base, marks, bad, reason
):
    positions = write_log(tenant, base, _marked(marks))
    before = dir_image(tenant)
    for readonly in (False, True):
        with pytest.raises(CorruptLog) as info:
            Store.open(tenant, BLOG.MODELS, BLOG.DESCRIPTION, readonly=readonly)
        assert (info.value.path, info.value.offset, info.value.reason) == (log_of(tenant), positions[bad - 1], reason)
        assert dir_image(tenant) == before


def test_a_batch_right_after_another_and_single_rows_after_it_read_whole(tenant, base):
    """Two batches back to back (the second's first mark right after the first's last row),
    then a row without a mark."""
    first, second = '{"first":1,"last":2}', '{"first":3,"last":4}'
    payloads = [row(i, "insert", i, user(i), None, first if i < 3 else second) for i in range(1, 5)]
    payloads.append(row(5, "insert", 5, user(5)))
    write_log(tenant, base, payloads)
    loaded = load(tenant)
    assert loaded.head_offset == 5 and loaded.damage is None
    assert users(loaded) == {i: user(i) for i in range(1, 6)}


# -- events.py: the payload of a write and of a batch's op -----------------------------------


def test_an_update_and_a_delete_of_a_batch_carry_the_mark_last_and_read_back():
    update = ChangeEvent(EventKind.UPDATE, "User", 5, 3, 1, {"id": 1, "n": 2}, {"id": 1, "n": 1}, (4, 6))
    assert update.payload() == (
        b'{"kind":"update","model":"User","offset":5,"watermark":3,"id":1,"record":{"id":1,"n":2},'
        b'"previous":{"id":1,"n":1},"batch":{"first":4,"last":6}}'
    )
    assert list(update.to_dict()) == ["kind", "model", "offset", "watermark", "id", "record", "previous", "batch"]
    assert update.to_dict()["batch"] == {"first": 4, "last": 6}
    delete = ChangeEvent(EventKind.DELETE, "User", 6, 4, "k", {"id": "k"}, None, (4, 6))
    assert delete.payload() == (
        b'{"kind":"delete","model":"User","offset":6,"watermark":4,"id":"k","record":{"id":"k"},'
        b'"batch":{"first":4,"last":6}}'
    )
    assert decode_event(update.payload()) == update and decode_event(delete.payload()).batch == (4, 6)
    assert decode_event(b'{"kind":"insert","model":"U","offset":1,"watermark":1,"id":1,"record":{}}').batch is None


def test_the_widest_mark_is_that_of_two_u64_offsets():
    assert BATCH_MARK_MAX == len(',"batch":{"first":18446744073709551615,"last":18446744073709551615}')
