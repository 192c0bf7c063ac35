"""The reading thread's waits for the groups it handed to the loop (dbsvc/replica/groups.py G4,
follower.py rule 3): `_settle`'s, before a connection that ended is followed by the next,
and `_call_on_loop`'s, before anything else runs on the loop.

Session 24 (wt-hand) found no test that failed without either wait. For `_settle`: the
stream tests held a group's fsync, which leaves the group applied and `Pipeline.unsynced`
set, and `_settle` then waits through `_call_on_loop`; the gap is a group handed over
whose apply has not begun, with nothing unsynced yet. Here the event loop itself is held
(a callback on it waiting on a `threading.Event`), so that group stays in hand for as long
as the test says. For `_call_on_loop`: of the calls it makes, only a compaction at the
primary's cut met by the poll in the middle of a stream can find groups in hand (every
other follows `_settle`, or comes before this connection handed anything); a group
queued behind one whose apply waits for a held fsync is then applied after the
compaction's switch, in the new epoch, unless the thread waited.

Nothing here sleeps to decide: the hold is let go once the reading thread is parked in
a `drain` (seen in its own live stack), or has gone past the point where it should have
waited (the next connection opened; the compaction waiting for its switch, as the
compactor says: storage/compactor.py `Compactor.at_switch`). One of the two always comes, and only the wait gives the right end.

The scripted primary and in-process replica of tests/support/follower_kit.py.
"""

from __future__ import annotations

import sys
import threading

from dbsvc.errors import WebSocketClientError
from dbsvc.replica import groups
from dbsvc.storage.logfile import encode_frame, frame_offset
from support.follower_kit import (
    EPOCH_A,
    EPOCH_B,
    H1,
    Replica,
    ScriptedPrimary,
    body,
    deadline_seconds,
    epoch_stream,
    history,
    insert,
    update,
)

GROUP = groups.BATCH  # a full group: the thread hands it over and reads on at once


def _parked_in(thread: threading.Thread, name: str) -> bool:
    """Whether `thread` is now inside a function called `name` (its live stack; under
    mutation testing, bench/mutation_pytest.py, a method's body runs under mutmut's name
    for it, `xǁClassǁname__mutmut_orig` or a mutant's)."""
    mutated = f"ǁ{name}__mutmut_"
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == name or mutated in frame.f_code.co_name:
            return True
        frame = frame.f_back
    return False


def _start(node: Replica) -> threading.Thread:
    """Start `node` and return its reading thread: the one it started (a thread an
    earlier test left may still run beside it)."""
    before = set(threading.enumerate())
    node.start()
    (thread,) = [t for t in threading.enumerate() if t.name == "dbsvc-follower" and t not in before]
    return thread


class LoopHold:
    """Holds `node`'s event loop in a callback until `release`: a group handed over in
    the meantime is queued on the loop and not applied."""

    def __init__(self, node: Replica) -> None:
        self.node = node
        self.holding = threading.Event()
        self.released = threading.Event()

    def hold(self) -> None:
        """Called on the reading thread (a script step): returns once the loop is held."""
        self.node.loop.call_soon_threadsafe(self._on_loop)
        assert self.holding.wait(deadline_seconds()), "the loop never ran the hold"

    def _on_loop(self) -> None:
        self.holding.set()
        self.released.wait(deadline_seconds())  # bounded: a failed test frees the loop by itself

    def release(self) -> None:
        self.released.set()


def test_a_stream_that_ends_with_a_group_handed_but_not_yet_applied_reconnects_after_it(replica):
    # One full group handed over while the loop is held (its apply not begun, nothing
    # unsynced), then the connection drops. The thread must wait in `_settle` for the
    # group to be applied and durable; a thread that does not reads the head as 0 and
    # asks for frame 1 again.
    last = GROUP + 20
    primary = ScriptedPrimary(body(EPOCH_A, last, hist=history(H1)))
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary)
    held = LoopHold(node)

    def first() -> bytes:
        held.hold()
        return insert(1)

    dropped = WebSocketClientError("connection closed without a close frame")
    primary.streams = [
        [first] + [insert(n) for n in range(2, GROUP + 1)] + [dropped],
        # The next connection asks after=GROUP - 1 (its head frame first, rule 7b).
        [insert(n) for n in range(GROUP, last + 1)],
    ]
    try:
        thread = _start(node)
        assert held.holding.wait(deadline_seconds())
        node.wait(
            "the thread parked in a drain or connected again",
            lambda: _parked_in(thread, "drain") or len(primary.afters) == 2,
        )
        assert primary.afters == [0]
        assert node.store.applied_offset == 0  # the group is in hand, not applied
    finally:
        held.release()
    node.wait(f"at {last}", lambda: node.store.head_offset == last and node.status.state == "following")
    assert primary.afters == [0, GROUP - 1]
    assert node.status.reconnects == 1
    assert node.on_loop(lambda: sorted(node.store.table("User").records)) == list(range(1, last + 1))


def _at_its_switch(node: Replica) -> bool:
    """Whether the store's compaction waits for its switch (compactor.py `at_switch`: every
    thread step done, the committer asked to run the switch between two fsyncs), read on
    the loop."""
    return node.on_loop(lambda: node.store.compactor.at_switch)


def test_a_cut_met_by_the_poll_with_groups_in_hand_compacts_once_they_are_applied(replica, tmp_path, monkeypatch):
    # The first group's fsync is held, so the second group's apply waits for it and the
    # third stays queued behind it (DEPTH groups in hand). Then the poll of /snapshot
    # (every turn here) names epoch B, cut at the second group's end. The third group was
    # sent before the primary's switch: its frames are epoch A's (an update before the cut
    # makes A's User watermark one more than B's), so it must be applied in epoch A, before
    # the compaction at the cut, which renumbers it (`_call_on_loop` drains first). The
    # frames after it are epoch B's. A compaction started beside the queued group switches
    # once the held fsync is done, before that group's turn: epoch A's frames then meet
    # epoch B, and the replica bootstraps again.
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:1:HOLD={gate}")
    cut, sent_in_a, last = 2 * GROUP, 3 * GROUP, 4 * GROUP + 30
    primary = ScriptedPrimary(body(EPOCH_A, last, hist=history(H1)))
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        epoch_stream(EPOCH_B, cut, range(1, cut), hist=history(H1)),
    ]
    node = replica(primary, poll_seconds=0.0)

    def compacted() -> bytes:
        # Read on the reading thread as the third group's first frame: the second group
        # applied (its apply now waits for the first's fsync), the primary compacted at it.
        node.wait("the second group applied", lambda: node.store.applied_offset == cut)
        primary.answer = body(EPOCH_B, last, hist=history(H1))
        return insert(cut + 1, uid=cut)

    in_a = [insert(1), update(2, 1)] + [insert(n, uid=n - 1) for n in range(3, cut + 1)]
    third = [compacted] + [insert(n, uid=n - 1) for n in range(cut + 2, sent_in_a + 1)]
    in_b = [insert(n, watermark=n - 1, uid=n - 1) for n in range(sent_in_a + 1, last + 1)]
    primary.streams = [in_a + third + in_b]
    try:
        thread = _start(node)
        node.wait("the first group's fsync held", lambda: (tmp_path / "gate.held").exists())
        node.wait(
            "the thread draining, or the compaction at its switch",
            lambda: _parked_in(thread, "drain") or _at_its_switch(node),
        )
        assert node.store.epoch == EPOCH_A and node.store.head_offset == 0
    finally:
        gate.touch()
    node.wait(f"at {last} in epoch B", lambda: node.store.head_offset == last and node.store.epoch == EPOCH_B)
    assert (node.status.bootstraps, node.status.compactions) == (1, 1)
    assert node.status.state == "following"
    assert node.store.epoch_state.log_base == cut
    logged = node.on_loop(lambda: [frame_offset(frame) for frame in node.store.frames_after(cut)])
    assert logged == list(range(cut + 1, last + 1))
    assert node.on_loop(lambda: sorted(node.store.table("User").records)) == list(range(1, last))
    assert node.store.watermarks()["User"] == last - 1


def test_a_group_that_fails_with_one_queued_behind_it_stops_following_at_once(replica, tmp_path, monkeypatch):
    # The second group holds a frame that does not fit the store; while the first's fsync
    # is held its apply waits, the third group is queued behind it and the thread waits
    # for room with a fourth. The failed apply drops the queued group, and both leave the
    # count of groups in hand (G4): the thread gets the error, drains nothing, and stops.
    # Counted wrong, its drain would wait for groups no apply will ever return.
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:1:HOLD={gate}")
    ghost_at, last = 2 * GROUP, 4 * GROUP
    primary = ScriptedPrimary(body(EPOCH_A, last, hist=history(H1)))
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    ghost = encode_frame(ghost_at, insert(ghost_at)[16:].replace(b'"model":"User"', b'"model":"Ghost"'))
    primary.streams = [
        [insert(n) for n in range(1, ghost_at)] + [ghost] + [insert(n) for n in range(ghost_at + 1, last + 1)]
    ]
    node = replica(primary)
    try:
        thread = _start(node)
        node.wait("the first group's fsync held", lambda: (tmp_path / "gate.held").exists())
        node.wait("the thread waiting for room", lambda: _parked_in(thread, "hand") and _parked_in(thread, "wait"))
        assert node.store.head_offset == 0
    finally:
        gate.touch()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == f"replication frame at offset {ghost_at}: unknown model 'Ghost'"
    assert node.store.head_offset == ghost_at - 1
    assert node.on_loop(lambda: sorted(node.store.table("User").records)) == list(range(1, ghost_at))
