"""`dbsvc replicate` as a subprocess: against real servers (stream, resume, restarts, the
guard, refusals, the replica file's recovery) and against a fake primary that sends crafted
messages (every bad frame is refused by its offset, and nothing of it reaches FILE)."""

from __future__ import annotations

import asyncio
import http
import http.client
import json
import os
import pty
import select
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from websockets.asyncio.server import serve as ws_serve
from websockets.datastructures import Headers
from websockets.http11 import Response

from dbsvc.storage.logfile import MAX_PAYLOAD
from support.server import ROOT, server_pool, start_server
from support.storage import file_offsets
from support.tlskit import self_signed
from support.wskit import open_ws, run

USER = {"email": "ann@x.io", "name": "Ann"}
DEADLINE = 30.0


# -- helpers ----------------------------------------------------------------------------------


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


@pytest.fixture(autouse=True)
def kill_leftover_consumers():
    yield
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


# -- against a real server -------------------------------------------------------------------


WRITTEN_HEAD = 12  # the shared server's frames: ten inserts, one update, one delete


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One blog server for the tests that only read it (a consumer is a reader): ten users,
    user 3 renamed, user 4 deleted, so offsets 1..12 hold all three kinds of frame. Shared to
    save a server start a test; the teardown fails the module if a test wrote to it (its head
    moved or its frames differ), since each test's figures assume these twelve frames."""
    with server_pool(tmp_path_factory.mktemp("written") / "data") as pool:
        server = pool()
        write_users(server.port, 10)
        assert server.request("PATCH", "/api/user/3", {"name": "B"}).status == 200
        assert server.request("DELETE", "/api/user/4").status == 204
        frames = server_frames(server, 0, WRITTEN_HEAD)
        yield server
        assert server.proc.poll() is None, "a test stopped the shared server"
        assert head(server) == WRITTEN_HEAD, "a test wrote to the shared server"
        assert server_frames(server, 0, WRITTEN_HEAD) == frames


def test_file_holds_exactly_the_frames_the_server_holds(written, tmp_path):
    server = written
    out = tmp_path / "replica.log"
    consumer = follow(tmp_path, server, out)
    assert out.read_bytes() == server_frames(server, 0, 12)
    assert file_offsets(out) == list(range(1, 13))
    assert "stopped by SIGTERM at offset 12" in consumer.stderr


def test_stopped_and_restarted_under_writes_it_resumes_without_gap_or_duplicate(serve, tmp_path):
    server = serve()
    write_users(server.port, 20, "pre")
    writer = threading.Thread(target=write_users, args=(server.port, 300, "w"))
    writer.start()
    out = tmp_path / "replica.log"
    try:
        first = Consumer(tmp_path, base(server), "--out", str(out))
        wait_until(lambda: last_offset(out) >= 60, "60 frames", consumer=first)
        assert first.stop() == 0, first.stderr
        stopped_at = last_offset(out)
        second = Consumer(tmp_path, base(server), "--out", str(out))
    finally:
        writer.join(60)
    target = head(server)
    assert target == 320
    wait_until(lambda: last_offset(out) == target, "the head", consumer=second)
    assert second.stop() == 0
    assert f"after={stopped_at} " in second.stderr
    assert file_offsets(out) == list(range(1, 321))
    assert out.read_bytes() == server_frames(server, 0, 320)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_it_reconnects_to_a_restarted_server_and_goes_on(tmp_path):
    port = free_port()
    data = tmp_path / "data"
    env = {"SERVICE_PORT": str(port)}
    server = start_server(ROOT / "schemas" / "blog.dbs", data, env)
    out = tmp_path / "replica.log"
    try:
        write_users(server.port, 5, "a")
        consumer = Consumer(tmp_path, f"ws://127.0.0.1:{port}", "--out", str(out))
        wait_until(lambda: last_offset(out) == 5, "offset 5", consumer=consumer)
        assert server.stop() == 0
        server = start_server(ROOT / "schemas" / "blog.dbs", data, env)
        write_users(server.port, 5, "b")
        wait_until(lambda: last_offset(out) == 10, "offset 10 after the restart", consumer=consumer)
        assert consumer.stop() == 0
        assert "reconnecting after offset 5" in consumer.stderr
        assert out.read_bytes() == server_frames(server, 0, 10)
    finally:
        if server.proc.poll() is None:
            server.stop()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """One guarded blog server with two users, shared by the tests that only read it (a
    consumer with a token, or refused one); the teardown fails the module if its head moved."""
    from support.idp import TestIdp

    idp = TestIdp(tmp_path_factory.mktemp("guarded"))
    with server_pool(idp.data_dir()) as pool:
        server = pool(env=idp.server_env())
        token = idp.token
        write_users(server.port, 2, headers={"Authorization": f"Bearer {token()}"})
        yield server, token
        assert server.proc.poll() is None, "a test stopped the shared server"
        assert head(server) == 2, "a test wrote to the shared server"


def test_a_guarded_server_takes_the_token_from_the_flag_or_the_environment(guarded, tmp_path):
    server, token = guarded
    by_flag, by_env = tmp_path / "flag.log", tmp_path / "env.log"
    follow(tmp_path, server, by_flag, "--token", token())
    follow(tmp_path, server, by_env, env={"SERVICE_TOKEN": token()})
    assert (
        by_flag.read_bytes()
        == by_env.read_bytes()
        == server_frames(server, 0, 2, additional_headers={"Authorization": f"Bearer {token()}"})
    )


@pytest.mark.parametrize(
    "how, status",
    [("none", "HTTP 401 unauthorized"), ("garbage", "HTTP 401 unauthorized"), ("foreign", "HTTP 403 forbidden")],
)
def test_a_refused_token_ends_the_run_with_status_1(guarded, tmp_path, how, status):
    server, token = guarded
    args = {"none": [], "garbage": ["--token", "not.a.jwt"], "foreign": ["--token", token(tenant="other")]}[how]
    consumer = Consumer(tmp_path, base(server), "--out", str(tmp_path / "r.log"), *args)
    assert consumer.wait() == 1
    assert status in consumer.stderr and "--token or SERVICE_TOKEN" in consumer.stderr
    assert (tmp_path / "r.log").read_bytes() == b""


def compacted_server(serve, tmp_path, retain_mb: int | None):
    """A blog server with 5 rows, stopped, compacted offline (`dbsvc compact`), restarted;
    `[runtime] replication_retain_mb` set to `retain_mb` unless None (the default)."""
    schema = tmp_path / "blog.dbs"
    text = (ROOT / "schemas" / "blog.dbs").read_text()
    if retain_mb is not None:
        text = text.replace("replication = true", f"replication = true\nreplication_retain_mb = {retain_mb}", 1)
    schema.write_text(text)
    data = tmp_path / "data"
    server = serve(schema, data_dir=data)
    write_users(server.port, 5)
    out = tmp_path / "replica.log"
    follow(tmp_path, server, out)
    frames = server_frames(server, 0, 5)
    with open(out, "r+b") as f:  # keep offsets 1..2 only
        f.truncate(len(server_frames(server, 0, 2)))
    assert server.stop() == 0
    compact = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "compact"],
        cwd=ROOT,
        env=clean_env({"SERVICE_DATA": str(data)}),
        capture_output=True,
        timeout=60,
    )
    assert compact.returncode == 0, compact.stderr
    return serve(schema, data_dir=data), out, frames


def test_offset_gone_ends_the_run_and_says_to_rebootstrap(serve, tmp_path):
    server, out, _frames = compacted_server(serve, tmp_path, retain_mb=0)
    before = out.read_bytes()
    consumer = Consumer(tmp_path, base(server), "--out", str(out))
    assert consumer.wait() == 1
    assert "HTTP 410 offset_gone: the server no longer holds the rows after offset 2" in consumer.stderr
    assert "Re-bootstrap" in consumer.stderr
    assert out.read_bytes() == before


def test_a_compaction_within_the_retention_does_not_stop_a_replica(serve, tmp_path):
    server, out, frames = compacted_server(serve, tmp_path, retain_mb=None)
    write_users(server.port, 1, "after")
    consumer = follow(tmp_path, server, out)
    assert "after=2 " in consumer.stderr
    assert out.read_bytes() == frames + server_frames(server, 5, 1)


def test_replication_off_ends_the_run_with_404(serve, tmp_path):
    server = serve(ROOT / "schemas" / "inventory.dbs")
    consumer = Consumer(tmp_path, base(server))
    assert consumer.wait() == 1
    assert "HTTP 404 replication_disabled" in consumer.stderr
    assert "[runtime] replication = true" in consumer.stderr


def test_an_offset_ahead_of_the_server_ends_the_run(written, tmp_path):
    server = written
    consumer = Consumer(tmp_path, base(server), "--after", str(WRITTEN_HEAD + 1))
    assert consumer.wait() == 1
    assert "HTTP 400 offset_out_of_range" in consumer.stderr


@pytest.mark.parametrize("tail", ["half frame", "header only", "zeros"])
def test_a_torn_tail_is_cut_and_the_run_resumes(serve, tmp_path, tail):
    server = serve()
    write_users(server.port, 6, "a")
    out = tmp_path / "replica.log"
    follow(tmp_path, server, out)
    write_users(server.port, 2, "b")
    seventh = server_frames(server, 6, 1)
    torn = {"half frame": seventh[: len(seventh) // 2], "header only": seventh[:9], "zeros": b"\0" * 4096}[tail]
    good_size = out.stat().st_size
    with open(out, "ab") as f:
        f.write(torn)
    consumer = follow(tmp_path, server, out)
    assert f"cutting a torn tail of {len(torn)} bytes at byte {good_size}" in consumer.stderr
    assert "resuming after offset 6" in consumer.stderr
    assert out.read_bytes() == server_frames(server, 0, 8)


def test_damage_before_the_tail_is_refused_and_nothing_is_cut(written, tmp_path):
    server = written
    out = tmp_path / "replica.log"
    follow(tmp_path, server, out)
    frames = server_frames(server, 0, 2)
    data = bytearray(out.read_bytes())
    data[len(frames) + 20] ^= 0x01  # a payload byte of frame 3
    out.write_bytes(bytes(data))
    consumer = Consumer(tmp_path, base(server), "--out", str(out))
    assert consumer.wait() == 1
    assert f"corrupt at byte {len(frames)}: payload checksum mismatch; a good frame follows" in consumer.stderr
    assert out.read_bytes() == bytes(data)


def test_after_must_agree_with_the_file(written, tmp_path):
    server = written
    out = tmp_path / "replica.log"
    follow(tmp_path, server, out)
    before = out.read_bytes()
    consumer = Consumer(tmp_path, base(server), "--out", str(out), "--after", "1")
    assert consumer.wait() == 2
    assert "--after 1 disagrees with" in consumer.stderr and "ends at offset 12" in consumer.stderr
    assert out.read_bytes() == before
    follow(tmp_path, server, out, "--after", "12")  # agreeing is fine
    assert out.read_bytes() == before


def test_a_second_consumer_on_the_same_file_is_refused(written, tmp_path):
    server = written
    out = tmp_path / "replica.log"
    first = Consumer(tmp_path, base(server), "--out", str(out))
    wait_until(lambda: last_offset(out) == WRITTEN_HEAD, "the head", consumer=first)
    second = Consumer(tmp_path, base(server), "--out", str(out))
    assert second.wait() == 2
    assert "in use by another" in second.stderr
    assert first.stop() == 0


def test_without_out_each_event_is_a_json_line_on_stdout(written, tmp_path):
    server = written
    consumer = Consumer(tmp_path, base(server), "--after", "10")
    wait_until(lambda: consumer.stdout.count(b"\n") == 2, "two lines", consumer=consumer)
    assert consumer.stop(signal.SIGINT) == 0
    lines = consumer.stdout.splitlines()
    frames = server_frames(server, 10, 2)
    assert lines == [frames[16 : 16 + len(lines[0])], frames[32 + len(lines[0]) :]]
    assert [(json.loads(line)["offset"], json.loads(line)["kind"]) for line in lines] == [
        (11, "update"),
        (12, "delete"),
    ]


def test_progress_is_drawn_on_a_terminal(written, tmp_path):
    server = written
    master, slave = pty.openpty()
    consumer = Consumer(tmp_path, base(server), "--out", str(tmp_path / "r.log"), stderr=slave)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + DEADLINE
    try:
        while b"lag 0" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 65536)
        assert b"lag 0" in seen, seen
        assert b"\r12 frames" in seen and b"offset 12" in seen
        assert consumer.stop() == 0
    finally:
        os.close(master)


def test_bad_urls_are_usage_errors(tmp_path):
    for url in ("ftp://127.0.0.1:1", "http://", "http://127.0.0.1:1/?after=3"):
        consumer = Consumer(tmp_path, url)
        assert consumer.wait() == 2, url
        assert "dbsvc: error: URL" in consumer.stderr


# -- against a fake primary -------------------------------------------------------------------


def event_payload(offset: int, *, event_offset: int | None = None, kind: str = "insert") -> bytes:
    event = {
        "kind": kind,
        "model": "User",
        "offset": offset if event_offset is None else event_offset,
        "watermark": offset,
        "id": offset,
        "record": {"id": offset, "name": "x" * offset},
    }
    return json.dumps(event, separators=(",", ":")).encode()


def frame(
    offset: int,
    payload: bytes | None = None,
    *,
    crc: int | None = None,
    length_delta: int = 0,
    length: int | None = None,
    **event,
) -> bytes:
    payload = event_payload(offset, **event) if payload is None else payload
    size = len(payload) + length_delta if length is None else length
    return struct.pack(">QII", offset, zlib.crc32(payload) if crc is None else crc, size) + payload


GOOD = [frame(n) for n in (1, 2, 3)]

BAD_FRAMES = [
    # name, message after offset 3, the offset the error names, what it says
    ("truncated header", frame(4)[:10], 4, "truncated frame header (10 of 16 bytes)"),
    ("truncated payload", frame(4)[:-5], 4, f"truncated payload ({len(event_payload(4)) - 5} of "),
    ("wrong crc", frame(4, crc=12345), 4, "payload checksum mismatch"),
    ("length past the message", frame(4, length_delta=10), 4, "truncated payload"),
    (
        "length short of the message",
        frame(4, length_delta=-3),
        4,
        f"length {len(event_payload(4)) - 3} is short of the message's {len(event_payload(4))} payload bytes",
    ),
    (
        "length over the maximum",
        frame(4, length=2**32 - 1),
        4,
        "record too large: a frame payload of 4294967295 bytes, over the limit of 67108864",
    ),
    ("offset gap", frame(6), 6, "offset gap: expected 4, offsets 4..5 are missing"),
    ("offset repeat", frame(3), 3, "offset repeats: 3 was already received, expected 4"),
    ("offset far behind", frame(1), 1, "offset repeats: 1 was already received, expected 4"),
    ("bad json", frame(4, b'{"kind": "insert", '), 4, "payload is not JSON"),
    ("not utf-8", frame(4, b'{"kind": "\xff"}'), 4, "payload is not JSON"),
    ("a json array", frame(4, b"[1, 2]"), 4, "payload is a JSON list, expected an event object"),
    ("a link event", frame(4, kind="link"), 4, "payload is not an insert, update or delete event (kind 'link')"),
    ("event offset disagrees", frame(4, event_offset=7), 4, "the event's offset 7 disagrees with the frame's 4"),
    ("text message", "hello", 4, "a text message (5 characters), expected a binary frame"),
    ("empty message", b"", 4, "truncated frame header (0 of 16 bytes)"),
]


class FakePrimary:
    """A websockets server answering /replicate per `plan(attempt, after)`: a list of steps
    (bytes/str: a message; ("fragments", [parts]); ("sleep", s); "abort"; ("close", code);
    "hold": stay open), or an HTTP status to refuse with."""

    def __init__(self, plan, **server_options) -> None:
        self.plan = plan
        self.paths: list[str] = []
        self.snapshots = 0
        self.options = server_options

    async def _process_request(self, connection, request):
        if request.path == "/snapshot":  # no history to name: the head frame alone judges
            self.snapshots += 1
            return Response(404, "Not Found", Headers({"Content-Type": "text/plain"}), b"no /snapshot here")
        self.paths.append(request.path)
        step = self.plan(len(self.paths) - 1, int(request.path.partition("after=")[2] or 0))
        if isinstance(step, int):
            body = json.dumps({"type": "about:blank", "status": step, "code": "unavailable", "detail": "busy"})
            return Response(
                step, http.HTTPStatus(step).phrase, Headers({"Content-Type": "application/problem+json"}), body.encode()
            )
        connection.dbsvc_steps = step
        return None

    async def _handler(self, connection) -> None:
        for step in connection.dbsvc_steps:
            if step == "abort":
                connection.transport.abort()
                return
            if step == "hold":
                await connection.wait_closed()
                return
            if isinstance(step, tuple) and step[0] == "close":
                await connection.close(step[1])
                return
            if isinstance(step, tuple) and step[0] == "sleep":
                await asyncio.sleep(step[1])
            elif isinstance(step, tuple) and step[0] == "fragments":
                await connection.send(iter(step[1]))
            else:
                await connection.send(step)
        await connection.wait_closed()

    def serve(self, **extra):
        return ws_serve(
            self._handler, "127.0.0.1", 0, process_request=self._process_request, **{**self.options, **extra}
        )


async def start_consumer(tmp_path: Path, url: str, *args: str, env: dict | None = None):
    out, err = open(tmp_path / "fake.stdout", "wb"), open(tmp_path / "fake.stderr", "wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "dbsvc.py"),
        "replicate",
        url,
        *args,
        cwd=ROOT,
        env=clean_env(env),
        stdout=out,
        stderr=err,
    )
    out.close()
    err.close()
    return proc


async def stop_when(proc, predicate, what: str, timeout: float = DEADLINE) -> int:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.returncode is not None or time.monotonic() > deadline:
            proc.kill()
            await proc.wait()
            raise AssertionError(f"no {what}")
        await asyncio.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(proc.wait(), DEADLINE)


def fake_stderr(tmp_path: Path) -> str:
    return (tmp_path / "fake.stderr").read_text(errors="replace")


# Every bad frame's exact reason is checked in process (test_consumer_units.py, `check_frame`);
# as a command, one of each family: the header's checks, the order of offsets, the payload.
END_TO_END = [c for c in BAD_FRAMES if c[0] in ("wrong crc", "offset gap", "a link event", "text message")]


@pytest.mark.parametrize("name, bad, offset, reason", END_TO_END, ids=[c[0] for c in END_TO_END])
def test_a_bad_frame_ends_the_run_naming_its_offset_and_is_never_written(tmp_path, name, bad, offset, reason):
    primary = FakePrimary(lambda attempt, after: [*GOOD, bad, "hold"])
    out = tmp_path / "replica.log"

    async def body():
        async with primary.serve() as server:
            port = server.sockets[0].getsockname()[1]
            proc = await start_consumer(tmp_path, f"http://127.0.0.1:{port}", "--out", str(out))
            return await asyncio.wait_for(proc.wait(), DEADLINE)

    assert run(body()) == 1
    assert f"bad frame at offset {offset}: {reason}" in fake_stderr(tmp_path)
    assert out.read_bytes() == b"".join(GOOD)
    assert primary.paths == ["/replicate?after=0"]  # a bad frame is never retried


def test_a_whole_frame_over_the_log_limit_is_refused_as_record_too_large_and_never_written(tmp_path):
    """A well-formed frame (CRC and JSON good) whose payload is one byte over the 64 MiB a
    log reopens: the file would not reopen past it, so it is refused, not written (issue 30)."""
    head = event_payload(4)[:-3]  # ..."name":"xxxx, then more x and the payload's end
    payload = head + b"x" * (MAX_PAYLOAD + 1 - len(head) - 3) + b'"}}'
    assert len(payload) == MAX_PAYLOAD + 1 and json.loads(payload)["offset"] == 4
    big = frame(4, payload)
    del payload
    primary = FakePrimary(lambda attempt, after: [*GOOD, big, "hold"], max_size=None)
    out = tmp_path / "replica.log"

    async def body():
        async with primary.serve() as server:
            port = server.sockets[0].getsockname()[1]
            proc = await start_consumer(tmp_path, f"http://127.0.0.1:{port}", "--out", str(out))
            return await asyncio.wait_for(proc.wait(), DEADLINE)

    assert run(body()) == 1
    message = fake_stderr(tmp_path)
    assert (
        f"bad frame at offset 4: record too large: a frame payload of {MAX_PAYLOAD + 1} bytes, "
        f"over the limit of {MAX_PAYLOAD} (a log holding it would not reopen)"
    ) in message
    assert out.read_bytes() == b"".join(GOOD)


def test_drops_and_closes_reconnect_after_the_last_good_offset(tmp_path):
    frames = [frame(n) for n in range(1, 6)]
    # Each reconnect asks for the last frame kept again and checks it (consumer.py rule 7).
    plans = {
        0: [frames[0], frames[1], "abort"],
        1: [frames[1], frames[2], frames[3], ("close", 1001)],
        2: [frames[3], frames[4], "hold"],
    }
    primary = FakePrimary(lambda attempt, after: plans[attempt])
    out = tmp_path / "replica.log"

    async def body():
        async with primary.serve() as server:
            port = server.sockets[0].getsockname()[1]
            proc = await start_consumer(tmp_path, f"ws://127.0.0.1:{port}/", "--out", str(out))
            return await stop_when(proc, lambda: last_offset(out) == 5, "offset 5")

    assert run(body()) == 0, fake_stderr(tmp_path)
    assert primary.paths == ["/replicate?after=0", "/replicate?after=1", "/replicate?after=3"]
    assert out.read_bytes() == b"".join(frames)


def test_a_busy_server_is_retried_and_a_definitive_refusal_is_not(tmp_path):
    primary = FakePrimary(lambda attempt, after: 503 if attempt < 2 else [*GOOD, "hold"])
    out = tmp_path / "replica.log"

    async def body():
        async with primary.serve() as server:
            port = server.sockets[0].getsockname()[1]
            proc = await start_consumer(tmp_path, f"http://127.0.0.1:{port}", "--out", str(out))
            return await stop_when(proc, lambda: last_offset(out) == 3, "offset 3")

    assert run(body()) == 0, fake_stderr(tmp_path)
    assert primary.paths == ["/replicate?after=0"] * 3
    assert "HTTP 503" in fake_stderr(tmp_path)
    assert out.read_bytes() == b"".join(GOOD)


def test_fragmented_messages_are_reassembled_and_pings_answered(tmp_path):
    big = frame(2, event_payload(2) + b" " * 200_000)  # JSON allows trailing spaces
    parts = [big[:7], big[7:100_000], big[100_000:]]
    primary = FakePrimary(
        lambda attempt, after: [GOOD[0], ("fragments", parts), ("sleep", 2.5), GOOD[2], "hold"],
        ping_interval=0.3,
        ping_timeout=1.0,
    )
    out = tmp_path / "replica.log"

    async def body():
        async with primary.serve() as server:
            port = server.sockets[0].getsockname()[1]
            proc = await start_consumer(tmp_path, f"http://127.0.0.1:{port}", "--out", str(out))
            return await stop_when(proc, lambda: last_offset(out) == 3, "offset 3")

    assert run(body()) == 0, fake_stderr(tmp_path)
    assert primary.paths == ["/replicate?after=0"]  # pings answered: never dropped
    assert out.read_bytes() == GOOD[0] + big + GOOD[2]


def test_wss_is_spoken_with_the_system_trust_store(tmp_path):
    cert_path, key_path = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    primary = FakePrimary(lambda attempt, after: [*GOOD, "hold"])
    out = tmp_path / "replica.log"

    async def body():
        async with primary.serve(ssl=context) as server:
            port = server.sockets[0].getsockname()[1]
            proc = await start_consumer(
                tmp_path, f"wss://127.0.0.1:{port}", "--out", str(out), env={"SSL_CERT_FILE": str(cert_path)}
            )
            return await stop_when(proc, lambda: last_offset(out) == 3, "offset 3")

    assert run(body()) == 0, fake_stderr(tmp_path)
    assert out.read_bytes() == b"".join(GOOD)


# The replica file's scan (sinks.py `scan_frames`) is tested in process, case by case, in
# test_consumer_units.py.


# -- the blocking client of dbsvc.http.ws.client, in process ----------------------------------


def test_client_reports_refusals_closes_and_oversized_messages(tmp_path):
    from dbsvc.errors import HandshakeRefused, MessageTooBig, WebSocketClosed
    from dbsvc.http.ws.client import open_websocket

    def plan(attempt, after):
        return [[b"x" * 2000, "hold"], [("sleep", 0.5), ("close", 4001)], 410][attempt]

    primary = FakePrimary(plan)

    def client(url: str) -> list:
        seen: list = []
        with open_websocket(url, max_message=1000, timeout=5) as ws:
            try:
                ws.receive(5)
            except MessageTooBig as exc:
                seen.append(exc)
        with open_websocket(url, timeout=5) as ws:
            assert ws.receive(0.05) is None  # nothing yet is not an error
            try:
                ws.receive(5)
            except WebSocketClosed as exc:
                seen.append(exc.code)
        try:
            open_websocket(url, timeout=5)
        except HandshakeRefused as exc:
            seen.append((exc.status, exc.code, exc.problem["detail"]))
        return seen

    async def body():
        async with primary.serve() as server:
            port = server.sockets[0].getsockname()[1]
            return await asyncio.to_thread(client, f"ws://127.0.0.1:{port}/replicate?after=0")

    too_big, code, refused = run(body())
    assert "a message over 1000 bytes" in str(too_big)
    assert code == 4001
    assert refused == (410, "unavailable", "busy")
