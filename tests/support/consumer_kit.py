"""`dbsvc replicate` as a subprocess, for the tests that run it against real servers
(tests/replica/test_consumer_shared_reads.py, test_consumer_resume.py,
test_consumer_server_refusals.py) and against a fake primary (test_consumer_fake_primary.py):
the consumer with its output in files, bounded waits, the server's frames read by an
independent client, and users written over plain HTTP (also tests/app/test_replicate.py's).
tests/replica/conftest.py kills a consumer a test left running."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.server import ROOT
from support.storage import file_offsets
from support.wskit import open_ws, run

USER = {"email": "ann@x.io", "name": "Ann"}
DEADLINE = 30.0


def clean_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update(extra or {})
    return env


class Consumer:
    """`python dbsvc.py replicate ARGS` with its output in files (no pipe can fill)."""

    def __init__(self, tmp: Path, *args: str, env: dict | None = None, stderr=None) -> None:
        Consumer.count += 1
        self.captured = stderr is None
        self.out_path = tmp / f"consumer{Consumer.count}.stdout"
        self.err_path = tmp / f"consumer{Consumer.count}.stderr"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "dbsvc.py"), "replicate", *args],
                cwd=ROOT,
                env=clean_env(env),
                stdout=out,
                stderr=err if stderr is None else stderr,
            )
        RUNNING.append(self)

    count = 0

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    @property
    def stdout(self) -> bytes:
        return self.out_path.read_bytes()

    def wait(self, timeout: float = DEADLINE) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the consumer once it runs (its first message comes after its handlers)."""
        if self.captured:
            wait_until(lambda: "dbsvc replicate: " in self.stderr, "the consumer to start", consumer=self)
        self.proc.send_signal(sig)
        return self.wait()


RUNNING: list[Consumer] = []

RUNNING: list[Consumer] = []


def kill_leftover_consumers() -> None:
    """Kill every consumer a test started and left running (tests/replica/conftest.py)."""
    while RUNNING:
        consumer = RUNNING.pop()
        if consumer.proc.poll() is None:
            consumer.proc.kill()
            consumer.proc.wait(timeout=10)


def wait_until(predicate, what: str, timeout: float = DEADLINE, consumer: Consumer | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if consumer is not None and consumer.proc.poll() is not None:
            raise AssertionError(f"consumer exited {consumer.proc.returncode} before {what}:\n{consumer.stderr}")
        time.sleep(0.05)
    extra = f"\nconsumer stderr:\n{consumer.stderr}" if consumer is not None else ""
    raise AssertionError(f"timed out waiting for {what}{extra}")


def last_offset(path: Path) -> int:
    offsets = file_offsets(path)
    return offsets[-1] if offsets else 0


def server_frames(server, after: int, count: int, **kw) -> bytes:
    """The server's frames after `after`, read by an independent client (websockets)."""

    async def take():
        async with open_ws(server, f"/replicate?after={after}", max_size=None, **kw) as ws:
            return [await asyncio.wait_for(ws.recv(), 10) for _ in range(count)]

    return b"".join(run(take()))


def head(server) -> int:
    return server.get("/snapshot").json["offset"]


def write_users(port: int, count: int, prefix: str = "u", headers: dict | None = None) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i in range(count):
        conn.request(
            "POST",
            "/api/user",
            json.dumps({**USER, "email": f"{prefix}{i}@x.io"}),
            {"Content-Type": "application/json", **(headers or {})},
        )
        reply = conn.getresponse()
        assert reply.status == 201, reply.read()
        reply.read()
    conn.close()


def base(server) -> str:
    return f"http://127.0.0.1:{server.port}"


def follow(tmp_path: Path, server, out: Path, *args: str, env: dict | None = None) -> Consumer:
    """A consumer into `out`, waited for until it holds the server's head, then stopped."""
    consumer = Consumer(tmp_path, base(server), "--out", str(out), *args, env=env)
    target = head(server)
    wait_until(lambda: last_offset(out) == target, f"offset {target} in {out.name}", consumer=consumer)
    assert consumer.stop() == 0, consumer.stderr
    return consumer
