"""Torn tails and damaged logs: recover a prefix and say where, or refuse and say where."""

from __future__ import annotations

import os
import random
import struct

import pytest

from dbsvc.errors import CorruptLog
from dbsvc.storage.logfile import FRAME, HEADER_SIZE
from support.storage import open_store, run, snapshot_in_format_1, user

N_USERS = 12


def _frames(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every frame of a good log image."""
    out, pos = [], HEADER_SIZE
    while pos < len(data):
        _off, _crc, length = FRAME.unpack_from(data, pos)
        out.append((pos, pos + 16 + length))
        pos += 16 + length
    return out


@pytest.fixture
def filled(tenant):
    s = open_store(tenant)

    async def go():
        for i in range(1, N_USERS + 1):
            await s.insert("User", user(i, name="n" * (i * 3)))
        await s.replace("User", 3, user(3, name="renamed"))
        await s.delete("User", 5)

    run(go())
    s.close()
    path = os.path.join(tenant, "log")
    with open(path, "rb") as f:
        data = f.read()
    return tenant, path, data


def _state(tenant, **kw):
    s = open_store(tenant, **kw)
    try:
        return {i: r for i, r in s.tables["User"].records.items()}, s.head_offset, s.recovered_tail
    finally:
        s.close()


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def _expected_after(n_rows):
    """The User records after the first n_rows rows of the `filled` history."""
    state = {}
    for i in range(1, min(n_rows, N_USERS) + 1):
        state[i] = user(i, name="n" * (i * 3))
    if n_rows > N_USERS:
        state[3] = user(3, name="renamed")
    if n_rows > N_USERS + 1:
        del state[5]
    return state


def test_log_cut_at_every_byte_of_its_last_record(filled):
    tenant, path, data = filled
    frames = _frames(data)
    start, end = frames[-1]
    for cut in range(start, end):
        _write(path, data[:cut])
        records, head, damage = _state(tenant)
        assert head == len(frames) - 1
        assert records == _expected_after(len(frames) - 1)
        if cut == start:
            assert damage is None
        else:
            assert damage.position == start, cut
        assert os.path.getsize(path) == start  # the torn bytes were cut off


def test_cut_tail_is_logged_with_its_byte_offset(filled, caplog):
    tenant, path, data = filled
    start, end = _frames(data)[-1]
    _write(path, data[: end - 3])
    with caplog.at_level("WARNING", logger="dbsvc.storage"):
        _state(tenant)
    assert f"torn tail at byte {start}" in caplog.text


def test_writes_continue_after_a_cut_tail(filled, stores):
    tenant, path, data = filled
    start, _end = _frames(data)[-1]
    _write(path, data[: start + 5])
    s = stores(tenant)
    assert run(s.insert("User", user(50)))["id"] == 50
    head = s.head_offset
    s.close()
    records, head2, damage = _state(tenant)
    assert damage is None and head2 == head and 50 in records


def test_truncation_anywhere_recovers_the_whole_frames_before_it(filled):
    tenant, path, data = filled
    frames = _frames(data)
    for cut in range(0, len(data), 7):
        _write(path, data[:cut])
        if cut < HEADER_SIZE:
            with pytest.raises(CorruptLog, match="header"):
                _state(tenant)
            continue
        whole = sum(1 for _s, e in frames if e <= cut)
        records, head, _damage = _state(tenant)
        assert head == whole and records == _expected_after(whole)
        _write(path, data)


@pytest.mark.parametrize("which", [0, 3, 7])
def test_flipped_byte_before_the_tail_refuses_and_names_the_offset(filled, which):
    tenant, path, data = filled
    start, end = _frames(data)[which]
    broken = bytearray(data)
    broken[start + 20] ^= 0x40
    _write(path, bytes(broken))
    with pytest.raises(CorruptLog) as info:
        _state(tenant)
    assert info.value.offset == start and info.value.path == path
    assert f"corrupt at byte {start}" in str(info.value)
    assert bytes(open(path, "rb").read()) == bytes(broken)  # nothing truncated


def test_flipped_byte_in_the_last_record_is_cut_as_a_tail(filled):
    tenant, path, data = filled
    start, end = _frames(data)[-1]
    broken = bytearray(data)
    broken[end - 2] ^= 0x01
    _write(path, bytes(broken))
    records, head, damage = _state(tenant)
    assert damage.position == start and "checksum" in damage.reason
    assert records == _expected_after(len(_frames(data)) - 1)


def test_zero_filled_block_in_the_middle_refuses(filled):
    tenant, path, data = filled
    start, _ = _frames(data)[4]
    broken = data[:start] + bytes(64) + data[start + 64 :]
    _write(path, broken)
    with pytest.raises(CorruptLog) as info:
        _state(tenant)
    assert info.value.offset == start


def test_zero_filled_tail_is_cut(filled):
    tenant, path, data = filled
    _write(path, data + bytes(8192))
    records, head, damage = _state(tenant)
    assert head == len(_frames(data)) and damage.position == len(data)


def test_duplicated_block_refuses_or_recovers_a_prefix(filled):
    tenant, path, data = filled
    frames = _frames(data)
    a, _ = frames[2]
    _, b = frames[4]
    # duplicated in the middle: the frames after it are good, so this is not a tail
    _write(path, data[:b] + data[a:b] + data[b:])
    with pytest.raises(CorruptLog) as info:
        _state(tenant)
    assert info.value.offset == b
    # duplicated at the end: stale offsets after the head are cut, the state is intact
    _write(path, data + data[a:b])
    records, head, damage = _state(tenant)
    assert head == len(frames) and damage.position == len(data)
    assert records == _expected_after(len(frames))


def test_random_damage_never_serves_a_bad_record(filled):
    tenant, path, data = filled
    frames = _frames(data)
    rnd = random.Random(1234)
    for _round in range(150):
        broken = bytearray(data)
        kind = rnd.choice(["flip", "zero", "dup", "cut"])
        p = rnd.randrange(HEADER_SIZE, len(data))
        if kind == "flip":
            broken[p] ^= 1 << rnd.randrange(8)
        elif kind == "zero":
            n = rnd.randint(1, 300)
            broken[p : p + n] = bytes(len(broken[p : p + n]))
        elif kind == "dup":
            n = rnd.randint(1, 300)
            broken[p:p] = data[p - min(n, p - HEADER_SIZE) : p]
        else:
            del broken[p:]
        _write(path, bytes(broken))
        try:
            records, head, _damage = _state(tenant)
        except CorruptLog as exc:
            assert exc.path == path and HEADER_SIZE <= exc.offset < len(broken)
            continue
        assert 0 <= head <= len(frames)
        assert records == _expected_after(head), (kind, p)


def test_damaged_snapshot_refuses_with_its_path(filled):
    tenant, _path, _data = filled
    from dbsvc.storage.tenants import compact_tenant

    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    snap = os.path.join(tenant, "snapshot")
    raw = bytearray(open(snap, "rb").read())
    raw[len(raw) // 2] ^= 0x20
    _write(snap, bytes(raw))
    with pytest.raises(CorruptLog) as info:
        _state(tenant)
    assert info.value.path == snap and "checksum" in info.value.reason


def test_damaged_header_refuses(filled):
    tenant, path, data = filled
    broken = bytearray(data)
    broken[20] ^= 0xFF
    _write(path, bytes(broken))
    with pytest.raises(CorruptLog, match="header checksum"):
        _state(tenant)


def test_frame_offsets_are_checked(filled):
    tenant, path, data = filled
    frames = _frames(data)
    start, _ = frames[-1]
    broken = bytearray(data)
    struct.pack_into(">Q", broken, start, 999)  # wrong offset, payload and CRC intact
    _write(path, bytes(broken))
    records, head, damage = _state(tenant)
    assert head == len(frames) - 1 and "offset 999" in damage.reason


@pytest.mark.parametrize(
    "change, reason",
    [
        ("swap", "not in strictly ascending id order"),
        ("duplicate", "not in strictly ascending id order"),
        ("short", "not lists of its 7 fields"),
        ("object", "not lists of its 7 fields"),
    ],
)
def test_snapshot_rows_out_of_shape_refuse_and_leave_the_files(filled, change, reason):
    """A snapshot line with a good checksum whose rows are not strictly ascending by id, or
    not one value per field (another writer, or damage the CRC cannot see), is refused
    before anything is indexed."""
    import json
    import zlib

    tenant, _path, _data = filled
    from dbsvc.storage.tenants import compact_tenant

    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    snap = os.path.join(tenant, "snapshot")
    lines = snapshot_in_format_1(snap).split(b"\n")  # an open parses its rows
    user_line = 1  # the header lists User first
    rows = json.loads(lines[user_line][9:])
    if change == "swap":
        rows[2], rows[3] = rows[3], rows[2]
    elif change == "duplicate":
        rows[3] = list(rows[2])
    elif change == "short":
        rows[3] = rows[3][:-1]
    else:
        rows[3] = {f"k{i}": v for i, v in enumerate(rows[3])}
    body = json.dumps(rows, separators=(",", ":")).encode()
    lines[user_line] = b"%08x " % zlib.crc32(body) + body
    broken = b"\n".join(lines)
    _write(snap, broken)
    with pytest.raises(CorruptLog) as info:
        _state(tenant)
    assert info.value.path == snap and reason in info.value.reason
    assert open(snap, "rb").read() == broken  # nothing rewritten
