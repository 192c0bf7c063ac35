"""Real servers for black-box tests: `python dbsvc.py serve SCHEMA` on 127.0.0.1, port 0.

Every child server the tests start binds port 0 and says which port it got on one line;
`wait_for_port` reads lines until that one (the dbsvc server logs `listening on
http://HOST:PORT` on stderr, the demo app of tests/http prints `PORT <n>` on stdout).
`start_server` then drains stderr in a thread so the pipe never fills and tests can read the
log; `Server.stop` and `Server.wait` return only once that thread has read the log to its end,
so the lines a server writes as it exits are in `log` when they return (a test that read the
log right after `proc.wait` could miss its last line on a loaded host). Requests go through
`http.client`, an HTTP client independent of our protocol layer, each bounded by the server's
`request_timeout` (30 s; a test whose requests carry tens of MB asks for more).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"listening on http://[^:]+:(\d+)")
# The HTTP parser every server here runs (SERVICE_HTTP_PARSER): the fast path by default;
# DBSVC_TEST_HTTP_PARSER=h11 runs the same tests on h11 alone (.ci/run does both).
HTTP_PARSER = os.environ.get("DBSVC_TEST_HTTP_PARSER", "fast")


class Reply:
    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.headers = {k.lower(): v for k, v in headers}
        self.body = body

    @property
    def json(self):
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Reply {self.status} {self.body[:200]!r}>"


class Server:
    def __init__(
        self,
        proc: subprocess.Popen,
        port: int,
        data_dir: Path,
        log: list[str],
        readers: tuple[threading.Thread, ...] = (),
        request_timeout: float = 30,
    ) -> None:
        self.proc = proc
        self.port = port
        self.data_dir = data_dir
        self.log = log
        self.readers = readers  # the threads that read the child's pipes into `log` (and more)
        self.request_timeout = request_timeout
        self._conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body=None, headers: dict | None = None) -> Reply:
        headers = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            headers.setdefault("Content-Type", "application/json")
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.request_timeout)
            try:
                self._conn.request(method, path, body=body, headers=headers)
                resp = self._conn.getresponse()
                data = resp.read()
                reply = Reply(resp.status, resp.getheaders(), data)
                if resp.will_close:
                    self._conn.close()
                    self._conn = None
                return reply
            except (ConnectionError, http.client.RemoteDisconnected, http.client.CannotSendRequest):
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def get(self, path: str, **kw) -> Reply:
        return self.request("GET", path, **kw)

    def post(self, path: str, body, **kw) -> Reply:
        return self.request("POST", path, body=body, **kw)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout: float = 30) -> int:
        """The exit status, once the child has exited and its pipes are read to their end."""
        status = self.proc.wait(timeout=timeout)
        drained_pipes(self.readers, timeout)
        return status


def drained_pipes(readers: tuple[threading.Thread, ...], timeout: float) -> None:
    """Waits for `readers` (threads reading an exited child's pipes) to reach the end of them.
    A pipe still open `timeout` seconds after the child's exit is held by a process the child
    left behind: that fails the test, naming it, rather than leaving its log cut short."""
    end = time.monotonic() + timeout
    for thread in readers:
        thread.join(max(0.0, end - time.monotonic()))
        if thread.is_alive():
            raise AssertionError(
                f"a pipe of the exited server is still open after {timeout} s: a process it left holds it"
            )


def wait_for_port(
    proc: subprocess.Popen, stream: IO[str], pattern: re.Pattern[str], log: list[str], timeout: float = 30
) -> int:
    """The port a child bound, from the first line of `stream` that `pattern` matches (group 1);
    the lines before it go to `log`. A child that exits or stays silent for `timeout`
    seconds is killed and the test fails with everything it wrote."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        log.append(line)
        match = pattern.search(line)
        if match:
            return int(match.group(1))
    proc.kill()
    rest = stream.read()
    raise AssertionError(f"{proc.args[1:]} did not start (exit {proc.wait()}):\n{''.join(log)}{rest}")


def service_env(data_dir: Path, env: dict | None = None) -> dict[str, str]:
    """The environment of a test server: this one's without SERVICE_* and RUST_LOG, then
    port 0, the data directory, info logs, the HTTP parser under test, and `env`."""
    full_env = {key: value for key, value in os.environ.items() if not key.startswith("SERVICE_") and key != "RUST_LOG"}
    full_env.update(
        {"SERVICE_PORT": "0", "SERVICE_DATA": str(data_dir), "RUST_LOG": "info", "SERVICE_HTTP_PARSER": HTTP_PARSER}
    )
    full_env.update(env or {})
    return full_env


def spawn_serve(
    schema: str | Path, data_dir: Path, env: dict | None, args: tuple[str, ...], ready: re.Pattern[str], timeout: float
) -> tuple[subprocess.Popen, int, list[str], threading.Thread]:
    """`dbsvc serve SCHEMA ARGS...` started, waited for until its stderr matches `ready`
    (whose group 1 is the port), its stderr then read into the returned log by the returned
    thread (which ends at the end of the pipe)."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(schema), *args],
        cwd=ROOT,
        env=service_env(data_dir, env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log: list[str] = []
    port = wait_for_port(proc, proc.stderr, ready, log, timeout)

    def drain() -> None:
        for line in proc.stderr:
            log.append(line)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    return proc, port, log, reader


def start_server(
    schema: str | Path,
    data_dir: Path,
    env: dict | None = None,
    timeout: float = 30,
    args: tuple[str, ...] = (),
    request_timeout: float = 30,
) -> Server:
    """`timeout` bounds the start; `request_timeout` each request's connect, send and read."""
    proc, port, log, reader = spawn_serve(schema, data_dir, env, args, LISTENING, timeout)
    return Server(proc, port, data_dir, log, (reader,), request_timeout)


@contextlib.contextmanager
def server_pool(default_data: Path) -> Iterator[Callable[..., Server]]:
    """`pool(schema=blog, env=None, data_dir=default_data, args=(), timeout=30) -> Server`
    (`timeout`: start_server's bound on the start); every server the pool started is killed
    when the block ends (the `serve` fixtures)."""
    started: list[Server] = []

    def start(
        schema: str | Path = ROOT / "schemas" / "blog.dbs",
        env: dict | None = None,
        data_dir: Path | None = None,
        args: tuple[str, ...] = (),
        timeout: float = 30,
    ) -> Server:
        server = start_server(schema, data_dir or default_data, env, timeout, args)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait(timeout=10)
