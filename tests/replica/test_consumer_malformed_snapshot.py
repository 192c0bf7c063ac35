"""`dbsvc replicate --out FILE` and a server whose `GET /snapshot` is JSON but not a `/snapshot`
body (consumer.py rule 7, answers.py rule 1): the run ends before any stream is opened, with
the read replica's message (the field, its value, what was expected), exit status 1 as for a
bad frame, FILE and FILE.history byte for byte as they were. In process against the scripted
primary of support/replica_kit.py, and once as the command a user runs, for the status."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from dbsvc.errors import MalformedAnswer
from dbsvc.replica.consumer import Reporter
from dbsvc.replica.sinks import ReplicaFile
from dbsvc.storage.history import History
from support.cli import run_dbsvc
from support.replica_kit import frame, snapshot_body
from support.replica_kit import run_replicate as run

pytestmark = pytest.mark.timeout(60)
H1, H2 = "1" * 32, "2" * 32
F1, F2 = frame(1), frame(2)
MALFORMED = "the primary answered a malformed /snapshot: "
RECORD = 'null or a history record {"id": ..., "forks": [...]}'
BODY = snapshot_body(2, {"id": H1, "forks": []})


def without(name: str) -> dict:
    return {key: value for key, value in BODY.items() if key != name}


CASES = [
    ([2], "the body [2], expected a JSON object"),
    (None, "the body None, expected a JSON object"),
    (without("epoch"), "epoch missing, expected a non-empty string"),
    ({**BODY, "epoch": ""}, "epoch '', expected a non-empty string"),
    (without("offset"), "offset missing, expected a non-negative integer"),
    ({**BODY, "offset": "2"}, "offset '2', expected a non-negative integer"),
    ({**BODY, "offset": True}, "offset True, expected a non-negative integer"),
    ({**BODY, "offset": 2.0}, "offset 2.0, expected a non-negative integer"),
    ({**BODY, "offset": -1}, "offset -1, expected a non-negative integer"),
    (without("fingerprint"), "fingerprint missing, expected a string"),
    ({**BODY, "history": "h"}, f"history 'h', expected {RECORD}"),
    ({**BODY, "history": {"id": H2}}, f"history {{'id': '{H2}'}}, expected {RECORD}"),
    ({**BODY, "history": {"id": "x", "forks": []}}, f"history {{'id': 'x', 'forks': []}}, expected {RECORD}"),
    (
        {**BODY, "history": {"id": H2, "forks": [{"id": H1, "at": "1"}]}},
        f"history {{'id': '{H2}', 'forks': [{{'id': '{H1[:16]}..., expected {RECORD}",
    ),
]
IDS = [
    "list",
    "null",
    "no-epoch",
    "epoch-empty",
    "no-offset",
    "offset-text",
    "offset-true",
    "offset-float",
    "offset-negative",
    "no-fingerprint",
    "history-text",
    "history-no-forks",
    "history-bad-id",
    "history-bad-fork",
]


def replica_file(tmp_path: Path) -> tuple[Path, bytes, bytes]:
    """FILE holding frames 1 and 2 under history H1; its bytes and its record's bytes."""
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    sink = ReplicaFile.open(str(out), Reporter(io.StringIO()))
    sink.adopt_history(History(H1))
    sink.close()
    return out, out.read_bytes(), (tmp_path / "r.log.history").read_bytes()


@pytest.mark.parametrize("body, message", CASES, ids=IDS)
def test_a_malformed_snapshot_ends_the_run_before_any_stream_and_leaves_the_file(primary, tmp_path, body, message):
    # A garbled history counted as none: the head frame alone was checked, and the run went on.
    out, before, record = replica_file(tmp_path)
    p = primary(lambda attempt, after: [F2, frame(3)], snapshot=(200, body))
    status, err = run(p.base, out=str(out))
    assert isinstance(status, MalformedAnswer), (status, err)
    assert str(status) == MALFORMED + message
    assert (status.route, p.paths, err) == ("/snapshot", [], "")  # not retried, no stream opened
    assert out.read_bytes() == before
    assert (tmp_path / "r.log.history").read_bytes() == record


def test_a_new_file_takes_no_record_from_a_malformed_snapshot(primary, tmp_path):
    out = tmp_path / "new.log"
    p = primary(lambda attempt, after: [F1], snapshot=(200, {**BODY, "history": {"id": H2, "forks": None}}))
    status, _err = run(p.base, out=str(out))
    assert str(status) == MALFORMED + f"history {{'id': '{H2}', 'forks': None}}, expected {RECORD}"
    assert out.read_bytes() == b""
    assert not (tmp_path / "new.log.history").exists()


@pytest.mark.parametrize("body, message", [CASES[1], CASES[-1]], ids=[IDS[1], IDS[-1]])
def test_the_command_says_the_malformed_field_and_exits_1(primary, tmp_path, body, message):
    out, before, record = replica_file(tmp_path)
    p = primary(lambda attempt, after: [F2, frame(3)], snapshot=(200, body))
    done = run_dbsvc("replicate", p.base, "--out", str(out), timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (1, f"dbsvc: error: {MALFORMED}{message}\n", "")
    assert p.paths == []
    assert out.read_bytes() == before
    assert (tmp_path / "r.log.history").read_bytes() == record
