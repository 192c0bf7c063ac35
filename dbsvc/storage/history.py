"""A tenant's history id: which sequence of rows its offsets name.

Offsets are global and never reused within one history, but a restore (a backup's files put
back: offsets 1..20 again, then new rows 21, 22, ... that are not the rows 21, 22, ... the
tenant had before) or an import into a used tenant rewrites what an offset means from some
point on. Each such rewrite starts a new history (a new random id) and records where it
forked from its parent, as PostgreSQL's timelines after a point-in-time recovery and
Kafka's leader epochs do. A replica keeps the history of the primary it follows and compares
it on every connection (replica/follower.py rule 7).

File `<tenant>/history`, one line, `CRC SP JSON LF` (CRC = 8 hex digits of crc32(JSON))::

    1a2b3c4d {"format":1,"id":"<32 hex>","forks":[{"id":"<32 hex>","at":20},...]}

`forks` lists the ancestors, oldest first: the entry {"id": A, "at": 20} says the history
after A (the next entry's id, or `id` for the last entry) holds A's rows up to offset 20 and
its own after. So a holder of history A at head h holds a prefix of this history when h is
at most every `at` from A's entry to the end (`shares_prefix`). At most MAX_FORKS ancestors
are kept (the oldest dropped): a replica that old bootstraps again, which is safe.

Rules:
1. The file is written whole under a `.tmp` name, fsynced and renamed (files.write_atomic),
   so it is the old record or the new one. A CRC or shape failure is `CorruptLog` naming it.
2. A fresh tenant gets a history when its first log is created (recovery.py step 6).
   A tenant written before histories existed has no file: its history is unknown (None),
   and a replica judges it by the head frame alone (docs/replication.md, "Histories").
3. `fork` is the one way a history changes on a primary: restore (datatools/backup.py) and
   import into a tenant holding rows (datatools/load.py). Compaction keeps the history: it
   starts a new epoch of the same rows. A replica replaces its record with its primary's
   (`Store.adopt_history`) when it bootstraps or proves it holds a prefix.

Imports only errors and files (the durable write) and the standard library.
"""

from __future__ import annotations

import json
import os
import secrets
import zlib
from dataclasses import dataclass
from typing import Any

from dbsvc.errors import CorruptLog
from dbsvc.storage.files import write_atomic
from dbsvc.strictjson import strict_loads

HISTORY_NAME = "history"
HISTORY_SUFFIX = ".history"  # a frame file's record, FILE.history beside FILE (replicate --out, import --frames)
FORMAT = 1
MAX_FORKS = 64


@dataclass(frozen=True, slots=True)
class Fork:
    id: str  # the parent history
    at: int  # the last offset the child shares with it


@dataclass(frozen=True, slots=True)
class History:
    id: str
    forks: tuple[Fork, ...] = ()

    def fork(self, at: int) -> History:
        """The history a rewrite after offset `at` starts (rule 3)."""
        return History(new_history_id(), (*self.forks, Fork(self.id, at))[-MAX_FORKS:])

    def shares_prefix(self, other: str, head: int) -> bool:
        """Whether the rows 1..head of history `other` are rows of this history."""
        if other == self.id:
            return True
        for i, fork in enumerate(self.forks):
            if fork.id == other:
                return all(head <= later.at for later in self.forks[i:])
        return False

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "forks": [{"id": f.id, "at": f.at} for f in self.forks]}


def new_history_id() -> str:
    return secrets.token_hex(16)


def history_from_json(value: Any) -> History | None:
    """A History from its JSON (`to_json`, a primary's /snapshot or /replicate/snapshot
    header), or None for anything that is not one (an older primary sends none)."""
    if not isinstance(value, dict) or not _is_id(value.get("id")) or not isinstance(value.get("forks"), list):
        return None
    forks = []
    for f in value["forks"]:
        if not isinstance(f, dict) or not _is_id(f.get("id")) or type(f.get("at")) is not int or f["at"] < 0:
            return None
        forks.append(Fork(f["id"], f["at"]))
    return History(value["id"], tuple(forks))


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value)


def encode_history(history: History) -> bytes:
    body = json.dumps({"format": FORMAT, **history.to_json()}, separators=(",", ":")).encode("ascii")
    return b"%08x " % zlib.crc32(body) + body + b"\n"


def decode_history(path: str, data: bytes) -> History:
    """Rule 1: the record of a history file's bytes, or CorruptLog."""
    if len(data) < 10 or data[8:9] != b" " or not data.endswith(b"\n"):
        raise CorruptLog(path, 0, "history file is not one checksummed line")
    body = data[9:-1]
    if data[:8] != b"%08x" % zlib.crc32(body):
        raise CorruptLog(path, 0, "history file checksum mismatch")
    try:
        value = strict_loads(body)  # no NaN, no 1e400 (dbsvc/strictjson.py)
    except ValueError as exc:
        raise CorruptLog(path, 0, f"history file is not JSON: {exc}") from None
    history = history_from_json(value) if isinstance(value, dict) and value.get("format") == FORMAT else None
    if history is None:
        raise CorruptLog(path, 0, f"history file is not a history record of format {FORMAT}")
    return history


def read_history(directory: str) -> History | None:
    """The tenant's history, or None when it has no history file (rule 2)."""
    return read_history_file(os.path.join(directory, HISTORY_NAME))


def read_history_file(path: str) -> History | None:
    """The history record in the file at `path` (a tenant's, or a `replicate --out` FILE's
    `FILE.history`), None when there is no such file; `CorruptLog` naming it when it does
    not verify."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return decode_history(path, data)


def write_history(directory: str, history: History) -> None:
    write_atomic(os.path.join(directory, HISTORY_NAME), encode_history(history))


def fork_history(directory: str, at: int) -> History:
    """Rule 3: start a new history after offset `at` (a fresh one when the tenant had none)
    and write it; returns it."""
    current = read_history(directory)
    history = current.fork(at) if current is not None else History(new_history_id())
    write_history(directory, history)
    return history
