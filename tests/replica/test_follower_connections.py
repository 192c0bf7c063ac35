"""What a replica checks on every connection to its primary (dbsvc/replica/follower.py rules 1
and 7), in process over a scripted primary (tests/support/follower_kit.py): the schema's
fingerprint, the head frame on a reconnection, and the primary's history against its own
(adopted, diverged or bootstrapped again).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dbsvc.errors import ConfigError, WebSocketClientError
from dbsvc.storage.history import Fork, History
from support.follower_kit import (
    EPOCH_A,
    EPOCH_B,
    FINGERPRINT,
    H1,
    H2,
    H3,
    OTHER,
    URL,
    ScriptedPrimary,
    body,
    epoch_stream,
    following,
    history,
    insert,
    restored_behind,
)

# -- rule 1: the fingerprint, at start and on every connection ----------------------------------


def fingerprint_message(theirs: str) -> str:
    return (
        f"the primary's schema fingerprint {theirs!r} differs from this replica's "
        f"{FINGERPRINT!r}: serve the same schema on both"
    )


def test_a_fingerprint_mismatch_at_start_refuses_the_start(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 0, fingerprint=OTHER))
    node = replica(primary)
    with pytest.raises(ConfigError) as info:
        node.follower.prepare()
    assert str(info.value) == fingerprint_message(OTHER)
    assert primary.epochs_asked == 0


def test_a_primary_unreachable_at_start_is_checked_when_it_comes_up_and_a_mismatch_stops(replica):
    primary = ScriptedPrimary(OSError("connection refused"))
    node = replica(primary)
    node.follower.prepare()  # does not refuse the start
    assert node.status.error == "the primary is not reachable: connection refused"
    assert node.status.synced is False
    assert node.status.waiting_for() == (
        f"the first bootstrap from its primary {URL} (starting: the primary is not reachable: connection refused)"
    )
    primary.answer = body(EPOCH_A, 0, fingerprint=OTHER)  # it comes up serving another schema
    node.follower.start(node.loop)
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == fingerprint_message(OTHER)
    assert primary.afters == [] and primary.epochs_asked == 0


def test_the_fingerprint_is_checked_again_on_a_reconnection_and_a_mismatch_stops(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)))

    def restarted_with_another_schema() -> Exception:
        primary.answer = body(EPOCH_A, 2, fingerprint=OTHER, hist=history(H1))
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), None, restarted_with_another_schema]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == fingerprint_message(OTHER)
    assert primary.afters == [0]  # never asked for the stream again
    assert node.store.head_offset == 2
    assert node.status.reconnects == 1


def test_a_bootstrap_snapshot_of_another_schema_is_not_installed(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 0), epochs=[epoch_stream(EPOCH_A, 0, fingerprint=OTHER)])
    node = replica(primary)
    with pytest.raises(ConfigError) as info:
        node.follower.prepare()
    assert str(info.value) == fingerprint_message(OTHER)
    assert node.store.epoch != EPOCH_A


# -- rule 7: histories, on every connection -------------------------------------------------------


def reconnected(primary: ScriptedPrimary, then: list) -> Callable[[], Exception]:
    """A step that drops the connection after `then` became the next connection's script."""

    def drop() -> Exception:
        primary.streams.insert(0, then)
        return WebSocketClientError("connection closed without a close frame")

    return drop


def test_a_reconnection_asks_for_the_head_frame_and_goes_on_after_it(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 4, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2), insert(3), None, reconnected(primary, [insert(3), insert(4)])]]
    node = replica(primary).start()
    node.wait("at 4", lambda: node.store.head_offset == 4)
    assert primary.afters == [0, 2]
    assert node.status.reconnects == 1
    assert node.status.bootstraps == 1
    assert node.user_ids() == [1, 2, 3, 4]


def test_a_head_frame_that_differs_on_reconnection_bootstraps_from_the_primary(replica, caplog):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    restored = [insert(3, name="restored")]  # the same offset, another row: a restore
    primary.streams = [[insert(1), insert(2), insert(3), None, reconnected(primary, restored)]]
    primary.epochs.append(epoch_stream(EPOCH_A, 3, range(1, 4), hist=history(H1)))  # the restored epoch
    node = replica(primary).start()
    node.wait("bootstrapped again", lambda: node.status.bootstraps == 2 and node.status.state == "following")
    assert primary.afters == [0, 2, 3]
    assert node.status.reconnects == 1
    assert node.store.head_offset == 3
    assert (
        "WARNING",
        f"following {URL}: the primary's frame at offset 3 differs from this replica's: the histories "
        "diverged (a restore or a rewrite on the primary); bootstrapping again",
    ) in [(r.levelname, r.getMessage()) for r in caplog.records]


def test_a_head_frame_not_sent_in_time_is_a_reconnection(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2), insert(3), None, reconnected(primary, [None])], [insert(3)]]
    node = replica(primary).start()
    node.wait("two reconnections", lambda: node.status.reconnects == 2)
    assert node.status.error == "the primary did not send its frame 3 within 10 s"
    node.wait("following", lambda: node.status.state == "following")
    assert primary.afters == [0, 2, 2]
    assert node.status.bootstraps == 1


def test_a_primary_behind_the_replica_leaves_it_diverged_with_its_rows(replica):
    primary = restored_behind()
    node = replica(primary).start()
    node.wait("diverged", lambda: node.status.state == "diverged")
    assert node.status.error == (
        "the primary holds offsets up to 1, this replica up to 3; bootstrapping again would discard the rows after 1"
    )
    assert primary.epochs_asked == 1 and primary.afters == [0]
    assert node.user_ids() == [1, 2, 3]
    assert node.status.synced is True


def test_rebootstrap_lets_a_replica_ahead_of_its_primary_copy_it(replica):
    primary = restored_behind(EPOCH_B, H2)
    primary.epochs.append(epoch_stream(EPOCH_B, 1, range(1, 2), hist=history(H2)))
    node = replica(primary, rebootstrap=True).start()
    node.wait("in epoch B", lambda: node.store.epoch == EPOCH_B and node.status.state == "following")
    assert node.user_ids() == [1]
    assert node.store.history == History(H2, ())


@pytest.mark.parametrize(
    "theirs, kept",
    [
        (None, History(H1, ())),  # a primary older than histories: the head frame alone judges
        (history(H1), History(H1, ())),
        (history(H2, (H1, 3)), History(H2, (Fork(H1, 3),))),  # forked at our head: adopted
        (history(H2, (H1, 5)), History(H2, (Fork(H1, 5),))),  # forked after it
    ],
    ids=["none", "same", "forked-at-head", "forked-after-head"],
)
def test_a_primary_history_that_continues_ours_is_adopted_after_the_head_frame(replica, theirs, kept):
    primary = ScriptedPrimary(body(EPOCH_A, 4, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    def new_history() -> Exception:
        primary.answer = body(EPOCH_A, 4, hist=theirs)
        primary.streams.insert(0, [insert(3), insert(4)])
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), insert(3), None, new_history]]
    node = replica(primary).start()
    node.wait("at 4", lambda: node.store.head_offset == 4)
    assert node.store.history == kept
    assert primary.afters == [0, 2]
    assert node.status.bootstraps == 1


def test_a_primary_history_forked_before_our_head_bootstraps_again(replica, caplog):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    def imported_at_two() -> Exception:  # an import rewrote the primary after offset 2
        primary.answer = body(EPOCH_A, 3, hist=history(H2, (H1, 2)))
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), insert(3), None, imported_at_two]]
    primary.epochs.append(epoch_stream(EPOCH_A, 3, range(1, 4), hist=history(H2, (H1, 2))))
    installed: list[History | None] = []  # the history of each store the bootstraps hand on
    node = replica(primary, on_store=lambda store: installed.append(store.history)).start()
    node.wait("bootstrapped again", lambda: node.status.bootstraps == 2 and node.status.state == "following")
    assert installed == [History(H1, ()), History(H2, (Fork(H1, 2),))]  # adopted with the snapshot
    assert node.store.history == History(H2, (Fork(H1, 2),))
    assert primary.afters == [0, 3]  # no head frame asked for: the history alone refused it
    assert (
        "WARNING",
        f"following {URL}: the primary is in history {H2}, which does not continue this replica's history "
        f"{H1} at offset 3 (a restore or an import on the primary); bootstrapping again",
    ) in [(r.levelname, r.getMessage()) for r in caplog.records]


def test_a_replica_without_a_history_record_adopts_the_primarys_once_the_head_frame_passed(replica, tmp_path):
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2)]]
    following(primary, replica, 2).close()
    (tmp_path / "replica" / "history").unlink()  # a tenant written before histories
    again = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H2, (H1, 2))), streams=[[insert(2), insert(3)]])
    node = replica(again)
    assert node.store.history is None
    node.start()
    node.wait("at 3", lambda: node.store.head_offset == 3)
    assert node.store.history == History(H2, (Fork(H1, 2),))
    assert again.afters == [1] and again.epochs_asked == 0


def test_an_empty_replica_adopts_any_history_of_its_primary(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 0, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    node = replica(primary)

    def another_history() -> Exception:  # unrelated to H1, but the replica holds no row of H1
        primary.answer = body(EPOCH_A, 0, hist=history(H3))
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[None, another_history], []]
    node.start()
    node.wait("in H3", lambda: node.store.history == History(H3, ()))
    assert node.status.bootstraps == 1
    assert primary.afters == [0, 0]


def test_a_primary_that_names_no_head_is_asked_again_and_never_taken_as_empty(replica):
    # A /snapshot without an offset is malformed (bootstrap.py invariant 4), not a primary
    # at offset 0 that a replica with rows would call diverged and stop following.
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1)]]
    following(primary, replica, 1).close()
    headless = ScriptedPrimary({"epoch": EPOCH_A, "fingerprint": FINGERPRINT, "history": history(H1)})
    node = replica(headless).start()
    node.wait("two retries", lambda: node.status.reconnects >= 2)
    assert node.status.state == "reconnecting"
    assert node.status.error == (
        "the primary answered a malformed /snapshot: offset missing, expected a non-negative integer"
    )
    assert node.user_ids() == [1]
    assert (headless.epochs_asked, headless.afters) == (0, [])
