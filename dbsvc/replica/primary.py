"""The primary as a read replica reaches it: its `/snapshot`, `/replicate` and `/replicate/snapshot`.

follower.py decides (rules 1-8 of its docstring); this module only carries the bytes. The
seam exists so those decisions can be driven without a server: a test hands the follower
another `Primary` (tests/replica/test_follower_decisions.py plays one from a script) and
goes through each branch, a new epoch met mid-stream or a refused handshake included, where
an end-to-end run only reaches the paths a real primary happens to take.

    body    = primary.snapshot()          # GET /snapshot as parsed JSON (any JSON value)
    stream  = primary.replicate(after)    # /replicate?after=N, open
    stream  = primary.epoch_snapshot()    # /replicate/snapshot, open

Rules:
1. `snapshot` raises `OSError` (refused, dropped, an HTTP error status: urllib's HTTPError is
   one) or `ValueError` (not JSON); it judges nothing of the body: follower.py does.
2. `replicate` and `epoch_snapshot` raise `HandshakeRefused` for an answer other than 101 and
   `WebSocketClientError` when no connection could be had; a `Stream` yields whole messages
   (`receive(timeout)`: bytes, str, or None when none came within `timeout` seconds) and
   raises `WebSocketClientError` once the connection has ended.
3. Timeouts: 5 s for `/snapshot`, 10 s for a handshake (the follower's, unchanged since
   these calls lived in follower.py).

Imports the blocking WebSocket client of dbsvc.http.ws.client and the consumer's `Endpoint`;
nothing of storage, no asyncio.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any, Protocol

from dbsvc.http.ws.client import open_websocket
from dbsvc.replica.consumer import Endpoint

SNAPSHOT_TIMEOUT = 5.0  # rule 3
HANDSHAKE_TIMEOUT = 10.0


class Stream(Protocol):
    """An open `/replicate` or `/replicate/snapshot` socket (rule 2); closed on exit."""

    def receive(self, timeout: float | None = None) -> bytes | str | None: ...

    def __enter__(self) -> Stream: ...

    def __exit__(self, *exc_info: object) -> None: ...


class Primary(Protocol):
    """What the follower asks of its primary (rules 1 and 2)."""

    def snapshot(self) -> Any: ...

    def replicate(self, after: int) -> Stream: ...

    def epoch_snapshot(self) -> Stream: ...


class HttpPrimary:
    """The primary at `endpoint`, over HTTP and the blocking WebSocket client."""

    def __init__(self, endpoint: Endpoint, token: str | None = None) -> None:
        self.endpoint = endpoint
        self._headers = [("Authorization", f"Bearer {token}")] if token else []

    def snapshot(self) -> Any:
        request = urllib.request.Request(f"{self.endpoint.http_base}/snapshot")
        with urllib.request.urlopen(request, timeout=SNAPSHOT_TIMEOUT) as reply:  # noqa: S310 - our URL
            return json.loads(reply.read())

    def replicate(self, after: int) -> Stream:
        return open_websocket(self.endpoint.replicate_url(after), headers=self._headers, timeout=HANDSHAKE_TIMEOUT)

    def epoch_snapshot(self) -> Stream:
        url = f"{self.endpoint.ws_base}/replicate/snapshot"
        return open_websocket(url, headers=self._headers, timeout=HANDSHAKE_TIMEOUT)
