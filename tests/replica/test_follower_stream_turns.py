"""A read replica's turns of its stream (dbsvc/replica/follower.py rules 3, 5 and 9, `_stream`
and `_call_on_loop`): a group that brings it to the primary's head counts as caught up even
while frames keep coming, the poll of the primary's `/snapshot` keeps to `poll_seconds`, and a
poll that finds the primary compacted waits for the groups in hand before it compacts, a
refusal of one of them then stopping following with the frame's own reason.

The scripted primary of tests/support/follower_kit.py on a real store in a temporary
directory; every wait is a poll with a deadline. Written from the survivors of the
session-26 mutation run of follower.py (docs/mutation.md): no older test caught up
without a quiet read (which marks it caught up too), none counted the polls of a stream, and none reached `_call_on_loop`'s `except StreamError` (no call made through
it raises one: only the wait for the groups in hand, `Handoff.drain`, can re-raise a
group's refusal there).
"""

from __future__ import annotations

from dbsvc.replica import groups
from dbsvc.storage.logfile import encode_frame
from support.follower_kit import EPOCH_A, EPOCH_B, H1, ScriptedPrimary, body, epoch_stream, history, insert

GROUP = groups.BATCH  # a full group: handed over without a wait (groups.py G4)


def test_a_group_that_reaches_the_primarys_head_is_caught_up_without_a_quiet_read(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    seen: list[float | None] = []

    def noted() -> bytes:
        seen.append(node.status.caught_up_at)
        return insert(3)

    # A None after a frame ends that read's group at once: no turn of the loop is quiet
    # until frame 3 is read, and only frame 2's group reached the primary's head of 2.
    primary.streams = [[insert(1), None, insert(2), None, noted]]
    node = replica(primary, poll_seconds=3600.0)
    node.start()
    node.wait("frame 3 read", lambda: len(seen) == 1)
    assert seen[0] is not None


def test_a_stream_polls_the_primarys_snapshot_no_more_often_than_poll_seconds(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    asked: list[int] = []

    def noted(frame: bytes) -> object:
        def step() -> bytes | None:
            asked.append(primary.snapshots_asked)
            return frame

        return step

    # Each None is a quiet read: one more turn of the stream's loop, at once.
    primary.streams = [[noted(insert(1)), None, insert(2), None, None, insert(3), None, None, noted(None)]]
    node = replica(primary, poll_seconds=3600.0).start()
    node.wait("the script read to its end", lambda: len(asked) == 2)
    assert node.store.head_offset == 3 and node.status.state == "following"
    assert asked[1] == asked[0]  # no poll within the hour, however many turns


def test_a_refused_group_met_by_the_wait_before_a_compaction_stops_following_with_its_reason(replica):
    # Frames 1-3 applied and durable, then the primary's /snapshot names epoch B cut at 3
    # (its history ours) as a full group 4..GROUP+3 is read, whose last frame names a model
    # this schema lacks. The poll after the hand-over compacts at 3, which first waits for
    # the group in hand: its refusal comes out of that wait.
    last = GROUP + 3
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)))
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1)), epoch_stream(EPOCH_B, 3, hist=history(H1))]

    def compacted() -> bytes:
        primary.answer = body(EPOCH_B, last, hist=history(H1))
        return insert(4)

    ghost = encode_frame(last, insert(last)[16:].replace(b'"model":"User"', b'"model":"Ghost"'))
    group = [compacted] + [insert(n) for n in range(5, last)] + [ghost]
    primary.streams = [[insert(1), insert(2), insert(3), None, *group]]
    node = replica(primary, poll_seconds=0.0).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == f"replication frame at offset {last}: unknown model 'Ghost'"
    assert node.store.head_offset == last - 1  # the frames before the refused one count
    assert (node.store.epoch, node.status.compactions, primary.epochs_asked) == (EPOCH_A, 0, 2)
