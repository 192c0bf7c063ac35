"""The primary as a read replica reaches it: its `/snapshot`, `/replicate` and `/replicate/snapshot`.

follower.py decides (the rules of its docstring) and bootstrap.py judges what the primary
said; this module only carries the bytes. The
seam exists so those decisions can be driven without a server: a test hands the follower
another `Primary` (tests/support/follower_kit.py plays one from a script, for tests/replica/test_follower_*.py) and
goes through each branch, a new epoch met mid-stream or a refused handshake included, where
an end-to-end run only reaches the paths a real primary happens to take.

    body    = primary.snapshot()          # GET /snapshot as parsed JSON (any JSON value)
    stream  = primary.replicate(after)    # /replicate?after=N, open
    stream  = primary.epoch_snapshot()    # /replicate/snapshot, open
    header  = read_snapshot_header(stream)        # its first message, a SnapshotHeader: the cut
    header, data = read_snapshot(stream)          # the whole snapshot, size and crc32 checked

Rules:
1. `snapshot` raises `OSError` (refused, dropped, an HTTP error status) or `ValueError` (not
   JSON); it judges nothing of the body: follower.py does. `HttpPrimary` asks it over one
   kept-alive connection (HTTP/1.1), opened again when the server has closed it (an idle
   timeout, a restart) and for the request after a failed one: the follower asks every
   second (its rule 5), and each ask on a new connection through urllib (a connect, a
   dozen blocking calls) held its reading thread 60-117 ms while catching up, each call
   waiting for the GIL behind the busy loop, so the loop ran out of groups to apply
   (bench/README.md, "The primary's /snapshot asked over one kept-alive connection").
2. `replicate` and `epoch_snapshot` raise `HandshakeRefused` for an answer other than 101 and
   `WebSocketClientError` when no connection could be had; a `Stream` yields whole messages
   (`receive(timeout)`: bytes, str, or None when none came within `timeout` seconds;
   `receive_many`: those that came at once, ws/client.py C7) and raises
   `WebSocketClientError` once the connection has ended.
3. Timeouts: 5 s for `/snapshot`, 10 s for a handshake (the follower's, unchanged since
   these calls lived in follower.py), 30 s for each message of the snapshot stream.
4. `read_snapshot_header` and `read_snapshot` raise `StreamError` for every malformed
   message: a stream that does not start with its header, a header or end message that is
   not JSON or not an object, an end message whose size or crc32 is not the bytes'; and
   `WebSocketClientError` for one that stalls. Nothing else (no bare ValueError or
   TypeError) escapes them but `MalformedAnswer`, for a header that is a JSON object but
   not a snapshot header (answers.py rule 2: its epoch, offset, fingerprint or history
   not what the route promises), read into a typed `SnapshotHeader` before anything
   after it. The follower takes a `StreamError` of the stream as damage in transit and
   fetches again (its rule 2), and a `MalformedAnswer` as transient too (its rule 4). A
   `StreamError` names the offset of the header (0 before one was read) and what was
   expected.
5. Every JSON text from the primary (the `/snapshot` body, the snapshot stream's header and
   end messages) is read by dbsvc/strictjson.py: `NaN`, `Infinity` and a number past the
   doubles (`1e400`, which json.loads reads as inf) are not JSON, so `snapshot` raises
   ValueError for them and the stream's readers `StreamError` (rule 4), as for any text
   that is not JSON, naming the number: the follower reconnects, as it does for any answer
   that is not JSON.

Imports the blocking WebSocket client of dbsvc.http.ws.client, the consumer's `Endpoint`
and the header's reader (answers.py); nothing of storage, no asyncio.
"""

from __future__ import annotations

import http.client
import urllib.parse
import zlib
from typing import Any, Protocol

from dbsvc.errors import StreamError, WebSocketClientError
from dbsvc.http.ws.client import open_websocket
from dbsvc.replica.answers import SnapshotHeader, parse_snapshot_header
from dbsvc.replica.consumer import Endpoint
from dbsvc.strictjson import strict_loads

SNAPSHOT_TIMEOUT = 5.0  # rule 3
HANDSHAKE_TIMEOUT = 10.0
MESSAGE_TIMEOUT = 30.0


class Stream(Protocol):
    """An open `/replicate` or `/replicate/snapshot` socket (rule 2); closed on exit."""

    def receive(self, timeout: float | None = None) -> bytes | str | None: ...

    def receive_many(self, limit: int, max_bytes: int, timeout: float | None = None) -> list[bytes | str]: ...

    def __enter__(self) -> Stream: ...

    def __exit__(self, *exc_info: object) -> None: ...


class Primary(Protocol):
    """What the follower asks of its primary (rules 1 and 2)."""

    def snapshot(self) -> Any: ...

    def replicate(self, after: int) -> Stream: ...

    def epoch_snapshot(self) -> Stream: ...

    def close(self) -> None:
        """Let go of what `snapshot` keeps between asks (the reading thread's end)."""


class KeptSnapshot:
    """GET /snapshot of one primary on one kept-alive connection (HTTP/1.1; rule 1), for
    `HttpPrimary` and the workers' `WriterPrimary` alike. A kept connection that fails
    before an answer came may have been closed by the server while idle (a timeout, a
    restart): the ask is made once more on a new one. A new connection's failure is the
    answer, and so is a timeout (a primary slow to answer is asked again at the next poll,
    not at once). No proxy variable diverts it (http.client reads none), as none diverts
    the `/replicate` streams."""

    def __init__(self, netloc: str, path: str, *, secure: bool = False, headers: dict[str, str] | None = None) -> None:
        self._netloc, self._path, self._secure = netloc, path, secure
        self._headers = headers or {}
        self._connection: http.client.HTTPConnection | None = None

    def ask(self) -> Any:
        """The answer's JSON; OSError or ValueError as rule 1 says."""
        kept = self._connection is not None
        try:
            status, data = self._ask()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            if not kept or isinstance(exc, TimeoutError):
                raise OSError(f"GET /snapshot failed: {exc!r}") from exc
            try:
                status, data = self._ask()
            except (OSError, http.client.HTTPException) as again:
                self.close()
                raise OSError(f"GET /snapshot failed: {again!r}") from again
        if status != 200:
            raise OSError(f"GET /snapshot answered {status}")
        try:
            return strict_loads(data)
        except ValueError as exc:  # rule 5: what json.loads took as inf or nan included
            raise ValueError(f"GET /snapshot answered what is not JSON: {exc}") from None

    def _ask(self) -> tuple[int, bytes]:
        connection = self._connection
        if connection is None:
            kind = http.client.HTTPSConnection if self._secure else http.client.HTTPConnection
            connection = self._connection = kind(self._netloc, timeout=SNAPSHOT_TIMEOUT)
        connection.request("GET", self._path, headers=self._headers)
        reply = connection.getresponse()
        data = reply.read()
        if reply.will_close:  # the server closes it after this answer
            self.close()
        return reply.status, data

    def close(self) -> None:
        """Close the kept connection (the next ask opens one)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


class HttpPrimary:
    """The primary at `endpoint`, over HTTP and the blocking WebSocket client."""

    def __init__(self, endpoint: Endpoint, token: str | None = None) -> None:
        self.endpoint = endpoint
        self._headers = [("Authorization", f"Bearer {token}")] if token else []
        parts = urllib.parse.urlsplit(endpoint.http_base)
        self._snapshot = KeptSnapshot(parts.netloc, f"{parts.path}/snapshot", secure=parts.scheme == "https")

    def snapshot(self) -> Any:
        return self._snapshot.ask()

    def close(self) -> None:
        self._snapshot.close()

    def replicate(self, after: int) -> Stream:
        return open_websocket(self.endpoint.replicate_url(after), headers=self._headers, timeout=HANDSHAKE_TIMEOUT)

    def epoch_snapshot(self) -> Stream:
        url = f"{self.endpoint.ws_base}/replicate/snapshot"
        return open_websocket(url, headers=self._headers, timeout=HANDSHAKE_TIMEOUT)


def read_snapshot_header(stream: Stream) -> SnapshotHeader:
    """The first message of `/replicate/snapshot`: its JSON header, checked (rule 4)."""
    first = stream.receive(timeout=MESSAGE_TIMEOUT)
    if not isinstance(first, str):
        raise StreamError(0, "the snapshot stream did not start with its header")
    header = _message(first, "header", 0)
    if not isinstance(header, dict):
        raise StreamError(0, "the snapshot stream's header is not an object")
    return parse_snapshot_header(header)


def read_snapshot(stream: Stream) -> tuple[SnapshotHeader, bytes]:
    """The whole `/replicate/snapshot`: its header and its bytes, checked against the end
    message's size and crc32 (rule 4)."""
    header = read_snapshot_header(stream)
    offset = header.offset
    parts: list[bytes] = []
    while True:
        message = stream.receive(timeout=MESSAGE_TIMEOUT)
        if message is None:
            raise WebSocketClientError("the snapshot stream stalled")
        if isinstance(message, str):
            end = _message(message, "end message", offset)
            break
        parts.append(message)
    data = b"".join(parts)
    if not isinstance(end, dict):
        raise StreamError(offset, "the snapshot stream's end message is not an object")
    if end.get("type") != "end" or end.get("bytes") != len(data) or end.get("crc32") != zlib.crc32(data):
        raise StreamError(offset, "the snapshot arrived damaged (size or crc32)")
    return header, data


_EXPECTED = {
    "header": 'a JSON object {"type": "snapshot", "epoch": ..., "offset": ...}',
    "end message": 'a JSON object {"type": "end", "bytes": ..., "crc32": ...}',
}


def _message(text: str, what: str, offset: int) -> Any:
    """A text message of the snapshot stream as JSON (rule 5); `StreamError` at `offset`,
    naming it, what the decoder said and what was expected, for one that is not (a
    non-finite number included: dbsvc/strictjson.py)."""
    try:
        return strict_loads(text)
    except ValueError as exc:
        raise StreamError(
            offset, f"the snapshot stream's {what} is not JSON: {exc}; expected {_EXPECTED[what]}"
        ) from None
