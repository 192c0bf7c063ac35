"""The primary's JSON answers as typed values: its `/snapshot` body and its `/replicate/snapshot` header.

Both are read by more than one module: the read replica (bootstrap.py, through `Upstream`)
and the `dbsvc replicate` consumer (consumer.py) read the `/snapshot` body, and primary.py
reads the snapshot stream's header for bootstrap.py. consumer.py may not import
bootstrap.py (bootstrap.py imports consumer.py's `Endpoint`: a cycle), so the one reader
of each answer lives here, where every one of them may import it:

    theirs = parse_snapshot_body(json_value)       # GET /snapshot -> PrimarySnapshot
    header = parse_snapshot_header(json_value)     # /replicate/snapshot's first message -> SnapshotHeader

Rules:
1. A `/snapshot` body is an object whose `epoch` is a non-empty string, `offset` a
   non-negative integer (a bool or a float is not one), `fingerprint` a string and
   `history` null, absent or a history record (storage/history.py). Its other fields
   (`watermarks`, `replication`, `replica`) are not read.
2. A `/replicate/snapshot` header is an object with the same four fields under the same
   rules (realtime/session.py writes it: `type`, `format`, `epoch`, `offset`,
   `fingerprint`, `history`); `type` and `format` are not read.
3. Anything else is `MalformedAnswer` naming the route, the first field that is not what
   the route promises, its value (its repr, shortened to 80 characters, or `missing`) and
   what was expected. A garbled `history` is malformed, never taken for "no history": a
   primary written before histories sends none (null or absent), never a broken one.
4. These functions judge the shape of one answer only. Whether the answer is ours (the
   fingerprint), whether the header agrees with the snapshot under it, and whether a
   malformed answer is retried, are the caller's (follower.py rules 1, 2 and 4; consumer.py
   rule 7).

Imports dbsvc.errors and the history record of dbsvc.storage.history; nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dbsvc.errors import MalformedAnswer
from dbsvc.storage.history import History, history_from_json

SNAPSHOT_ROUTE = "/snapshot"
HEADER_ROUTE = "/replicate/snapshot"

_MISSING = object()  # a field the answer does not have
_SHOWN = 80  # characters of a malformed value the message shows
_HISTORY = 'null or a history record {"id": ..., "forks": [...]}'


@dataclass(frozen=True, slots=True)
class PrimarySnapshot:
    """The primary's `GET /snapshot` (rule 1): its epoch, its head offset, its schema
    fingerprint and its history record, None for a primary written before histories."""

    epoch: str
    offset: int
    fingerprint: str
    history: History | None


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    """The first message of the primary's `/replicate/snapshot` (rule 2): the epoch of the
    snapshot that follows, the offset it starts after (its cut), the schema fingerprint
    and the history record, None for a primary written before histories."""

    epoch: str
    offset: int
    fingerprint: str
    history: History | None


def parse_snapshot_body(body: object) -> PrimarySnapshot:
    """Rule 1: the primary's `/snapshot` JSON as a `PrimarySnapshot`, or MalformedAnswer
    naming the first field that is not what the route promises (rule 3)."""
    return PrimarySnapshot(*_fields(SNAPSHOT_ROUTE, body, "the body"))


def parse_snapshot_header(header: object) -> SnapshotHeader:
    """Rule 2: the snapshot stream's parsed header as a `SnapshotHeader`, or MalformedAnswer
    naming the first field that is not what the route promises (rule 3)."""
    return SnapshotHeader(*_fields(HEADER_ROUTE, header, "the header"))


def _fields(route: str, answer: object, whole: str) -> tuple[str, int, str, History | None]:
    """Rules 1-3: epoch, offset, fingerprint and history of one answer, checked in order."""
    if not isinstance(answer, Mapping):
        raise _malformed(route, whole, answer, "a JSON object")
    epoch = answer.get("epoch", _MISSING)
    if not isinstance(epoch, str) or not epoch:
        raise _malformed(route, "epoch", epoch, "a non-empty string")
    offset = answer.get("offset", _MISSING)
    if type(offset) is not int or offset < 0:
        raise _malformed(route, "offset", offset, "a non-negative integer")
    fingerprint = answer.get("fingerprint", _MISSING)
    if not isinstance(fingerprint, str):
        raise _malformed(route, "fingerprint", fingerprint, "a string")
    record = answer.get("history")
    history = history_from_json(record)
    if record is not None and history is None:
        raise _malformed(route, "history", record, _HISTORY)
    return epoch, offset, fingerprint, history


def _malformed(route: str, field: str, value: object, expected: str) -> MalformedAnswer:
    shown = "missing" if value is _MISSING else repr(value)
    if len(shown) > _SHOWN:
        shown = shown[: _SHOWN - 3] + "..."
    return MalformedAnswer(route, field, shown, expected)
