"""Where a read replica's groups of frames end, and what it does between them
(dbsvc/replica/follower.py rules 3 and 5), the decisions test_follower_stream.py (over
tests/support/follower_kit.py) did not pin: a group ends at groups.BATCH frames or at 1 MiB of frames,
whichever comes first, to the byte; the good frames before a bad one are durable before
the refusal is reported; a quiet turn waits for the last group's fsync before it reads or
polls again; a replica behind its primary is never reported caught up.

In process, on a real store; fsyncs held with `DBSVC_FAULT` HOLD (storage/files.py). Written
from the survivors of the session-6 mutation run of follower.py (docs/mutation.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from dbsvc.replica import groups
from support.follower_kit import (  # the scripted primary and the in-process replica
    EPOCH_A,
    H1,
    Replica,
    ScriptedPrimary,
    body,
    epoch_stream,
    history,
    insert,
)

MIB = 1 << 20  # groups.BATCH_BYTES
FULL = groups.BATCH  # a full group's frames


def sized(offset: int, size: int) -> bytes:
    """An insert frame at `offset` of exactly `size` bytes (its profile padded)."""
    bare = len(insert(offset, profile={"pad": ""}))
    frame = insert(offset, profile={"pad": "x" * (size - bare)})
    assert len(frame) == size
    return frame


@pytest.mark.parametrize(
    ("first", "read_in_group_one", "applied_when_read"),
    [
        (MIB // 4, 4, {4: 0, 5: 4}),  # four frames of exactly 1 MiB: the group ends at 4
        (MIB // 4 - 1, 5, {5: 0, 6: 5}),  # one byte short: frame 5 joins, and ends it
    ],
    ids=["1MiB", "1MiB-1"],
)
def test_a_group_ends_at_a_mebibyte_of_frames_to_the_byte(replica, first, read_in_group_one, applied_when_read):
    seen: dict[int, int] = {}
    node: Replica | None = None
    # The reading thread reads the next group while the loop applies this one (groups.py
    # G4): the second group's first frame is read once the first group is applied, or, with
    # the group ended elsewhere, never (its frames before are still being read), so it
    # waits for that, with a deadline, before it is read.
    second, first_end = max(applied_when_read), applied_when_read[max(applied_when_read)]

    def at(offset: int, frame: bytes) -> Callable[[], bytes]:
        def step() -> bytes:
            assert node is not None
            deadline = time.monotonic() + 2.0
            while offset == second and node.store.applied_offset < first_end and time.monotonic() < deadline:
                time.sleep(0.005)
            seen[offset] = node.store.applied_offset
            return frame

        return step

    frames = [sized(1, first)] + [sized(n, MIB // 4) for n in range(2, 8)]
    primary = ScriptedPrimary(body(EPOCH_A, 7, hist=history(H1)))
    primary.streams = [[at(n, frame) for n, frame in enumerate(frames, 1)]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary)
    node.start()
    node.wait("at 7", lambda: node.store.head_offset == 7)
    assert all(seen[n] == 0 for n in range(1, read_in_group_one + 1)), seen
    assert {n: seen[n] for n in applied_when_read} == applied_when_read


def test_the_good_frames_before_a_bad_one_are_durable_before_following_stops(replica, tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:1:HOLD={gate}")
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)))
    primary.streams = [[insert(1), insert(2), b"not a frame"]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary)
    try:
        node.start()
        node.wait("the good frames' fsync held", lambda: (tmp_path / "gate.held").exists())
        deadline = time.monotonic() + 0.5
        while node.status.state != "stopped" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert node.status.state == "following" and node.store.head_offset == 0
    finally:
        gate.touch()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.store.head_offset == 2


def test_a_quiet_turn_waits_for_the_last_group_to_be_durable_before_it_polls_again(replica, tmp_path, monkeypatch):
    # A full group (FULL frames), then the stream is quiet: the thread waits for that
    # group's fsync (held here) in its quiet turn, and only then polls /snapshot again.
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:1:HOLD={gate}")
    primary = ScriptedPrimary(body(EPOCH_A, FULL, hist=history(H1)))
    quiet = threading.Event()

    def quiet_turn() -> None:
        quiet.set()  # the full group's turn (and its poll) is over
        return None  # a receive that timed out: the quiet turn

    primary.streams = [[insert(n) for n in range(1, FULL + 1)] + [quiet_turn]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary, poll_seconds=0.0)
    try:
        node.start()
        node.wait("the group's fsync held", lambda: (tmp_path / "gate.held").exists())
        # The full group's own turn polls once, after it handed the group over (the
        # loop applies it meanwhile, groups.py G4); the quiet turn's read marks that turn's
        # end: waited for, not slept for (a sleep of 0.2 s let a late poll at load be
        # counted as the quiet turn's).
        node.wait("the quiet turn", quiet.is_set)
        asked = primary.snapshots_asked
        deadline = time.monotonic() + 1.2  # a thread that does not wait polls every 0.5 s quiet turn
        while primary.snapshots_asked == asked and time.monotonic() < deadline:
            time.sleep(0.01)
        assert primary.snapshots_asked == asked and node.store.head_offset == 0
    finally:
        gate.touch()
    node.wait("polling again", lambda: primary.snapshots_asked > asked)
    assert node.store.head_offset == FULL


def test_a_replica_behind_its_primary_is_never_reported_caught_up(replica):
    # The primary is FULL + 88 ahead; a full group comes, then the stream is quiet. The turn
    # after the group (its first step marks that the group's turn ended) and the quiet one
    # leave the replica behind: never caught up, however long the stream stays quiet.
    turns = threading.Event()

    def mark() -> None:
        turns.set()
        return None

    primary = ScriptedPrimary(body(EPOCH_A, FULL + 88, hist=history(H1)))
    primary.streams = [[insert(n) for n in range(1, FULL + 1)] + [mark, None]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary, poll_seconds=3600.0)
    node.start()
    node.wait("the group's turn ended", turns.is_set)
    node.wait("at FULL", lambda: node.store.head_offset == FULL)
    assert node.status.caught_up_at is None
    assert (node.status.primary_offset, node.status.state) == (FULL + 88, "following")
