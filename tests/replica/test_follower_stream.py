"""A following replica and the stream it reads (dbsvc/replica/follower.py rules 3, 5 and 9), in
process over a scripted primary (tests/support/follower_kit.py): a new epoch met mid-stream
compacts at the primary's cut, groups of frames are read while the one before is written, what
is applied and what stops following, and the lag the primary's head gives.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from dbsvc.errors import WebSocketClientError
from dbsvc.replica import groups
from dbsvc.storage import files
from dbsvc.storage.logfile import encode_frame, frame_offset
from support.follower_kit import (
    EPOCH_A,
    EPOCH_B,
    FINGERPRINT,
    H1,
    URL,
    Replica,
    ScriptedPrimary,
    body,
    deadline_seconds,
    epoch_stream,
    following,
    history,
    insert,
    update,
)

# -- rule 9: a new epoch met in the middle of a stream: compact at the primary's cut ------------


def test_a_new_epoch_met_mid_stream_compacts_at_the_primarys_cut_and_follows_on(replica, caplog):
    caplog.set_level("INFO", logger="dbsvc.replica")
    primary = ScriptedPrimary(body(EPOCH_A, 4, hist=history(H1)))

    def compacted() -> bytes:
        # The primary compacted at offset 4: epoch B's snapshot holds the 3 users, so its
        # User watermark is 3 where ours (3 inserts and an update) is 4.
        primary.answer = body(EPOCH_B, 5, hist=history(H1))
        return insert(5, watermark=4)

    primary.streams = [[insert(1), insert(2), insert(3), update(4, 1), compacted], [insert(5, watermark=4)]]
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        epoch_stream(EPOCH_B, 4, range(1, 4), hist=history(H1)),
    ]
    node = replica(primary).start()
    node.wait("at offset 5 in epoch B", lambda: node.store.head_offset == 5 and node.store.epoch == EPOCH_B)
    node.wait("following", lambda: node.status.state == "following")
    assert primary.afters == [0, 4]
    # No snapshot fetched for epoch B: its cut is read from the header of
    # /replicate/snapshot, which is closed then.
    assert primary.epochs_asked == 2
    assert (node.status.bootstraps, node.status.compactions) == (1, 1)
    assert node.store.epoch_state.log_base == 4 and node.store.watermarks()["User"] == 4
    assert node.user_ids() == [1, 2, 3, 5]
    assert node.status.error is None
    assert ("INFO", f"compacted at the primary's cut: epoch {EPOCH_B} from offset 4 ({URL})") in [
        (r.levelname, r.getMessage()) for r in caplog.records
    ]


def test_a_new_epoch_seen_by_the_poll_of_snapshot_mid_stream_compacts_at_its_cut(replica, caplog):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)))

    def compacted() -> None:  # the primary compacts while the stream is quiet
        primary.answer = body(EPOCH_B, 2, hist=history(H1))
        return None

    primary.streams = [[insert(1), insert(2), None, compacted]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1)), epoch_stream(EPOCH_B, 2, hist=history(H1))]
    node = replica(primary, poll_seconds=0.0).start()
    node.wait("compacted into epoch B", lambda: node.store.epoch == EPOCH_B and node.status.compactions == 1)
    assert (node.status.bootstraps, node.status.state) == (1, "following")
    assert primary.afters == [0] and primary.epochs_asked == 2  # the stream goes on
    assert node.user_ids() == [1, 2]


def test_a_replica_restarted_behind_the_cut_follows_its_old_epoch_to_the_cut_then_compacts(replica, tmp_path):
    first = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), [[insert(1), insert(2)]])
    first.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = following(first, replica, 2)
    node.close()
    # Meanwhile the primary updated user 1 and inserted user 3, and compacted at 4 (3
    # users: User watermark 3 in epoch B); it keeps rows 3 and 4 (log.retained). Row 5 is
    # the first of epoch B.
    primary = ScriptedPrimary(body(EPOCH_B, 5, hist=history(H1)), epochs=[epoch_stream(EPOCH_B, 4, hist=history(H1))])
    primary.streams = [[insert(2), update(3, 1), insert(4, uid=3), insert(5, watermark=4, uid=4)]]
    primary.streams.append([insert(5, watermark=4, uid=4)])
    again = replica(primary, directory="replica").start()
    again.wait("at 5 in epoch B", lambda: again.store.head_offset == 5 and again.store.epoch == EPOCH_B)
    assert (again.status.bootstraps, again.status.compactions, primary.epochs_asked) == (0, 1, 1)
    assert primary.afters == [1, 4]
    assert again.user_ids() == [1, 2, 3, 4]
    assert again.store.watermarks()["User"] == 4 and again.store.epoch_state.log_base == 4


def test_a_cut_behind_rows_applied_before_a_restart_bootstraps(replica):
    first = ScriptedPrimary(body(EPOCH_A, 4, hist=history(H1)), [[insert(n) for n in range(1, 5)]])
    first.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = following(first, replica, 4)
    node.close()
    # The primary compacted at 2: rows 3 and 4 were applied here before the restart, and
    # what they replaced is no longer known, so the cut cannot be made here.
    primary = ScriptedPrimary(body(EPOCH_B, 4, hist=history(H1)))
    primary.epochs = [
        epoch_stream(EPOCH_B, 2, hist=history(H1)),
        epoch_stream(EPOCH_B, 4, range(1, 5), hist=history(H1)),
    ]
    again = replica(primary, directory="replica").start()
    again.wait("in epoch B", lambda: again.store.epoch == EPOCH_B and again.status.state == "following")
    assert (again.status.bootstraps, again.status.compactions) == (1, 0)
    assert again.user_ids() == [1, 2, 3, 4]


# -- rule 3: groups of frames, the next read while the last is written, never more ---------------


def test_groups_are_read_ahead_of_the_one_written_and_no_third_is_applied_before_the_first_is_durable(
    replica, tmp_path, monkeypatch
):
    # The first group's fsync is held (DBSVC_FAULT HOLD, storage/files.py) until the gate
    # file exists: meanwhile the second group is applied, but no third (at most two groups
    # are ever unacknowledged, groups.py G3), and the reading thread reads DEPTH groups
    # ahead of the one applied and asks for no frame past them (G4: a slow apply pushes
    # back on the socket).
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:1:HOLD={gate}")
    seen: dict[int, tuple[int, int]] = {}
    group = groups.BATCH
    read_ahead = (2 + groups.DEPTH) * group  # the first, the second applied, DEPTH more read
    last = read_ahead + group + 100
    primary = ScriptedPrimary(body(EPOCH_A, last, hist=history(H1)))
    node: Replica | None = None

    def at(offset: int) -> Callable[[], bytes]:
        def step() -> bytes:
            assert node is not None
            seen[offset] = (node.store.head_offset, node.store.applied_offset)
            return insert(offset)

        return step

    primary.streams = [[at(n) for n in range(1, last + 1)]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary)
    try:
        node.start()
        node.wait("the first group's fsync held", lambda: (tmp_path / "gate.held").exists())
        node.wait("the second group applied", lambda: node.store.applied_offset == 2 * group)
        node.wait("the groups ahead read", lambda: read_ahead in seen)
        deadline = time.monotonic() + 0.3  # a reader that does not wait asks for more at once
        while read_ahead + 1 not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert read_ahead + 1 not in seen
        assert (node.store.head_offset, node.store.applied_offset) == (0, 2 * group)
    finally:
        gate.touch()  # a failed check must not leave the fsync held (the store's close waits for it)
    node.wait(f"at {last}", lambda: node.store.head_offset == last)
    # A group's frames are read before any of it is applied; the frames past the groups
    # ahead once the first is durable.
    assert seen[1] == (0, 0)
    assert seen[group] == (0, 0)
    head, applied = seen[read_ahead + 1]
    assert head >= group and applied >= 2 * group
    assert node.store.stats()["fsyncs"] <= 7  # a group is one fsync (storage/follow.py rule 5)


def test_a_stream_that_ends_with_groups_in_hand_resumes_after_them_each_applied_once(replica, tmp_path, monkeypatch):
    # Three full groups are read and handed over while the first one's fsync is held, then
    # the connection drops: the groups still in hand are applied and durable before the
    # next connection asks for anything (groups.py G4), so it resumes at the replica's
    # head, every row is applied once and in order, and the replica follows on.
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:1:HOLD={gate}")
    group = groups.BATCH
    handed, last = 3 * group, 3 * group + 50
    dropped = threading.Event()

    def drop() -> Exception:
        dropped.set()
        return WebSocketClientError("connection closed without a close frame")

    primary = ScriptedPrimary(body(EPOCH_A, last, hist=history(H1)))
    # The next connection asks after=handed - 1 (our head frame, rule 7b), then goes on.
    primary.streams = [[insert(n) for n in range(1, handed + 1)] + [drop], [insert(n) for n in range(handed, last + 1)]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary)
    try:
        node.start()
        node.wait("the first group's fsync held", lambda: (tmp_path / "gate.held").exists())
        node.wait("the stream dropped", dropped.is_set)
        assert node.store.head_offset == 0 and primary.afters == [0]
    finally:
        gate.touch()
    node.wait(f"at {last}", lambda: node.store.head_offset == last and node.status.state == "following")
    assert primary.afters == [0, handed - 1]
    logged = node.on_loop(lambda: [frame_offset(frame) for frame in node.store.frames_after(0)])
    assert logged == list(range(1, last + 1))
    assert node.on_loop(lambda: sorted(node.store.table("User").records)) == list(range(1, last + 1))
    assert node.status.reconnects == 1


def test_the_frames_of_a_group_are_one_write_call_under_either_sync(replica, monkeypatch):
    # storage/follow.py rule 5: a group of frames is handed to the log with one write call,
    # also under SERVICE_SYNC=off, where a write call per frame cost most of the apply.
    writes: list[int] = []

    class Counting(files.FileOps):
        def write(self, fd: int, data: bytes | memoryview) -> int:  # type: ignore[override]
            writes.append(len(data))
            return super().write(fd, data)

    primary = ScriptedPrimary(body(EPOCH_A, 300, hist=history(H1)))
    primary.streams = [[insert(n) for n in range(1, 301)]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    with files.use(Counting()):
        node = following(primary, replica, 300, sync="off")
    assert node.on_loop(lambda: node.store.live_counts()["User"]) == 300
    frames = sum(len(insert(n)) for n in range(1, 301))
    assert sum(writes) >= frames
    assert len([size for size in writes if size < 1000]) < 10  # not one write call per frame


# -- rule 3: what is applied ---------------------------------------------------------------------


def test_a_bad_frame_stops_following_after_applying_the_good_frames_before_it(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 4, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2), insert(4)]]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == "bad frame at offset 4: offset gap: expected 3, offsets 3 are missing"
    assert node.store.head_offset == 2
    assert node.user_ids() == [1, 2]


def test_a_frame_over_this_stores_payload_limit_is_refused_before_it_is_applied(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    big = insert(2, name="x" * 5000)
    primary.streams = [[insert(1), big]]
    node = replica(primary, max_payload=4096).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    size = len(big) - 16
    assert node.status.error == (
        f"bad frame at offset 2: record too large: a frame payload of {size} bytes, over the limit of 4096 "
        "(a log holding it would not reopen); nothing of it is kept"
    )
    assert node.store.head_offset == 1


def test_a_frame_that_does_not_fit_the_store_stops_following(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    ghost = encode_frame(2, insert(2)[16:].replace(b'"model":"User"', b'"model":"Ghost"'))
    primary.streams = [[insert(1), None, ghost]]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == "replication frame at offset 2: unknown model 'Ghost'"
    assert node.store.head_offset == 1


# -- rule 5: lag ------------------------------------------------------------------------------------


def test_lag_counts_the_primarys_head_and_a_quiet_stream_is_caught_up(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 5, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    node: Replica | None = None
    reports: list[dict] = []

    def behind() -> None:  # frames 3-5 not sent yet: 3 behind
        assert node is not None
        reports.append(node.status.report(node.store.head_offset))
        return None

    primary.streams = [[insert(1), insert(2), None, behind, insert(3), insert(4), insert(5)]]
    node = replica(primary)
    node.start()
    node.wait("caught up", lambda: node.store.head_offset == 5 and node.status.caught_up_at is not None)
    assert reports[0]["primary_offset"] == 5 and reports[0]["lag_offsets"] == 3
    assert reports[0]["state"] == "following"
    report = node.status.report(5)
    assert (report["primary_offset"], report["lag_offsets"], report["lag_seconds"]) == (5, 0, 0.0)


def test_the_poll_of_snapshot_raises_the_primarys_head_while_streaming(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    def written_on() -> None:
        primary.answer = body(EPOCH_A, 9, hist=history(H1))

    primary.streams = [[insert(1), None, written_on]]
    node = replica(primary, poll_seconds=0.0).start()
    node.wait("the head of 9", lambda: node.status.primary_offset == 9)
    assert node.status.report(1)["lag_offsets"] == 8
    # caught up at 1 until the poll saw 9: the seconds behind count from then
    node.wait("seconds behind", lambda: node.status.report(1)["lag_seconds"] > 0)
    assert node.status.report(1)["lag_seconds"] < deadline_seconds()


def test_a_snapshot_without_an_offset_is_asked_again_and_nothing_followed(replica):
    headless = {"epoch": EPOCH_A, "fingerprint": FINGERPRINT, "history": history(H1)}  # no "offset"
    primary = ScriptedPrimary(headless, epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    node = replica(primary, poll_seconds=0.0).start()
    node.wait("three more asks", lambda: primary.snapshots_asked >= 4)
    assert node.status.state == "reconnecting"
    assert node.status.primary_offset == 0
    assert (primary.epochs_asked, primary.afters, node.status.bootstraps) == (0, [], 0)


def test_the_primarys_head_is_polled_between_batches_while_frames_keep_coming(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    node: Replica | None = None
    seen: list[int] = []

    def written_on() -> bytes:
        primary.answer = body(EPOCH_A, 9, hist=history(H1))
        return insert(1)

    def record() -> bytes:
        assert node is not None
        seen.append(node.status.primary_offset)
        return insert(3)

    primary.streams = [[written_on, None, insert(2), None, record]]  # never a quiet turn
    node = replica(primary, poll_seconds=0.0)
    node.start()
    node.wait("at 3", lambda: node.store.head_offset == 3)
    assert seen == [9]
