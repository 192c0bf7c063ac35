"""Operations (issue 32 items 4, 7, 9, 10, 11): what an operator meets once a server runs.

Each case runs real server processes on loopback ports they choose and reads what they
write (standard output, standard error) and answer:

- a read replica is not ready (`/ready` 503, saying what it waits for) until its first
  bootstrap, and its banner and `/health` name its primary (item 9);
- `/metrics` in the Prometheus text format on `Accept: text/plain` or `?format=prometheus`,
  read back with prometheus_client's own parser; JSON stays the default (item 11);
- `/api/` lists the models, their routes and the documents; `/` redirects to the
  explorer or the index; a 0.0.0.0 bind prints a reachable address (item 4);
- with `SERVICE_LOG_FORMAT=json` every line the process writes is one JSON object (item 7);
- `dbsvc export` against a running server takes the consistent copy itself, and export
  and import read the tenant's own schema when none is given (item 10).

Every wait is a poll with a deadline.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import LISTENING, ROOT, Server, service_env, wait_for_port

BLOG = ROOT / "schemas" / "blog.dbs"


class Process(Server):
    """A server whose standard output is kept too (`out`: its lines, read by a thread)."""

    out: list[str]


def start(schema: Path, data: Path, env: dict | None = None, args: tuple[str, ...] = ()) -> Process:
    """`dbsvc serve SCHEMA`, stdout and stderr both read: stderr up to its `listening on`."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(schema), *args],
        cwd=ROOT,
        env=service_env(data, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log: list[str] = []
    port = wait_for_port(proc, proc.stderr, LISTENING, log, 60)
    out: list[str] = []

    def drain(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    threading.Thread(target=drain, args=(proc.stderr, log), daemon=True).start()
    threading.Thread(target=drain, args=(proc.stdout, out), daemon=True).start()
    server = Process(proc, port, data, log)
    server.out = out
    return server


@pytest.fixture
def servers() -> Iterator[list[Process]]:
    """The servers a test started, killed when it ends."""
    started: list[Process] = []
    yield started
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def poll(check, timeout: float = 60, what: str = "condition"):
    """`check()`'s first truthy answer, polled until `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = check()
        if answer:
            return answer
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout} s")


# -- item 9: a replica is ready once it has bootstrapped ---------------------------------------


def test_replica_is_not_ready_until_its_first_bootstrap_and_names_its_primary(tmp_path, servers):
    port = free_port()  # the primary is not there yet
    primary_url = f"http://127.0.0.1:{port}"
    replica = start(BLOG, tmp_path / "replica", args=("--follow", primary_url))
    servers.append(replica)

    ready = replica.get("/ready")
    assert ready.status == 503, ready
    assert ready.json["code"] == "unavailable"
    assert "first bootstrap" in ready.json["detail"] and primary_url in ready.json["detail"], ready.json
    health = replica.get("/health")
    assert health.status == 200  # alive all the same
    assert health.json["replica"]["primary"] == primary_url
    assert health.json["replica"]["ready"] is False
    assert "first bootstrap" in health.json["replica"]["waiting_for"]
    poll(lambda: any(primary_url in line for line in replica.out), 10, "the banner's replica line")
    banner = "".join(replica.out)
    assert f"Replica   of {primary_url}" in banner, banner

    primary = start(BLOG, tmp_path / "primary", env={"SERVICE_PORT": str(port)})
    servers.append(primary)
    assert primary.post("/api/user", {"email": "ann@example.com", "name": "Ann"}).status == 201
    poll(lambda: replica.get("/ready").status == 200, 60, "the replica's readiness")
    assert replica.get("/ready").json == {"status": "ready"}
    health = poll(
        lambda: (h := replica.get("/health").json["replica"])["state"] == "following" and h, 30, "following"
    )
    assert health["ready"] is True and health["waiting_for"] is None
    poll(lambda: replica.get("/api/user").json["total"] == 1, 30, "the replica's copy")
