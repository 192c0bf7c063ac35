"""Snapshot model lines cut into pieces (snapshot.py, "Pieces"): written with a TAB after
every CHUNK_ROWS-th row's comma, read one piece at a time, and always the rows of the line
parsed whole, whatever TABs a damaged or hand-made line carries."""

from __future__ import annotations

import json
import os
import zlib

import pytest
from support.storage import check_indexes, open_store, run, user

from dbsvc.errors import CorruptLog
from dbsvc.storage import snapshot
from dbsvc.storage.snapshot import ModelLine, model_pieces, read_snapshot
from dbsvc.storage.tenants import compact_tenant

N_USERS = 10


@pytest.fixture
def compacted(tenant, monkeypatch):
    """A tenant of N_USERS users compacted offline with pieces of 3 rows."""
    monkeypatch.setattr(snapshot, "CHUNK_ROWS", 3)
    s = open_store(tenant)

    async def go():
        for i in range(1, N_USERS + 1):
            await s.insert("User", user(i, name=f"user\t{i}"))        # a TAB in a value: escaped
    run(go())
    want = dict(s._tables["User"].records)
    s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    return tenant, want


def _lines(tenant):
    return open(os.path.join(tenant, "snapshot"), "rb").read().split(b"\n")


def _users(tenant):
    s = open_store(tenant)
    try:
        check_indexes(s)
        return dict(s._tables["User"].records)
    finally:
        s.close()


def _rewrite_user_line(tenant, body: bytes) -> bytes:
    lines = _lines(tenant)
    lines[1] = b"%08x " % zlib.crc32(body) + body          # the header lists User first
    data = b"\n".join(lines)
    with open(os.path.join(tenant, "snapshot"), "wb") as f:
        f.write(data)
    return data


def test_the_writer_cuts_a_line_after_every_chunk_and_it_stays_one_json_array(compacted):
    tenant, want = compacted
    body = _lines(tenant)[1][9:]
    assert body.count(b"\t") == 3 and body.count(b",\t") == 3      # 10 rows: 3 + 3 + 3 + 1
    rows = json.loads(body)                                          # a reader may parse it whole
    assert [r[0] for r in rows] == list(range(1, N_USERS + 1))
    assert _users(tenant) == want


def test_pieces_are_read_one_at_a_time_and_equal_the_whole_line(compacted):
    tenant, _want = compacted
    path = os.path.join(tenant, "snapshot")
    data = open(path, "rb").read()
    _epoch, _head, lines = read_snapshot(path, data)
    user_line = lines[0]
    pieces = list(model_pieces(path, user_line))
    assert [len(p) for p in pieces] == [3, 3, 3, 1]
    assert [row for p in pieces for row in p] == json.loads(data[user_line.start : user_line.end])


def test_a_line_without_tabs_is_one_piece(compacted):
    """Snapshots written before pieces existed load as they always did."""
    tenant, want = compacted
    whole = json.loads(_lines(tenant)[1][9:])
    _rewrite_user_line(tenant, json.dumps(whole, separators=(",", ":")).encode())
    path = os.path.join(tenant, "snapshot")
    _e, _h, lines = read_snapshot(path, open(path, "rb").read())
    assert [len(p) for p in model_pieces(path, lines[0])] == [N_USERS]
    assert _users(tenant) == want


@pytest.mark.parametrize("where", ["after the bracket", "inside a row", "inside a row after good pieces",
                                   "before a comma", "at the end"])
def test_tabs_elsewhere_read_the_line_whole(compacted, where):
    """TABs that are JSON whitespace but not piece ends: the rows are still the line's."""
    tenant, want = compacted
    rows = json.loads(_lines(tenant)[1][9:])
    texts = [json.dumps(r, separators=(",", ":")).encode() for r in rows]
    if where == "after the bracket":
        body = b"[\t" + b",".join(texts) + b"]"
    elif where == "inside a row":
        body = b"[" + b",".join(texts[:4]) + b"," + texts[4].replace(b",", b",\t", 1) + b"," + b",".join(texts[5:]) + b"]"
    elif where == "inside a row after good pieces":     # pieces 1-2 parse, piece 3 does not
        body = (b"[" + b",".join(texts[:2]) + b",\t" + b",".join(texts[2:4]) + b",\t"
                + texts[4].replace(b",", b",\t", 1) + b"," + b",".join(texts[5:]) + b"]")
    elif where == "before a comma":
        body = b"[" + b",".join(texts[:5]) + b"\t," + b",".join(texts[5:]) + b"]"
    else:
        body = b"[" + b",\t".join(texts) + b"\t]"
    assert json.loads(body) == rows
    _rewrite_user_line(tenant, body)
    assert _users(tenant) == want


@pytest.mark.parametrize("shape, reason", [
    ("empty piece", "not JSON"),                 # "[r1,TAB,TAB r2...]": invalid JSON whole
    ("blank piece", "not JSON"),                 # "[ ,TAB r1...]": a piece of whitespace alone
    ("object", "not a JSON array"),
    ("unclosed", "not JSON"),
    ("opened wrong", "not JSON"),                # "(r1,TAB r2...]": its pieces would parse
    ("no comma before a tab", "not JSON"),       # "[r1 TAB r2...]": so would these
])
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
    }[shape]
    data = _rewrite_user_line(tenant, body)
    with pytest.raises(CorruptLog) as info:
        open_store(tenant)
    assert info.value.path == os.path.join(tenant, "snapshot") and reason in info.value.reason
    assert info.value.offset == len(_lines(tenant)[0]) + 1                 # the User line
    assert open(os.path.join(tenant, "snapshot"), "rb").read() == data


def test_row_count_is_checked_over_all_pieces(compacted):
    tenant, _want = compacted
    body = _lines(tenant)[1][9:]
    cut = body[: body.rindex(b",\t")] + b"]"                          # the last piece dropped
    _rewrite_user_line(tenant, cut)
    with pytest.raises(CorruptLog) as info:
        open_store(tenant)
    assert "9 rows, header says 10" in info.value.reason


def test_ids_must_ascend_across_a_piece_boundary(compacted):
    """Each piece ascending on its own is not enough: the first id of a piece must follow
    the last of the one before."""
    tenant, _want = compacted
    rows = json.loads(_lines(tenant)[1][9:])
    rows[2], rows[3] = rows[3], rows[2]                   # ids 1 2 4 | 3 5 6 | ...
    texts = [json.dumps(r, separators=(",", ":")).encode() for r in rows]
    pieces = [b",".join(texts[i : i + 3]) for i in range(0, len(texts), 3)]
    _rewrite_user_line(tenant, b"[" + b",\t".join(pieces) + b"]")
    with pytest.raises(CorruptLog) as info:
        open_store(tenant)
    assert "not in strictly ascending id order" in info.value.reason


def test_model_pieces_counts_rows_against_the_header():
    data = b"[[1],\t[2]]"
    line = ModelLine("M", ["id"], 3, 2, 40, data, 0, len(data))
    with pytest.raises(CorruptLog) as info:
        list(model_pieces("snap", line))
    assert info.value.offset == 40 and "2 rows, header says 3" in info.value.reason


def test_online_compaction_writes_a_piece_per_chunk_it_streams(tenant, monkeypatch):
    from dbsvc.storage import online

    monkeypatch.setattr(online, "CHUNK", 4)
    s = open_store(tenant)

    async def go():
        for i in range(1, N_USERS + 1):
            await s.insert("User", user(i))
        await s.compact_now()
    try:
        run(go())
        want = dict(s._tables["User"].records)
    finally:
        s.close()
    body = _lines(tenant)[1][9:]
    assert body.count(b",\t") == 2 and len(json.loads(body)) == N_USERS        # 4 + 4 + 2
    assert _users(tenant) == want
