"""`dbsvc replicate URL`: follow a server's `/replicate` stream, check it, store it.

One binary WebSocket message per row, exactly a frame of the server's log: offset, CRC32,
length, payload (the layout is drawn once, in dbsvc/storage/logfile.py; this module reads
frames only through its functions). Offsets run after + 1, after + 2, ... (gap-free); the
length equals the bytes that follow; the payload is compact JSON:
{"kind": "insert"|"update"|"delete", "model", "offset", ...}.

Rules:
1. Every message is checked before anything of it is kept (`check_frame`): binary, a
   whole header, an offset exactly one past the last one kept (the first: `after + 1`),
   a length equal to the rest of the message, a matching CRC, a JSON payload that is an
   insert/update/delete event whose `offset` is the frame's. JSON here is strict JSON
   (dbsvc/strictjson.py): `NaN`, `Infinity` and a number past the doubles (`1e400`, which
   json.loads reads as inf) are not JSON, as no server writes them. A bad message ends the run
   with status 1 and a message naming its offset and the fault; the frames before it stay.
   A payload over the log's limit (logfile.MAX_PAYLOAD; a follower's store may have a
   smaller `max_payload`) is `record too large`, never written: FILE, like a log, could
   not be reopened past it.
2. With `--out FILE`, good frames are appended to FILE back to back, the bytes as
   received (FILE is a log without its header). FILE is fsynced at least every second,
   every 8 MiB, whenever the stream pauses, and before exiting, so a crash loses at most
   that unsynced tail. Without `--out`, each event's JSON is written to standard output,
   one line each, flushed on the same schedule; a reader that goes away (`| head`) ends
   the run quietly, status 0.
3. On start FILE is locked (flock; a second consumer on it is refused) and scanned with
   the log's own frame checks: a torn tail (a half frame a crash left, with no good frame
   after it) is cut, fsynced and reported; damage that a good frame follows is refused,
   nothing cut, unless a zero byte lies just before that frame (logfile rule 3: appends no
   fsync covered, which a power loss may keep out of order), which is cut as a torn tail.
   Every good frame's payload is parsed as rule 1's strict JSON: a `NaN` or `1e400` under
   a good CRC (a hand edit, a foreign writer) is damage, refused with `CorruptLog` naming
   FILE, the byte and the offset (status 1), FILE untouched; it is never left for rule 7's
   head-frame check to mistake for a divergence.
   The run resumes after FILE's last offset; `--after` must then agree. The first frame's
   header offset is confirmed by its CRC-protected payload.
4. Reconnects: a refused connection, a dropped one, a close frame (a server restart sends
   1001), or 75 s of silence (the server pings every 30 s) lead to a reconnect with
   `after` = the last offset kept, after an exponential, capped (30 s), jittered delay.
   Only a definitive answer ends the run with status 1: 410 `offset_gone` (the server no
   longer holds the rows after that offset: re-bootstrap), 401/403, 404, and every other
   4xx but 408/429. 5xx, 408 and 429 are retried.
5. SIGINT and SIGTERM: the frame in hand is finished, FILE is fsynced, status 0.
6. When standard error is a terminal, one progress line is redrawn at most four times a
   second: frames, bytes, last offset, lag (the head offset of GET /snapshot, polled every
   3 s by a thread, minus the last offset). Other messages are plain lines on stderr.
7. Histories (docs/replication.md, "Histories"): on every connection, before anything
   is written, FILE must be shown to hold a prefix of the server's history, twice over:
   a. the history record: the server's `GET /snapshot` names its history; FILE.history
      (sinks.py) names the one FILE's frames came from. The server's must be FILE's, or
      one that forked from it at or after FILE's last offset L (an import on the server at
      L); any other is a divergence. A server that names none (older than histories) is
      judged by (b) alone; a FILE without a record takes the server's once (b) passed.
   b. the head frame: the run asks for `after=L-1` and the first frame must be byte-equal
      to FILE's frame L (then it goes on after it), or differ only in the payload's
      `watermark`, which an online compaction renumbers for the rows it carries.
   A divergence (a restore from a backup, a rewrite) ends the run with `HistoryDiverged`,
   exit status 3 (dbsvc/exits.py), a message naming L and what to do, FILE and its record
   untouched; so does a server whose head is below L-1 (its 400 `offset_out_of_range`).
   A head frame that is not the same row and fails rule 1's checks itself (a payload
   holding `NaN` or `1e400`, which `same_row` never takes for FILE's; a wrong offset) is
   that frame's FrameError instead, status 1, naming the fault, FILE untouched. A
   `/snapshot` body that is JSON but not one (answers.py rule 1: its epoch, offset,
   fingerprint or history not what the route promises; a garbled history is never taken
   for none) ends the run with `MalformedAnswer`, status 1, as a bad frame does (the
   server said it; asking again would most likely hear it again), naming the field, its
   value and what was expected, FILE and its record untouched.
   A server that no longer holds frame L (410 for L-1) cannot be checked by (b): the run
   says so and continues after L, as before the check. The record is written (sinks.py)
   only once both checks passed, before the first frame after them.
8. The messages are taken from the client as many at once as it has ready (`receive_many`,
   ws/client.py C7: up to BATCH messages or BATCH_BYTES bytes, the first awaited up to POLL
   seconds), then each is checked and kept in order, as one at a time would: a bad one
   ends the run after the good ones before it were kept; a signal is looked at between
   takes, so the frames in hand are finished (rule 5).

Where the good frames go (rules 2 and 3: FILE, or standard output) is sinks.py.

Imports: the blocking WebSocket client of dbsvc.http.ws.client, the one reader of the
server's `/snapshot` body (answers.py, shared with the read replica), the log's own frame
rules from dbsvc.storage.logfile (`frame_error`), so a replica file and a server log are
judged alike, the history record of dbsvc.storage.history, and sinks.py, which opens, writes, cuts, fsyncs and closes FILE through the
file seam `files.ops`, so the power-loss simulator (tests/support/powerloss_fs.py) judges
it as it judges the log. Nothing of the server (app, realtime, Store), no asyncio.
"""

from __future__ import annotations

import http.client
import random
import signal
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, BinaryIO, TextIO

from dbsvc.errors import (
    ConfigError,
    DbsvcError,
    HandshakeRefused,
    HistoryDiverged,
    MalformedAnswer,
    MessageTooBig,
    WebSocketClientError,
)
from dbsvc.http.ws.client import open_websocket
from dbsvc.replica.answers import PrimarySnapshot, parse_snapshot_body
from dbsvc.replica.sinks import ReplicaFile, StdoutSink
from dbsvc.storage.history import History
from dbsvc.storage.logfile import MAX_FRAME, MAX_PAYLOAD, frame_error, frame_header, frame_offset, frame_payload
from dbsvc.strictjson import strict_loads

KINDS = frozenset({"insert", "update", "delete"})
SYNC_INTERVAL = 1.0  # rule 2
SYNC_BYTES = 8 * 1024 * 1024
POLL = 0.2  # how often the loop looks at signals and the clock
# Messages taken from the /replicate stream at once, at most (rule 8), and their bytes: one
# constant for both readers of the stream, this one and a read replica, whose group they
# bound (groups.py G1 imports them). 1,024 rather than 512 for the replica: ~7% less of its
# CPU a frame served (fewer fsyncs, hand-overs and runs a frame; bench/README.md, session 20,
# wt-rep16); while it catches up its loop pauses about 20 ms a group. Here a take is not a
# unit of work (frames are written one by one and fsynced by SYNC_BYTES and SYNC_INTERVAL), so
# its size costs nothing a frame either way: the hand-over was 0.27 us a frame at 512 and at
# 1,024 (bench/README.md, session 21, wt-tidy4). A signal waits for at most one take's frames
# (rule 5): ~1,024 checks and writes, milliseconds.
BATCH, BATCH_BYTES = 1024, 1 << 20
CONNECT_TIMEOUT = 10.0
BACKOFF_FIRST, BACKOFF_CAP = 0.5, 30.0
SNAPSHOT_EVERY = 3.0
REDRAW_EVERY = 0.25


class ReplicaError(DbsvcError):
    """A failure that ends `dbsvc replicate` with status 1."""


class FrameError(ReplicaError):
    """A message from the server that is not the next good frame (rule 1)."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"bad frame at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


# -- the URL --------------------------------------------------------------------------------

_SCHEMES = {"http": ("ws", "http"), "ws": ("ws", "http"), "https": ("wss", "https"), "wss": ("wss", "https")}


@dataclass(frozen=True, slots=True)
class Endpoint:
    ws_base: str  # ws://host:port[/prefix]
    http_base: str  # http://host:port[/prefix]

    def replicate_url(self, after: int) -> str:
        return f"{self.ws_base}/replicate?after={after}"


def parse_endpoint(url: str) -> Endpoint:
    """The server's base URL (http://, https://, ws:// or wss://HOST:PORT[/prefix]);
    a trailing `/replicate` is accepted too."""
    parts = urllib.parse.urlsplit(url.strip())
    schemes = _SCHEMES.get(parts.scheme.lower())
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if schemes is None or not parts.hostname or not port_ok:
        raise ConfigError(f"URL {url!r} is not a server base URL: expected http://HOST:PORT or ws://HOST:PORT")
    if parts.query or parts.fragment:
        raise ConfigError(f"URL {url!r}: give the server's base URL without a query; use --after N")
    path = parts.path.rstrip("/")
    if path.endswith("/replicate"):
        path = path[: -len("/replicate")]
    return Endpoint(f"{schemes[0]}://{parts.netloc}{path}", f"{schemes[1]}://{parts.netloc}{path}")


# -- rule 1: one message --------------------------------------------------------------------


def check_frame(message: bytes | str, expected: int, max_payload: int = MAX_PAYLOAD) -> tuple[int, dict[str, Any]]:
    """(offset, event) of a good frame whose offset must be `expected` and whose payload is at
    most `max_payload` bytes (a log's limit; a follower passes its store's); else FrameError."""
    frame = check_frame_bytes(message, expected, max_payload)
    try:
        event = strict_loads(bytes(frame_payload(frame)))
    except ValueError as exc:  # UnicodeDecodeError and a non-finite number included
        raise FrameError(expected, f"payload is not JSON ({exc})") from exc
    if not isinstance(event, dict):
        raise FrameError(expected, f"payload is a JSON {type(event).__name__}, expected an event object")
    kind = event.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:  # an object or array is unhashable
        raise FrameError(expected, f"payload is not an insert, update or delete event (kind {kind!r})")
    if event.get("offset") != expected or isinstance(event.get("offset"), bool):
        raise FrameError(expected, f"the event's offset {event.get('offset')!r} disagrees with the frame's {expected}")
    return expected, event


def check_frame_bytes(message: bytes | str, expected: int, max_payload: int = MAX_PAYLOAD) -> bytes:
    """The checks of `check_frame` short of the payload's JSON: binary, the header, the
    offset `expected`, the length within `max_payload` and equal to the rest, the CRC.
    A read replica checks this much on its reading thread and leaves the event to its
    store, which decodes each payload once (storage/follow.py rule 5)."""
    if isinstance(message, str):
        raise FrameError(expected, f"a text message ({len(message)} characters), expected a binary frame")
    header = frame_header(message)
    if header is not None:
        offset, length = header.offset, header.length
        payload_bytes = len(frame_payload(message))
        if offset < expected:
            raise FrameError(offset, f"offset repeats: {offset} was already received, expected {expected}")
        if offset > expected:
            missing = f"{expected}" if offset == expected + 1 else f"{expected}..{offset - 1}"
            raise FrameError(offset, f"offset gap: expected {expected}, offsets {missing} are missing")
        if length > max_payload:  # rule 1: what a log holding it would not reopen is never kept
            raise FrameError(
                offset,
                f"record too large: a frame payload of {length} bytes, over the limit of {max_payload} "
                "(a log holding it would not reopen); nothing of it is kept",
            )
        if length < payload_bytes:
            raise FrameError(offset, f"length {length} is short of the message's {payload_bytes} payload bytes")
    reason = frame_error(message, 0, expected)  # header, length, CRC: the log's checks
    if reason is not None:
        raise FrameError(expected, reason)
    return message


# -- rule 6: progress -----------------------------------------------------------------------


class Reporter:
    """Messages on stderr, plus the progress line when stderr is a terminal."""

    def __init__(self, stream: TextIO, endpoint: Endpoint | None = None) -> None:
        self.stream = stream
        self.live = endpoint is not None and stream.isatty()
        self.frames = self.bytes = 0
        self.last: int | None = None
        self.head: int | None = None
        self.state = "connecting"
        self._drawn_at = 0.0
        self._line = ""
        self._stop = threading.Event()
        if self.live and endpoint is not None:
            threading.Thread(target=self._poll, args=(endpoint,), daemon=True, name="snapshot").start()

    def say(self, message: str) -> None:
        self.stream.write(("\r\x1b[K" if self.live else "") + f"dbsvc replicate: {message}\n")
        self.stream.flush()
        self.draw(force=True)

    def draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.live or (not force and now - self._drawn_at < REDRAW_EVERY):
            return
        self._drawn_at = now
        lag = "?" if self.head is None or self.last is None else max(0, self.head - self.last)
        line = f"{self.frames} frames  {_size(self.bytes)}  offset {'-' if self.last is None else self.last}  lag {lag}  ({self.state})"
        if force or line != self._line:
            self._line = line
            self.stream.write(f"\r{line}\x1b[K")
            self.stream.flush()

    def finish(self) -> None:
        self._stop.set()
        if self.live:
            self.draw(force=True)
            self.stream.write("\n")
            self.stream.flush()

    def _poll(self, endpoint: Endpoint) -> None:
        while True:
            try:
                _status, snapshot = get_snapshot(endpoint, 2.0)
                if snapshot is not None:
                    self.head = snapshot.offset
            except (OSError, ValueError, http.client.HTTPException, MalformedAnswer):
                pass  # the stream's own reconnects (or rule 7a's check) say why
            if self._stop.wait(SNAPSHOT_EVERY):
                return


def get_snapshot(endpoint: Endpoint, timeout: float) -> tuple[int, PrimarySnapshot | None]:
    """The status of the server's `GET /snapshot` (no token needed) and, for a 200, its body
    read by the one reader of that body (answers.py rule 1); OSError, HTTPException or
    ValueError when it cannot be had or is not JSON, MalformedAnswer when it is JSON but not
    a `/snapshot` body."""
    parts = urllib.parse.urlsplit(endpoint.http_base)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.netloc, timeout=timeout)
    try:
        conn.request("GET", f"{parts.path}/snapshot")
        reply = conn.getresponse()
        data = reply.read()
    finally:
        conn.close()
    if reply.status != 200:
        return reply.status, None
    body = strict_loads(data)  # a ValueError for NaN or 1e400 too (rule 1's strict JSON)
    return reply.status, parse_snapshot_body(body)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


# -- rules 4 and 5: the run -----------------------------------------------------------------


class _Stop:
    """The SIGINT/SIGTERM handler: only notes the signal (rule 5)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        self.signum = signum


def refusal_message(exc: HandshakeRefused, after: int) -> str | None:
    """Why a refused handshake ends the run (rule 4), or None when it is worth retrying."""
    status, code = exc.status, exc.code
    detail = (exc.problem or {}).get("detail") or exc.body[:200].decode("utf-8", "replace")
    if status == 410:
        oldest = (exc.problem or {}).get("oldest")
        since = f" (its log now starts after offset {oldest})" if isinstance(oldest, int) else ""
        return (
            f"HTTP 410 offset_gone: the server no longer holds the rows after offset {after}{since}; "
            "they were compacted away, so this replica cannot be continued. Re-bootstrap it: copy "
            "the server's current records (note the Dbsvc-Offset header of the reads) and start a "
            "new replica file with --after that offset"
        )
    if status in (401, 403):
        return f"HTTP {status} {code}: {detail} (give a valid token with --token or SERVICE_TOKEN)"
    if status == 404 and code == "replication_disabled":
        return f"HTTP 404 replication_disabled: {detail} (the server's schema needs `[runtime] replication = true`)"
    if status == 400 and code == "offset_out_of_range":
        return (
            f"HTTP 400 offset_out_of_range: {detail}; this replica is ahead of the server, whose "
            f"history no longer reaches offset {after} (a server restored from a backup, a different "
            "or reset server, or a wrong --after?). The rows after the server's head are not the "
            "server's: start a new replica file, keeping this one if its rows matter"
        )
    if 400 <= status < 500 and status not in (408, 429):
        return f"HTTP {status} {code or ''}: {detail}".replace("  ", " ")
    return None


def replicate(
    url: str,
    *,
    after: int | None = None,
    out: str | None = None,
    token: str | None = None,
    stderr: TextIO | None = None,
    stdout: BinaryIO | None = None,
) -> int:
    """Run the command; returns the exit status (raises ReplicaError / ConfigError too)."""
    endpoint = parse_endpoint(url)
    if after is not None and after < 0:
        raise ConfigError(f"--after {after} is not an offset: expected an integer >= 0")
    report = Reporter(stderr or sys.stderr, endpoint)
    sink: ReplicaFile | StdoutSink
    try:
        if out is not None:
            sink = ReplicaFile.open(out, report)
            stored = sink.last_offset
            if stored is not None and after is not None and after != stored:
                sink.close()
                raise ConfigError(
                    f"--after {after} disagrees with {out!r}, which ends at offset {stored}; "
                    "leave --after out to resume from the file"
                )
        else:
            sink = StdoutSink(stdout or sys.stdout.buffer)
    except BaseException:
        report.finish()
        raise
    last = sink.last_offset if sink.last_offset is not None else (after or 0)
    report.last = last
    headers = [("Authorization", f"Bearer {token.removeprefix('Bearer ').strip()}")] if token else []
    stop = _Stop()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _follow(endpoint, sink, last, headers, stop, report)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        try:
            sink.close()
        finally:
            report.finish()


def same_row(theirs: bytes | str, mine: bytes) -> bool:
    """Rule 7: the server's frame is FILE's: byte-equal, or (an online compaction renumbers
    the watermarks of the rows it carries into its new log, docs/replication.md) equal but
    for the payload's `watermark`, both payloads strict JSON: `1e400` and `1e999`, which
    json.loads reads as the same inf, are not one row."""
    if theirs == mine:
        return True
    header = frame_header(theirs) if isinstance(theirs, bytes) else None
    if not isinstance(theirs, bytes) or header is None or header.offset != frame_offset(mine):
        return False
    try:
        a, b = strict_loads(bytes(frame_payload(theirs))), strict_loads(bytes(frame_payload(mine)))
    except ValueError:
        return False
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    a.pop("watermark", None)
    b.pop("watermark", None)
    return a == b


def diverged_message(path: str, offset: int) -> str:
    """Rule 7: what a failed head-frame check says."""
    return (
        f"the server's frame at offset {offset} differs from the one {path} holds: the server's history "
        f"is no longer this file's (restored from a backup, or rewritten), so its offsets after {offset} "
        f"may name other rows. {path} was left as it is; start a new replica file (keep this one if "
        "its rows matter)"
    )


def history_to_adopt(endpoint: Endpoint, sink: ReplicaFile, last: int) -> History | None:
    """Rule 7a: the server's history, to record once the head frame passed (None: keep
    FILE's record); `HistoryDiverged` when the server's history does not continue FILE's
    at offset `last`. OSError, HTTPException or ValueError when /snapshot cannot be had;
    MalformedAnswer (not retried: the server said it) when its body is not a `/snapshot`
    body, a garbled `history` included, which is never taken for none."""
    status, snapshot = get_snapshot(endpoint, CONNECT_TIMEOUT)
    if status >= 500 or status in (408, 429):
        raise OSError(f"GET /snapshot answered {status}")
    theirs = snapshot.history if snapshot is not None else None
    mine = sink.history
    if theirs is None or theirs == mine:
        return None  # an older server, or a /snapshot a proxy does not pass: rule 7b alone
    if mine is None or sink.last_frame is None or theirs.shares_prefix(mine.id, last):
        return theirs
    raise HistoryDiverged(
        f"the server's history {theirs.id} does not continue the history {mine.id} that {sink.path} "
        f"holds up to offset {last} (the server was restored from a backup, or an import rewrote "
        f"it after an offset the file holds), so its offsets may name other rows. {sink.path} was "
        "left as it is; start a new replica file (keep this one if its rows matter)"
    )


def _follow(
    endpoint: Endpoint,
    sink: ReplicaFile | StdoutSink,
    last: int,
    headers: list[tuple[str, str]],
    stop: _Stop,
    report: Reporter,
) -> int:
    attempt = 0
    unchecked = -1  # the head whose frame the server no longer holds (rule 7)
    while stop.signum is None and not sink.closed:
        mine = sink.last_frame if isinstance(sink, ReplicaFile) and last > 0 and last != unchecked else None
        url = endpoint.replicate_url(last if mine is None else last - 1)
        report.state = "connecting"
        adopt: History | None = None
        try:
            if isinstance(sink, ReplicaFile):
                adopt = history_to_adopt(endpoint, sink, last)  # rule 7a
            ws = open_websocket(url, headers=headers, timeout=CONNECT_TIMEOUT)
        except HandshakeRefused as exc:
            if mine is not None and exc.status == 410:
                report.say(
                    f"the server no longer holds frame {last}, so it cannot be checked against "
                    f"{sink.path}'s; continuing after offset {last} unchecked"
                )
                unchecked = last
                continue
            verdict = refusal_message(exc, last)
            if verdict is not None and isinstance(sink, ReplicaFile) and sink.last_frame is not None:
                if exc.status == 400 and exc.code == "offset_out_of_range":  # rule 7: a shorter server
                    raise HistoryDiverged(f"{url}: {verdict}") from exc
            if verdict is not None:
                raise ReplicaError(f"{url}: {verdict}") from exc
            problem: Exception = exc
        except (WebSocketClientError, OSError, http.client.HTTPException, ValueError) as exc:
            problem = exc  # the /snapshot of rule 7a as well as the stream
        else:
            report.state = "streaming"
            check = "" if mine is None else f"; resuming after={last} once frame {last} matches the file's"
            report.say(f"streaming {url} into {sink.path}{check}")
            with ws:
                if adopt is not None and mine is None and isinstance(sink, ReplicaFile):
                    sink.adopt_history(adopt)  # nothing of FILE to compare the frame with
                    adopt = None
                try:
                    while stop.signum is None and not sink.closed:
                        messages = ws.receive_many(BATCH, BATCH_BYTES, POLL)  # ws/client.py C7
                        now = time.monotonic()
                        if messages and mine is not None:  # rule 7: the head frame
                            if not same_row(messages[0], mine):
                                check_frame(messages[0], last)  # a bad frame is said as one (rule 7)
                                raise HistoryDiverged(f"{url}: {diverged_message(sink.path, last)}")
                            mine = None
                            if adopt is not None and isinstance(sink, ReplicaFile):
                                sink.adopt_history(adopt)  # rule 7: both checks passed
                                adopt = None
                            del messages[0]
                        if not messages:
                            if sink.unsynced or now - sink.synced_at >= SYNC_INTERVAL:
                                sink.sync()  # rule 2: the stream paused
                            report.draw()
                            continue
                        for message in messages:
                            offset, event = check_frame(message, last + 1)
                            assert isinstance(message, bytes)
                            sink.write(message, event)
                            last = offset
                            report.bytes += len(message)
                        attempt = 0  # it delivered: a fresh backoff
                        report.frames += len(messages)
                        report.last = last
                        if sink.unsynced >= SYNC_BYTES or now - sink.synced_at >= SYNC_INTERVAL:
                            sink.sync()
                        report.draw()
                    break
                except MessageTooBig as exc:
                    raise FrameError(last + 1, f"{exc} (a frame is at most {MAX_FRAME} bytes)") from exc
                except WebSocketClientError as exc:
                    problem = exc
        sink.sync()
        delay = min(BACKOFF_CAP, BACKOFF_FIRST * 2**attempt)
        delay = random.uniform(delay / 2, delay)  # jitter: replicas do not stampede
        attempt = min(attempt + 1, 16)
        report.state = f"reconnecting in {delay:.1f} s"
        report.say(f"{problem}; reconnecting after offset {last} in {delay:.1f} s")
        deadline = time.monotonic() + delay
        while stop.signum is None and time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
    if stop.signum is not None:
        report.say(f"stopped by {signal.Signals(stop.signum).name} at offset {last}")
    return 0
