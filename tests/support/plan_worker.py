"""A worker process that follows a plan instead of serving, for the supervisor's own tests.

dbsvc/supervisor.py starts it exactly as it starts a worker (`supervise(..., argv=[python,
this file])`: the worker variables, NOTIFY_SOCKET, its own process group, PR_SET_PDEATHSIG),
so tests/workers/test_supervisor_loop.py drives the supervisor's decisions (start order,
readiness, restarts and their backoff, status 2, the stop order and its kill deadline) in the
test's own process, with real child processes and real notification datagrams, in well
under a second a worker rather than a whole server's start.

The plan is JSON in PLAN_WORKER: for each label (`writer`, `reader-1`, ...) a list of runs,
one list of steps a start (the nth start follows the nth run; past the end, the last):

    ready            READY=1 (with a STATUS= line) on NOTIFY_SOCKET, as notify.py sends it
    status           a STATUS= line alone (naming READY=1 inside its text): no readiness
    ready-elsewhere  READY=1 sent by a child process of this one (another pid)
    sleep:S          sleep S seconds
    await:LABEL      wait until worker LABEL has journaled its readiness (30 s at most)
    exits:LABEL:N    wait until worker LABEL has journaled N exits (30 s at most)
    linger:S         from now on SIGTERM makes it exit 0 only S seconds later
    deaf             from now on SIGTERM is journaled and ignored
    exit:N           exit with status N
    kill:N           kill itself with signal N
    serve            wait for SIGTERM (it exits 0 then, unless deaf)

Without a step left it exits 0. Every start, readiness, SIGTERM and exit is one line of the
journal file PLAN_JOURNAL, JSON: label, pid, event, `at` (time.monotonic(), one clock for
every process of the machine), and on a start the process group, the parent-death signal,
SERVICE_PORT and the worker variables.
Imports nothing from dbsvc: it stands for a worker, it is none.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time

PR_GET_PDEATHSIG = 2
WORKER_VARIABLES = ("DBSVC_WORKER", "DBSVC_WORKERS", "DBSVC_WORKER_PORT", "DBSVC_WORKER_KEY")  # workers/role.py
SEND = (  # argv holds no NUL: the abstract name travels with its '@'
    "import socket, sys; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
    "s.connect('\\0' + sys.argv[1][1:]); s.send(b'READY=1')"
)


def journal(label: str, event: str, **fields: object) -> None:
    line = json.dumps({"label": label, "pid": os.getpid(), "event": event, "at": time.monotonic(), **fields})
    fd = os.open(os.environ["PLAN_JOURNAL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())  # one write with O_APPEND: lines never interleave
    finally:
        os.close(fd)


def starts_before(label: str) -> int:
    try:
        with open(os.environ["PLAN_JOURNAL"]) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return 0
    return sum(1 for e in lines if e["label"] == label and e["event"] == "start")


def until_journaled(label: str, event: str, times: int = 1) -> None:
    end = time.monotonic() + 30.0
    while time.monotonic() < end:
        with open(os.environ["PLAN_JOURNAL"]) as f:
            seen = [json.loads(line) for line in f if line.strip()]
        if sum(1 for e in seen if e["label"] == label and e["event"] == event) >= times:
            return
        time.sleep(0.01)
    raise SystemExit(f"plan_worker: {label} did not journal {event!r} {times} times within 30 s")


def notification_target() -> str:
    address = os.environ["NOTIFY_SOCKET"]
    return "\0" + address[1:] if address.startswith("@") else address


def send(data: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(notification_target())
        sock.send(data)


def death_signal() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    value = ctypes.c_int(0)
    libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(value))
    return value.value


def main() -> None:
    label = os.environ["DBSVC_WORKER"]
    runs = json.loads(os.environ["PLAN_WORKER"])[label]
    steps = runs[min(starts_before(label), len(runs) - 1)]
    variables = {name: os.environ.get(name) for name in WORKER_VARIABLES}
    journal(
        label,
        "start",
        pgid=os.getpgid(0),
        pdeathsig=death_signal(),
        port=os.environ.get("SERVICE_PORT"),
        variables=variables,
    )
    on_term = {"deaf": False, "linger": 0.0}

    def term(signum: int, frame: object) -> None:
        journal(label, "term")
        if on_term["deaf"]:
            return
        time.sleep(on_term["linger"])
        journal(label, "exit", status=0)
        os._exit(0)

    signal.signal(signal.SIGTERM, term)
    for step in steps:
        name, _, arg = step.partition(":")
        if name == "ready":
            journal(label, "ready")  # first: whatever the supervisor starts on it comes after
            send(f"READY=1\nSTATUS={label} ready".encode())
        elif name == "status":
            send(f"STATUS={label} starting, not READY=1 yet".encode())  # readiness is a line of its own
        elif name == "ready-elsewhere":
            subprocess.run([sys.executable, "-c", SEND, os.environ["NOTIFY_SOCKET"]], check=True)
        elif name == "sleep":
            time.sleep(float(arg))
        elif name == "await":
            until_journaled(arg, "ready")
        elif name == "exits":
            other, _, times = arg.partition(":")
            until_journaled(other, "exit", int(times))
        elif name == "linger":
            on_term["linger"] = float(arg)
        elif name == "deaf":
            on_term["deaf"] = True
        elif name == "exit":
            journal(label, "exit", status=int(arg))
            os._exit(int(arg))
        elif name == "kill":
            journal(label, "exit", status=-int(arg))
            os.kill(os.getpid(), int(arg))
        elif name == "serve":
            while True:
                signal.pause()
        else:
            raise SystemExit(f"plan_worker: unknown step {step!r}")
    journal(label, "exit", status=0)


if __name__ == "__main__":
    main()
