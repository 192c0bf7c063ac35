"""The primary's `GET /snapshot` body as a read replica reads it (dbsvc/replica/bootstrap.py
invariant 4, follower.py rule 4), in process over a scripted primary
(tests/support/follower_kit.py): a body that parsed but is not a `/snapshot` answer is named
for what it is (the field, its value, what was expected), leaves the store as it was, and
is retried while the replica serves, at start, between connections and at a poll mid-stream;
once the primary answers a good body again, the replica follows.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dbsvc.errors import WebSocketClientError
from support.follower_kit import (
    EPOCH_A,
    H1,
    URL,
    ScriptedPrimary,
    body,
    deadline_seconds,
    epoch_stream,
    following,
    history,
    insert,
)

MALFORMED = "the primary answered a malformed /snapshot: "


def good(offset: int) -> dict[str, Any]:
    return body(EPOCH_A, offset, hist=history(H1))


def without(field: str) -> dict[str, Any]:
    answer = good(0)
    del answer[field]
    return answer


def with_(**fields: Any) -> dict[str, Any]:
    return dict(good(0), **fields)


CASES = {  # id: (the body, what the message says of it)
    "list": ([1, 2], "the body [1, 2], expected a JSON object"),
    "string": ("ok", "the body 'ok', expected a JSON object"),
    "null": (None, "the body None, expected a JSON object"),
    "offset-text": (with_(offset="abc"), "offset 'abc', expected a non-negative integer"),
    "offset-numeral": (with_(offset="3"), "offset '3', expected a non-negative integer"),
    "offset-float": (with_(offset=1.5), "offset 1.5, expected a non-negative integer"),
    "offset-bool": (with_(offset=True), "offset True, expected a non-negative integer"),
    "offset-negative": (with_(offset=-1), "offset -1, expected a non-negative integer"),
    "offset-list": (with_(offset=[3]), "offset [3], expected a non-negative integer"),
    "offset-null": (with_(offset=None), "offset None, expected a non-negative integer"),
    "offset-missing": (without("offset"), "offset missing, expected a non-negative integer"),
    "offset-long-text": (with_(offset="x" * 200), "offset '" + "x" * 76 + "..., expected a non-negative integer"),
    "epoch-missing": (without("epoch"), "epoch missing, expected a non-empty string"),
    "epoch-number": (with_(epoch=7), "epoch 7, expected a non-empty string"),
    "epoch-empty": (with_(epoch=""), "epoch '', expected a non-empty string"),
    "fingerprint-missing": (without("fingerprint"), "fingerprint missing, expected a string"),
    "fingerprint-number": (with_(fingerprint=16), "fingerprint 16, expected a string"),
    "history-text": (
        with_(history="h1"),
        """history 'h1', expected null or a history record {"id": ..., "forks": [...]}""",
    ),
    "history-bad-id": (
        with_(history={"id": "not hex", "forks": []}),
        """history {'id': 'not hex', 'forks': []}, expected null or a history record {"id": ..., "forks": [...]}""",
    ),
}


@pytest.mark.parametrize("answer, detail", list(CASES.values()), ids=list(CASES))
def test_a_malformed_snapshot_at_start_is_named_and_leaves_the_store_as_it_was(replica, caplog, answer, detail):
    caplog.set_level("WARNING", logger="dbsvc.replica")
    primary = ScriptedPrimary(answer, epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    node = replica(primary)
    epoch = node.store.epoch
    node.follower.prepare()  # does not refuse the start
    assert node.status.error == MALFORMED + detail
    assert node.status.state == "starting"
    assert node.status.synced is False
    assert (node.store.epoch, node.store.head_offset) == (epoch, 0)
    assert (primary.epochs_asked, primary.afters) == (0, [])
    assert ("WARNING", f"following {URL}: {MALFORMED}{detail}; retrying while serving") in [
        (r.levelname, r.getMessage()) for r in caplog.records
    ]


BETWEEN = ["list", "offset-text", "epoch-missing", "fingerprint-missing"]


@pytest.mark.parametrize("answer, detail", [CASES[kind] for kind in BETWEEN], ids=BETWEEN)
def test_a_malformed_snapshot_between_connections_keeps_the_rows_and_is_retried(replica, answer, detail):
    primary = ScriptedPrimary(good(2), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])

    garble = threading.Event()

    def garbled() -> Exception:  # the stream drops once the test says so, the answer garbled
        garble.wait(deadline_seconds())
        primary.answer = answer
        return WebSocketClientError("connection closed without a close frame")

    primary.streams = [[insert(1), insert(2), None, garbled]]
    node = following(primary, replica, 2)
    garble.set()
    node.wait("the malformed answer reported", lambda: node.status.error == MALFORMED + detail)
    assert node.status.state == "reconnecting"
    assert node.user_ids() == [1, 2]
    assert (node.store.epoch, node.status.bootstraps, primary.epochs_asked) == (EPOCH_A, 1, 1)
    primary.streams.append([insert(2), insert(3)])  # rule 7b: our head frame, then on
    primary.answer = good(3)
    node.wait("following at 3", lambda: node.store.head_offset == 3 and node.status.state == "following")
    assert node.status.error is None
    assert node.user_ids() == [1, 2, 3]
    assert primary.epochs_asked == 1


def test_a_replica_started_on_a_malformed_snapshot_bootstraps_once_the_primary_answers_well(replica):
    primary = ScriptedPrimary(with_(offset="abc"), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    primary.streams = [[insert(1)]]
    node = replica(primary).start()
    node.wait("a retry", lambda: node.status.reconnects >= 1)
    assert node.status.error == MALFORMED + "offset 'abc', expected a non-negative integer"
    assert (primary.epochs_asked, node.store.head_offset) == (0, 0)
    primary.answer = good(1)
    node.wait("following at 1", lambda: node.store.head_offset == 1 and node.status.state == "following")
    assert (node.status.synced, node.status.bootstraps, node.status.error) == (True, 1, None)


def test_a_malformed_snapshot_at_a_poll_mid_stream_neither_drops_the_stream_nor_bootstraps(replica):
    primary = ScriptedPrimary(good(2), epochs=[epoch_stream(EPOCH_A, 0, hist=history(H1))])
    asked_before: list[int] = []

    def garbled() -> None:  # a receive that timed out, the primary's /snapshot garbled meanwhile
        primary.answer = without("epoch")
        asked_before.append(primary.snapshots_asked)
        return None

    primary.streams = [[insert(1), garbled, insert(2)]]
    # poll_seconds 0: the reading thread polls after every read, so after the garbled answer
    node = following(primary, replica, 2, poll_seconds=0.0)
    assert primary.snapshots_asked > asked_before[0]  # the garbled answer was polled
    assert (node.status.reconnects, node.status.bootstraps, primary.epochs_asked) == (0, 1, 1)
    assert (node.status.state, node.status.error) == ("following", None)
    assert primary.afters == [0]
