"""A read replica whose primary compacts (dbsvc/replica/follower.py rule 9), the decisions the
scripted primary of tests/support/follower_kit.py (test_follower_stream.py) did not reach:
a cut the replica's own compaction fails to make (rule 2's bootstrap then, the log saying
why word for word), a primary that compacts twice (the count in `/metrics`), and a
`/replicate/snapshot` header that names no cut (following stops, saying so).

In process, on a real store in a temporary directory; every wait is a poll with a deadline.
Written from the survivors of the session-6 mutation run of follower.py (docs/mutation.md).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from dbsvc.storage.events import ChangeEvent, EventKind
from support.follower_kit import (  # the scripted primary and the in-process replica
    EPOCH_A,
    EPOCH_B,
    FINGERPRINT,
    H1,
    H2,
    URL,
    Replica,
    ScriptedPrimary,
    body,
    epoch_stream,
    history,
    insert,
    update,
    user,
)

EPOCH_C = "c" * 32


def changed(offset: int, uid: int, watermark: int) -> bytes:
    """The frame of an update of User `uid` at `offset` whose watermark is `watermark`."""
    return ChangeEvent(
        EventKind.UPDATE, "User", offset, watermark, uid, dict(user(uid), name="changed"), user(uid)
    ).frame()


def compacts(primary: ScriptedPrimary, epoch: str, head: int, frame: bytes) -> Any:
    """A script step: the primary compacts at `head` into `epoch`, then sends `frame`."""

    def step() -> bytes:
        primary.answer = body(epoch, head + 1, hist=history(H1))
        return frame

    return step


def test_a_cut_whose_compaction_fails_here_bootstraps_and_the_log_says_why(replica, monkeypatch, caplog):
    # The replica's own compaction at the primary's cut fails (its first file step, an I/O
    # error): the store stays in epoch A, so the replica cannot follow epoch B's frames from
    # its own state, and bootstraps from the primary's snapshot instead (rule 2).
    caplog.set_level("INFO", logger="dbsvc.replica")
    monkeypatch.setenv("DBSVC_FAULT", "compact:1:EIO")
    primary = ScriptedPrimary(body(EPOCH_A, 4, hist=history(H1)))
    first = [insert(1), insert(2), insert(3), update(4, 1), compacts(primary, EPOCH_B, 4, insert(5, watermark=4))]
    primary.streams = [first, [insert(5, watermark=4)]]
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        epoch_stream(EPOCH_B, 4, hist=history(H1)),  # the cut, read from its header
        epoch_stream(EPOCH_B, 4, range(1, 4), hist=history(H1)),  # the bootstrap's snapshot
    ]
    node = replica(primary).start()
    node.wait("at 5 in epoch B", lambda: node.store.head_offset == 5 and node.store.epoch == EPOCH_B)
    node.wait("following", lambda: node.status.state == "following")
    assert (node.status.bootstraps, node.status.compactions, primary.epochs_asked) == (2, 0, 3)
    assert node.user_ids() == [1, 2, 3, 5]
    why = (
        f"following {URL}: the primary is in epoch {EPOCH_B} from offset 4, this replica in {EPOCH_A} at 4, "
        "and this replica cannot cut there: the compaction failed (the log says why); bootstrapping again"
    )
    assert ("WARNING", why) in [(r.levelname, r.getMessage()) for r in caplog.records]


def test_each_compaction_at_a_cut_is_counted(replica):
    # The primary compacts at 3 (epoch B: 2 users, User watermark 2) and at 5 (epoch C: 3
    # users, watermark 3); the first frame of each new epoch counts from there, so it is met
    # mid-stream. Two compactions here, no second bootstrap, and /metrics counts both.
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)))
    primary.streams = [
        [insert(1), insert(2), update(3, 1), compacts(primary, EPOCH_B, 3, insert(4, watermark=3, uid=3))],
        [insert(4, watermark=3, uid=3), changed(5, 2, watermark=4), compacts(primary, EPOCH_C, 5, insert(6, 4, 4))],
        [insert(6, watermark=4, uid=4)],
    ]
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        epoch_stream(EPOCH_B, 3, hist=history(H1)),
        epoch_stream(EPOCH_C, 5, hist=history(H1)),
    ]
    node = replica(primary).start()
    node.wait("at 6 in epoch C", lambda: node.store.head_offset == 6 and node.store.epoch == EPOCH_C)
    assert (node.status.bootstraps, node.status.compactions) == (1, 2)
    assert primary.afters == [0, 3, 5]
    assert node.user_ids() == [1, 2, 3, 4]


MALFORMED = "the primary answered a malformed /replicate/snapshot: "
RECORD = '{"id": ..., "forks": [...]}'


def cutting_at_3(primary: ScriptedPrimary) -> None:
    """The primary compacts at 3 into epoch B; frame 4 is of epoch B (watermark 3)."""
    primary.streams = [
        [insert(1), insert(2), update(3, 1), compacts(primary, EPOCH_B, 3, insert(4, watermark=3, uid=3))],
        [insert(4, watermark=3, uid=3)],
    ]


@pytest.mark.parametrize(
    "header, message",
    [
        ({"epoch": EPOCH_B}, "offset missing, expected a non-negative integer"),
        ({"epoch": EPOCH_B, "offset": "3"}, "offset '3', expected a non-negative integer"),
        ({"epoch": EPOCH_B, "offset": True}, "offset True, expected a non-negative integer"),
        ({"offset": 3}, "epoch missing, expected a non-empty string"),
        ({"epoch": 7, "offset": 3}, "epoch 7, expected a non-empty string"),
        ({"epoch": EPOCH_B, "offset": 3, "fingerprint": None}, "fingerprint None, expected a string"),
        (
            {"epoch": EPOCH_B, "offset": 3, "history": {"id": H1}},
            f"history {{'id': '{H1}'}}, expected null or a history record {RECORD}",
        ),
    ],
    ids=["no-offset", "offset-text", "offset-true", "no-epoch", "epoch-number", "fingerprint-null", "history-garbled"],
)
def test_a_malformed_cut_header_is_transient_and_the_next_cut_is_made(replica, caplog, header, message):
    # It stopped following ("the snapshot stream's header names no epoch and offset"), and a
    # garbled history was never read. Now it is the primary's malformed answer, as its
    # /snapshot's is: nothing is cut or installed, the next connection asks again.
    caplog.set_level("INFO", logger="dbsvc.replica")
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)))
    cutting_at_3(primary)
    cut = json.dumps({"type": "snapshot", "format": 1, "fingerprint": FINGERPRINT, **header})
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        [cut, "never read"],
        epoch_stream(EPOCH_B, 3, hist=history(H1)),  # the next connection's cut
    ]
    node = replica(primary).start()
    node.wait("at 4 in epoch B", lambda: node.store.head_offset == 4 and node.store.epoch == EPOCH_B)
    told = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert ("INFO", f"following {URL}: {MALFORMED}{message}; reconnecting") in told
    assert (node.status.bootstraps, node.status.compactions, primary.epochs_asked) == (1, 1, 3)
    assert node.user_ids() == [1, 2, 3]


def test_a_cut_header_of_another_schema_still_stops_following(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)))
    cutting_at_3(primary)
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1)), epoch_stream(EPOCH_B, 3, fingerprint="other")]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == (
        f"the primary's schema fingerprint 'other' differs from this replica's {FINGERPRINT!r}: "
        "serve the same schema on both"
    )
    assert (node.store.epoch, node.store.head_offset, node.status.compactions) == (EPOCH_A, 3, 0)


def test_a_frame_of_a_new_epoch_the_primary_does_not_name_bootstraps_and_the_log_quotes_it(replica, caplog):
    # Frame 3 counts its watermark from 1 (a new epoch), but the primary's /snapshot still
    # names epoch A: not a cut this replica can follow; the log quotes the store's refusal.
    caplog.set_level("INFO", logger="dbsvc.replica")
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)))
    primary.streams = [[insert(1), insert(2), insert(3, watermark=1)], [insert(3)]]
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        epoch_stream(EPOCH_A, 2, range(1, 3), hist=history(H1)),
    ]
    node = replica(primary).start()
    node.wait("a second bootstrap", lambda: node.status.bootstraps == 2)
    why = (
        f"following {URL}: replication frame at offset 3: User watermark 1 follows 2 here: "
        "the primary started a new epoch; bootstrapping again"
    )
    assert ("WARNING", why) in [(r.levelname, r.getMessage()) for r in caplog.records]
    assert node.status.compactions == 0


def test_a_new_epoch_in_another_history_is_bootstrapped_never_cut(replica, caplog):
    # The primary was restored (history H2, not a fork of ours) and is in epoch B, its head
    # past ours: its cut would cut another history, so the replica bootstraps (rule 2).
    caplog.set_level("INFO", logger="dbsvc.replica")
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)))

    def restored() -> None:
        primary.answer = body(EPOCH_B, 4, hist=history(H2))
        return None

    primary.streams = [[insert(1), insert(2), None, restored], []]
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        epoch_stream(EPOCH_B, 4, range(1, 5), hist=history(H2)),
        epoch_stream(EPOCH_B, 4, range(1, 5), hist=history(H2)),
    ]
    node = replica(primary, poll_seconds=0.0).start()
    node.wait("in epoch B", lambda: node.store.epoch == EPOCH_B and node.status.state == "following")
    assert (node.status.bootstraps, node.status.compactions) == (2, 0)
    assert node.store.history is not None and node.store.history.id == H2
    assert node.user_ids() == [1, 2, 3, 4]
    why = f"following {URL}: the primary is in epoch {EPOCH_B}, this replica in {EPOCH_A}; bootstrapping again"
    assert ("WARNING", why) in [(r.levelname, r.getMessage()) for r in caplog.records]


def test_a_frame_of_the_next_epoch_met_behind_the_cut_bootstraps_and_the_log_says_why(replica, caplog):
    # The replica applied 2 rows; frame 3 comes counted in the primary's next epoch, whose
    # cut is at 4: rows 3 and 4 of the old epoch never came here, so it cannot follow on.
    caplog.set_level("INFO", logger="dbsvc.replica")
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)))
    primary.streams = [
        [insert(1), insert(2), compacts(primary, EPOCH_B, 4, insert(3, watermark=1))],
        [insert(5, watermark=5)],
    ]
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        epoch_stream(EPOCH_B, 4, hist=history(H1)),
        epoch_stream(EPOCH_B, 4, range(1, 5), hist=history(H1)),
    ]
    node = replica(primary).start()
    node.wait("at 5 in epoch B", lambda: node.store.head_offset == 5 and node.store.epoch == EPOCH_B)
    assert (node.status.bootstraps, node.status.compactions) == (2, 0)
    why = (
        f"following {URL}: the primary is in epoch {EPOCH_B} from offset 4, this replica in {EPOCH_A} at 2, "
        "and its frame 3 is of a later epoch; bootstrapping again"
    )
    assert ("WARNING", why) in [(r.levelname, r.getMessage()) for r in caplog.records]


class CompactsAgain(ScriptedPrimary):
    """Once the replica has reached epoch B, this primary has compacted again (epoch C, at
    the same offset): the replica's next look at /snapshot finds another cut."""

    node: Replica | None = None

    def snapshot(self) -> Any:
        if self.node is not None and self.node.store.epoch == EPOCH_B:
            self.answer = body(EPOCH_C, 2, hist=history(H1))
        return super().snapshot()


def test_a_second_cut_right_after_the_first_is_read_afresh(replica):
    primary = CompactsAgain(body(EPOCH_A, 2, hist=history(H1)))

    def compacted() -> None:  # the primary compacts at 2 while the stream is quiet
        primary.answer = body(EPOCH_B, 2, hist=history(H1))
        return None

    primary.streams = [[insert(1), insert(2), None, compacted]]
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        epoch_stream(EPOCH_B, 2, hist=history(H1)),
        epoch_stream(EPOCH_C, 2, hist=history(H1)),
    ]
    node = primary.node = replica(primary, poll_seconds=0.0)
    node.start()
    node.wait("in epoch C", lambda: node.store.epoch == EPOCH_C and node.status.compactions == 2)
    assert (node.status.state, node.status.error, primary.epochs_asked) == ("following", None, 3)
    assert node.user_ids() == [1, 2]


def test_at_start_a_replica_with_rows_waits_for_its_first_connection_to_cut(replica):
    # One row applied in epoch A; meanwhile the primary compacted at 1 (epoch B). The start
    # does not bootstrap: the first connection compacts at the cut, nothing downloaded.
    first = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), [[insert(1)]])
    first.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(first).start()
    node.wait("at 1", lambda: node.store.head_offset == 1 and node.status.state == "following")
    node.close()
    primary = ScriptedPrimary(body(EPOCH_B, 1, hist=history(H1)), [[]], [epoch_stream(EPOCH_B, 1, hist=history(H1))])
    again = replica(primary)
    again.follower.prepare()
    assert (again.status.bootstraps, primary.epochs_asked, again.store.epoch) == (0, 0, EPOCH_A)
    again.follower.start(again.loop)
    again.wait("in epoch B", lambda: again.store.epoch == EPOCH_B and again.status.state == "following")
    assert (again.status.bootstraps, again.status.compactions) == (0, 1)


def test_at_start_an_empty_replica_bootstraps_even_in_its_primarys_history(replica):
    # Bootstrapped from an empty primary (epoch A, history H1, no rows); the primary has
    # rows since and compacted (epoch B): an empty replica has nothing to cut, so the start
    # bootstraps at once.
    first = ScriptedPrimary(body(EPOCH_A, 0, hist=history(H1)), [[]], [epoch_stream(EPOCH_A, 0, hist=history(H1))])
    node = replica(first).start()
    node.wait("following", lambda: node.status.state == "following")
    node.close()
    primary = ScriptedPrimary(body(EPOCH_B, 2, hist=history(H1)), [[]])
    primary.epochs = [epoch_stream(EPOCH_B, 2, range(1, 3), hist=history(H1))]
    again = replica(primary)
    again.follower.prepare()
    assert (again.status.bootstraps, again.store.epoch, again.store.head_offset) == (1, EPOCH_B, 2)
