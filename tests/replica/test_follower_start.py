"""A replica's start (dbsvc/replica/follower.py rules 1, 2 and 8), in process over a scripted
primary (tests/support/follower_kit.py): the first bootstrap, what refuses the start and what
only leaves it unready, a bootstrap snapshot that is damaged (never installed: the start goes
on and it is fetched again) or of another epoch (never installed), and the writer lock handed on to the store a bootstrap opens.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import zlib
from typing import Any

import pytest

from dbsvc.errors import ConfigError
from dbsvc.storage import Store, files
from support.follower_kit import (
    EPOCH_A,
    EPOCH_B,
    H1,
    H2,
    URL,
    Replica,
    ScriptedPrimary,
    body,
    epoch_stream,
    following,
    history,
    insert,
    refused,
)

# -- rules 1, 2 and 8 at start ----------------------------------------------------------------------


def test_a_replica_already_in_the_primarys_epoch_starts_without_a_bootstrap(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1)]]
    first = following(primary, replica, 1)
    first.close()
    again = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), streams=[[insert(1), insert(2), insert(3)]])
    node = replica(again)
    assert node.status.synced is True  # a row: it followed before (rule 8)
    node.start()
    node.wait("at 3", lambda: node.store.head_offset == 3)
    assert again.epochs_asked == 0
    assert again.afters == [0]
    assert node.status.bootstraps == 0


def test_an_empty_replica_whose_bootstrap_fails_at_start_starts_unready(replica, caplog):
    primary = ScriptedPrimary(body(EPOCH_A, 0), epochs=[[epoch_stream(EPOCH_A, 0)[0], None]])  # a header, then none
    node = replica(primary)
    node.follower.prepare()
    assert ("WARNING", f"bootstrap from {URL} failed (the snapshot stream stalled); retrying while serving") in [
        (r.levelname, r.getMessage()) for r in caplog.records
    ]
    assert node.status.synced is False
    assert node.status.bootstraps == 0
    assert node.store.head_offset == 0


@pytest.mark.parametrize(
    "answer, error",
    [
        (OSError("connection refused"), "the primary is not reachable: connection refused"),
        (ValueError("Expecting value"), "the primary is not reachable: Expecting value"),
    ],
    ids=["refused", "not-json"],
)
def test_a_primary_unreachable_at_start_does_not_stop_the_start(replica, answer, error):
    primary = ScriptedPrimary(answer)
    node = replica(primary)
    node.follower.prepare()
    assert node.status.error == error
    assert node.status.state == "starting"
    assert primary.epochs_asked == 0


@pytest.mark.parametrize(
    "stream, message",
    [
        (
            epoch_stream(EPOCH_A, 0, header_offset=5),
            "cannot follow http://127.0.0.1:9: the snapshot's own header disagrees with the stream's header",
        ),
        (
            [json.dumps(dict(json.loads(epoch_stream(EPOCH_A, 0)[0]), epoch=EPOCH_B))] + epoch_stream(EPOCH_A, 0)[1:],
            "cannot follow http://127.0.0.1:9: the snapshot's own header disagrees with the stream's header",
        ),
        (
            refused(403, "forbidden", "not a replicator"),
            "cannot follow http://127.0.0.1:9: the primary refused /replicate/snapshot: the server refused the "
            "WebSocket handshake: HTTP 403 forbidden: not a replicator",
        ),
    ],
    ids=["offset", "epoch", "refused"],
)
def test_a_bootstrap_the_primary_refuses_or_contradicts_refuses_the_start(replica, stream, message):
    primary = ScriptedPrimary(body(EPOCH_A, 0), epochs=[stream])
    node = replica(primary)
    with pytest.raises(ConfigError) as info:
        node.follower.prepare()
    assert str(info.value) == message
    assert node.store.epoch != EPOCH_A


DAMAGED = "the snapshot arrived damaged (size or crc32)"


def end_with(**fields: Any) -> str:
    """The end message of epoch A's snapshot at offset 5, with `fields` changed."""
    return json.dumps(dict(json.loads(epoch_stream(EPOCH_A, 5)[2]), **fields))


def without_offset(header: str) -> str:
    return json.dumps({k: v for k, v in json.loads(header).items() if k != "offset"})


def with_history(header: str, history: object) -> str:
    return json.dumps(dict(json.loads(header), history=history))


@pytest.mark.parametrize(
    "stream, message",
    [
        (epoch_stream(EPOCH_A, 5)[:2] + [end_with(bytes=1)], f"replication frame at offset 5: {DAMAGED}"),
        (
            epoch_stream(EPOCH_A, 5)[:2] + [end_with(crc32=zlib.crc32(b"other"))],
            f"replication frame at offset 5: {DAMAGED}",
        ),
        (epoch_stream(EPOCH_A, 5)[:2] + [end_with(type="stop")], f"replication frame at offset 5: {DAMAGED}"),
        (epoch_stream(EPOCH_A, 5)[:2] + [json.dumps({"type": "stop"})], f"replication frame at offset 5: {DAMAGED}"),
        (
            # It named offset 0 for the damage after it; the header is now checked first.
            [without_offset(epoch_stream(EPOCH_A, 5)[0]), epoch_stream(EPOCH_A, 5)[1], end_with(bytes=1)],
            "the primary answered a malformed /replicate/snapshot: offset missing, expected a non-negative integer",
        ),
        (
            [with_history(epoch_stream(EPOCH_A, 5)[0], "h1"), *epoch_stream(EPOCH_A, 5)[1:]],
            "the primary answered a malformed /replicate/snapshot: history 'h1', expected null or a history "
            'record {"id": ..., "forks": [...]}',
        ),
        (
            epoch_stream(EPOCH_A, 5)[1:],
            "replication frame at offset 0: the snapshot stream did not start with its header",
        ),
        (
            ["{" + epoch_stream(EPOCH_A, 5)[0]] + epoch_stream(EPOCH_A, 5)[1:],
            "replication frame at offset 0: the snapshot stream's header is not JSON: Expecting property name "
            "enclosed in double quotes: line 1 column 2 (char 1); "
            'expected a JSON object {"type": "snapshot", "epoch": ..., "offset": ...}',
        ),
        (
            epoch_stream(EPOCH_A, 5)[:2] + [end_with(crc32=float("nan"))],
            "replication frame at offset 5: the snapshot stream's end message is not JSON: NaN is not valid JSON "
            '(RFC 8259 §6: numbers are finite); expected a JSON object {"type": "end", "bytes": ..., "crc32": ...}',
        ),
    ],
    ids=[
        "size",
        "crc",
        "type",
        "not-end",
        "header-without-offset",
        "header-history-garbled",
        "no-header",
        "header-not-json",
        "end-nan",
    ],
)
def test_a_damaged_bootstrap_snapshot_is_never_installed_and_the_start_goes_on(replica, caplog, stream, message):
    # It escaped prepare() (a StreamError, or a bare ValueError for text that is not JSON):
    # the replica process died at start with a traceback. Damage on the way is transient.
    primary = ScriptedPrimary(body(EPOCH_A, 5), epochs=[stream])
    node = replica(primary)
    node.follower.prepare()
    assert (node.status.state, node.status.error) == ("reconnecting", f"bootstrap failed: {message}")
    assert ("WARNING", f"bootstrap from {URL} failed ({message}); retrying while serving") in [
        (r.levelname, r.getMessage()) for r in caplog.records
    ]
    assert node.status.synced is False and node.status.bootstraps == 0  # not ready (rule 8)
    assert (node.store.epoch != EPOCH_A, node.store.head_offset) == (True, 0)


def test_a_replica_whose_bootstrap_snapshot_arrived_damaged_at_start_fetches_it_again(replica):
    header, data, end = epoch_stream(EPOCH_A, 2, range(1, 3), hist=history(H1))
    damaged = data[:20] + bytes([data[20] ^ 1]) + data[21:]  # the crc32 of the end message no longer holds
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[[header, damaged, end], [header, data, end]])
    primary.streams = [[insert(3)]]
    node = replica(primary)
    node.follower.prepare()  # the error as the start left it: the reading thread may clear it at once
    assert node.status.error == f"bootstrap failed: replication frame at offset 2: {DAMAGED}"
    node.follower.start(node.loop)
    node.wait("following at 3", lambda: node.store.head_offset == 3 and node.status.state == "following")
    assert (node.store.epoch, node.user_ids(), node.status.bootstraps) == (EPOCH_A, [1, 2, 3], 1)
    assert node.status.synced is True and node.status.error is None


def test_a_snapshot_in_several_messages_is_joined_whole(replica):
    header, data, end = epoch_stream(EPOCH_A, 3, range(1, 4))
    primary = ScriptedPrimary(body(EPOCH_A, 3), epochs=[[header, data[:40], data[40:], end]])
    node = replica(primary)
    node.follower.prepare()
    assert node.store.epoch == EPOCH_A and node.store.head_offset == 3
    assert node.status.bootstraps == 1


def test_a_replica_ahead_of_a_primary_in_another_epoch_diverges_at_start(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1), insert(2), insert(3)]]
    following(primary, replica, 3).close()
    smaller = ScriptedPrimary(body(EPOCH_B, 1, hist=history(H2)))
    node = replica(smaller)
    node.follower.prepare()
    assert node.status.state == "diverged"
    assert node.status.error == (
        "the primary holds offsets up to 1, this replica up to 3; bootstrapping again would discard the rows after 1"
    )
    assert smaller.epochs_asked == 0
    asked = smaller.snapshots_asked
    node.follower.start(node.loop)  # a diverged replica's thread does not follow
    node.wait("the thread gone", lambda: not [t for t in threading.enumerate() if t.name == "dbsvc-follower"])
    assert smaller.snapshots_asked == asked and smaller.afters == []


def test_stop_ends_the_reading_thread(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1)]]
    node = following(primary, replica, 1)
    threads = [t for t in threading.enumerate() if t.name == "dbsvc-follower"]
    assert len(threads) == 1 and threads[0].daemon  # named for a debugger; never holds the process open
    node.follower.stop()  # the stream is quiet: the thread is inside a receive of 0.5 s
    assert not [t for t in threading.enumerate() if t.name == "dbsvc-follower"]


def test_a_bootstrap_keeps_the_writer_lock_and_hands_the_new_store_on(replica):
    primary = ScriptedPrimary(body(EPOCH_A, 1, hist=history(H1)), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1)]]
    handed: list[Store] = []
    node = following(primary, replica, 1, on_store=handed.append)
    assert node.locks[0] is None  # the first open takes the lock
    assert len(node.locks) == 2 and node.locks[1] is not None  # the bootstrap's reopen is handed it
    assert handed == [node.store]


def test_the_state_is_bootstrapping_while_the_snapshot_is_fetched(replica):
    node: Replica | None = None
    states: list[str] = []
    header, data, end = epoch_stream(EPOCH_A, 0, hist=history(H1))

    def first() -> str:
        assert node is not None
        states.append(node.status.state)
        return header

    primary = ScriptedPrimary(body(EPOCH_A, 0, hist=history(H1)), epochs=[[first, data, end]])
    node = replica(primary)
    node.start()
    node.wait("following", lambda: node.status.state == "following")
    assert states == ["bootstrapping"]


def test_a_snapshot_whose_lines_do_not_verify_names_where_it_came_from(replica):
    header, data, _ = epoch_stream(EPOCH_A, 0)
    damaged = b"00000000" + data[8:]  # the first line's CRC
    end = json.dumps({"type": "end", "bytes": len(damaged), "crc32": zlib.crc32(damaged)})
    primary = ScriptedPrimary(body(EPOCH_A, 0), epochs=[[header, damaged, end]])
    node = replica(primary)
    node.follower.prepare()  # a CorruptLog escaped it: transient now, as any damage on the way
    assert node.status.error == (
        f"bootstrap failed: {URL}/replicate/snapshot: corrupt at byte 0: snapshot line checksum mismatch"
    )
    assert node.status.state == "reconnecting"
    assert node.store.epoch != EPOCH_A


@pytest.mark.parametrize("offset, expected", [(7, 7), (0, 0)], ids=["offset", "zero"])
def test_start_up_reports_the_primarys_head(replica, offset, expected):
    primary = ScriptedPrimary(None)
    node = replica(primary)
    primary.answer = body(node.store.epoch, offset)
    assert node.status.synced is False  # empty
    node.follower.prepare()  # already in the primary's epoch: nothing fetched
    assert primary.epochs_asked == 0
    assert node.status.synced is True
    assert node.status.primary_offset == expected
    assert node.status.report(0)["lag_offsets"] == expected


class _NoRoomForASnapshot(files.FileOps):
    """A disk without room for the first `snapshot.new` written (ENOSPC on its first write),
    every other file operation done as the system does it."""

    def __init__(self) -> None:
        self.watched: set[int] = set()
        self.refused = 0

    def open(self, path: str, flags: int, mode: int = 0o777) -> int:  # type: ignore[override]
        fd = os.open(path, flags, mode)
        if path.endswith("snapshot.new") and not self.refused:
            self.watched.add(fd)
        return fd

    def write(self, fd: int, data: bytes) -> int:  # type: ignore[override]
        if fd in self.watched:
            self.watched.clear()
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(fd, data)


def test_a_bootstrap_the_disk_has_no_room_for_keeps_the_store_open_and_is_fetched_again(replica):
    # The failed install left the store closed (its lock let go with it) while the replica
    # went on serving it; it is opened again now, the lock kept, the tenant as it was.
    stream = epoch_stream(EPOCH_A, 2, range(1, 3), hist=history(H1))
    primary = ScriptedPrimary(body(EPOCH_A, 3, hist=history(H1)), epochs=[stream, stream])
    primary.streams = [[insert(3)]]
    node = replica(primary)
    with files.use(_NoRoomForASnapshot()) as disk:
        node.follower.prepare()
    assert disk.refused == 1
    assert node.status.error == "bootstrap failed: [Errno 28] No space left on device"
    assert len(node.locks) == 2 and node.locks[1] is not None  # reopened with the lock it kept
    assert (node.store.head_offset, node.store.epoch != EPOCH_A) == (0, True)
    assert not os.path.exists(os.path.join(node.directory, "snapshot.new"))
    node.follower.start(node.loop)
    node.wait("following at 3", lambda: node.store.head_offset == 3 and node.status.state == "following")
    assert (node.store.epoch, node.user_ids(), node.status.bootstraps) == (EPOCH_A, [1, 2, 3], 1)
