"""JSON from a primary holding a number JSON does not have: `1e400` and `-1e400` (which
json.loads reads as infinities), `NaN` and `Infinity` (words json.loads takes). No dbsvc
server writes one, so a corrupt or foreign primary's is refused as that reader refuses any
other text that is not JSON (dbsvc/strictjson.py's words), before anything of it is kept:

- `dbsvc replicate`: a frame is a FrameError that ends the run, FILE holding the frames
  before it; a `/snapshot` answer is retried like a failed one, FILE untouched; the head
  frame a run compares with FILE's last (`same_row`, consumer.py rule 7) is never the same
  row when either holds one (json.loads read `1e400` and `1e999` as one inf), and a server's
  head frame holding one is its FrameError, FILE and its history record untouched; FILE's
  own head frame holding one is refused when FILE is opened (CorruptLog), the server never
  asked (more in test_consumer_file_strict.py);
- a read replica: its primary's `/snapshot` answer, and the snapshot stream it bootstraps
  from (a row, the header, the end message), make it reconnect, its store as it was: the
  same epoch, head and records, still serving.

All over real sockets: the consumer against the scripted loopback primary
(support/replica_kit.py), the replica's `HttpPrimary` against a websockets server here.
(A replica's frames are refused by storage/followrun.py's scanner, the same decoder:
test_replica_apply_plain_runs.py.)
"""

from __future__ import annotations

import json
import threading
import zlib

import pytest

from dbsvc.errors import CorruptLog, HistoryDiverged
from dbsvc.replica.consumer import FrameError, ReplicaError, same_row
from support.follower_kit import EPOCH_A, EPOCH_B, H1, H2, body, epoch_stream, history, insert
from support.replica_kit import Primary, frame, payload
from support.replica_kit import run_replicate as run

pytestmark = pytest.mark.timeout(120)

WORDS = [b"1e400", b"-1e400", b"NaN", b"Infinity"]
F1, F2 = frame(1), frame(2)


def refusal(word: bytes) -> str:
    """The strict decoder's words for `word`."""
    text = word.decode()
    if text in ("NaN", "Infinity"):
        return f"{text} is not valid JSON (RFC 8259 §6: numbers are finite)"
    return f"the number {text} is out of range: expected a finite number (a 64-bit float, RFC 8259 §6)"


# -- dbsvc replicate -----------------------------------------------------------------------------


@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.decode())
def test_a_frame_holding_a_non_finite_number_ends_the_consumers_run_and_is_never_written(primary, tmp_path, word):
    out = tmp_path / "r.log"
    bad = frame(3, payload(3, record={"id": 3, "score": 0.5}).replace(b"0.5", word))
    p = primary(lambda attempt, after: [F1, F2, bad, ("close", 1000)] if attempt == 0 else 403)
    status, _err = run(p.base, out=str(out))
    assert isinstance(status, FrameError)
    assert str(status) == f"bad frame at offset 3: payload is not JSON ({refusal(word)})"
    assert out.read_bytes() == F1 + F2
    assert p.paths == ["/replicate?after=0"]


def scored(at: int, number: bytes, watermark: int | None = None) -> bytes:
    """The frame of a User insert at `at` whose record's score is the text `number`."""
    body = payload(at, record={"id": at, "score": 0.5}, **({} if watermark is None else {"watermark": watermark}))
    return frame(at, body.replace(b"0.5", number))


@pytest.mark.parametrize(
    "theirs, mine",
    [
        (scored(2, b"1e400"), scored(2, b"1e999")),  # json.loads would read one inf: the same row
        (scored(2, b"1e400", watermark=1), scored(2, b"1e400")),  # renumbered: equal but for it
        (scored(2, b"-1e400", watermark=1), scored(2, b"-1e400")),
        (scored(2, b"NaN", watermark=1), scored(2, b"0.5")),
        (scored(2, b"0.5", watermark=1), scored(2, b"Infinity")),  # FILE's holds it
    ],
    ids=["1e400-1e999", "1e400-renumbered", "-1e400-renumbered", "theirs-nan", "mine-infinity"],
)
def test_a_head_frame_holding_a_non_finite_number_is_never_the_same_row(theirs, mine):
    assert not same_row(theirs, mine)


@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.decode())
def test_a_servers_head_frame_holding_a_non_finite_number_is_a_frame_error_and_file_kept(primary, tmp_path, word):
    # It ended the run as a divergence (exit 3, "start a new replica file"): the frame is bad.
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    p = primary(lambda attempt, after: [scored(2, word, watermark=1), frame(3)] if attempt == 0 else 403)
    status, _err = run(p.base, out=str(out))
    assert isinstance(status, FrameError)
    assert str(status) == f"bad frame at offset 2: payload is not JSON ({refusal(word)})"
    assert out.read_bytes() == F1 + F2
    assert not (tmp_path / "r.log.history").exists()
    assert p.paths == ["/replicate?after=1"]


def file_refusal(path, at: int, offset: int, word: bytes) -> str:
    """What opening a FILE whose frame `offset` at byte `at` holds `word` says (sinks.py)."""
    return (
        f"{path}: corrupt at byte {at}: the frame at offset {offset} is not JSON ({refusal(word)}), expected "
        "strict JSON as a server writes; its CRC is good, so this is damage, not a torn tail: nothing was cut"
    )


@pytest.mark.parametrize(("word", "servers"), [(b"1e400", b"1e400"), (b"NaN", b"0.5")])
def test_a_file_whose_head_frame_is_not_finite_is_refused_when_opened(primary, tmp_path, word, servers):
    # 1e400: json.loads would take FILE's and the server's for one row (inf == inf) and append
    # after it; NaN beside a good frame ended the run as a divergence (exit 3, "start a new
    # replica file"): the wrong cause. Strict, FILE's own frame is refused when FILE is opened,
    # before the server is asked anything.
    out = tmp_path / "r.log"
    out.write_bytes(F1 + scored(2, word))
    before = out.read_bytes()
    p = primary(lambda attempt, after: [scored(2, servers, watermark=1), frame(3)] if attempt == 0 else 403)
    status, _err = run(p.base, out=str(out))
    assert isinstance(status, CorruptLog) and not isinstance(status, HistoryDiverged)
    assert str(status) == file_refusal(out, len(F1), 2, word)
    assert out.read_bytes() == before
    assert not (tmp_path / "r.log.history").exists()
    assert (p.paths, p.snapshot_paths) == ([], [])


class _RawSnapshot(Primary):
    """The scripted primary whose first `GET /snapshot` answers 200 with `raw`, as it is."""

    def __init__(self, plan, raw: bytes) -> None:
        self.raw = [raw]
        super().__init__(plan)

    async def _process(self, connection, request):
        if request.path.endswith("/snapshot") and self.raw:
            self.snapshot_paths.append(request.path)
            return self._response(200, self.raw.pop(0), "application/json")
        return await super()._process(connection, request)


@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.decode())
def test_a_snapshot_answer_holding_a_non_finite_number_is_retried_and_file_left_as_it_was(tmp_path, word):
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2)
    raw = b'{"epoch":"%s","offset":%s,"history":{"id":"%s","forks":[]}}' % (EPOCH_A.encode(), word, H2.encode())
    p = _RawSnapshot(lambda attempt, after: 403, raw)
    try:
        status, err = run(p.base, out=str(out))
    finally:
        p.close()
    assert isinstance(status, ReplicaError) and p.paths == ["/replicate?after=1"]
    assert err.splitlines()[0].startswith(f"dbsvc replicate: {refusal(word)}; reconnecting after offset 2"), err
    assert out.read_bytes() == F1 + F2
    assert not (tmp_path / "r.log.history").exists()


# -- a read replica --------------------------------------------------------------------------------


class _Server:
    """A primary over HTTP and WebSocket on a loopback port: `/snapshot` answers `answer`
    (bytes, as they are); `/replicate/snapshot` sends `epoch` (its messages); `/replicate?after=N`
    sends `frames` after N, then holds the connection until `drop` is set."""

    def __init__(self) -> None:
        from websockets.sync.server import serve

        self.answer = b""
        self.epoch: list = []
        self.frames: list[bytes] = []
        self.drop = threading.Event()
        self.server = serve(self._handle, "127.0.0.1", 0, process_request=self._http)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.socket.getsockname()[1]}"

    def _http(self, connection, request):
        if request.path == "/snapshot":
            return connection.respond(200, self.answer.decode())
        return None

    def _handle(self, connection) -> None:
        path = connection.request.path
        if path == "/replicate/snapshot":
            for message in self.epoch:
                connection.send(message)
            return
        after = int(path.partition("after=")[2])
        for message in self.frames[after:]:
            connection.send(message)
        self.drop.wait(20)

    def close(self) -> None:
        self.drop.set()
        self.server.shutdown()


def _good(server: _Server) -> None:
    server.answer = json.dumps(body(EPOCH_A, 3, hist=history(H1))).encode()
    server.epoch = epoch_stream(EPOCH_A, 0, hist=history(H1))
    server.frames = [insert(1), insert(2), insert(3)]


@pytest.fixture
def followed(replica):
    """A replica that bootstrapped from the server and follows it at head 3 (users 1-3)."""
    server = _Server()
    _good(server)
    node = replica(None, url=server.url)
    try:
        node.start()
        node.wait("following at 3", lambda: node.store.head_offset == 3 and node.status.state == "following")
        yield server, node
    finally:
        server.close()


def _held(node) -> tuple:
    """What the replica holds and serves: its epoch, head and User records."""
    return node.on_loop(lambda: (node.store.epoch, node.store.head_offset)), node.user_ids()


def _reconnecting_with(node, words: str) -> None:
    node.wait(f"reconnecting with {words!r}", lambda: words in (node.status.error or ""))
    assert node.status.state == "reconnecting", node.status


@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.decode())
def test_a_primarys_snapshot_answer_holding_a_non_finite_number_makes_the_replica_reconnect(followed, word):
    server, node = followed
    held = _held(node)
    server.answer = (
        json.dumps(body(EPOCH_A, 0, hist=history(H1))).replace('"offset": 0', f'"offset": {word.decode()}').encode()
    )
    server.drop.set()  # the stream ends: the next connection asks /snapshot first
    _reconnecting_with(node, f"GET /snapshot answered what is not JSON: {refusal(word)}")
    assert _held(node) == held == ((EPOCH_A, 3), [1, 2, 3])


def _bad_epoch(word: bytes, where: str) -> list:
    """Epoch B's snapshot stream (users 1-4, the first one's age `word` for "rows"), `word`
    written where `where` says, every checksum and size made good again."""
    header, data, end = epoch_stream(EPOCH_B, 5, range(1, 5), hist=history(H2))
    if where == "header":
        return [header.replace('"offset": 5', f'"offset": {word.decode()}'), data, end]
    if where == "end message":
        return [header, data, end.replace('"type": "end"', f'"type": "end", "rows": {word.decode()}')]
    lines = data.split(b"\n")
    for i, line in enumerate(lines):
        if b'"u1@example.com"' in line:  # User's rows line (format 1: arrays of values)
            rows = line[9:].replace(b"null", word, 1)  # user 1's age
            lines[i] = b"%08x " % zlib.crc32(rows) + rows
    data = b"\n".join(lines)
    return [header, data, json.dumps({"type": "end", "bytes": len(data), "crc32": zlib.crc32(data)})]


WHERE = {
    "rows": "model 'User': the line is not JSON ({})",
    "header": "the snapshot stream's header is not JSON: {}",
    "end message": "the snapshot stream's end message is not JSON: {}",
}


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.decode())
def test_a_snapshot_stream_holding_a_non_finite_number_is_never_installed(followed, word, where):
    # The primary moved to another history (a restore): the replica bootstraps again from
    # its snapshot, which holds the number; it keeps what it had and retries.
    server, node = followed
    held = _held(node)
    server.answer = json.dumps(body(EPOCH_B, 5, hist=history(H2))).encode()
    server.epoch = _bad_epoch(word, where)
    server.drop.set()
    _reconnecting_with(node, WHERE[where].format(refusal(word)))
    assert node.status.error.startswith("bootstrap failed: "), node.status
    assert node.status.bootstraps == 1  # the first one, from the good snapshot
    assert _held(node) == held == ((EPOCH_A, 3), [1, 2, 3])
