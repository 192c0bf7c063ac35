"""A scripted primary for `dbsvc replicate` run in process (tests/replica/test_consumer_*.py):
a websockets server on a loopback port, served from a thread of the test's process, that
answers `GET /snapshot` and `/replicate` as each test scripts it; frames built from the
documented layout (offset u64, CRC32 u32, length u32, payload, big-endian), never with
logfile.py's encoder; and a stderr that says it is a terminal."""

from __future__ import annotations

import asyncio
import http
import io
import json
import struct
import threading
import zlib

from websockets.asyncio.server import serve as ws_serve
from websockets.datastructures import Headers
from websockets.http11 import Response

DEADLINE = 20.0
MiB = 1024 * 1024
SERVER_EPOCH = "e" * 32  # the scripted primary's epoch and schema fingerprint, as /snapshot names them
SERVER_FINGERPRINT = "f" * 64


def snapshot_body(offset: int, history: dict | None = None, **over) -> dict:
    """A server's `GET /snapshot` body at head `offset` naming `history` (None: a server
    written before histories), `over` replacing or adding keys."""
    return {
        "watermarks": {},
        "epoch": SERVER_EPOCH,
        "offset": offset,
        "fingerprint": SERVER_FINGERPRINT,
        "history": history,
        **over,
    }


def event(at: int, **over) -> dict:
    """A User insert at offset `at` (its watermark and id too), `over` replacing keys."""
    return {"kind": "insert", "model": "User", "offset": at, "watermark": at, "id": at, "record": {"id": at}, **over}


def payload(at: int, **over) -> bytes:
    return json.dumps(event(at, **over), separators=(",", ":")).encode()


def frame(at: int, body: bytes | None = None, *, crc: int | None = None, length: int | None = None) -> bytes:
    """A log frame at offset `at` holding `body` (`payload(at)` if None); `crc` and `length`
    replace the header's true CRC32 and length, for a damaged frame."""
    body = payload(at) if body is None else body
    return (
        struct.pack(">QII", at, zlib.crc32(body) if crc is None else crc, len(body) if length is None else length)
        + body
    )


class Primary:
    """A scripted primary in a thread: `GET /snapshot` answers `snapshot` (status, JSON body)
    (or a list of them, answered in turn, the last one from then on);
    `/replicate?after=N` answers `plan(attempt, after)`: a list of messages and pauses (a float: seconds), ending with
    ("close", code) or nothing (the connection is then held open), or an HTTP status (with
    a problem body: `problems[status]`, or code "unavailable")."""

    def __init__(self, plan, snapshot: tuple | list = (404, None), problems: dict | None = None) -> None:
        self.plan, self.snapshot, self.problems = plan, snapshot, problems or {}
        self.paths: list[str] = []
        self.authorization: list[str | None] = []
        self.snapshot_paths: list[str] = []
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),), daemon=True)
        self._thread.start()
        assert self._started.wait(DEADLINE), "the scripted primary did not start"
        self.base = f"http://127.0.0.1:{self.port}"

    async def _main(self) -> None:
        self._done = asyncio.Event()
        async with ws_serve(self._handler, "127.0.0.1", 0, process_request=self._process) as server:
            self.port = server.sockets[0].getsockname()[1]
            self._started.set()
            await self._done.wait()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._done.set)
        self._thread.join(DEADLINE)

    def _response(self, status: int, body: bytes, kind: str) -> Response:
        return Response(status, http.HTTPStatus(status).phrase, Headers({"Content-Type": kind}), body)

    async def _process(self, connection, request):
        if request.path.endswith("/snapshot"):
            self.snapshot_paths.append(request.path)
            answers = self.snapshot if isinstance(self.snapshot, list) else [self.snapshot]
            status, body = answers.pop(0) if len(answers) > 1 else answers[0]
            return self._response(status, json.dumps(body).encode(), "application/json")
        self.paths.append(request.path)
        self.authorization.append(request.headers.get("Authorization"))
        step = self.plan(len(self.paths) - 1, int(request.path.partition("after=")[2]))
        if isinstance(step, int):
            problem = {"status": step, "code": "unavailable", "detail": "busy", **self.problems.get(step, {})}
            return self._response(step, json.dumps(problem).encode(), "application/problem+json")
        connection.steps = step
        return None

    async def _handler(self, connection) -> None:
        for step in connection.steps:
            if isinstance(step, float):  # a pause in the stream, in seconds
                await asyncio.sleep(step)
                continue
            if isinstance(step, tuple):
                await connection.close(step[1])
                return
            await connection.send(step)
        await connection.wait_closed()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_replicate(url: str, **kw) -> tuple[int | BaseException, str]:
    """`dbsvc replicate` against `url` in this process: its exit status, or the exception
    that ended it, and what it wrote to stderr."""
    from dbsvc.replica.consumer import replicate

    err = io.StringIO()
    try:
        status: int | BaseException = replicate(url, stderr=err, **kw)
    except Exception as exc:  # the test reads what ended the run
        status = exc
    return status, err.getvalue()
