"""The supervisor of `serve --workers N` run in the test's process over plan workers: the
`supervisor` fixture, the `Run` it gives back and the cues a test stops it on.

`supervise(..., argv=...)` runs its loop on the test's main thread (it owns the signal
handlers) and starts each worker as tests/support/plan_worker.py. A thread of the test sends
the supervisor SIGTERM (or SIGINT) once the journal shows what the test waits for
(`stop_when`), polling with a deadline, never sleeping in place of an event.

Shared by tests/workers/test_supervisor_loop.py and test_supervisor_waits.py, which import
it by name (it was test_supervisor_loop.py's own, and the second file loaded that one by
its path). tests/workers/conftest.py names the `supervisor` fixture for them."""

from __future__ import annotations

import datetime
import io
import json
import logging
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.logs import configure_logging
from dbsvc.schema import load_schema
from dbsvc.supervisor import supervise
from support.server import ROOT

PLAN_WORKER = str(ROOT / "tests" / "support" / "plan_worker.py")
BLOG = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
DEADLINE = 30.0  # the driver stops the supervisor by then whatever it waits for

Events = list[dict]
LINE = re.compile(r"\S+ +[A-Z]+ dbsvc\.supervisor: (.*) worker=supervisor")


@dataclass
class Run:
    status: int
    events: Events  # the workers' journal, in order
    out: str  # the supervisor's standard output: the ready banner
    err: str  # its log
    manager: list[bytes]  # the datagrams it sent to its own NOTIFY_SOCKET
    signalled: list[float]  # time.monotonic() just before the driver sent each of its signals
    logged: list[tuple[float, str]]  # time.monotonic() as each supervisor message was logged, and it

    def logged_at(self, message: str) -> float:
        """When the supervisor logged `message` (once): its log call comes before what the
        message says it does (a kill follows its 'killing it'), so this is a time no later
        than that action, on the journal's clock."""
        (at,) = [at for at, said in self.logged if said == message]
        return at

    def of(self, label: str, event: str) -> Events:
        return [e for e in self.events if e["label"] == label and e["event"] == event]

    @property
    def said(self) -> list[str]:
        """The supervisor's log messages, each whole (the text log's line less its time,
        level, logger and `worker=` field), so an assertion matches a message exactly."""
        return [m.group(1) for m in map(LINE.match, self.err.splitlines()) if m]

    def when(self, pattern: str) -> list[float]:
        """The times (seconds, from the log's own timestamps) of the messages matching `pattern`."""
        times = []
        for line in self.err.splitlines():
            m = LINE.match(line)
            if m and re.fullmatch(pattern, m.group(1)):
                stamp = datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ")
                times.append(stamp.replace(tzinfo=datetime.UTC).timestamp())
        return times

    def says(self, pattern: str) -> int:
        """How many of its messages match `pattern` whole."""
        return sum(1 for message in self.said if re.fullmatch(pattern, message))

    @property
    def port(self) -> int:
        return int(self.events[0]["port"])


def journal(path: Path) -> Events:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Clocked(logging.Handler):
    """Notes time.monotonic() as each record is emitted, in the logging call itself."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((time.monotonic(), record.getMessage()))


def count(events: Events, label: str, event: str) -> int:
    return sum(1 for e in events if e["label"] == label and e["event"] == event)


@pytest.fixture
def supervisor(tmp_path, capsys):
    """Runs a supervisor over plan workers; gives back a `Run` once it has returned."""
    manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
    manager_name = f"dbsvc-test-manager-{secrets.token_hex(8)}"
    manager.bind("\0" + manager_name)
    stray: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: stray.append(signum)) for sig in (2, 15)}

    def run(
        plan: dict[str, list[list[str]]],
        workers: int = 2,
        stop_when: Callable[[Events], bool] | None = None,
        signals: tuple[int, ...] = (signal.SIGTERM,),
        again_when: Callable[[Events], bool] | None = None,
        env: dict[str, str | None] | None = None,
        argv: list[str] | None = None,
    ) -> Run:
        path = tmp_path / f"journal-{secrets.token_hex(4)}"
        given = {
            "PATH": os.environ.get("PATH", ""),
            "SERVICE_DATA": str(tmp_path / "data"),
            "SERVICE_HOST": "127.0.0.1",
            "SERVICE_PORT": "0",
            "RUST_LOG": "info",
            "NOTIFY_SOCKET": "@" + manager_name,
            "PLAN_WORKER": json.dumps(plan),
            "PLAN_JOURNAL": str(path),
            **(env or {}),
        }
        environ = {name: value for name, value in given.items() if value is not None}  # None: left out
        done = threading.Event()
        signalled: list[float] = []
        main = threading.main_thread().ident
        assert main is not None

        def drive() -> None:
            """`signals` in turn to the supervisor: the first once `stop_when` holds, each next
            one once `again_when` does; all of them at the deadline, whatever holds."""
            end = time.monotonic() + DEADLINE
            pending = list(signals)
            while pending and not done.is_set():
                events = journal(path) + heard(clocked.records)
                cue = stop_when if len(pending) == len(signals) else again_when
                if time.monotonic() > end or (cue is not None and cue(events)):
                    signalled.append(time.monotonic())
                    signal.pthread_kill(main, pending.pop(0))
                done.wait(0.02)

        driver = threading.Thread(target=drive, daemon=True)
        clocked = Clocked()
        logging.getLogger("dbsvc.supervisor").addHandler(clocked)
        driver.start()
        try:
            status = supervise(BLOG, environ, workers, argv=argv or [sys.executable, PLAN_WORKER])
        finally:
            done.set()
            driver.join()
            logging.getLogger("dbsvc.supervisor").removeHandler(clocked)
        captured = capsys.readouterr()
        datagrams = []
        while True:
            try:
                datagrams.append(manager.recv(4096))
            except BlockingIOError:
                break
        return Run(status, journal(path), captured.out, captured.err, datagrams, signalled, clocked.records)

    yield run
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    manager.close()
    configure_logging("info", "text", stream=io.StringIO())  # off the captured stream
    assert stray == [], "a signal reached the test after the supervisor's loop ended"


def heard(records: list[tuple[float, str]]) -> Events:
    """The supervisor's messages so far as events of the label `supervisor`, for the cues."""
    return [{"label": "supervisor", "event": "said", "message": message} for _, message in list(records)]


def ready(label: str, nth: int = 1, logged: bool = True) -> Callable[[Events], bool]:
    """`label` said it was ready `nth` times, and the supervisor logged each: the worker
    journals its readiness before it sends it, so its line alone does not mean the
    supervisor has read it (at load, the stop then came first: no banner, no 'all ready').
    `logged=False` where the supervisor's log level hides that line (then only the worker's
    journal; wrap it in `settled`)."""
    said = re.compile(rf"worker {re.escape(label)} ready \(pid \d+\)")

    def cue(events: Events) -> bool:
        told = sum(1 for e in events if e["label"] == "supervisor" and said.fullmatch(e["message"]))
        return count(events, label, "ready") >= nth and (told >= nth or not logged)

    return cue


def all_ready(*labels: str) -> Callable[[Events], bool]:
    cues = [ready(label) for label in labels]
    return lambda events: all(cue(events) for cue in cues)


def settled(cue: Callable[[Events], bool], seconds: float = 1.0) -> Callable[[Events], bool]:
    """`cue` has held for `seconds`: time for the supervisor to read what the worker sent
    after its journal line (the readiness datagram) before it is told to stop."""
    since: list[float] = []

    def check(events: Events) -> bool:
        if not cue(events):
            return False
        since[:1] = since[:1] or [time.monotonic()]
        return time.monotonic() - since[0] >= seconds

    return check


SERVING = [["ready", "serve"]]
