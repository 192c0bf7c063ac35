"""recovery.py's refusals of a damaged log or snapshot, each with its exact path, byte and
message. A refused open must leave every byte of the directory as it found it, and once the
damage is undone the same tenant opens with every record.

Each test builds a real tenant with the store, then crafts or damages its files with the
project's own encoders (tests/support/recovery_kit.py). Everything runs in this process
(mutation testing only sees calls made here) and on small logs.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.logfile import HEADER_SIZE, decode_header, encode_header
from dbsvc.storage.snapshot import ModelImage, SnapshotImage
from support.recovery_kit import (
    HEAD,
    NEXT_USER_WATERMARK,
    append_event,
    assert_intact,
    assert_refused,
    log_of,
    model_image,
    read,
    rewrite_snapshot,
    snapshot_of,
    write,
)
from support.storage import post, user

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


NOT_LISTS = "snapshot rows of User are not objects of its 7 fields in order"  # format 4
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
