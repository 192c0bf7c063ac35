"""retain.py at the unit where each decision is made: which frames a compaction keeps within
its byte budget (`plan`, `write_pending`), when a segment on disk counts (`load`), what a
reader of it gets (`read`, `find_frame`) and the file steps (`commit_pending`,
`discard_pending`, `remove`).

Log files are built here byte by byte from the format of docs (a 40-byte header:
magic, version, epoch, base offset, CRC; frames of offset, CRC, length, payload), never with
logfile.py's encoders, and every expected size is a sum of frame sizes written in the test:
a wrong budget rule or a gap in the kept offsets changes the bytes on disk."""

from __future__ import annotations

import logging
import os
import struct
import zlib

import pytest

from dbsvc.storage import retain
from dbsvc.storage.retain import Segment, SegmentDamaged

OLD = "0123456789abcdef0123456789abcdef"  # the epoch of an earlier log
NEW = "fedcba9876543210fedcba9876543210"  # the epoch of the log being compacted


def header(epoch: str, base: int) -> bytes:
    body = struct.pack(">8sI16sQ", b"DBSVCLOG", 1, bytes.fromhex(epoch), base)
    return body + struct.pack(">I", zlib.crc32(body))


def frame(offset: int, size: int) -> bytes:
    """A good frame of `offset` that is exactly `size` bytes long, header included."""
    head = b'{"offset":%d,"pad":"' % offset
    payload = head + b"x" * (size - 16 - len(head) - 2) + b'"}'
    assert len(payload) == size - 16
    return struct.pack(">QII", offset, zlib.crc32(payload), len(payload)) + payload


def write_log(path: str, epoch: str, base: int, sizes: list[int]) -> dict[int, bytes]:
    """A log file of base `base` with frames base + 1.. of the given sizes; its frames."""
    frames = {base + 1 + i: frame(base + 1 + i, size) for i, size in enumerate(sizes)}
    with open(path, "wb") as f:
        f.write(header(epoch, base) + b"".join(frames.values()))
    return frames


def retained(directory: str, budget: int, segment: Segment | None, log: str, base: int, head: int):
    """Run a compaction's step 2 on the log at `log`; the pending segment and its bytes."""
    p = retain.plan(budget, NEW, segment, log, os.path.getsize(log), base, head)
    pending = retain.write_pending(directory, p)
    path = os.path.join(directory, "log.retained.new")
    if pending is None:
        assert not os.path.exists(path)
        return None, None
    with open(path, "rb") as f:
        return pending, f.read()


@pytest.fixture
def log5(tmp_path):
    """A log of base 10 holding frames 11..15 of 100, 150, 200, 250 and 300 bytes (the
    file is 40 + 1000 = 1040 bytes)."""
    path = str(tmp_path / "log")
    return path, write_log(path, NEW, 10, [100, 150, 200, 250, 300])


# -- the byte budget ---------------------------------------------------------------------

# (budget, offsets kept, size of the retained file): the header counts in the budget; a
# frame boundary is where header + the newest frames end, each one tried at, one under and
# one over.
BUDGETS = [
    (340, [15], 340),  # 40 + 300: exactly the newest frame
    (339, [], 0),  # one under: not even the newest frame, nothing is written
    (341, [15], 340),
    (590, [14, 15], 590),  # 40 + 250 + 300
    (589, [15], 340),
    (591, [14, 15], 590),
    (790, [13, 14, 15], 790),  # 40 + 200 + 250 + 300
    (789, [14, 15], 590),
    (940, [12, 13, 14, 15], 940),  # 40 + 150 + 200 + 250 + 300
    (1040, [11, 12, 13, 14, 15], 1040),  # the whole log
    (1039, [12, 13, 14, 15], 940),
    (1041, [11, 12, 13, 14, 15], 1040),
    (10**9, [11, 12, 13, 14, 15], 1040),
]


@pytest.mark.parametrize(("budget", "kept", "size"), BUDGETS)
def test_the_budget_keeps_the_newest_whole_frames_exactly(tmp_path, log5, budget, kept, size):
    log, frames = log5
    pending, data = retained(str(tmp_path), budget, None, log, 10, 15)
    if not kept:
        assert pending is None
        return
    assert data == header(NEW, kept[0] - 1) + b"".join(frames[o] for o in kept)
    assert len(data) == size <= budget
    assert pending == Segment(str(tmp_path / "log.retained.new"), NEW, kept[0] - 1, 15, size, size - 300)


@pytest.mark.parametrize("budget", [-1, 0, 1, 39, 40, 41, 339])
def test_a_budget_below_header_plus_newest_frame_retains_nothing(tmp_path, log5, budget):
    log, _ = log5
    if budget <= 0:
        assert retain.plan(budget, NEW, None, log, 1040, 10, 15) is None
    assert retained(str(tmp_path), budget, None, log, 10, 15) == (None, None)


def test_plan_lists_its_sources_oldest_first(tmp_path, log5):
    log, _ = log5
    seg_path = str(tmp_path / "seg")
    write_log(seg_path, OLD, 7, [50, 60, 70])
    segment = Segment(seg_path, OLD, 7, 10, 220, 150)
    assert retain.plan(1, NEW, segment, log, 1040, 10, 15) == retain.Plan(
        1, NEW, (retain.Source(seg_path, 40, 220, 8, 10), retain.Source(log, 40, 1040, 11, 15))
    )
    # A segment that does not end at the log's base is left out; so is an empty log.
    stale = Segment(seg_path, OLD, 7, 9, 220, 150)
    only_log = retain.Plan(5, NEW, (retain.Source(log, 40, 1040, 11, 15),))
    assert retain.plan(5, NEW, stale, log, 1040, 10, 15) == only_log
    only_segment = retain.Plan(5, NEW, (retain.Source(seg_path, 40, 220, 8, 10),))
    assert retain.plan(5, NEW, segment, log, 40, 10, 10) == only_segment
    assert retain.plan(5, NEW, None, log, 40, 10, 10) == retain.Plan(5, NEW, ())


# -- an older source that only partly fits -----------------------------------------------


@pytest.fixture
def two_sources(tmp_path):
    """A retained segment of an earlier epoch (base 5, frames 6..10 of 60, 70, 80, 90, 100
    bytes: 440 with its header) meeting a log of base 10 (frames 11, 12 of 100, 120)."""
    seg_path, log = str(tmp_path / "log.retained"), str(tmp_path / "log")
    old = write_log(seg_path, OLD, 5, [60, 70, 80, 90, 100])
    new = write_log(log, NEW, 10, [100, 120])
    segment = retain.load(seg_path, 10)
    assert segment == Segment(seg_path, OLD, 5, 10, 440, 340)
    return segment, log, old | new


@pytest.mark.parametrize(
    ("budget", "kept"),
    [
        (660, range(6, 13)),  # 40 + 220 + 400: everything
        (659, range(7, 13)),
        (450, range(9, 13)),  # 40 + 220 + 100 + 90
        (449, range(10, 13)),
        (451, range(9, 13)),
        (360, range(10, 13)),  # 40 + 220 + 100
        (359, range(11, 13)),  # the log alone, whole
        (260, range(11, 13)),
        (259, range(12, 13)),
    ],
)
def test_an_older_source_that_partly_fits_keeps_its_newest_frames_gap_free(tmp_path, two_sources, budget, kept):
    segment, log, frames = two_sources
    pending, data = retained(str(tmp_path), budget, segment, log, 10, 12)
    # Under the new log's epoch, from the first kept offset, every offset once, oldest first.
    assert data == header(NEW, kept[0] - 1) + b"".join(frames[o] for o in kept)
    assert (pending.base, pending.end, pending.size, pending.epoch) == (kept[0] - 1, 12, len(data), NEW)
    assert list(retain.read(pending, 0)) == [(o, frames[o]) for o in kept]


def test_an_older_source_that_would_fit_after_a_newer_one_did_not_is_left_out(tmp_path):
    """The log's older frame does not fit, the whole small segment would: keeping it would
    leave a gap (offset 11), so only the newest frame is kept."""
    seg_path, log = str(tmp_path / "log.retained"), str(tmp_path / "log")
    write_log(seg_path, OLD, 7, [40, 40, 40])
    frames = write_log(log, NEW, 10, [300, 100])
    segment = retain.load(seg_path, 10)
    pending, data = retained(str(tmp_path), 40 + 100 + 150, segment, log, 10, 12)
    assert data == header(NEW, 11) + frames[12]
    assert pending.base == 11


def test_a_segment_alone_beside_an_empty_log_keeps_its_newest_frames(tmp_path):
    seg_path, log = str(tmp_path / "log.retained"), str(tmp_path / "log")
    frames = write_log(seg_path, OLD, 5, [60, 70, 80, 90, 100])
    write_log(log, NEW, 10, [])
    segment = retain.load(seg_path, 10)
    pending, data = retained(str(tmp_path), 40 + 90 + 100, segment, log, 10, 10)
    assert data == header(NEW, 8) + frames[9] + frames[10]
    assert (pending.base, pending.end) == (8, 10)


def test_a_source_cut_short_under_the_copy_retains_nothing(tmp_path, log5, caplog):
    """A log whose last frame is torn where the plan said it ended (a changed source)."""
    log, _ = log5
    p = retain.plan(10**6, NEW, None, log, 1040 - 5, 10, 15)
    with caplog.at_level(logging.WARNING, logger="dbsvc.storage"):
        assert retain.write_pending(str(tmp_path), p) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path}: the retained copy does not end with offset 15; retaining nothing"
    ]
    assert not os.path.exists(tmp_path / "log.retained.new")


def test_a_source_shorter_than_planned_fails_the_copy_naming_it(tmp_path, log5):
    log, _ = log5
    p = retain.plan(10**6, NEW, None, log, 1045, 10, 15)
    with pytest.raises(OSError) as caught:
        retain.write_pending(str(tmp_path), p)
    assert str(caught.value) == f"{log} ended at byte 1040, expected 1045"


@pytest.mark.parametrize("failure", ["source-short", "stopped"])
def test_a_copy_that_fails_leaves_no_log_retained_new(tmp_path, two_sources, failure):
    """A failed step 2 removes its partial file at once (files.write_durably), a leftover
    of an earlier compaction under the same name included; the sources are untouched.
    source-short: the log ends 5 bytes before the plan says, so the copy fails at its end;
    stopped: `check` raises before the second source (an online compaction stopped by the
    store's close), the first one copied."""
    segment, log, _ = two_sources
    new = tmp_path / "log.retained.new"
    new.write_bytes(b"j" * 5000)
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path) if name != new.name}
    calls = []

    def check() -> None:
        calls.append(1)
        if failure == "stopped" and len(calls) == 2:
            raise RuntimeError("closing")

    stop = os.path.getsize(log) + (5 if failure == "source-short" else 0)
    p = retain.plan(10**6, NEW, segment, log, stop, 10, 12)
    with pytest.raises(OSError if failure == "source-short" else RuntimeError):
        retain.write_pending(str(tmp_path), p, check=check)
    assert not new.exists()
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before


def test_write_pending_replaces_a_leftover_file_whole_with_mode_0644(tmp_path, log5):
    log, frames = log5
    new = tmp_path / "log.retained.new"
    old_mask = os.umask(0o022)
    try:
        new.write_bytes(b"j" * 5000)  # a leftover of a compaction that stopped before its commit
        pending, data = retained(str(tmp_path), 340, None, log, 10, 15)
        assert data == header(NEW, 14) + frames[15]
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        retained(str(fresh), 340, None, log, 10, 15)
        assert os.stat(fresh / "log.retained.new").st_mode & 0o777 == 0o644
    finally:
        os.umask(old_mask)


def test_write_pending_asks_check_before_each_chunk_and_stops_when_it_raises(tmp_path, two_sources):
    segment, log, _ = two_sources
    calls = []
    p = retain.plan(10**6, NEW, segment, log, os.path.getsize(log), 10, 12)
    retain.write_pending(str(tmp_path), p, check=lambda: calls.append(1))
    assert len(calls) == 2  # one chunk of each source

    def stop() -> None:
        raise RuntimeError("closing")

    with pytest.raises(RuntimeError, match="closing"):
        retain.write_pending(str(tmp_path), p, check=stop)


# -- load: when a segment on disk counts ---------------------------------------------------


def test_load_takes_a_sound_segment_with_trailing_nothing(tmp_path):
    path = str(tmp_path / "log.retained")
    write_log(path, OLD, 3, [50, 60, 70])
    assert retain.load(path, 6) == Segment(path, OLD, 3, 6, 220, 150)
    assert retain.load(None, 6) is None
    assert retain.load(str(tmp_path / "absent"), 6) is None


@pytest.mark.parametrize(
    ("damage", "log_base", "at", "reason"),
    [
        ("none", 7, 220, "it does not end with a good frame of offset 7, the log's base"),
        ("none", 5, 220, "it does not end with a good frame of offset 5, the log's base"),
        ("none", 3, 0, "it starts after offset 3, not before the log's base 3"),
        ("none", 2, 0, "it starts after offset 3, not before the log's base 2"),
        ("first", 6, 40, "its first frame is not a good frame of offset 4"),
        ("early", 6, 40, "its first frame is not a good frame of offset 5"),  # header base 4, first frame 4
        ("late", 6, 40, "its first frame is not a good frame of offset 3"),  # header base 2, first frame 4
        ("last", 6, 220, "it does not end with a good frame of offset 6, the log's base"),
        ("tail", 6, 221, "it does not end with a good frame of offset 6, the log's base"),
        ("header", 6, 0, "log header checksum mismatch"),
    ],
)
def test_load_ignores_a_segment_that_fails_a_check_and_says_why(tmp_path, caplog, damage, log_base, at, reason):
    path = str(tmp_path / "log.retained")
    write_log(path, OLD, 3, [50, 60, 70])  # frames 4, 5, 6: 40 + 180 = 220 bytes
    data = bytearray(open(path, "rb").read())
    if damage == "first":
        data[40 + 30] ^= 1
    elif damage in ("early", "late"):
        data[:40] = header(OLD, 4 if damage == "early" else 2)
    elif damage == "last":
        data[-5] ^= 1
    elif damage == "tail":
        data += b"\n"
    elif damage == "header":
        data[20] ^= 1
    open(path, "wb").write(bytes(data))
    with caplog.at_level(logging.WARNING, logger="dbsvc.storage"):
        assert retain.load(path, log_base) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path}: ignoring the retained log segment ({path}: corrupt at byte {at}: {reason});"
        f" offsets before {log_base} answer 410 offset_gone"
    ]


def test_load_finds_the_last_frame_behind_a_large_one(tmp_path):
    """The search from the end reads back over windows of 64 KiB: the last frame starts
    200,000 bytes before the end of the file."""
    path = str(tmp_path / "log.retained")
    write_log(path, OLD, 0, [50, 300_000, 200_000])
    assert retain.load(path, 3) == Segment(path, OLD, 0, 3, 40 + 500_050, 40 + 300_050)


# -- reading -------------------------------------------------------------------------------


@pytest.fixture
def big(tmp_path):
    """A segment of base 100 with 600 frames of 300 to 899 bytes (far past the 64 KiB the
    bisection stops within), meeting a log of base 700."""
    path = str(tmp_path / "log.retained")
    frames = write_log(path, OLD, 100, [300 + i for i in range(600)])
    return retain.load(path, 700), frames


def test_read_yields_exactly_the_frames_after_any_offset(big):
    segment, frames = big
    assert segment.size == 40 + sum(300 + i for i in range(600))
    for after in (0, 99, 100, 101, 150, 333, 334, 500, 650, 698, 699):
        assert list(retain.read(segment, after)) == [(o, frames[o]) for o in range(max(after, 100) + 1, 701)]
    assert list(retain.read(segment, 700)) == []
    assert list(retain.read(segment, 10**6)) == []


def test_read_stops_at_damage_after_only_good_frames(big):
    segment, frames = big
    at = 40 + sum(300 + i for i in range(399))  # frame 500 starts here
    with open(segment.path, "r+b") as f:
        f.seek(at + 100)
        f.write(b"?")
    got = []
    with pytest.raises(SegmentDamaged) as caught:
        for item in retain.read(segment, 450):
            got.append(item)
    assert got == [(o, frames[o]) for o in range(451, 500)]
    assert caught.value.position == at and caught.value.path == segment.path
    assert str(caught.value).startswith(f"{segment.path}: damaged at byte {at}: ")


def test_read_refuses_a_replaced_file_a_damaged_header_and_a_short_end(big):
    segment, frames = big
    data = open(segment.path, "rb").read()
    open(segment.path, "wb").write(header(NEW, 100) + data[40:])
    with pytest.raises(SegmentDamaged) as caught:
        list(retain.read(segment, 0))
    assert str(caught.value) == f"{segment.path}: damaged at byte 0: the file was replaced"
    open(segment.path, "wb").write(header(OLD, 99) + data[40:])
    with pytest.raises(SegmentDamaged, match="the file was replaced"):
        list(retain.read(segment, 0))
    open(segment.path, "wb").write(b"X" + data[1:])
    with pytest.raises(SegmentDamaged) as caught:
        list(retain.read(segment, 0))
    assert str(caught.value) == f"{segment.path}: damaged at byte 0: not a dbsvc log (magic b'XBSVCLOG')"
    assert (caught.value.path, caught.value.position, caught.value.reason) == (
        segment.path,
        0,
        "not a dbsvc log (magic b'XBSVCLOG')",
    )
    cut = len(data) - len(frames[700]) - len(frames[699])  # ends after frame 698
    open(segment.path, "wb").write(data[:cut])
    got = []
    with pytest.raises(SegmentDamaged, match=rf"damaged at byte {cut}: truncated frame header \(0 of 16 bytes\)"):
        for item in retain.read(segment, 695):
            got.append(item[0])
    assert got == [696, 697, 698]
    # The same size, but its last frame is 699: the walk ends cleanly one offset short.
    open(segment.path, "wb").write(data[:cut] + frame(699, len(frames[699]) + len(frames[700])))
    with pytest.raises(SegmentDamaged) as caught:
        list(retain.read(segment, 695))
    assert str(caught.value) == f"{segment.path}: damaged at byte {len(data)}: ends at offset 699, expected 700"


@pytest.mark.parametrize("big_every", [0, 10])
def test_read_seeks_near_the_wanted_frame_instead_of_walking_from_the_start(tmp_path, monkeypatch, big_every):
    """A segment of about 9 MiB (2,000 frames of 4 to 6 KiB; with `big_every`, every tenth
    one 100 KiB, so a bisection step can find no frame between its middle and its upper
    end): the frames after an offset deep inside it cost a bisection over 64 KiB windows
    and one 1 MiB chunk, never a walk over everything before them."""
    path = str(tmp_path / "log.retained")
    sizes = [102_400 if big_every and i % big_every == 5 else 4000 + (i % 7) * 300 for i in range(2000)]
    frames = write_log(path, OLD, 0, sizes)
    segment = retain.load(path, 2000)
    reads: list[int] = []
    real = os.pread

    def counting(fd: int, n: int, pos: int) -> bytes:
        data = real(fd, n, pos)
        reads.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counting)
    for after in (1500, 1999, 1000, 1, 0, 700, 1995, 1994, *range(1490, 1510)):
        reads.clear()
        got = retain.read(segment, after)
        assert next(got) == (after + 1, frames[after + 1])
        got.close()
        # 1 MiB for the walk's chunk, at most 16 steps of a 64 KiB window and a 100 KiB frame.
        assert sum(reads) <= (1 << 20) + 16 * (65536 + 102_400 + 16), (after, sum(reads))


def test_find_frame_resynchronises_on_the_first_good_frame_in_range(tmp_path):
    path = str(tmp_path / "f")
    a, b, c = frame(5, 100), frame(6, 100), frame(7, 100)
    junk = b"\x00" * 31 + struct.pack(">QII", 6, 0, 10) + b"\x00" * 10  # a header with a bad CRC; odd length
    data = junk + a + b + c
    open(path, "wb").write(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        n = len(junk)
        assert retain.find_frame(fd, 0, len(data), 5, 7) == (n, 5)
        assert retain.find_frame(fd, 0, len(data), 6, 7) == (n + 100, 6)
        assert retain.find_frame(fd, 1, len(data), 7, 7) == (n + 200, 7)
        assert retain.find_frame(fd, n + 1, len(data), 5, 7) == (n + 100, 6)
        assert retain.find_frame(fd, 0, n + 299, 7, 7) is None  # frame 7 ends past stop
        assert retain.find_frame(fd, 0, n + 300, 7, 7) == (n + 200, 7)
        assert retain.find_frame(fd, 0, len(data), 8, 9) is None
        assert retain.find_frame(fd, 0, len(data), 7, 6) is None
    finally:
        os.close(fd)
    # One stray zero byte: the first candidate (byte 0) fails, the next one (byte 1) is frame 5.
    open(path, "wb").write(b"\x00" + a + b + c)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert retain.find_frame(fd, 0, 301, 5, 7) == (1, 5)
    finally:
        os.close(fd)


def test_find_frame_finds_a_frame_whose_header_straddles_a_window(tmp_path):
    """Windows are 64 KiB and a candidate's 16-byte header must lie inside one: frame 2
    starts at byte 65,521, the first position the first window (from byte 0) cannot hold
    a header at, so the next window must start exactly there."""
    path = str(tmp_path / "f")
    data = frame(1, 65521) + frame(2, 500) + frame(3, 500)
    open(path, "wb").write(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert retain.find_frame(fd, 0, len(data), 2, 3) == (65521, 2)
        assert retain.find_frame(fd, 0, len(data), 3, 3) == (66021, 3)
        assert retain.find_frame(fd, 1, len(data), 2, 2) == (65521, 2)
    finally:
        os.close(fd)


def test_find_frame_takes_a_candidate_just_inside_the_windows_end(tmp_path):
    """A first window from byte 0 holds candidates up to byte 65,520; frame 2 starts at
    65,515, after a candidate (frame 1's header) that is out of range."""
    path = str(tmp_path / "f")
    data = frame(1, 65515) + frame(2, 500) + frame(3, 500)
    open(path, "wb").write(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert retain.find_frame(fd, 0, len(data), 2, 3) == (65515, 2)
    finally:
        os.close(fd)


@pytest.mark.parametrize("last", [65537, 65540, 200])
def test_load_finds_a_last_frame_starting_just_before_a_window_of_the_search(tmp_path, last):
    """The search from the end reads 64 KiB windows, each with the 7 bytes past it: a last
    frame of 65,537 bytes starts one byte before the first window, 65,540 four bytes."""
    path = str(tmp_path / "log.retained")
    write_log(path, OLD, 0, [50, last])
    assert retain.load(path, 2) == Segment(path, OLD, 0, 2, 90 + last, 90)


def test_a_frame_of_exactly_the_largest_payload_is_good(tmp_path):
    """64 MiB of payload (sparse zeros: cheap on disk) is a good frame: a retained segment
    whose last frame is that big is found from the end and taken."""
    n = 64 * 1024 * 1024
    path = str(tmp_path / "big")
    with open(path, "wb") as f:
        f.write(header(OLD, 0) + frame(1, 100) + struct.pack(">QII", 2, zlib.crc32(bytes(n)), n))
        f.truncate(40 + 100 + 16 + n)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert retain.find_frame(fd, 140, 156 + n, 2, 2) == (140, 2)
    finally:
        os.close(fd)
    assert retain.load(path, 2) == Segment(path, OLD, 0, 2, 156 + n, 140)


# -- the file steps ------------------------------------------------------------------------


def test_commit_discard_and_remove(tmp_path, log5):
    log, _ = log5
    d = str(tmp_path)
    final, new = os.path.join(d, "log.retained"), os.path.join(d, "log.retained.new")
    pending, data = retained(d, 10**6, None, log, 10, 15)
    committed = retain.commit_pending(d, pending)
    assert committed == Segment(final, NEW, 10, 15, 1040, 740)
    assert open(final, "rb").read() == data and not os.path.exists(new)
    assert retain.commit_pending(d, None) is None  # nothing retained: the old one goes
    assert not os.path.exists(final)
    assert retain.commit_pending(d, None) is None  # and nothing to remove is fine
    retained(d, 10**6, None, log, 10, 15)
    retain.discard_pending(d)
    assert not os.path.exists(new)
    retain.discard_pending(d)
    open(final, "wb").write(data)
    assert retain.remove(d) is True and not os.path.exists(final)
    assert retain.remove(d) is False
