"""Kit of the protocol tests (tests/http): start `demo_app.py` on 127.0.0.1, port 0, with
small limits (a real subprocess; in-process under mutation testing, see IN_PROCESS), and talk
to it through a minimal raw-socket HTTP/1.1 client (no mocks)."""

from __future__ import annotations

import base64
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from support import demo_app
from support.inprocess import InProcessServer
from support.server import wait_for_port

DEMO_APP = Path(__file__).with_name("demo_app.py")
DEMO_PORT = re.compile(r"^PORT (\d+)$")  # demo_app.py's line once it listens
TIMEOUT = 5.0


@dataclass
class HttpResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name.lower():
                return value
        return None

    def json(self):
        import json

        return json.loads(self.body)


class Client:
    """One raw HTTP/1.1 connection: write bytes, read responses one by one."""

    def __init__(self, port: int, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(
        self, method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> HttpResponse:
        self.send(build_request(method, target, headers, body))
        return self.read_response(head_only=method == "HEAD")

    def read_response(self, head_only: bool = False) -> HttpResponse:
        line = self.reader.readline()
        if not line:
            raise ConnectionError("server closed the connection")
        parts = line.decode("latin-1").split(" ", 2)
        status = int(parts[1])
        headers: list[tuple[str, str]] = []
        while True:
            line = self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers.append((name.strip().lower(), value.strip()))
        response = HttpResponse(status, headers, b"")
        length = response.header("content-length")
        if not head_only and length is not None and status >= 200:
            response.body = self.reader.read(int(length))
        return response

    def upgrade(self, target: str = "/upgrade") -> HttpResponse:
        """Ask for a WebSocket upgrade of `target` and read the answer: a 101's head only (the
        socket speaks WebSocket from there on), a refusal whole (the connection stays HTTP)."""
        key = base64.b64encode(os.urandom(16)).decode()
        self.send(
            (
                f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        return self.read_response()  # a 1xx has no body (read_response reads none below 200)

    def is_closed(self, wait: float = TIMEOUT) -> bool:
        """True once the server has closed (EOF or reset) within `wait` seconds."""
        self.sock.settimeout(wait)
        try:
            return self.reader.read(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def build_request(method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: test"]
    headers = dict(headers or {})
    if body and "Content-Length" not in headers and "Transfer-Encoding" not in headers:
        headers["Content-Length"] = str(len(body))
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# Where start_demo serves the demo app: a child process (what a user runs), or this process
# when mutmut runs the tests (it sets MUTANT_UNDER_TEST, to "" for its clean run) or
# DBSVC_TEST_HTTP_INPROCESS=1 asks for it (support/inprocess.py says why).
IN_PROCESS = "MUTANT_UNDER_TEST" in os.environ or os.environ.get("DBSVC_TEST_HTTP_INPROCESS") == "1"


class DemoServer:
    """The demo app, listening on `port`: what every protocol test talks to."""

    port: int

    def __init__(self, port: int) -> None:
        self.port = port
        self.clients: list[Client] = []

    def client(self, timeout: float = TIMEOUT) -> Client:
        client = Client(self.port, timeout)
        self.clients.append(client)
        return client

    def get(self, target: str, headers: dict[str, str] | None = None) -> HttpResponse:
        client = self.client()
        try:
            return client.request("GET", target, headers)
        finally:
            client.close()

    def log(self) -> str:
        raise NotImplementedError

    def begin_shutdown(self) -> None:
        """Start a graceful shutdown (SIGTERM for a process), without waiting for it."""
        raise NotImplementedError

    def wait(self, timeout: float) -> int:
        """Wait for the server to end; the exit status, 0 when it went well."""
        raise NotImplementedError

    def terminate(self, timeout: float = 10.0) -> int:
        """A graceful shutdown, waited for; the exit status."""
        self.begin_shutdown()
        return self.wait(timeout)

    def _stop(self) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        for client in self.clients:
            try:
                client.close()
            except OSError:
                pass
        self._stop()


class ChildDemo(DemoServer):
    """demo_app.py in a child process; its log is its stderr, in a file."""

    def __init__(self, process: subprocess.Popen, port: int, log_path: Path) -> None:
        super().__init__(port)
        self.process = process
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def begin_shutdown(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def _stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        if self.process.stdout:
            self.process.stdout.close()
        self.log_path.unlink(missing_ok=True)  # the log is read before cleanup; /tmp keeps none


class InProcessDemo(DemoServer):
    """demo_app's `app` served in a thread of this process (support/inprocess.py)."""

    def __init__(self, server: InProcessServer) -> None:
        super().__init__(server.port)
        self.server = server

    def log(self) -> str:
        return self.server.log.text()

    def begin_shutdown(self) -> None:
        self.server.begin_stop()

    def wait(self, timeout: float) -> int:
        self.server.stop(timeout)  # raises if it did not end well
        return 0

    def _stop(self) -> None:
        if self.server.running():
            self.server.stop()


def start_demo(args: list[str] | None = None, env: dict[str, str] | None = None, *, child: bool = False) -> DemoServer:
    """The demo app with these command-line `args`, in-process when IN_PROCESS, unless the
    test needs a process of its own (`child`: signals, RSS, rlimits) or another log
    configuration (`env`)."""
    if IN_PROCESS and not child and not env:
        settings, nofile = demo_app.parse_args(args or [])
        assert not nofile, "--nofile lowers the rlimit of the whole process: pass child=True"
        return InProcessDemo(InProcessServer(demo_app.app, settings).start())
    return start_child_demo(args, env)


def start_child_demo(args: list[str] | None = None, env: dict[str, str] | None = None) -> ChildDemo:
    log_file = tempfile.NamedTemporaryFile(prefix="dbsvc-http-", suffix=".log", delete=False)
    full_env = dict(os.environ, RUST_LOG="info", SERVICE_LOG_FORMAT="text", PYTHONUNBUFFERED="1")
    full_env.update(env or {})
    process = subprocess.Popen(
        [sys.executable, str(DEMO_APP), *(args or [])], stdout=subprocess.PIPE, stderr=log_file, env=full_env, text=True
    )
    log_file.close()
    assert process.stdout is not None
    try:
        port = wait_for_port(process, process.stdout, DEMO_PORT, [], timeout=10)
    except AssertionError as failed:
        log = Path(log_file.name)
        text = log.read_text()
        log.unlink()
        raise AssertionError(f"{failed}\n{text}") from None
    return ChildDemo(process, port, Path(log_file.name))


def assert_one_layer_crash(
    records: list[logging.LogRecord], phase: str, request_id: str, exc_type: type[BaseException]
) -> None:
    """Rule 8: among `records`, one "internal error in the http layer" line naming the phase and
    the request id, with the exception attached by type and its message kept out of the log."""
    crashes = [r for r in records if r.getMessage().startswith("internal error in the http layer")]
    assert [r.getMessage() for r in crashes] == [
        f"internal error in the http layer (phase {phase}, request_id={request_id})"
    ]
    assert crashes[0].exc_info is not None and crashes[0].exc_info[0] is exc_type
    assert getattr(crashes[0], "exc_messages", None) is False
