"""A replica's primary refusing, failing or gone (dbsvc/replica/follower.py rule 4), in process
over a scripted primary (tests/support/follower_kit.py): what bootstraps again, what is retried
after a backoff, what stops following while the replica keeps serving, and what the log says
so the operator reads why.
"""

from __future__ import annotations

import pytest

from dbsvc.errors import WebSocketClientError
from dbsvc.replica.follower import next_wait
from support.follower_kit import (
    EPOCH_A,
    H1,
    URL,
    ScriptedPrimary,
    body,
    epoch_stream,
    history,
    insert,
    refused,
    restored_behind,
)

# -- rule 4: refusals, reconnections, definitive answers ----------------------------------------


@pytest.mark.parametrize(
    "status, code, why",
    [
        (410, "offset_gone", "the primary no longer holds the rows after 0"),
        (400, "offset_out_of_range", "the primary's head is behind this replica's 0"),
    ],
)
def test_a_refusal_that_says_our_rows_are_gone_bootstraps_again(replica, caplog, status, code, why):
    primary = ScriptedPrimary(body(EPOCH_A, 0, hist=history(H1)))
    primary.streams = [refused(status, code), []]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1)), epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("following", lambda: node.status.state == "following")
    assert node.status.bootstraps == 2
    assert node.status.reconnects == 0
    assert primary.afters == [0, 0]
    assert ("WARNING", f"following {URL}: {why}; bootstrapping again") in [
        (r.levelname, r.getMessage()) for r in caplog.records
    ]


@pytest.mark.parametrize("status", [500, 503, 408, 425, 429])
def test_a_busy_or_failing_primary_is_retried(replica, status):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)))
    primary.streams = [refused(status, "unavailable"), [insert(1)]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("one reconnection", lambda: node.status.reconnects == 1)
    assert node.status.error in (f"the primary answered {status}", None)
    node.wait("at 1", lambda: node.store.head_offset == 1 and node.status.state == "following")
    assert node.status.error is None
    assert node.status.bootstraps == 1
    assert primary.afters == [0, 0]


@pytest.mark.parametrize(
    "status, code",
    [(401, "unauthorized"), (403, "forbidden"), (404, "replication_disabled"), (400, "bad_query"), (499, "other")],
)
def test_a_definitive_refusal_stops_following_and_the_replica_keeps_serving(replica, status, code):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)))
    primary.streams = [refused(status, code, "go away")]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.error == (
        f"the primary refused /replicate: the server refused the WebSocket handshake: HTTP {status} {code}: go away"
    )
    assert node.status.reconnects == 0
    assert primary.afters == [0]
    assert node.status.synced is True  # bootstrapped: it serves the primary's epoch


def test_a_failed_bootstrap_is_retried_and_a_refused_one_stops(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 0, hist=history(H1)))
    primary.epochs = [
        epoch_stream(EPOCH_A, 0, hist=history(H1)),
        WebSocketClientError("cannot connect to 127.0.0.1:9: refused"),
        refused(401, "unauthorized", "no token"),
    ]
    primary.streams = [refused(410, "offset_gone"), refused(410, "offset_gone")]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert node.status.reconnects == 1  # the failed bootstrap
    assert node.status.error == (
        "the primary refused /replicate/snapshot: the server refused the WebSocket handshake: "
        "HTTP 401 unauthorized: no token"
    )
    assert primary.epochs_asked == 3 and node.status.bootstraps == 1


def test_a_dropped_connection_is_retried_after_the_rows_kept(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [
        [insert(1), None, WebSocketClientError("connection lost: reset")],
        [insert(1), insert(2), insert(3)],
    ]
    node = replica(primary).start()
    node.wait("at 3", lambda: node.store.head_offset == 3 and node.status.state == "following")
    assert primary.afters == [0, 0]  # head 1: its frame asked for again (after=0), then 2 and 3
    assert node.status.reconnects == 1
    assert node.status.error is None
    assert node.user_ids() == [1, 2, 3]


# -- rule 4's backoff ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "delay, draw, expected",
    [
        (0.2, 0.0, (0.1, 0.4)),
        (0.2, 0.5, (0.2, 0.4)),
        (1.0, 0.75, (1.25, 2.0)),
        (6.0, 0.0, (3.0, 10.0)),
        (10.0, 0.5, (10.0, 10.0)),
    ],
)
def test_backoff_jitters_the_delay_and_doubles_it_up_to_ten_seconds(delay, draw, expected):
    assert next_wait(delay, draw) == expected


# -- what the log says (rules 4 and 7: the operator reads why) ---------------------------------


def test_the_log_says_why_following_stopped_or_diverged(replica, caplog):
    caplog.set_level("INFO", logger="dbsvc.replica")
    primary = restored_behind()
    node = replica(primary).start()
    node.wait("diverged and logged", lambda: any(r.levelname == "ERROR" for r in caplog.records))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "dbsvc.replica"]
    assert ("INFO", f"following {URL}: connection closed without a close frame; reconnecting") in lines
    assert (
        "WARNING",
        f"following {URL}: the primary's head is offset 1, behind this replica's 3; bootstrapping again",
    ) in lines
    assert lines[-1] == (
        "ERROR",
        f"stopped following {URL}: the primary holds offsets up to 1, this replica up to 3; bootstrapping "
        "again would discard the rows after 1. This replica keeps serving its 3 rows but no longer follows. "
        "To discard them and copy the primary, restart it with --rebootstrap (or SERVICE_FOLLOW_REBOOTSTRAP=1), "
        "or drop its tenant (dbsvc tenant drop) and start it again; to keep them, back this tenant up first "
        "(dbsvc backup)",
    )


def test_the_log_says_why_following_stopped(replica, caplog):
    caplog.set_level("INFO", logger="dbsvc.replica")
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [refused(401, "unauthorized", "bad token")]
    node = replica(primary).start()
    node.wait("stopped and logged", lambda: any(r.levelname == "ERROR" for r in caplog.records))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "dbsvc.replica"]
    assert lines[0] == ("INFO", f"bootstrapped from {URL}: epoch {EPOCH_A} at offset 0")
    assert lines[-1] == (
        "ERROR",
        f"stopped following {URL}: the primary refused /replicate: the server refused the WebSocket "
        "handshake: HTTP 401 unauthorized: bad token",
    )


def test_a_primary_that_stays_down_keeps_the_replica_reconnecting(replica, caplog):
    caplog.set_level("WARNING", logger="dbsvc.replica")
    primary = ScriptedPrimary(OSError("connection refused"))
    node = replica(primary)
    node.follower.prepare()
    node.follower.start(node.loop)
    node.wait("three reconnections", lambda: node.status.reconnects >= 3)
    assert node.status.state == "reconnecting"
    assert node.status.error == "connection refused"
    assert node.status.synced is False
    assert ("WARNING", f"primary {URL} not reachable yet (connection refused); following starts when it is") in [
        (r.levelname, r.getMessage()) for r in caplog.records
    ]


# -- a store that fails under the replica ------------------------------------------------------------


def test_a_replica_whose_store_fails_says_it_stopped_following(replica, monkeypatch, caplog):
    # The first fsync of the replica's log fails: the store is fail-stop (commit.py) and
    # refuses every later write, so following cannot go on; /metrics must say so rather than
    # show "following" with a reading thread that is gone.
    monkeypatch.setenv("DBSVC_FAULT", "fsync:1:EIO")
    primary = ScriptedPrimary(body(EPOCH_A, 2, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1)], [insert(1)], [insert(1)]]
    node = replica(primary).start()
    # the follower's thread sets the state, then the error, then logs: wait for all three
    node.wait("stopped", lambda: node.status.state == "stopped" and node.status.error is not None)
    assert node.status.error == (
        "write not stored: the store is read-only after an I/O error on the log ([Errno 5] Input/output error "
        "(injected by DBSVC_FAULT fsync:1)): nothing written since can be trusted; fix the disk, then restart the server"
    )
    # the state is set before the line is logged, on the follower's thread: wait for both
    node.wait(
        "the stop logged",
        lambda: any(
            r.levelname == "ERROR" and r.getMessage().startswith(f"stopped following {URL}: ") for r in caplog.records
        ),
    )


def test_a_failure_after_a_bootstrap_mid_run_is_retried(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)))
    primary.streams = [refused(410, "offset_gone"), refused(503, "unavailable"), [insert(1)]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1)), epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("at 1", lambda: node.store.head_offset == 1 and node.status.state == "following")
    assert (node.status.bootstraps, node.status.reconnects) == (2, 1)
    assert primary.afters == [0, 0, 0]
