"""A read replica whose stream goes quiet right after a full group (dbsvc/replica/follower.py
rule 3, `_stream` and `_handoff_pending`): the group was applied pipelined, its fsync
awaited by nobody yet, since the reading thread went on to read the next one. A quiet read
must hand the loop an empty group that waits for it: only so does a failed fsync there
stop following while the primary stays quiet, instead of `following` on a store that is
read-only until a restart (commit.py rule 4).

The scripted primary of tests/support/follower_kit.py; the fsync failed with `DBSVC_FAULT`
(storage/files.py). Written from the survivors of the session-26 mutation run of
follower.py (docs/mutation.md): test_follower_settle.py ends the stream after the full
group, where `_settle` waits for it whatever `_stream` did.
"""

from __future__ import annotations

from dbsvc.replica import groups
from support.follower_kit import EPOCH_A, H1, ScriptedPrimary, body, epoch_stream, history, insert

GROUP = groups.BATCH  # a full group: the thread reads on before it is durable


def test_an_fsync_that_fails_after_a_full_group_stops_following_while_the_stream_is_quiet(replica, monkeypatch):
    monkeypatch.setenv("DBSVC_FAULT", "fsync:1:EIO")
    primary = ScriptedPrimary(body(EPOCH_A, GROUP, hist=history(H1)))
    primary.streams = [[insert(n) for n in range(1, GROUP + 1)]]  # then quiet, never closed
    primary.epochs = [epoch_stream(EPOCH_A, 0, hist=history(H1))]
    node = replica(primary).start()
    node.wait("stopped", lambda: node.status.state == "stopped")
    assert "Input/output error (injected by DBSVC_FAULT fsync:1)" in (node.status.error or "")
    assert primary.afters == [0] and node.store.head_offset == 0
