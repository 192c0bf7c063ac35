"""Which worker of `serve --workers N` this process is, as the supervisor hands it down.

The supervisor (dbsvc/supervisor.py) starts each worker as the same command line it was
started with, plus these environment variables; a process that finds them is a worker:

    DBSVC_WORKER       writer | reader-1 ... reader-(N-1)   the worker's label (logs, /health)
    DBSVC_WORKERS      N                                    how many workers the tenant has
    DBSVC_WORKER_PORT  the writer's private port on 127.0.0.1 (the readers follow it there)
    DBSVC_WORKER_KEY   the key every request to that port carries (`Dbsvc-Worker-Key`)

Rules:
1. The variables are all set or none is; a malformed one is a ConfigError naming it (the
   supervisor wrote them, so it is a bug or a hand-made environment, never guessed past).
2. They are not SERVICE_* variables: an operator never sets them, and config.py, the reader
   of SERVICE_*, does not know them.
3. The key is random per supervisor run (32 bytes, URL-safe) and lives only in the
   environment of the supervisor's children, readable by their user alone (/proc/PID/environ
   is mode 0400); it keeps other local users off the private port, which skips the token
   guard for the streams a reader follows.

Imports errors only.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from dbsvc.errors import ConfigError

WORKER = "DBSVC_WORKER"
WORKERS = "DBSVC_WORKERS"
PORT = "DBSVC_WORKER_PORT"
KEY = "DBSVC_WORKER_KEY"
VARIABLES = (WORKER, WORKERS, PORT, KEY)
KEY_HEADER = "Dbsvc-Worker-Key"

_LABEL = re.compile(r"writer|reader-([1-9][0-9]{0,3})")


class Kind(enum.Enum):
    WRITER = "writer"
    READER = "reader"


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """One worker: `index` 0 is the writer, 1..count-1 the readers."""

    index: int
    count: int
    private_port: int
    key: str

    @property
    def kind(self) -> Kind:
        return Kind.WRITER if self.index == 0 else Kind.READER

    @property
    def label(self) -> str:
        return "writer" if self.index == 0 else f"reader-{self.index}"

    def environ(self) -> dict[str, str]:
        """The variables that make a child process this worker."""
        return {WORKER: self.label, WORKERS: str(self.count), PORT: str(self.private_port), KEY: self.key}

    def describe(self, pid: int) -> dict[str, object]:
        """This worker as `/health` and `/metrics` name it (docs/workers.md)."""
        return {"label": self.label, "role": self.kind.value, "index": self.index, "workers": self.count, "pid": pid}


def role_from_environ(environ: Mapping[str, str]) -> WorkerRole | None:
    """This process's role, or None when it is no worker (rule 1)."""
    present = [name for name in VARIABLES if environ.get(name)]
    if not present:
        return None
    missing = [name for name in VARIABLES if name not in present]
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} not set beside {', '.join(present)}: the worker variables come together"
        )
    match = _LABEL.fullmatch(environ[WORKER])
    if match is None:
        raise ConfigError(f"{WORKER} must be 'writer' or 'reader-K', got {environ[WORKER]!r}")
    index = int(match.group(1)) if match.group(1) else 0
    count = _number(environ, WORKERS, 2, 1024)
    if index >= count:
        raise ConfigError(f"{WORKER} {environ[WORKER]!r} is past {WORKERS}={count}")
    return WorkerRole(index, count, _number(environ, PORT, 1, 65535), environ[KEY])


def _number(environ: Mapping[str, str], name: str, low: int, high: int) -> int:
    text = environ[name]
    if not text.isdigit() or not low <= int(text) <= high:
        raise ConfigError(f"{name} must be an integer from {low} to {high}, got {text!r}")
    return int(text)
