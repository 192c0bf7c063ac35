"""Kit of the protocol tests (tests/http): start `demo_app.py` as a real subprocess on
127.0.0.1, port 0, with small limits, and talk to it through a minimal raw-socket HTTP/1.1
client (no mocks)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from support.server import wait_for_port

DEMO_APP = Path(__file__).with_name("demo_app.py")
DEMO_PORT = re.compile(r"^PORT (\d+)$")             # demo_app.py's line once it listens
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

    def request(self, method: str, target: str, headers: dict[str, str] | None = None,
                body: bytes = b"") -> HttpResponse:
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


def build_request(method: str, target: str, headers: dict[str, str] | None = None,
                  body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: test"]
    headers = dict(headers or {})
    if body and "Content-Length" not in headers and "Transfer-Encoding" not in headers:
        headers["Content-Length"] = str(len(body))
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class DemoServer:
    process: subprocess.Popen
    port: int
    log_path: Path
    clients: list[Client] = field(default_factory=list)

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
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def terminate(self, timeout: float = 10.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def cleanup(self) -> None:
        for client in self.clients:
            try:
                client.close()
            except OSError:
                pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        if self.process.stdout:
            self.process.stdout.close()


def start_demo(args: list[str] | None = None, env: dict[str, str] | None = None) -> DemoServer:
    log_file = tempfile.NamedTemporaryFile(prefix="dbsvc-http-", suffix=".log", delete=False)
    full_env = dict(os.environ, RUST_LOG="info", SERVICE_LOG_FORMAT="text", PYTHONUNBUFFERED="1")
    full_env.update(env or {})
    process = subprocess.Popen(
        [sys.executable, str(DEMO_APP), *(args or [])],
        stdout=subprocess.PIPE, stderr=log_file, env=full_env, text=True)
    log_file.close()
    assert process.stdout is not None
    try:
        port = wait_for_port(process, process.stdout, DEMO_PORT, [], timeout=10)
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{Path(log_file.name).read_text()}") from None
    return DemoServer(process, port, Path(log_file.name))
