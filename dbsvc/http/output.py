"""Output of one socket: turn-end batching and write back-pressure, shared by HTTP and WebSocket.

Job: hold the bytes a connection produces during one turn of the event loop and write them
together when the turn ends (connection.py rule 9, the way Redis writes its replies just
before its loop sleeps), and remember whether the transport asked us to stop writing
(`pause_writing`, asyncio's high-water mark). Both the HTTP connection and the WebSocket
connection own one `Outbox`; neither copies this logic.

Rules:
1. `write_later(data)` holds `data`; the first held chunk of a turn asks the hub to call
   `flush()` once the turn ends (`defer`), so every socket's output of a turn leaves in
   one `transport.write`. Past OUT_LIMIT (64 KiB) held bytes are written at once, so the
   transport's own back-pressure still bounds them.
2. `write(data)` writes now, after anything held, so order is always call order.
3. Nothing is written after `closed` is set (the transport is gone).
4. `paused` mirrors the transport's pause_writing / resume_writing; the owner decides
   what to stop producing while it is set.
5. `handed` counts the bytes given to the transport; less its write buffer, that is what
   the transport has written (`written`): when it grows, the peer is reading (a WebSocket
   counts that as a sign of life, ws/server.py rule 3).
6. `bulk` marks an upgraded WebSocket's output (ws/server.py sets it): the hub may hold it
   a little past the turn's end while fan-outs are heavy, so the frames of several events
   leave in one write (hub.py rule 10). HTTP responses are never held so.

Imports nothing from dbsvc; no h11, no wsproto.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

OUT_LIMIT = 64 * 1024


class Outbox:
    """The held output and write state of one transport."""

    __slots__ = ("transport", "paused", "closed", "handed", "bulk", "_defer", "_chunks", "_size")

    def __init__(self, defer: Callable[[Outbox], None]) -> None:
        self.transport: Any = None
        self.paused = False
        self.closed = False
        self.handed = 0  # bytes given to the transport, ever (rule 5)
        self.bulk = False  # a WebSocket's output (rule 6)
        self._defer = defer
        self._chunks: list[bytes] = []
        self._size = 0

    def write_later(self, data: bytes) -> None:
        """Hold `data` until the loop's turn ends (rule 1), or write now past OUT_LIMIT."""
        chunks = self._chunks
        chunks.append(data)
        self._size += len(data)
        if len(chunks) == 1:
            self._defer(self)
        if self._size >= OUT_LIMIT:
            self.flush()

    def write(self, data: bytes) -> None:
        """Write now, after any held output (rule 2)."""
        if self._chunks:
            self.flush()
        if not self.closed:
            self.handed += len(data)
            self.transport.write(data)

    def flush(self) -> None:
        """Write the held output (the hub calls this when the turn ends)."""
        chunks = self._chunks
        if not chunks:
            return
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._size = 0
        if not self.closed:
            self.handed += len(data)
            self.transport.write(data)

    def discard(self) -> None:
        """Drop held output: the transport is gone (rule 3)."""
        self._chunks.clear()
        self._size = 0
        self.closed = True

    @property
    def written(self) -> int:
        """Bytes the transport has passed to the kernel so far (rule 5): a reader's progress."""
        transport = self.transport
        if transport is None or self.closed:
            return self.handed
        return self.handed - transport.get_write_buffer_size()

    @property
    def backlog(self) -> int:
        """Bytes in the transport's write buffer: what leaves only as the peer reads. Bytes
        held here are not counted: a flush hands them on whether or not anyone reads."""
        transport = self.transport
        return transport.get_write_buffer_size() if transport is not None and not self.closed else 0

    @property
    def buffered(self) -> int:
        """Bytes held here plus bytes in the transport's write buffer."""
        transport = self.transport
        return self._size + (transport.get_write_buffer_size() if transport is not None and not self.closed else 0)
