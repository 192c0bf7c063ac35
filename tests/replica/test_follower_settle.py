"""A read replica whose stream ends right after a full group (dbsvc/replica/follower.py rule 3,
`_settle`): the group was applied but not yet durable, since the reading thread went on to
read the next one. The next connection must resume at the replica's acknowledged head, so
the thread waits for that group's fsync before it reconnects; an fsync that fails there is
logged word for word, and the store's refusal then stops following.

The scripted primary of tests/support/follower_kit.py; the fsync
held or failed with `DBSVC_FAULT` (storage/files.py). Written from the survivors of the
session-6 mutation run of follower.py (docs/mutation.md): no test ended a stream there.
"""

from __future__ import annotations

import time

from dbsvc.errors import WebSocketClientError
from dbsvc.replica import groups
from support.follower_kit import (  # the scripted primary and the in-process replica
    EPOCH_A,
    H1,
    URL,
    ScriptedPrimary,
    body,
    epoch_stream,
    history,
    insert,
)

GROUP = 1024  # groups.BATCH: a full group, so the thread reads on before it is durable


def test_the_group_size_is_the_documented_one():
    assert groups.BATCH == GROUP


def test_a_stream_that_ends_after_a_full_group_reconnects_only_once_it_is_durable(replica, tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    monkeypatch.setenv("DBSVC_FAULT", f"fsync:1:HOLD={gate}")
    primary = ScriptedPrimary(body(EPOCH_A, GROUP, hist=history(H1)))
    primary.streams = [[insert(n) for n in range(1, GROUP + 1)] + [WebSocketClientError("dropped")], []]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary)
    try:
        node.start()
        node.wait("the group's fsync held", lambda: (tmp_path / "gate.held").exists())
        node.wait("the group applied", lambda: node.store.applied_offset == GROUP)
        deadline = time.monotonic() + 0.5  # a thread that does not wait reconnects within 0.3 s
        while len(primary.afters) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert primary.afters == [0]
        assert node.store.head_offset == 0
    finally:
        gate.touch()  # a failed check must not leave the fsync held (the store's close waits for it)
    node.wait("the second connection", lambda: len(primary.afters) == 2)
    assert primary.afters == [0, GROUP - 1]  # at head GROUP: the head frame first (rule 7b)
    assert node.store.head_offset == GROUP


def test_an_fsync_that_fails_when_the_stream_ended_is_logged_and_the_replica_stops_following_at_once(
    replica, monkeypatch, caplog
):
    """The stream ends while the last group's fsync fails: the store is read-only until a
    restart (commit.py rule 4), so the replica stops following there (follower.py rule 4),
    and says so, instead of connecting again and saying `following` while the primary is
    quiet."""
    caplog.set_level("INFO", logger="dbsvc.replica")
    monkeypatch.setenv("DBSVC_FAULT", "fsync:1:EIO")
    primary = ScriptedPrimary(body(EPOCH_A, GROUP, hist=history(H1)))
    # Were a second connection made, it would be quiet (nothing to apply, nothing to wait for).
    primary.streams = [[insert(n) for n in range(1, GROUP + 1)] + [WebSocketClientError("dropped")], [None]]
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    logged = [(r.levelname, r.getMessage()) for r in caplog.records]
    prefix = f"following {URL}: the last frames applied did not become durable: "
    warnings = [message for level, message in logged if level == "WARNING" and message.startswith(prefix)]
    assert len(warnings) == 1, logged
    reason = warnings[0][len(prefix) :]
    assert "Input/output error (injected by DBSVC_FAULT fsync:1)" in reason
    assert reason.startswith("write not stored: the store is read-only after an I/O error on the log"), reason
    assert node.status.error == reason
    assert primary.afters == [0] and node.store.head_offset == 0
