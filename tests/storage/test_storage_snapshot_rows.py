"""Snapshots read by parsing their rows (snapshotreader.py, "From the rows"): format-1 files,
whose one line per model holds all its rows with ",TAB" after every row but the last, read
a window at a time, keeping each text that is exactly one row; and always the rows of the
line parsed whole, whatever TABs a damaged, hand-made or older line carries. The fixture
writes its snapshot in format 1 (support `snapshot_in_format_1`); the format-2 writer and
the keys reader are test_storage_snapshot_keys.py's."""

from __future__ import annotations

import json
import os
import zlib
from array import array

import pytest

from dbsvc.errors import CorruptLog
from dbsvc.storage import snapshot, snapshotreader
from dbsvc.storage.rows import pack
from dbsvc.storage.snapshotreader import ModelPart, RowsLine, model_windows, read_snapshot
from dbsvc.storage.tenants import compact_tenant
from support.storage import BLOG, open_store, opened_users, run, snapshot_in_format_1, user

N_USERS = 10
USER_FIELDS = BLOG.BY_NAME["User"].fields


@pytest.fixture
def compacted(tenant, monkeypatch):
    """A tenant of N_USERS users compacted offline, its snapshot in format 1, read back in
    windows of about 2 rows."""
    monkeypatch.setattr(snapshotreader, "WINDOW", 100)
    s = open_store(tenant)

    async def go():
        for i in range(1, N_USERS + 1):
            await s.insert("User", user(i, name=f"user\t{i}"))  # a TAB in a value: escaped

    run(go())
    want = dict(s.tables["User"].records)
    s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    snapshot_in_format_1(os.path.join(tenant, "snapshot"))
    return tenant, want


def _lines(tenant):
    return open(os.path.join(tenant, "snapshot"), "rb").read().split(b"\n")


def _users(tenant):
    return opened_users(tenant)[0]


def _stored(tenant):
    return opened_users(tenant)[1]


def _rewrite_user_line(tenant, body: bytes) -> bytes:
    lines = _lines(tenant)
    lines[1] = b"%08x " % zlib.crc32(body) + body  # the header lists User first
    data = b"\n".join(lines)
    with open(os.path.join(tenant, "snapshot"), "wb") as f:
        f.write(data)
    return data


def _read(tenant):
    path = os.path.join(tenant, "snapshot")
    data = open(path, "rb").read()
    _epoch, _head, parts = read_snapshot(path, data)
    return data, parts[0].lines[0], list(model_windows(path, parts[0]))


def test_windows_are_read_one_at_a_time_keep_the_texts_and_equal_the_whole_line(compacted):
    tenant, _want = compacted
    data, user_line, windows = _read(tenant)
    assert len(windows) > 2 and all(texts is not None for _rows, texts in windows)
    rows = [row for p, _t in windows for row in p]
    assert rows == json.loads(data[user_line.start : user_line.end])
    texts = [t for _p, ts in windows for t in ts]
    assert texts == data[user_line.start + 1 : user_line.end - 1].split(b",\t")
    assert [json.loads(t) for t in texts] == rows


def test_a_line_without_tabs_is_read_and_its_rows_packed(compacted):
    """A line written by hand loads as it always did; its stored records are the rows
    encoded again."""
    tenant, want = compacted
    whole = json.loads(_lines(tenant)[1][9:])
    _rewrite_user_line(tenant, json.dumps(whole, separators=(",", ":")).encode())
    _data, _line, windows = _read(tenant)
    assert [(len(p), t) for p, t in windows] == [(N_USERS, None)]
    assert _users(tenant) == want
    assert list(_stored(tenant).values()) == [pack(USER_FIELDS, r) for r in whole]


def test_a_line_of_the_older_pieces_is_read_and_its_rows_packed(compacted):
    """The writer before this one put ",TAB" after every third row only: a window is then
    a few rows per text, parsed and packed."""
    tenant, want = compacted
    rows = json.loads(_lines(tenant)[1][9:])
    texts = [json.dumps(r, separators=(",", ":")).encode() for r in rows]
    _rewrite_user_line(tenant, b"[" + b",\t".join(b",".join(texts[i : i + 3]) for i in range(0, N_USERS, 3)) + b"]")
    _data, _line, windows = _read(tenant)
    assert sum(len(p) for p, _t in windows) == N_USERS
    assert [len(p) for p, t in windows if t is None] == [3, 3, 3]  # the last text is one row: kept
    assert _users(tenant) == want
    assert list(_stored(tenant).values()) == [pack(USER_FIELDS, r) for r in rows]


def test_a_text_that_is_not_exactly_one_row_is_never_kept(compacted, monkeypatch):
    """A ",TAB" inside a nested value made up for by two rows joined with a plain comma
    (the texts and the rows of the window then number the same), whitespace before a row
    and inside one: each such window is parsed, and the records are the line's."""
    tenant, _want = compacted
    monkeypatch.setattr(snapshotreader, "WINDOW", 1 << 20)  # one window: the counts must agree
    rows = json.loads(_lines(tenant)[1][9:])
    rows[3][-1] = [[1], [2]]  # profile, a json field
    rows[4][-1] = [[3]]
    texts = [json.dumps(r, separators=(",", ":")).encode() for r in rows]
    texts[3] = texts[3].replace(b"[[1],[2]]", b"[[1],\t[2]]")  # row 4 split in two texts...
    texts[4] = texts[4] + b"," + texts.pop(5)  # ...rows 5 and 6 in one
    texts[6] = b" " + texts[6]
    texts[7] = texts[7][:-1] + b" ]"
    body = b"[" + b",\t".join(texts) + b"]"
    assert json.loads(body) == rows and body.count(b",\t") == N_USERS - 1
    _rewrite_user_line(tenant, body)
    _data, _line, windows = _read(tenant)
    assert [(len(p), t) for p, t in windows] == [(N_USERS, None)]
    fields = BLOG.BY_NAME["User"].fields
    assert _users(tenant) == {r[0]: dict(zip(fields, r)) for r in rows}
    assert list(_stored(tenant).values()) == [pack(USER_FIELDS, r) for r in rows]


def test_a_row_written_with_spaces_is_stored_as_its_record_and_reads_the_same(compacted):
    """`json.dumps`'s default ", " and ": " inside rows: the rows of a format-1 file are
    arrays, so its records are stored as their objects packed from the parsed rows (the
    compact JSON a write stores), and every read gives the values back."""
    tenant, want = compacted
    rows = json.loads(_lines(tenant)[1][9:])
    texts = [json.dumps(r).encode() for r in rows]
    assert b", " in texts[0]
    _rewrite_user_line(tenant, b"[" + b",\t".join(texts) + b"]")
    assert list(_stored(tenant).values()) == [pack(USER_FIELDS, r) for r in rows]
    assert _users(tenant) == want


@pytest.mark.parametrize(
    "where", ["after the bracket", "inside a row", "inside a row after good windows", "before a comma", "at the end"]
)
def test_tabs_elsewhere_read_the_line_whole(compacted, where):
    """TABs that are JSON whitespace but not row ends: the rows are still the line's."""
    tenant, want = compacted
    rows = json.loads(_lines(tenant)[1][9:])
    texts = [json.dumps(r, separators=(",", ":")).encode() for r in rows]
    if where == "after the bracket":
        body = b"[\t" + b",".join(texts) + b"]"
    elif where == "inside a row":
        body = (
            b"[" + b",".join(texts[:4]) + b"," + texts[4].replace(b",", b",\t", 1) + b"," + b",".join(texts[5:]) + b"]"
        )
    elif where == "inside a row after good pieces":  # pieces 1-2 parse, piece 3 does not
        body = (
            b"["
            + b",".join(texts[:2])
            + b",\t"
            + b",".join(texts[2:4])
            + b",\t"
            + texts[4].replace(b",", b",\t", 1)
            + b","
            + b",".join(texts[5:])
            + b"]"
        )
    elif where == "before a comma":
        body = b"[" + b",".join(texts[:5]) + b"\t," + b",".join(texts[5:]) + b"]"
    else:
        body = b"[" + b",\t".join(texts) + b"\t]"
    assert json.loads(body) == rows
    _rewrite_user_line(tenant, body)
    assert _users(tenant) == want


@pytest.mark.parametrize(
    "shape, reason",
    [
        ("empty piece", "not JSON"),  # "[r1,TAB,TAB r2...]": invalid JSON whole
        ("blank piece", "not JSON"),  # "[ ,TAB r1...]": a piece of whitespace alone
        ("object", "not a JSON array"),
        ("unclosed", "not JSON"),
        ("opened wrong", "not JSON"),  # "(r1,TAB r2...]": its pieces would parse
        ("no comma before a tab", "not JSON"),  # "[r1 TAB r2...]": so would these
        ("not UTF-8", "not JSON"),  # a byte no UTF-8 text holds, in a row's last value
    ],
)
def test_a_line_that_is_not_an_array_of_rows_refuses_and_keeps_the_file(compacted, shape, reason):
    tenant, _want = compacted
    rows = json.loads(_lines(tenant)[1][9:])
    texts = [json.dumps(r, separators=(",", ":")).encode() for r in rows]
    body = {
        "empty piece": b"[" + texts[0] + b",\t,\t" + b",".join(texts[1:]) + b"]",
        "blank piece": b"[ ,\t" + b",".join(texts) + b"]",
        "object": b'{"rows":\t' + b",".join(texts[:1]) + b"}",
        "unclosed": b"[" + b",\t".join(texts),
        "opened wrong": b"(" + b",\t".join(texts) + b"]",
        "no comma before a tab": b"[" + texts[0] + b" \t" + b",".join(texts[1:]) + b"]",
        "not UTF-8": b"[" + b",\t".join([texts[0][:-5] + b'"\xff"]', *texts[1:]]) + b"]",
    }[shape]
    data = _rewrite_user_line(tenant, body)
    with pytest.raises(CorruptLog) as info:
        open_store(tenant)
    assert info.value.path == os.path.join(tenant, "snapshot") and reason in info.value.reason
    assert info.value.offset == len(_lines(tenant)[0]) + 1  # the User line
    assert open(os.path.join(tenant, "snapshot"), "rb").read() == data


def test_row_count_is_checked_over_all_pieces(compacted):
    tenant, _want = compacted
    body = _lines(tenant)[1][9:]
    cut = body[: body.rindex(b",\t")] + b"]"  # the last piece dropped
    _rewrite_user_line(tenant, cut)
    with pytest.raises(CorruptLog) as info:
        open_store(tenant)
    assert "9 rows, header says 10" in info.value.reason


def test_ids_must_ascend_across_a_piece_boundary(compacted):
    """Each piece ascending on its own is not enough: the first id of a piece must follow
    the last of the one before."""
    tenant, _want = compacted
    rows = json.loads(_lines(tenant)[1][9:])
    rows[2], rows[3] = rows[3], rows[2]  # ids 1 2 4 | 3 5 6 | ...
    texts = [json.dumps(r, separators=(",", ":")).encode() for r in rows]
    pieces = [b",".join(texts[i : i + 3]) for i in range(0, len(texts), 3)]
    _rewrite_user_line(tenant, b"[" + b",\t".join(pieces) + b"]")
    with pytest.raises(CorruptLog) as info:
        open_store(tenant)
    assert "not in strictly ascending id order" in info.value.reason


def test_model_windows_counts_rows_against_the_header():
    data = b"[[1],\t[2]]"
    part = ModelPart("M", ["id"], 3, 2, None, 40, [RowsLine(40, data, 0, len(data), None, 0)], 0)
    with pytest.raises(CorruptLog) as info:
        list(model_windows("snap", part))
    assert info.value.offset == 40 and "2 rows, header says 3" in info.value.reason


@pytest.mark.parametrize("version", [1, 2])
def test_number_sort_keys_load_into_arrays_with_nulls_kept_apart(tenant, monkeypatch, version, stores):
    """Ages (int keys, some null, some past 2**31) and joined (datetime -> microseconds)
    read window by window from a format-1 snapshot, or block by block from a format-2
    one's keys: the sort indexes hold them in arrays, nulls apart, and agree with the
    records."""
    monkeypatch.setattr(snapshotreader, "WINDOW", 100)
    monkeypatch.setattr(snapshot, "BLOCK_ROWS", 4)
    s = stores(tenant)

    async def go():
        for i in range(1, N_USERS + 1):
            age = None if i % 3 == 0 else 2**40 + i if i % 3 == 1 else 20 + i
            await s.insert("User", user(i, age=age, joined=f"2026-01-{i:02d}T00:00:00.{i:06d}Z"))

    run(go())
    want = dict(s.tables["User"].records)
    s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    if version == 1:
        snapshot_in_format_1(os.path.join(tenant, "snapshot"))
    assert _users(tenant) == want  # check_indexes included
    s = stores(tenant)
    try:
        table = s.tables["User"]
        for f in ("age", "joined"):
            assert {(type(sub), sub.typecode) for sub in table.ordered[f].key_sublists} == {(array, "q")}
        assert list(table.ordered["age"].nulls) == [3, 6, 9]
    finally:
        s.close()
