"""`dbsvc serve SCHEMA --workers N` as a real process tree for black-box tests.

The supervisor is started like any test server (tests/support/server.py: port 0, the data
directory, the log drained by a thread); it is ready when it logs
`all N workers ready on http://HOST:PORT`. SO_REUSEPORT hands each new connection to one
worker and keeps it there, so a test that needs a given worker opens connections until
one lands on it: `connection_to("reader-1")` asks each new connection's `/health` which
worker it reached (its `worker.label`), a bounded number of times. Requests go through
`http.client` (and `websockets` for sockets), clients independent of our protocol layer.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from support.server import Reply, drained_pipes, spawn_serve

READY = re.compile(r"all \d+ workers ready on http://[^:]+:(\d+)")
TRIES = 400  # connections opened to find one worker, at most
FIND_SECONDS = 30.0


class Connection:
    """One keep-alive connection, pinned to the worker that accepted it (never reopened:
    a reply on another connection could come from another worker)."""

    def __init__(self, port: int, headers: dict | None = None) -> None:
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = dict(headers or {})  # sent with every request (a token)
        self.worker = self.request("GET", "/health").json["worker"]

    @property
    def label(self) -> str:
        return self.worker["label"]

    def request(self, method: str, path: str, body=None, headers: dict | None = None) -> Reply:
        headers = {**self.headers, **(headers or {})}
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            headers.setdefault("Content-Type", "application/json")
        self.http.request(method, path, body=body, headers=headers)
        response = self.http.getresponse()
        return Reply(response.status, response.getheaders(), response.read())

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def close(self) -> None:
        self.http.close()


class Workers:
    """A running supervisor and its workers."""

    def __init__(
        self,
        proc: subprocess.Popen,
        port: int,
        data_dir: Path,
        log: list[str],
        count: int,
        env: dict | None = None,
        reader: threading.Thread | None = None,
    ) -> None:
        self.proc = proc
        self.reader = reader  # the thread reading its stderr (and its workers') into `log`
        self.env = dict(env or {})  # the variables it was started with, beside service_env's
        self.port = port
        self.data_dir = data_dir
        self.log = log
        self.count = count
        self.headers: dict[str, str] = {}  # every Connection's (a token, for a guarded tree)

    @property
    def labels(self) -> list[str]:
        return ["writer"] + [f"reader-{k}" for k in range(1, self.count)]

    def connection_to(self, label: str, deadline: float = FIND_SECONDS) -> Connection:
        """A connection the worker `label` accepted (bounded: TRIES connections, `deadline` s)."""
        seen: dict[str, int] = {}
        end = time.monotonic() + deadline
        for _ in range(TRIES):
            if time.monotonic() > end:
                break
            try:
                connection = Connection(self.port, self.headers)
            except (OSError, http.client.HTTPException):
                time.sleep(0.05)  # a worker between two lives: its socket closed under us
                continue
            if connection.label == label:
                return connection
            seen[connection.label] = seen.get(connection.label, 0) + 1
            connection.close()
        raise AssertionError(f"no connection reached worker {label!r} (reached: {seen})\n{''.join(self.log[-30:])}")

    def socket_to(self, label: str) -> socket.socket:
        """A raw socket the worker `label` accepted, its `/health` exchange done (for a
        WebSocket client to upgrade on: `connect(url, sock=...)`)."""
        end = time.monotonic() + FIND_SECONDS
        for _ in range(TRIES):
            assert time.monotonic() < end, f"no socket reached worker {label!r}"
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(1)
                assert chunk, "the worker closed the connection"
                head += chunk
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            body = b""
            while len(body) < length:
                body += sock.recv(length - len(body))
            if json.loads(body)["worker"]["label"] == label:
                return sock
            sock.close()
        raise AssertionError(f"no socket reached worker {label!r}")

    def private_port(self) -> int:
        """The writer's private port, from its `listening on` line that is not the public one."""
        found = re.compile(r"listening on 127\.0\.0\.1:(\d+) worker=writer")
        ports = {int(m.group(1)) for line in list(self.log) if (m := found.search(line))}
        (port,) = ports - {self.port}
        return port

    def pids(self) -> dict[str, int]:
        """Each worker's pid, as its /health says."""
        return {label: self.connection_to(label).worker["pid"] for label in self.labels}

    def wait_log(self, pattern: str, count: int = 1, timeout: float = 60.0) -> None:
        """Until `count` lines of the log match `pattern` (a poll with a deadline)."""
        compiled = re.compile(pattern)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if sum(1 for line in list(self.log) if compiled.search(line)) >= count:
                return
            time.sleep(0.05)
        raise AssertionError(f"{count} x {pattern!r} not logged within {timeout} s:\n{''.join(self.log[-40:])}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        status = self.proc.wait(timeout=timeout)
        drained_pipes((self.reader,) if self.reader else (), timeout)  # the last lines are in `log`
        return status


def start_workers(
    schema: str | Path, data_dir: Path, count: int, env: dict | None = None, timeout: float = 90
) -> Workers:
    proc, port, log, reader = spawn_serve(schema, data_dir, env, ("--workers", str(count)), READY, timeout)
    return Workers(proc, port, data_dir, log, count, env, reader)
