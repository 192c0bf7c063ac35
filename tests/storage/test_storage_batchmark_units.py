"""The batch mark (events.py "Batches") at the units where it is decided: the bytes a batch's
row carries, and what replay (recovery.py) makes of a log that ends inside a batch, of a log
without marks, and of a mark that does not fit the offsets it names (logfile.py rule 5); and
the payload a write or a batch's op puts in the log (events.py `write_event`,
`write_payload`, a delete fitted within its room, the record limit); and an import's batch
(batch.py: `plan`'s five checks, each problem as one insert would give it, and `frames`).

Logs are built here frame by frame, their payloads written out as the documented JSON text
(events.py's layout), never with the event module's helpers, so a change to the writer's
bytes and a change to the reader's decisions each fail a test of their own."""

from __future__ import annotations

import json
import os
import struct
import zlib

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import (
    BatchRejected,
    ConstraintViolation,
    CorruptLog,
    ForeignKeyViolation,
    NotFound,
    PayloadTooLarge,
    UniqueViolation,
)
from dbsvc.schema import load_schema, parse_schema
from dbsvc.storage import Store, batch, recovery
from dbsvc.storage.events import (
    BATCH_MARK_MAX,
    ChangeEvent,
    EventKind,
    decode_event,
    fitted_delete_payload,
    record_limit,
    write_event,
    write_payload,
)
from dbsvc.storage.logfile import HEADER_SIZE, encode_frame
from dbsvc.storage.tenants import create_tenant
from support.storage import BLOG, ROOT, open_store, post, run, user
from support.tree import dir_image


def text(value) -> str:
    """Compact JSON, characters as they are (as compact_json writes a record)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


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


def test_a_frame_is_the_offset_the_crc_the_length_and_the_payload():
    payload = b'{"kind":"insert","model":"User","offset":7,"watermark":3,"id":7,"record":{"id":7}}'
    event = ChangeEvent(EventKind.INSERT, "User", 7, 3, 7, {"id": 7})
    assert event.frame() == struct.pack(">QII", 7, zlib.crc32(payload), len(payload)) + payload


def test_write_event_shows_the_new_record_or_a_deletes_last_one_and_keeps_previous_for_an_update():
    old, new = {"id": 1, "n": 1}, {"id": 1, "n": 2}
    assert write_event(EventKind.INSERT, "U", 1, 1, 1, new, None) == ChangeEvent(EventKind.INSERT, "U", 1, 1, 1, new)
    assert write_event(EventKind.UPDATE, "U", 2, 2, 1, new, old) == ChangeEvent(
        EventKind.UPDATE, "U", 2, 2, 1, new, old
    )
    assert write_event(EventKind.DELETE, "U", 3, 3, 1, None, new) == ChangeEvent(EventKind.DELETE, "U", 3, 3, 1, new)


DOC = {"id": 1, "a": "x" * 40, "b": "y" * 20, "c": None, "d": "z"}
FULL = (
    b'{"kind":"delete","model":"Doc","offset":3,"watermark":2,"id":1,"record":{"id":1,'
    b'"a":"' + b"x" * 40 + b'","b":"' + b"y" * 20 + b'","c":null,"d":"z"}}'
)
NO_A = (
    b'{"kind":"delete","model":"Doc","offset":3,"watermark":2,"id":1,"record":{"id":1,'
    b'"a":null,"b":"' + b"y" * 20 + b'","c":null,"d":"z"},"omitted":["a"]}'
)
NO_AB = (
    b'{"kind":"delete","model":"Doc","offset":3,"watermark":2,"id":1,"record":{"id":1,'
    b'"a":null,"b":null,"c":null,"d":"z"},"omitted":["a","b"]}'
)
NO_ABD = (
    b'{"kind":"delete","model":"Doc","offset":3,"watermark":2,"id":1,"record":{"id":1,'
    b'"a":null,"b":null,"c":null,"d":null},"omitted":["a","b","d"]}'
)


@pytest.mark.parametrize(
    ("room", "expected"),
    [
        (len(FULL), FULL),
        (len(FULL) - 1, NO_A),
        (len(NO_A), NO_A),  # exactly the room: the first name in `omitted` has no comma before it
        (len(NO_A) - 1, NO_AB),
        (len(NO_AB), NO_AB),
        (len(NO_AB) - 1, NO_ABD),  # nothing fits: as small as it gets, never the id or a null
        (10, NO_ABD),
    ],
)
def test_a_delete_over_its_room_nulls_its_largest_values_until_it_fits(room, expected):
    event = ChangeEvent(EventKind.DELETE, "Doc", 3, 2, 1, DOC)
    assert fitted_delete_payload(event, "id", room) == expected


def test_a_fitted_delete_of_a_batch_still_ends_with_its_mark():
    # logfile.py rule 5: a batch row's payload ends with its mark, after "omitted" too
    event = ChangeEvent(EventKind.DELETE, "Doc", 3, 2, 1, DOC, None, (3, 4))
    mark = b',"batch":{"first":3,"last":4}'
    assert fitted_delete_payload(event, "id", len(NO_A) + len(mark)) == NO_A[:-1] + mark + b"}"


def test_a_delete_that_fits_exactly_is_written_whole_and_one_over_is_fitted():
    event = ChangeEvent(EventKind.DELETE, "Doc", 3, 2, 1, DOC)
    assert write_payload(event, "id", len(FULL)) == FULL
    assert write_payload(event, "id", len(FULL) - 1) == NO_A
    assert write_payload(event, "id", len(NO_AB)) == NO_AB


def test_a_delete_that_cannot_fit_is_refused_with_its_frames_size():
    event = ChangeEvent(EventKind.DELETE, "Doc", 3, 2, 1, DOC)
    with pytest.raises(PayloadTooLarge) as info:
        write_payload(event, "id", len(NO_AB) - 1)
    assert str(info.value) == (
        f"record too large: the delete of Doc 1 makes a log frame of {len(NO_ABD)} bytes, over the limit of "
        f"{len(NO_AB) - 1} (the record was stored before the record size limit; it can still be read)"
    )


def test_an_insert_over_the_record_limit_is_refused_and_one_under_it_is_written():
    room = 2 * 1024 + 1024 + 2  # record_limit(room) == 1025 bytes of JSON
    assert record_limit(room) == 1025
    fits = {"id": 1, "t": "x" * (1025 - len('{"id":1,"t":""}'))}
    event = ChangeEvent(EventKind.INSERT, "Doc", 3, 2, 1, fits)
    assert write_payload(event, "id", 10**6) == write_payload(event, "id", room) == event.payload()
    over = {"id": 1, "t": fits["t"] + "x"}
    with pytest.raises(PayloadTooLarge) as info:
        write_payload(ChangeEvent(EventKind.INSERT, "Doc", 3, 2, 1, over), "id", room)
    assert str(info.value).startswith("record too large: the Doc record is 1026 bytes of JSON, the limit is 1025 ")


def test_the_record_limit_is_half_of_what_a_frame_holds_besides_its_head():
    assert record_limit(64 * 1024 * 1024) == 33_553_920
    assert record_limit(1024 + 5) == 2  # rounded down to whole bytes


# -- batch.py: an import's batch -------------------------------------------------------------


@pytest.fixture
def store(tenant):
    """A blog store holding users 1 and 2 and post 1."""
    s = open_store(tenant)

    async def fill():
        await s.insert("User", user(1, email="one@x"))
        await s.insert("User", user(2, email="two@x"))
        await s.insert("BlogPost", post(1, author=1))

    run(fill())
    yield s
    s.close()


def problems(store, rows, *args) -> list[tuple[int, type, str, int | None]]:
    with pytest.raises(BatchRejected) as info:
        batch.plan(store.tables, rows, *args)
    return [(index, type(error), error.detail, other) for index, error, other in info.value.problems]


def fields(store, rows) -> list[str | None]:
    """The field each problem names (a 409's `field`, as one insert's would)."""
    with pytest.raises(BatchRejected) as info:
        batch.plan(store.tables, rows)
    return [error.extra.get("field") for _index, error, _other in info.value.problems]


def test_a_batch_takes_the_next_automatic_ids_after_the_store_and_its_own_rows(store):
    rows = [
        ("User", user(None, email="a@x")),
        ("User", user(7)),
        ("User", user(None, email="b@x")),
        ("BlogPost", post(None, author=7)),
    ]
    planned = batch.plan(store.tables, rows)
    assert [(t.name, r["id"]) for t, r in planned] == [("User", 3), ("User", 7), ("User", 8), ("BlogPost", 2)]
    assert rows[0][1]["id"] is None  # the caller's record is left as it was


def test_every_bad_row_is_listed_in_row_order_with_the_row_it_clashes_with(store):
    comment = {"id": 1, "post_id": 8, "author_id": 9, "body": "b", "created": "2026-01-01T00:00:00Z"}
    rows = [
        ("Nope", {"id": 1}),
        ("User", user(1)),  # an id the store holds
        ("User", user(5, email="five@x")),
        ("User", user(5, email="again@x")),  # the id of an earlier row
        ("User", user(6, email="one@x")),  # a @unique value the store holds
        ("User", user(7, email="five@x")),  # a @unique value of an earlier row
        ("BlogPost", post(4, author=9)),  # no such parent
        ("Comment", comment),  # two missing parents: one problem a row
        ("Comment", dict(comment, id=2, post_id=1)),  # its first parent there, its second not
    ]
    assert problems(store, rows) == [
        (0, NotFound, "unknown model 'Nope': expected one of User, BlogPost, Comment", None),
        (1, UniqueViolation, "id 1 is already used by user 1", None),
        (3, UniqueViolation, "id 5 is already used by user 5", 2),
        (4, UniqueViolation, "email 'one@x' is already used by user 1", None),
        (5, UniqueViolation, "email 'five@x' is already used by user 5", 2),
        (6, ForeignKeyViolation, "author_id 9 does not match any user", None),
        (7, ForeignKeyViolation, "post_id 8 does not match any blog-post", None),
        (8, ForeignKeyViolation, "author_id 9 does not match any user", None),
    ]
    assert fields(store, rows) == [None, "id", "id", "email", "email", "author_id", "post_id", "author_id"]


def test_a_reference_may_name_a_later_row(store):
    rows = [("BlogPost", post(5, author=9)), ("User", user(9, email="nine@x"))]
    assert [r["id"] for _t, r in batch.plan(store.tables, rows)] == [5, 9]


def test_the_message_names_how_many_rows_were_refused_and_the_first(store):
    with pytest.raises(BatchRejected) as info:
        batch.plan(store.tables, [("User", user(3, email="t@x")), ("User", user(1)), ("User", user(2))])
    assert str(info.value) == "2 of 3 rows refused, nothing written; first: row 1: id 1 is already used by user 1"


def test_the_largest_int64_is_the_last_automatic_id(store):
    rows = [("User", user(2**63 - 2, email="max@x")), ("User", user(None, email="next@x"))]
    assert [r["id"] for _t, r in batch.plan(store.tables, rows)] == [2**63 - 2, 2**63 - 1]


def test_no_automatic_id_is_left_past_the_largest_int64(store):
    rows = [("User", user(2**63 - 1, email="max@x")), ("User", user(None, email="next@x")), ("User", user(1))]
    with pytest.raises(BatchRejected) as info:
        batch.plan(store.tables, rows)
    [(index, error, other), later] = info.value.problems
    assert (index, type(error), other) == (1, ConstraintViolation, None)
    assert later[0] == 2  # the rows after it are still checked
    assert error.errors == [
        {
            "field": "id",
            "message": "no automatic id is left: the largest id used is 9223372036854775807; give an unused id",
        }
    ]


def test_a_model_whose_id_is_not_an_int_needs_its_id(tmp_path):
    module = compile_schema(load_schema(str(ROOT / "schemas" / "inventory.dbs")))
    s = Store.open(create_tenant(str(tmp_path / "inv"), "t"), module.MODELS, module.DESCRIPTION)
    try:
        row = {"code": None, "city": "Oslo", "opened": "2026-01-01", "manager": None}
        with pytest.raises(BatchRejected) as info:
            batch.plan(s.tables, [("Warehouse", row), ("Warehouse", dict(row, code="OS"))])
        [(index, error, _other)] = info.value.problems
        assert index == 0 and error.errors == [{"field": "code", "message": "is required"}]
    finally:
        s.close()


def test_a_record_over_the_limit_is_refused_by_plan_when_measured_and_by_frames_otherwise(store):
    room = 4096
    big = user(3, email="big@x", name="n" * record_limit(room))
    fits = user(4, email="fits@x")
    [(index, kind, detail, _other)] = problems(store, [("User", fits), ("User", big)], room)
    assert (index, kind) == (1, PayloadTooLarge) and detail.startswith("record too large: the User record is ")
    assert [(i, k) for i, k, _d, _o in problems(store, [("User", big), ("User", user(1))], room)] == [
        (0, PayloadTooLarge),
        (1, UniqueViolation),  # the rows after a record too large are still checked
    ]
    planned = batch.plan(store.tables, [("User", fits), ("User", big)], room, False)
    with pytest.raises(BatchRejected) as info:
        list(batch.frames(planned, 10, 0, 1024, [], room))
    assert [(i, type(e)) for i, e, _o in info.value.problems] == [(1, PayloadTooLarge)]
    assert str(info.value).startswith("1 of 2 rows refused, nothing written; first: row 1: record too large")


def test_frames_take_consecutive_offsets_watermarks_and_checkpoints_in_chunks(store, monkeypatch):
    rows = [("User", user(i, email=f"{i}@x")) for i in (3, 4, 5)] + [("BlogPost", post(2, author=3))]
    planned = batch.plan(store.tables, rows)
    monkeypatch.setattr(batch, "CHUNK_BYTES", 1)  # every frame a chunk of its own
    checkpoints: list[tuple[int, int]] = []
    chunks = list(batch.frames(planned, 4, 1000, 2, checkpoints))
    heads = [json.loads(chunk[16:]) for chunk in chunks]
    assert [(h["offset"], h["model"], h["watermark"], h["id"]) for h in heads] == [
        (4, "User", 3, 3),
        (5, "User", 4, 4),
        (6, "User", 5, 5),
        (7, "BlogPost", 2, 2),
    ]
    assert all("batch" not in h for h in heads)  # an import's rows are rows of one
    assert chunks[0] == encode_frame(4, chunks[0][16:])
    starts = [1000]
    for chunk in chunks:
        starts.append(starts[-1] + len(chunk))
    assert checkpoints == [(4, starts[0]), (6, starts[2])]


def test_a_chunk_ends_with_the_frame_that_fills_it(store, monkeypatch):
    """Six frames of one length L in chunks of 2L + 1 bytes: a chunk ends at the first frame
    that brings it to the size or past it, so three frames a chunk, twice."""
    planned = batch.plan(store.tables, [("User", user(i, email=f"{i}@x")) for i in range(3, 9)])
    monkeypatch.setattr(batch, "CHUNK_BYTES", 1)  # every frame a chunk of its own
    frames = list(batch.frames(planned, 4, 0, 1024, []))
    size = len(frames[0])
    assert {len(f) for f in frames} == {size}
    monkeypatch.setattr(batch, "CHUNK_BYTES", 2 * size + 1)
    assert [len(c) for c in batch.frames(planned, 4, 0, 1024, [])] == [3 * size, 3 * size]
    monkeypatch.setattr(batch, "CHUNK_BYTES", 2 * size)
    assert [len(c) for c in batch.frames(planned, 4, 0, 1024, [])] == [2 * size, 2 * size, 2 * size]


def test_an_import_batch_stamps_each_record_with_its_rows_offset(store):
    stored = store.insert_batch([("User", user(None, email="a@x")), ("BlogPost", post(None, author=3))])
    assert [r["id"] for r in stored] == [3, 2]
    assert store.head_offset == 5
    assert (store.version("User", 3), store.version("BlogPost", 2), store.version("User", 1)) == (4, 5, 1)


TWO_UNIQUES = """
model Badge {
  id    int   @id
  code  str?  @unique
  label str?  @unique
}
"""


@pytest.fixture
def badges(tmp_path):
    module = compile_schema(parse_schema(TWO_UNIQUES))
    s = Store.open(create_tenant(str(tmp_path / "badges"), "t"), module.MODELS, module.DESCRIPTION)
    yield s
    s.close()


def test_each_unique_field_is_judged_on_its_own(badges):
    """A null in one @unique field skips only that field; the same value in two @unique fields
    is no clash."""
    rows = [
        ("Badge", {"id": 1, "code": "v", "label": "w"}),
        ("Badge", {"id": 2, "code": "w", "label": "v"}),  # each value used, but in the other field
        ("Badge", {"id": 3, "code": None, "label": "v"}),  # its code is null, its label clashes
    ]
    with pytest.raises(BatchRejected) as info:
        batch.plan(badges.tables, rows)
    [(index, error, other)] = info.value.problems
    assert (index, error.detail, error.extra, other) == (
        2,
        "label 'v' is already used by badge 2",
        {"field": "label"},
        1,
    )


def test_an_id_longer_than_the_head_reserve_lowers_its_records_limit_in_plan_and_frames(tmp_path):
    """events.py "Sizes": the head is reckoned with the record's own id, at the widest offset
    and watermark; here a 1,500-character id."""
    module = compile_schema(load_schema(str(ROOT / "schemas" / "inventory.dbs")))
    s = Store.open(create_tenant(str(tmp_path / "inv"), "t"), module.MODELS, module.DESCRIPTION)
    try:
        code = "c" * 1500
        head = (
            '{"kind":"update","model":"Warehouse","offset":18446744073709551615,'
            f'"watermark":18446744073709551615,"id":"{code}","record":,"previous":}}'
        )
        room = 8192
        limit = (room - len(head)) // 2
        bare = {"code": code, "city": "", "opened": "2026-01-01", "manager": None}
        row = dict(bare, city="x" * (limit + 1 - len(text(bare))))
        with pytest.raises(BatchRejected) as info:
            batch.plan(s.tables, [("Warehouse", row)], room)
        assert info.value.problems[0][1].detail.startswith(
            f"record too large: the Warehouse record is {limit + 1} bytes of JSON, the limit is {limit} "
        )
        planned = batch.plan(s.tables, [("Warehouse", row)], room, False)
        with pytest.raises(BatchRejected) as info:
            list(batch.frames(planned, 1, 0, 1024, [], room))
        assert info.value.problems[0][1].detail.startswith(
            f"record too large: the Warehouse record is {limit + 1} bytes of JSON, the limit is {limit} "
        )
    finally:
        s.close()


def test_a_record_of_four_byte_characters_just_over_the_limit_is_measured(store):
    """Rule 5's cheap test before measuring must let through every record that may be over:
    a character is at most 4 bytes, so 8 bytes a character (and the head) are reckoned."""
    room = 4096
    limit = record_limit(room)
    bare = text(user(3, email="e@x", name=""))
    name = "\U0001f600" * ((limit + 4 - len(bare)) // 4)  # 4 bytes each
    record = user(3, email="e@x", name=name)
    size = len(text(record).encode("utf-8"))
    assert limit < size <= limit + 4
    [(index, kind, detail, _other)] = problems(store, [("User", record)], room)
    assert (index, kind) == (0, PayloadTooLarge)
    assert detail.startswith(f"record too large: the User record is {size} bytes of JSON, the limit is {limit} ")
