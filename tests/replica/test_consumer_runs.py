"""`dbsvc replicate` run in this process (`replicate(url, out=..., stderr=...)`), against a
scripted primary on a loopback port served from a thread of this process, so a mutation
run sees every decision of the run loop (rules 4, 5 and 7): where each connection resumes,
the head-frame check, the history record, which refusal ends the run and with what, the
messages on stderr, the progress line (rule 6), `GET /snapshot` (`get_snapshot`) and
the history check (`history_to_adopt`). test_replica_consumer.py runs the same command as
a subprocess against real servers.

Every run here ends by itself: a refusal the scripted primary answers, a bad frame, or a
SIGTERM this process sends itself once FILE holds what the test waits for."""

from __future__ import annotations

import asyncio
import http
import io
import json
import os
import re
import signal
import struct
import threading
import time
import zlib
from pathlib import Path

import pytest
from websockets.asyncio.server import serve as ws_serve
from websockets.datastructures import Headers
from websockets.http11 import Response

from dbsvc.errors import ConfigError, HistoryDiverged
from dbsvc.replica.consumer import (
    FrameError,
    ReplicaError,
    Reporter,
    get_snapshot,
    history_to_adopt,
    parse_endpoint,
    replicate,
)
from dbsvc.replica.sinks import ReplicaFile
from dbsvc.storage.history import History

DEADLINE = 20.0
pytestmark = pytest.mark.timeout(60)  # a run that never ends fails here, not at the suite's 300 s
H1, H2 = "1" * 32, "2" * 32


def payload(at: int, **over) -> bytes:
    event = {"kind": "insert", "model": "User", "offset": at, "watermark": at, "id": at, "record": {"id": at}, **over}
    return json.dumps(event, separators=(",", ":")).encode()


def frame(at: int, body: bytes | None = None) -> bytes:
    body = payload(at) if body is None else body
    return struct.pack(">QII", at, zlib.crc32(body), len(body)) + body


class Primary:
    """A scripted primary in a thread: `GET /snapshot` answers `snapshot` (status, JSON body)
    (or a list of them, answered in turn, the last one from then on);
    `/replicate?after=N` answers `plan(attempt, after)`: a list of messages, ending with
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
            if isinstance(step, tuple):
                await connection.close(step[1])
                return
            await connection.send(step)
        await connection.wait_closed()


@pytest.fixture
def primary():
    made: list[Primary] = []

    def make(plan, **kw) -> Primary:
        made.append(Primary(plan, **kw))
        return made[-1]

    yield make
    for p in made:
        p.close()


def run(url: str, **kw) -> tuple[int | BaseException, str]:
    err = io.StringIO()
    try:
        status: int | BaseException = replicate(url, stderr=err, **kw)
    except Exception as exc:  # the test reads what ended the run
        status = exc
    return status, err.getvalue()


def terminate_when(predicate) -> threading.Thread:
    """SIGTERM to this process once `predicate()` holds (rule 5: replicate's handler takes it)."""

    def watch() -> None:
        deadline = time.monotonic() + DEADLINE
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def size_is(path: Path, n: int):
    return lambda: path.exists() and path.stat().st_size == n


F1, F2, F3, F4 = (frame(n) for n in (1, 2, 3, 4))


# --- the run loop -------------------------------------------------------------------------


def test_frames_go_to_the_file_and_a_reconnection_checks_the_head_frame_first(primary, tmp_path):
    """Rules 2, 4, 7: the first connection after=0; a drop; the next asks after=L-1 and
    skips the head frame once it matches; a definitive refusal ends the run, status 1,
    with the frames kept."""
    plans = [[F1, F2, F3, ("close", 1001)], [F3, F4, ("close", 1001)], 403]
    p = primary(lambda attempt, after: plans[attempt], problems={403: {"code": "forbidden", "detail": "no"}})
    out = tmp_path / "r.log"
    status, err = run(p.base, out=str(out), token="Bearer  secret ")
    assert isinstance(status, ReplicaError)
    ws = f"ws://127.0.0.1:{p.port}"
    assert str(status) == (
        f"{ws}/replicate?after=3: HTTP 403 forbidden: no (give a valid token with --token or SERVICE_TOKEN)"
    )
    assert out.read_bytes() == F1 + F2 + F3 + F4
    assert p.paths == ["/replicate?after=0", "/replicate?after=2", "/replicate?after=3"]
    assert p.authorization == ["Bearer secret"] * 3
    lines = err.splitlines()
    assert lines[0] == f"dbsvc replicate: streaming {ws}/replicate?after=0 into {out}"
    closed = r"dbsvc replicate: WebSocket closed with code 1001; reconnecting after offset {} in 0\.[2-5] s"
    assert re.fullmatch(closed.format(3), lines[1]), lines[1]
    assert lines[2] == (
        f"dbsvc replicate: streaming {ws}/replicate?after=2 into {out}; resuming after=3 once frame 3 matches the file's"
    )
    assert re.fullmatch(closed.format(4), lines[3]), lines[3]  # it delivered: the first delay again
    assert len(lines) == 4


def test_a_file_of_one_frame_checks_it_as_the_head_frame(primary, tmp_path):
    out = tmp_path / "r.log"
    out.write_bytes(F1)
    p = primary(lambda attempt, after: [F1, F2] if attempt == 0 else 403)
    terminate_when(size_is(out, len(F1 + F2)))
    status, err = run(p.base, out=str(out))
    assert status == 0, err
    assert p.paths == ["/replicate?after=0"]
    assert out.read_bytes() == F1 + F2


def test_the_progress_line_follows_the_run(primary, tmp_path):
    out = tmp_path / "r.log"
    p = primary(lambda attempt, after: [F1, ("close", 1001)] if attempt == 0 else 403)
    err = Terminal()
    with pytest.raises(ReplicaError):
        replicate(p.base, out=str(out), stderr=err)
    text = err.getvalue()
    ws = f"ws://127.0.0.1:{p.port}"
    assert f"\r\x1b[Kdbsvc replicate: streaming {ws}/replicate?after=0 into {out}\n\r0 frames  0 B  offset 0  lag ?  (streaming)\x1b[K" in text
    assert re.search(
        r"\r\x1b\[Kdbsvc replicate: WebSocket closed with code 1001; reconnecting after offset 1 in (0\.[2-5]) s\n"
        rf"\r1 frames  {len(F1)} B  offset 1  lag \?  \(reconnecting in \1 s\)\x1b\[K",
        text,
    ), text
    assert text.endswith(f"\r1 frames  {len(F1)} B  offset 1  lag ?  (connecting)\x1b[K\n")


def test_a_snapshot_that_fails_is_retried_like_a_refused_stream(primary, tmp_path):
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    p = primary(lambda attempt, after: 403, snapshot=[(503, {}), (404, None)])
    status, err = run(p.base, out=str(out))
    assert isinstance(status, ReplicaError) and p.paths == ["/replicate?after=1"]
    assert re.fullmatch(
        r"dbsvc replicate: GET /snapshot answered 503; reconnecting after offset 2 in 0\.[2-5] s", err.splitlines()[0]
    ), err


def test_a_definitive_refusal_names_the_offset_the_run_stopped_after(primary, tmp_path):
    gone = {"code": "offset_gone", "detail": "compacted", "oldest": 9}
    p = primary(lambda attempt, after: 410, problems={410: gone})
    with open(tmp_path / "out", "wb") as stdout:
        status, _err = run(p.base, after=5, stdout=stdout)
    assert type(status) is ReplicaError
    assert str(status).startswith(
        f"ws://127.0.0.1:{p.port}/replicate?after=5: HTTP 410 offset_gone: the server no longer holds "
        "the rows after offset 5 (its log now starts after offset 9); "
    )
    # another 400 than offset_out_of_range, with frames in FILE: a refusal, not a divergence
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    p2 = primary(lambda attempt, after: 400, problems={400: {"code": "bad_query", "detail": "after=x"}})
    status, _err = run(p2.base, out=str(out))
    assert type(status) is ReplicaError
    assert str(status) == f"ws://127.0.0.1:{p2.port}/replicate?after=1: HTTP 400 bad_query: after=x"


def test_a_run_outside_the_main_thread_leaves_the_signal_handlers_alone(primary, tmp_path):
    p = primary(lambda attempt, after: 403)
    before = signal.getsignal(signal.SIGTERM)
    ended: list = []
    thread = threading.Thread(target=lambda: ended.append(run(p.base, out=str(tmp_path / "r.log"))[0]))
    thread.start()
    thread.join(DEADLINE)
    assert len(ended) == 1 and type(ended[0]) is ReplicaError
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_head_frame_that_differs_ends_the_run_diverged_and_keeps_the_file(primary, tmp_path):
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    other = frame(2, payload(2, record={"id": 2, "name": "other"}))
    p = primary(lambda attempt, after: [other, frame(3)])
    status, _err = run(p.base, out=str(out))
    assert isinstance(status, HistoryDiverged)
    assert str(status) == (
        f"ws://127.0.0.1:{p.port}/replicate?after=1: the server's frame at offset 2 differs from the one "
        f"{out} holds: the server's history is no longer this file's (restored from a backup, or "
        f"rewritten), so its offsets after 2 may name other rows. {out} was left as it is; start a new "
        "replica file (keep this one if its rows matter)"
    )
    assert out.read_bytes() == F1 + F2
    assert p.paths == ["/replicate?after=1"]


def test_a_head_frame_renumbered_by_a_compaction_matches_and_the_run_goes_on(primary, tmp_path):
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    p = primary(lambda attempt, after: [frame(2, payload(2, watermark=1)), F3] if attempt == 0 else 403)
    terminate_when(size_is(out, len(F1 + F2 + F3)))
    status, err = run(p.base, out=str(out))
    assert status == 0, err
    assert out.read_bytes() == F1 + F2 + F3
    assert err.splitlines()[-1] == "dbsvc replicate: stopped by SIGTERM at offset 3"


def test_a_server_that_no_longer_holds_the_head_frame_is_followed_unchecked(primary, tmp_path):
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    plans = [410, [F3, ("close", 1000)], 403]
    p = primary(lambda attempt, after: plans[attempt])
    status, err = run(p.base, out=str(out))
    assert isinstance(status, ReplicaError)
    # no delay after the 410: the next connection goes on at once, after offset 2
    assert p.paths == ["/replicate?after=1", "/replicate?after=2", "/replicate?after=2"]
    lines = err.splitlines()
    assert lines[0] == (
        f"dbsvc replicate: the server no longer holds frame 2, so it cannot be checked against "
        f"{out}'s; continuing after offset 2 unchecked"
    )
    assert lines[1] == f"dbsvc replicate: streaming ws://127.0.0.1:{p.port}/replicate?after=2 into {out}"
    assert out.read_bytes() == F1 + F2 + F3
    assert len(lines) == 3  # the 410 was said, not retried after a delay
    # the next connection checks frame 3: `unchecked` was only frame 2
    assert str(status) == f"ws://127.0.0.1:{p.port}/replicate?after=2: HTTP 403 unavailable: busy (give a valid token with --token or SERVICE_TOKEN)"


def test_a_server_behind_the_file_ends_the_run_diverged(primary, tmp_path):
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    problem = {"code": "offset_out_of_range", "detail": "after=1 is past the head 0"}
    p = primary(lambda attempt, after: 400, problems={400: problem})
    status, _err = run(p.base, out=str(out))
    assert isinstance(status, HistoryDiverged)
    assert str(status).startswith(
        f"ws://127.0.0.1:{p.port}/replicate?after=1: HTTP 400 offset_out_of_range: after=1 is past the head 0; "
        "this replica is ahead of the server"
    )
    # without a frame in FILE it is a plain refusal (status 1), not a divergence
    empty = tmp_path / "empty.log"
    status, _err = run(p.base, out=str(empty), after=5)
    assert type(status) is ReplicaError


def test_a_busy_server_is_retried_with_a_growing_jittered_delay(primary, tmp_path):
    p = primary(lambda attempt, after: [503, 429, 404][attempt])
    started = time.monotonic()
    status, err = run(p.base, out=str(tmp_path / "r.log"))
    took = time.monotonic() - started
    assert str(status) == f"ws://127.0.0.1:{p.port}/replicate?after=0: HTTP 404 unavailable: busy"
    delays = [float(line.rsplit(" in ", 1)[1].removesuffix(" s")) for line in err.splitlines()]
    assert len(delays) == 2
    # 0.5 s, then 1 s, each jittered down to no less than half
    for delay, cap in zip(delays, (0.5, 1.0)):
        assert cap / 2 - 0.05 <= delay <= cap + 0.05, delays
    assert took >= sum(delays) - 0.2
    assert err.splitlines()[0] == (
        "dbsvc replicate: the server refused the WebSocket handshake: HTTP 503 unavailable: busy; "
        f"reconnecting after offset 0 in {delays[0]:.1f} s"
    )


def test_a_bad_frame_ends_the_run_after_keeping_the_good_ones(primary, tmp_path):
    out = tmp_path / "r.log"
    p = primary(lambda attempt, after: [F1, F2, frame(4)])
    status, _err = run(p.base, out=str(out))
    assert isinstance(status, FrameError)
    assert str(status) == "bad frame at offset 4: offset gap: expected 3, offsets 3 are missing"
    assert out.read_bytes() == F1 + F2


def test_after_must_be_an_offset_and_agree_with_the_file(primary, tmp_path):
    p = primary(lambda attempt, after: 403)
    with pytest.raises(ConfigError) as caught:
        replicate(p.base, after=-1, stderr=io.StringIO())
    assert str(caught.value) == "--after -1 is not an offset: expected an integer >= 0"
    with open(tmp_path / "out", "wb") as stdout:
        status, _err = run(p.base, after=0, stdout=stdout)  # 0 is an offset: the run starts
    assert isinstance(status, ReplicaError) and p.paths == ["/replicate?after=0"]
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    with pytest.raises(ConfigError) as caught:
        replicate(p.base, after=1, out=str(out), stderr=io.StringIO())
    assert str(caught.value) == (
        f"--after 1 disagrees with {str(out)!r}, which ends at offset 2; leave --after out to resume from the file"
    )
    ReplicaFile.open(str(out), Reporter(io.StringIO())).close()  # the refused run let go of FILE's lock
    status, _err = run(p.base, after=2, out=str(out))  # agreeing: the run starts (and is refused)
    assert isinstance(status, ReplicaError) and p.paths[1:] == ["/replicate?after=1"]


def test_a_torn_tail_is_cut_and_said_and_the_progress_line_starts_at_the_files_last_offset(primary, tmp_path):
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2 + F3[:20])
    p = primary(lambda attempt, after: 403)
    err = Terminal()
    with pytest.raises(ReplicaError):
        replicate(p.base, out=str(out), stderr=err)
    assert out.read_bytes() == F1 + F2
    said = f"{out}: cutting a torn tail of 20 bytes at byte {len(F1 + F2)} (truncated payload (4 of {len(F3) - 16} bytes)); resuming after offset 2"
    line = "0 frames  0 B  offset {}  lag ?  (connecting)\x1b[K"
    # said while FILE is opened, before the run knows where it resumes; then the line at the end
    assert err.getvalue() == f"\r\x1b[Kdbsvc replicate: {said}\n\r{line.format('-')}\r{line.format(2)}\n"


def test_without_a_file_events_go_to_standard_output_after_the_given_offset(primary, tmp_path):
    p = primary(lambda attempt, after: [frame(6), frame(7), ("close", 1001)] if attempt == 0 else 403)
    with open(tmp_path / "out", "wb") as stdout:
        status, err = run(p.base, after=5, stdout=stdout)
    assert isinstance(status, ReplicaError)
    assert (tmp_path / "out").read_bytes() == payload(6) + b"\n" + payload(7) + b"\n"
    assert p.paths == ["/replicate?after=5", "/replicate?after=7"]  # no head frame without a file
    assert err.splitlines()[0] == f"dbsvc replicate: streaming ws://127.0.0.1:{p.port}/replicate?after=5 into standard output"


def test_the_servers_history_is_recorded_before_the_first_frame_of_a_new_file(primary, tmp_path):
    history = {"id": H1, "forks": []}
    out = tmp_path / "r.log"
    p = primary(lambda attempt, after: [F1] if attempt == 0 else 403, snapshot=(200, {"offset": 1, "history": history}))
    terminate_when(size_is(out, len(F1)))
    status, err = run(p.base, out=str(out))
    assert status == 0, err
    reopened = ReplicaFile.open(str(out), Reporter(io.StringIO()))
    assert reopened.history == History(H1)
    reopened.close()


def test_a_forked_history_is_adopted_only_after_the_head_frame_matched(primary, tmp_path):
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    mine = ReplicaFile.open(str(out), Reporter(io.StringIO()))
    mine.adopt_history(History(H1))
    mine.close()
    forked = {"id": H2, "forks": [{"id": H1, "at": 2}]}
    other = frame(2, payload(2, record={"id": 2, "name": "other"}))
    p = primary(lambda attempt, after: [other], snapshot=(200, {"offset": 2, "history": forked}))
    status, _err = run(p.base, out=str(out))
    assert isinstance(status, HistoryDiverged)
    kept = ReplicaFile.open(str(out), Reporter(io.StringIO()))
    assert kept.history == History(H1)  # not adopted
    kept.close()
    p2 = primary(lambda attempt, after: [F2, F3], snapshot=(200, {"offset": 3, "history": forked}))
    terminate_when(size_is(out, len(F1 + F2 + F3)))
    status, err = run(p2.base, out=str(out))
    assert status == 0, err
    reopened = ReplicaFile.open(str(out), Reporter(io.StringIO()))
    assert reopened.history is not None and reopened.history.id == H2
    reopened.close()


# --- GET /snapshot and the history check (rule 7a) ----------------------------------------


def test_get_snapshot_reads_the_servers_answer_under_its_prefix(primary):
    p = primary(lambda attempt, after: 403, snapshot=(200, {"offset": 7}))
    assert get_snapshot(parse_endpoint(p.base + "/db"), 5) == (200, {"offset": 7})
    assert p.snapshot_paths == ["/db/snapshot"]
    p.snapshot = (503, {"detail": "busy"})
    assert get_snapshot(parse_endpoint(p.base), 5) == (503, {})
    p.snapshot = (200, [7])
    with pytest.raises(ValueError, match=r"^the server's /snapshot is not a JSON object$"):
        get_snapshot(parse_endpoint(p.base), 5)


def sink_with(tmp_path: Path, frames: bytes, history: History | None) -> ReplicaFile:
    out = tmp_path / "r.log"
    out.write_bytes(frames)
    sink = ReplicaFile.open(str(out), Reporter(io.StringIO()))
    if history is not None:
        sink.adopt_history(history)
    return sink


@pytest.mark.parametrize("status", [500, 503, 408, 429])
def test_a_snapshot_the_server_cannot_give_now_is_a_reason_to_retry(primary, tmp_path, status):
    p = primary(lambda attempt, after: 403, snapshot=(status, {}))
    sink = sink_with(tmp_path, F1, None)
    with pytest.raises(OSError, match=rf"^GET /snapshot answered {status}$"):
        history_to_adopt(parse_endpoint(p.base), sink, 1)
    sink.close()


def test_which_server_history_is_adopted(primary, tmp_path):
    p = primary(lambda attempt, after: 403, snapshot=(404, {}))
    endpoint = parse_endpoint(p.base)
    sink = sink_with(tmp_path, F1 + F2, History(H1))
    assert history_to_adopt(endpoint, sink, 2) is None  # a server without /snapshot: the head frame alone
    p.snapshot = (200, {"offset": 2})
    assert history_to_adopt(endpoint, sink, 2) is None  # a server that names no history
    p.snapshot = (200, {"offset": 2, "history": {"id": H1, "forks": []}})
    assert history_to_adopt(endpoint, sink, 2) is None  # FILE's own
    forked_at_2 = {"id": H2, "forks": [{"id": H1, "at": 2}]}
    p.snapshot = (200, {"offset": 5, "history": forked_at_2})
    assert history_to_adopt(endpoint, sink, 2) == History(H2, (History(H1).forks or ()) + (_fork(H1, 2),))
    p.snapshot = (200, {"offset": 5, "history": {"id": H2, "forks": [{"id": H1, "at": 1}]}})
    with pytest.raises(HistoryDiverged) as caught:
        history_to_adopt(endpoint, sink, 2)
    assert str(caught.value) == (
        f"the server's history {H2} does not continue the history {H1} that {sink.path} "
        f"holds up to offset 2 (the server was restored from a backup, or an import rewrote "
        f"it after an offset the file holds), so its offsets may name other rows. {sink.path} was "
        "left as it is; start a new replica file (keep this one if its rows matter)"
    )
    sink.close()


def test_a_file_without_a_record_or_without_frames_takes_the_servers_history(primary, tmp_path):
    p = primary(lambda attempt, after: 403, snapshot=(200, {"offset": 5, "history": {"id": H2, "forks": []}}))
    endpoint = parse_endpoint(p.base)
    sink = sink_with(tmp_path, F1, None)
    assert history_to_adopt(endpoint, sink, 1) == History(H2)
    sink.close()
    empty = sink_with(tmp_path / "..", b"", History(H1))
    assert history_to_adopt(endpoint, empty, 0) == History(H2)
    empty.close()


def _fork(at_id: str, at: int):
    from dbsvc.storage.history import Fork

    return Fork(at_id, at)


# --- the progress line (rule 6) -----------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_messages_are_plain_lines_unless_stderr_is_a_terminal(primary):
    plain = Reporter(io.StringIO(), parse_endpoint("http://127.0.0.1:1"))
    plain.say("hello")
    plain.draw(force=True)
    plain.finish()
    assert plain.stream.getvalue() == "dbsvc replicate: hello\n"
    quiet = Reporter(Terminal())  # no endpoint: no progress line either
    quiet.say("hello")
    quiet.finish()
    assert quiet.stream.getvalue() == "dbsvc replicate: hello\n"


def test_the_progress_line_shows_frames_bytes_offset_and_lag_from_the_polled_head(primary):
    p = primary(lambda attempt, after: 403, snapshot=(200, {"offset": 42}))
    report = Reporter(Terminal(), parse_endpoint(p.base))
    deadline = time.monotonic() + DEADLINE
    while report.head is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert report.head == 42
    out = report.stream
    report.draw(force=True)
    assert out.getvalue() == "\r0 frames  0 B  offset -  lag ?  (connecting)\x1b[K"
    for n, shown in [(1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (1024**2 - 1, "1024.0 KiB"), (1024**2, "1.0 MiB"), (1024**3, "1.0 GiB"), (5 * 1024**3 // 2, "2.5 GiB")]:
        report.bytes, report.frames, report.last, report.state = n, 3, 40, "streaming"
        out.seek(0)
        out.truncate()
        report.draw(force=True)
        assert out.getvalue() == f"\r3 frames  {shown}  offset 40  lag 2  ({report.state})\x1b[K"
    report.last = 50  # ahead of the last poll: no negative lag
    out.seek(0)
    out.truncate()
    report.draw(force=True)
    report.draw()  # within a quarter second: not drawn again
    assert out.getvalue() == "\r3 frames  2.5 GiB  offset 50  lag 0  (streaming)\x1b[K"
    out.seek(0)
    out.truncate()
    report.say("a message")
    assert out.getvalue() == "\r\x1b[Kdbsvc replicate: a message\n\r3 frames  2.5 GiB  offset 50  lag 0  (streaming)\x1b[K"
    out.seek(0)
    out.truncate()
    report.finish()
    assert out.getvalue() == "\r3 frames  2.5 GiB  offset 50  lag 0  (streaming)\x1b[K\n"
    polls = len(p.snapshot_paths)
    time.sleep(0.2)
    assert len(p.snapshot_paths) == polls  # finish() stopped the poller
    assert not any(t.name == "snapshot" and t.is_alive() for t in threading.enumerate())


def test_the_progress_line_is_redrawn_only_when_a_quarter_second_passed(primary):
    report = Reporter(Terminal(), parse_endpoint("http://127.0.0.1:1"))
    out = report.stream
    report.draw(force=True)
    report.frames = 1
    report.draw()
    assert out.getvalue().count("\r") == 1
    time.sleep(0.3)
    report.draw()
    assert out.getvalue().endswith("\r1 frames  0 B  offset -  lag ?  (connecting)\x1b[K")
    report.draw(force=True)  # forced: drawn again, the same line
    assert out.getvalue().count("\r") == 3
    report.finish()


@pytest.mark.parametrize("answer, head", [((200, {"offset": 7}), 7), ((200, {"offset": "7"}), None), ((503, {"offset": 7}), None)])
def test_the_poller_takes_only_an_integer_head_from_a_200(primary, answer, head):
    p = primary(lambda attempt, after: 403, snapshot=answer)
    report = Reporter(Terminal(), parse_endpoint(p.base))
    report.finish()  # the poller makes its first request, then sees the stop
    deadline = time.monotonic() + DEADLINE
    while any(t.name == "snapshot" and t.is_alive() for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(p.snapshot_paths) == 1 and report.head == head
