"""`dbsvc replicate` as a subprocess against a fake primary that sends crafted messages:
every bad frame is refused by its offset and nothing of it reaches FILE; drops, closes,
a busy server, fragments and pings, wss; and the blocking client of
dbsvc.http.ws.client in process."""

from __future__ import annotations

import asyncio
import http
import json
import signal
import ssl
import struct
import sys
import time
import zlib
from pathlib import Path

import pytest
from websockets.asyncio.server import serve as ws_serve
from websockets.datastructures import Headers
from websockets.http11 import Response

from dbsvc.storage.logfile import MAX_PAYLOAD
from support.consumer_kit import DEADLINE, clean_env, last_offset
from support.server import ROOT
from support.tlskit import self_signed
from support.wskit import run


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


def run_consumer(
    primary: FakePrimary,
    tmp_path: Path,
    out: Path,
    *,
    until: int | None = None,
    url: str = "http://127.0.0.1:{port}",
    env: dict | None = None,
    **serve,
) -> int:
    """Serve `primary` (`serve`: extra server options such as `ssl`) and run a consumer of it
    into `out`; its exit status once it ends by itself, or, given `until`, once FILE ends at
    that offset and a SIGTERM stopped it."""

    async def body():
        async with primary.serve(**serve) as server:
            port = server.sockets[0].getsockname()[1]
            proc = await start_consumer(tmp_path, url.format(port=port), "--out", str(out), env=env)
            if until is None:
                return await asyncio.wait_for(proc.wait(), DEADLINE)
            return await stop_when(proc, lambda: last_offset(out) == until, f"offset {until}")

    return run(body())


# Every bad frame's exact reason is checked in process (test_consumer_units.py, `check_frame`);
# as a command, one of each family: the header's checks, the order of offsets, the payload.
END_TO_END = [c for c in BAD_FRAMES if c[0] in ("wrong crc", "offset gap", "a link event", "text message")]


@pytest.mark.parametrize("name, bad, offset, reason", END_TO_END, ids=[c[0] for c in END_TO_END])
def test_a_bad_frame_ends_the_run_naming_its_offset_and_is_never_written(tmp_path, name, bad, offset, reason):
    primary = FakePrimary(lambda attempt, after: [*GOOD, bad, "hold"])
    out = tmp_path / "replica.log"

    assert run_consumer(primary, tmp_path, out) == 1
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

    assert run_consumer(primary, tmp_path, out) == 1
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

    url = "ws://127.0.0.1:{port}/"
    assert run_consumer(primary, tmp_path, out, until=5, url=url) == 0, fake_stderr(tmp_path)
    assert primary.paths == ["/replicate?after=0", "/replicate?after=1", "/replicate?after=3"]
    assert out.read_bytes() == b"".join(frames)


def test_a_busy_server_is_retried_and_a_definitive_refusal_is_not(tmp_path):
    primary = FakePrimary(lambda attempt, after: 503 if attempt < 2 else [*GOOD, "hold"])
    out = tmp_path / "replica.log"

    assert run_consumer(primary, tmp_path, out, until=3) == 0, fake_stderr(tmp_path)
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

    assert run_consumer(primary, tmp_path, out, until=3) == 0, fake_stderr(tmp_path)
    assert primary.paths == ["/replicate?after=0"]  # pings answered: never dropped
    assert out.read_bytes() == GOOD[0] + big + GOOD[2]


def test_wss_is_spoken_with_the_system_trust_store(tmp_path):
    cert_path, key_path = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    primary = FakePrimary(lambda attempt, after: [*GOOD, "hold"])
    out = tmp_path / "replica.log"

    url, env = "wss://127.0.0.1:{port}", {"SSL_CERT_FILE": str(cert_path)}
    assert run_consumer(primary, tmp_path, out, until=3, url=url, env=env, ssl=context) == 0, fake_stderr(tmp_path)
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
