"""A read replica whose event loop is closed under its reading thread (dbsvc/replica/groups.py
G4, `Handoff.hand`; follower.py rule 4): the group read then has nowhere to go, so the hand-off
puts its count back and the thread stops following at once with the loop's error, instead of
`_settle` waiting its 120 s for a group nothing will ever apply.

The scripted primary of tests/support/follower_kit.py on a real store in a temporary
directory; the loop is stopped and closed by a step of the script, on the reading thread,
between two reads. Written from the open survivors of session 25's mutation run of
groups.py (`hand` 32-34, docs/mutation.md, sessions 25 and 26): a count left at 1 or 2, or
taken to -1, and the thread is still in `_settle`'s drain when this test's deadline ends.
"""

from __future__ import annotations

from support.follower_kit import EPOCH_A, H1, ScriptedPrimary, body, epoch_stream, history, insert


def test_a_loop_closed_under_the_reading_thread_stops_following_at_once(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    node = replica(primary)

    def loop_closed() -> bytes:
        node.loop.call_soon_threadsafe(node.loop.stop)
        node.thread.join(5)
        assert not node.thread.is_alive()
        node.loop.close()
        return insert(2)

    primary.streams = [[insert(1), None, loop_closed]]
    node.start()
    try:
        node.wait("stopped", lambda: node.status.state == "stopped")
        assert node.status.error == "Event loop is closed"
        assert node.store.head_offset == 1  # frame 2 was never handed over
    finally:
        node.store.close()  # its loop is gone: the committer is stopped here
