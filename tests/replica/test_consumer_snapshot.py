"""consumer.py's `GET /snapshot` (`get_snapshot`), its history check (`history_to_adopt`,
rule 7a) and the progress line (`Reporter`, rule 6), in process against a scripted primary
on a loopback port (support/replica_kit.py), every line drawn compared character for
character. The run loop is test_consumer_runs.py's."""

from __future__ import annotations

import http.server
import io
import json
import ssl
import threading
import time
from pathlib import Path

import pytest

from dbsvc.errors import HistoryDiverged, MalformedAnswer
from dbsvc.replica import consumer
from dbsvc.replica.answers import PrimarySnapshot
from dbsvc.replica.consumer import Reporter, get_snapshot, history_to_adopt, parse_endpoint
from dbsvc.replica.sinks import ReplicaFile
from dbsvc.storage.history import Fork, History
from support.replica_kit import DEADLINE, SERVER_EPOCH, SERVER_FINGERPRINT, Terminal, frame, snapshot_body
from support.tlskit import self_signed

pytestmark = pytest.mark.timeout(60)
H1, H2 = "1" * 32, "2" * 32
F1, F2 = frame(1), frame(2)


# --- GET /snapshot and the history check (rule 7a) ----------------------------------------


def test_get_snapshot_reads_the_servers_answer_under_its_prefix(primary):
    p = primary(lambda attempt, after: 403, snapshot=(200, snapshot_body(7)))
    assert get_snapshot(parse_endpoint(p.base + "/db"), 5) == (
        200,
        PrimarySnapshot(SERVER_EPOCH, 7, SERVER_FINGERPRINT, None),
    )
    assert p.snapshot_paths == ["/db/snapshot"]
    p.snapshot = (503, {"detail": "busy"})
    assert get_snapshot(parse_endpoint(p.base), 5) == (503, None)
    p.snapshot = (200, [7])  # it was a ValueError of its own wording: now the one reader's
    with pytest.raises(MalformedAnswer) as info:
        get_snapshot(parse_endpoint(p.base), 5)
    assert str(info.value) == "the primary answered a malformed /snapshot: the body [7], expected a JSON object"


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
    p.snapshot = (200, snapshot_body(2))
    assert history_to_adopt(endpoint, sink, 2) is None  # a server that names no history
    p.snapshot = (200, snapshot_body(2, {"id": H1, "forks": []}))
    assert history_to_adopt(endpoint, sink, 2) is None  # FILE's own
    forked_at_2 = {"id": H2, "forks": [{"id": H1, "at": 2}]}
    p.snapshot = (200, snapshot_body(5, forked_at_2))
    assert history_to_adopt(endpoint, sink, 2) == History(H2, (Fork(H1, 2),))
    p.snapshot = (200, snapshot_body(5, {"id": H2, "forks": [{"id": H1, "at": 1}]}))
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
    p = primary(lambda attempt, after: 403, snapshot=(200, snapshot_body(5, {"id": H2, "forks": []})))
    endpoint = parse_endpoint(p.base)
    sink = sink_with(tmp_path, F1, None)
    assert history_to_adopt(endpoint, sink, 1) == History(H2)
    sink.close()
    empty = sink_with(tmp_path / "..", b"", History(H1))
    assert history_to_adopt(endpoint, empty, 0) == History(H2)
    empty.close()


# --- the progress line (rule 6) -----------------------------------------------------------


def test_messages_are_plain_lines_unless_stderr_is_a_terminal(primary):
    plain = Reporter(io.StringIO(), parse_endpoint("http://127.0.0.1:1"))
    assert not any(t.name == "snapshot" for t in threading.enumerate())  # nothing to draw: no poller
    plain.say("hello")
    plain.draw(force=True)
    plain.finish()
    assert plain.stream.getvalue() == "dbsvc replicate: hello\n"
    quiet = Reporter(Terminal())  # no endpoint: no progress line either
    quiet.say("hello")
    quiet.finish()
    assert quiet.stream.getvalue() == "dbsvc replicate: hello\n"


def test_the_progress_line_shows_frames_bytes_offset_and_lag_from_the_polled_head(primary):
    p = primary(lambda attempt, after: 403, snapshot=(200, snapshot_body(42)))
    report = Reporter(Terminal(), parse_endpoint(p.base))
    deadline = time.monotonic() + DEADLINE
    while report.head is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert report.head == 42
    [poller] = [t for t in threading.enumerate() if t.name == "snapshot"]
    assert poller.daemon  # an exit never waits for it
    out = report.stream
    report.draw(force=True)
    assert out.getvalue() == "\r0 frames  0 B  offset -  lag ?  (connecting)\x1b[K"
    for n, shown in [
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (1024**2 - 1, "1024.0 KiB"),
        (1024**2, "1.0 MiB"),
        (1024**3, "1.0 GiB"),
        (5 * 1024**3 // 2, "2.5 GiB"),
    ]:
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
    assert (
        out.getvalue() == "\r\x1b[Kdbsvc replicate: a message\n\r3 frames  2.5 GiB  offset 50  lag 0  (streaming)\x1b[K"
    )
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
    report.draw()  # the first: drawn
    assert out.getvalue() == "\r0 frames  0 B  offset -  lag ?  (connecting)\x1b[K"
    report.frames = 1
    report.draw()
    assert out.getvalue().count("\r") == 1
    time.sleep(0.3)
    report.draw()
    assert out.getvalue().endswith("\r1 frames  0 B  offset -  lag ?  (connecting)\x1b[K")
    time.sleep(0.3)
    report.draw()  # a quarter second later, but the same line: not drawn again
    assert out.getvalue().count("\r") == 2
    report.draw(force=True)  # forced: drawn again, the same line
    assert out.getvalue().count("\r") == 3
    report.finish()


@pytest.fixture
def https_snapshot(tmp_path, monkeypatch):
    """A plain HTTP server over TLS (the standard library's), answering GET /snapshot with
    a body at offset 5 whose epoch is the path asked (`_http_server`), its self-signed certificate trusted through SSL_CERT_FILE as the
    system store would hold it; yields its port."""
    cert_path, key_path = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_path))
    yield from _http_server(ssl_files=(cert_path, key_path))


def _http_server(ssl_files=None):
    class Snapshot(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            body = json.dumps(snapshot_body(5, epoch=self.path)).encode()  # the path asked, as the epoch
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Snapshot)
    if ssl_files is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*ssl_files)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_get_snapshot_speaks_tls_to_an_https_server(https_snapshot):
    assert get_snapshot(parse_endpoint(f"https://127.0.0.1:{https_snapshot}/db"), 5) == (
        200,
        PrimarySnapshot("/db/snapshot", 5, SERVER_FINGERPRINT, None),
    )


def test_get_snapshot_asks_with_the_get_method():
    """A server strict about its methods (the standard library's answers 501 to any other)."""
    for port in _http_server():
        assert get_snapshot(parse_endpoint(f"http://127.0.0.1:{port}"), 5) == (
            200,
            PrimarySnapshot("/snapshot", 5, SERVER_FINGERPRINT, None),
        )


@pytest.mark.parametrize(
    "answer, head",
    [
        ((200, snapshot_body(7)), 7),
        ((200, {**snapshot_body(7), "offset": "7"}), None),
        ((200, snapshot_body(7, history="h")), None),  # a malformed body names no head either
        ((503, snapshot_body(7)), None),
    ],
)
def test_the_poller_takes_only_an_integer_head_from_a_200(primary, answer, head):
    p = primary(lambda attempt, after: 403, snapshot=answer)
    report = Reporter(Terminal(), parse_endpoint(p.base))
    report.finish()  # the poller makes its first request, then sees the stop
    deadline = time.monotonic() + DEADLINE
    while any(t.name == "snapshot" and t.is_alive() for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(p.snapshot_paths) == 1 and report.head == head


def test_the_poller_keeps_polling_the_head(primary, monkeypatch):
    """Every SNAPSHOT_EVERY seconds (3 s; 0.05 s here): the lag follows the server's head."""
    monkeypatch.setattr(consumer, "SNAPSHOT_EVERY", 0.05)
    p = primary(lambda attempt, after: 403, snapshot=(200, snapshot_body(42)))
    report = Reporter(Terminal(), parse_endpoint(p.base))
    deadline = time.monotonic() + DEADLINE
    while report.head != 42 and time.monotonic() < deadline:
        time.sleep(0.02)
    p.snapshot = (200, snapshot_body(43))
    while report.head != 43 and time.monotonic() < deadline:
        time.sleep(0.02)
    report.finish()
    assert report.head == 43
