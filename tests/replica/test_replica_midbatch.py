"""A read replica failing inside a batch's frames (issue 35: "a replica applies a batch as a
unit"; storage/follow.py rule 4): whether its stream breaks, a row of the batch does not fit
its store, or its own log refuses the batch's write, the replica shows none of that batch's
rows, and once it follows again it applies the batch whole.

The primary is played from a script through the follower's `primary=` seam, as in
the test_follower_*.py files (tests/support/follower_kit.py): a stream cut between two frames of
one batch is a step of the script, which a real primary only does by chance. What the
replica shows is read on its own loop at each of those moments; every wait is a poll with a
deadline.
"""

from __future__ import annotations

from typing import Any

from dbsvc.errors import WebSocketClientError
from dbsvc.storage.events import ChangeEvent, EventKind
from support.follower_kit import (  # the scripted primary and the in-process replica
    EPOCH_A,
    H1,
    Replica,
    ScriptedPrimary,
    body,
    epoch_stream,
    history,
    insert,
    user,
)


def in_batch(offset: int, first: int, last: int, uid: int | None = None, kind: EventKind = EventKind.INSERT) -> bytes:
    """The frame of a User row at `offset` (watermark `offset`) of the batch first..last."""
    uid = offset if uid is None else uid
    previous = user(uid) if kind is EventKind.UPDATE else None
    return ChangeEvent(kind, "User", offset, offset, uid, user(uid), previous, (first, last)).frame()


def primary_at(head: int, *streams: list) -> ScriptedPrimary:
    return ScriptedPrimary(
        body(EPOCH_A, head, hist=history(H1)), list(streams), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))]
    )


def test_a_stream_cut_inside_a_batch_shows_none_of_it_and_the_batch_comes_again_whole(replica):
    seen: list[Any] = []
    node: Replica | None = None

    def look() -> None:  # the replica's state while the stream sits between the batch's rows
        assert node is not None
        seen.append((node.user_ids(), node.store.head_offset))

    primary = primary_at(
        4,
        [insert(1), None, in_batch(2, 2, 4), in_batch(3, 2, 4), look, WebSocketClientError("connection lost: reset")],
        [insert(1), in_batch(2, 2, 4), in_batch(3, 2, 4), in_batch(4, 2, 4)],
    )
    node = replica(primary).start()
    node.wait("at 4", lambda: node.store.head_offset == 4 and node.status.state == "following")
    assert seen == [([1], 1)]
    assert primary.afters == [0, 0]  # the reconnection asked again from our head (its frame first)
    assert node.status.reconnects == 1
    assert node.user_ids() == [1, 2, 3, 4]


def test_a_row_that_does_not_fit_inside_a_complete_batch_keeps_none_of_the_batch(replica, tmp_path):
    # Row 3 updates a user nobody inserted: the batch is refused whole, rows 2 and 4 with it.
    bad = in_batch(3, 2, 4, uid=99, kind=EventKind.UPDATE)
    primary = primary_at(4, [insert(1), None, in_batch(2, 2, 4), bad, in_batch(4, 2, 4)])
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == "replication frame at offset 3: update of User 99, which does not exist here"
    assert node.store.head_offset == 1
    assert node.user_ids() == [1]
    node.close()
    # Nothing of the batch reached its log either: reopened, it follows on from offset 1
    # and applies the batch whole once the primary sends it right.
    again = replica(primary_at(4, [insert(1), in_batch(2, 2, 4), in_batch(3, 2, 4), in_batch(4, 2, 4)]))
    again.start()
    again.wait("at 4", lambda: again.store.head_offset == 4 and again.status.state == "following")
    assert again.primary is not None and again.primary.afters == [0]
    assert again.user_ids() == [1, 2, 3, 4]


def test_a_batch_its_own_log_refuses_to_write_leaves_none_of_it_and_comes_whole_after_a_restart(replica, monkeypatch):
    # The replica's second write call (the batch's frames, held together) finds no space.
    monkeypatch.setenv("DBSVC_FAULT", "write:2:ENOSPC")
    primary = primary_at(4, [insert(1), None, in_batch(2, 2, 4), in_batch(3, 2, 4), in_batch(4, 2, 4)])
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert "no space" in (node.status.error or "")
    assert node.store.head_offset == 1
    assert node.user_ids() == [1]
    node.close()
    monkeypatch.delenv("DBSVC_FAULT")
    again = replica(primary_at(4, [insert(1), in_batch(2, 2, 4), in_batch(3, 2, 4), in_batch(4, 2, 4)]))
    again.start()
    again.wait("at 4", lambda: again.store.head_offset == 4 and again.status.state == "following")
    assert again.user_ids() == [1, 2, 3, 4]
