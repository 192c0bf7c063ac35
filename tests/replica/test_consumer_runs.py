"""`dbsvc replicate` run in this process (`replicate(url, out=..., stderr=...)`), against a
scripted primary on a loopback port served from a thread of this process
(support/replica_kit.py), so a mutation run sees every decision of the run loop (rules 2,
4, 5 and 7): where each connection resumes, the head-frame check, the history record,
which refusal ends the run and with what, when FILE is fsynced, the messages on stderr
and the progress line's states. test_consumer_shared_reads.py, test_consumer_resume.py and
test_consumer_server_refusals.py run the same command as a subprocess against real
servers; test_consumer_snapshot.py holds `GET /snapshot`, the history check and the
progress line.

Every run here ends by itself: a refusal the scripted primary answers, a bad frame, or a
SIGTERM this process sends itself once FILE holds what the test waits for."""

from __future__ import annotations

import functools
import io
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from dbsvc.errors import ConfigError, HistoryDiverged
from dbsvc.http.ws.client import open_websocket
from dbsvc.replica import consumer
from dbsvc.replica.consumer import FrameError, ReplicaError, Reporter, replicate
from dbsvc.replica.sinks import ReplicaFile
from dbsvc.storage import files
from dbsvc.storage.history import History
from support.replica_kit import DEADLINE, Terminal, frame, payload, snapshot_body
from support.replica_kit import run_replicate as run

pytestmark = pytest.mark.timeout(60)  # a run that never ends fails here, not at the suite's 300 s
H1, H2 = "1" * 32, "2" * 32


def terminate_when(predicate) -> threading.Thread:
    """SIGTERM to this process once `predicate()` holds (rule 5: replicate's handler takes it).
    Nothing is sent if it never holds within DEADLINE, or once the run has put the handler it
    found back: the test then fails on its own rather than the signal ending pytest."""
    before = signal.getsignal(signal.SIGTERM)

    def watch() -> None:
        deadline = time.monotonic() + DEADLINE
        while not predicate():
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        if signal.getsignal(signal.SIGTERM) is not before:
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
    p = primary(lambda attempt, after: [F1, F2, ("close", 1001)] if attempt == 0 else 403)
    err = Terminal()
    with pytest.raises(ReplicaError):
        replicate(p.base, out=str(out), stderr=err)
    text = err.getvalue()
    ws = f"ws://127.0.0.1:{p.port}"
    assert (
        f"\r\x1b[Kdbsvc replicate: streaming {ws}/replicate?after=0 into {out}\n\r0 frames  0 B  offset 0  lag ?  (streaming)\x1b[K"
        in text
    )
    assert re.search(
        r"\r\x1b\[Kdbsvc replicate: WebSocket closed with code 1001; reconnecting after offset 2 in (0\.[2-5]) s\n"
        rf"\r2 frames  {len(F1 + F2)} B  offset 2  lag \?  \(reconnecting in \1 s\)\x1b\[K",
        text,
    ), text
    assert text.endswith(f"\r2 frames  {len(F1 + F2)} B  offset 2  lag ?  (connecting)\x1b[K\n")


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
    assert (
        str(status)
        == f"ws://127.0.0.1:{p.port}/replicate?after=2: HTTP 403 unavailable: busy (give a valid token with --token or SERVICE_TOKEN)"
    )


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


def test_the_jitter_draws_between_half_the_delay_and_the_delay(primary, tmp_path, monkeypatch):
    # The draw itself, not a sample of it: a narrower or wider range (a third of the delay)
    # passes the timing test above three times in four.
    draws: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        draws.append((low, high))
        return low

    monkeypatch.setattr(consumer.random, "uniform", uniform)
    p = primary(lambda attempt, after: [503, 503, 404][attempt])
    run(p.base, out=str(tmp_path / "r.log"))
    assert draws == [(0.25, 0.5), (0.5, 1.0)]


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
    assert (
        err.splitlines()[0]
        == f"dbsvc replicate: streaming ws://127.0.0.1:{p.port}/replicate?after=5 into standard output"
    )


def test_the_servers_history_is_recorded_before_the_first_frame_of_a_new_file(primary, tmp_path):
    history = {"id": H1, "forks": []}
    out = tmp_path / "r.log"
    p = primary(lambda attempt, after: [F1] if attempt == 0 else 403, snapshot=(200, snapshot_body(1, history)))
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
    p = primary(lambda attempt, after: [other], snapshot=(200, snapshot_body(2, forked)))
    status, _err = run(p.base, out=str(out))
    assert isinstance(status, HistoryDiverged)
    kept = ReplicaFile.open(str(out), Reporter(io.StringIO()))
    assert kept.history == History(H1)  # not adopted
    kept.close()
    p2 = primary(lambda attempt, after: [F2, F3], snapshot=(200, snapshot_body(3, forked)))
    terminate_when(size_is(out, len(F1 + F2 + F3)))
    status, err = run(p2.base, out=str(out))
    assert status == 0, err
    reopened = ReplicaFile.open(str(out), Reporter(io.StringIO()))
    assert reopened.history is not None and reopened.history.id == H2
    reopened.close()


class Fsyncs(files.FileOps):
    """The seam storage's file operations go through (files.ops): records, in order, the
    bytes written to FILE and each fsync of it."""

    def __init__(self) -> None:
        self.events: list = []

    def write(self, fd, data):  # type: ignore[override]
        n = os.write(fd, data)
        self.events.append(n)
        return n

    def fsync(self, fd):  # type: ignore[override]
        self.events.append("fsync")
        os.fsync(fd)


def test_file_is_fsynced_when_the_stream_pauses_and_at_every_8_mib(primary, tmp_path, monkeypatch):
    """Rule 2: a pause (no frame for the 0.2 s receive) syncs what came before it; 8 MiB
    unsynced syncs at once, a frame of exactly the 8th MiB included; a quick succession
    of small frames is written and fsynced together. The interval (SYNC_INTERVAL, 1 s) is
    put out of reach: it counts from the second pause's sync, so the 8 MiB had 0.7 s to come
    and at load (23) they took longer, an fsync after the 6th MiB."""
    monkeypatch.setattr(consumer, "SYNC_INTERVAL", 3600.0)
    mib = [
        frame(
            n,
            payload(
                n, record={"id": n, "pad": "x" * (1024 * 1024 - 16 - len(payload(n, record={"id": n, "pad": ""})))}
            ),
        )
        for n in range(3, 12)
    ]
    assert all(len(f) == 1024 * 1024 for f in mib)
    steps = [F1, 0.5, F2, 0.5, *mib, ("close", 1001)]
    p = primary(lambda attempt, after: steps if attempt == 0 else 403)
    with files.use(Fsyncs()) as seen:
        status, _err = run(p.base, out=str(tmp_path / "r.log"))
    assert isinstance(status, ReplicaError)
    big = 1024 * 1024
    assert seen.events == [
        len(F1),
        "fsync",
        len(F2),
        "fsync",
        big,
        big,
        big,
        big,
        big,
        big,
        big,
        big,
        "fsync",
        big,
        "fsync",
    ]


def test_a_head_frame_checked_against_a_server_without_histories_keeps_the_files_record(primary, tmp_path):
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    mine = ReplicaFile.open(str(out), Reporter(io.StringIO()))
    mine.adopt_history(History(H1))
    mine.close()
    p = primary(lambda attempt, after: [F2, F3] if attempt == 0 else 403)
    terminate_when(size_is(out, len(F1 + F2 + F3)))
    status, err = run(p.base, out=str(out))
    assert status == 0, err
    reopened = ReplicaFile.open(str(out), Reporter(io.StringIO()))
    assert reopened.history == History(H1)
    reopened.close()


def test_a_message_over_the_clients_limit_ends_the_run_naming_the_next_offset(primary, tmp_path, monkeypatch):
    """The client's limit (80 MiB) stood in for by 1,000 bytes, through the one seam: the
    client the consumer opens its stream with."""
    monkeypatch.setattr(consumer, "open_websocket", functools.partial(open_websocket, max_message=1000))
    out = tmp_path / "r.log"
    p = primary(lambda attempt, after: [F1, b"x" * 2000])
    status, _err = run(p.base, out=str(out))
    assert isinstance(status, FrameError)
    assert (status.offset, status.reason) == (
        2,
        f"a message over 1000 bytes (a frame is at most {64 * 1024 * 1024 + 16} bytes)",
    )
    assert out.read_bytes() == F1


def test_a_sigterm_during_the_backoff_ends_the_run_without_another_connection(primary, tmp_path):
    p = primary(lambda attempt, after: 503)
    terminate_when(lambda: len(p.paths) >= 1)
    status, err = run(p.base, out=str(tmp_path / "r.log"))
    assert status == 0, err
    assert p.paths == ["/replicate?after=0"]
    assert err.splitlines()[-1] == "dbsvc replicate: stopped by SIGTERM at offset 0"
