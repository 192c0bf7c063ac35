"""A read replica whose loop cancels its tasks while a group is applied (dbsvc/replica/groups.py
G4, `Handoff._apply_queued`; follower.py rule 4): what `asyncio.run` does to the tasks left
when a server's loop shuts down. The reading thread, waiting for that group, must get an
error it handles, named as a cancelled apply, and stop following with it; a cancellation
handed to the thread as itself is no `Exception`, so it would end the thread with
`/metrics` still saying `following`.

The scripted primary of tests/support/follower_kit.py on a real store in a temporary
directory; the group's fsync held with `DBSVC_FAULT` (storage/files.py) so that the
cancellation lands while it is applied. Written from the open survivors of session 25's
mutation run of groups.py (`_apply_queued` 10-13, docs/mutation.md, sessions 25 and 26).
"""

from __future__ import annotations

import asyncio

from support.follower_kit import EPOCH_A, H1, Replica, ScriptedPrimary, body, epoch_stream, history, insert


def test_a_group_whose_apply_is_cancelled_stops_following_and_says_so(tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:1:HOLD={gate}")
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2)]]  # one group, not full: the thread waits until it is durable
    (tmp_path / "replica").mkdir()
    node = Replica(str(tmp_path / "replica"), primary).start()  # closed here: its loop's tasks are cancelled
    try:
        node.wait("the group's fsync held", lambda: (tmp_path / "gate.held").exists())

        def cancel_every_task() -> None:  # as asyncio.run does to the tasks left at its end
            for task in asyncio.all_tasks(node.loop):
                task.cancel()

        node.loop.call_soon_threadsafe(cancel_every_task)
        node.wait("stopped", lambda: node.status.state == "stopped")
        assert node.status.error == "the group's apply was cancelled"
    finally:
        gate.touch()  # the store's close waits for the held fsync
        primary.idle.set()
        node.follower.stop()
        node.loop.call_soon_threadsafe(node.loop.stop)
        node.thread.join(5)
        node.store.close()  # on this thread: the loop that ran the store's tasks is stopped
        node.loop.close()
