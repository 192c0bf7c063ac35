"""Stand-in transports for driving `HttpConnection`s in process, with no socket.

The in-process benches (http_layer_bench.py, write_inprocess.py) hand each connection one of
these in `connection_made` and feed it bytes with `data_received`; what the connection writes
back is counted, never sent. Imports nothing from dbsvc, so a bench may still put another
checkout (`--code DIR`) on sys.path after importing this.

- `StandInTransport`: the calls a connection makes, none with an effect; the writes counted
  on the instance.
- `WaveTransport`: writes counted across every instance, and the current wave's `waiter`
  woken by the write it waits for (`expected`), so the loop sleeps in select while a commit
  group's fsync runs, as the server's does, instead of polling.
"""

from __future__ import annotations

import asyncio
from typing import Any


class StandInTransport:
    """The transport calls an `HttpConnection` makes; writes are counted, not sent."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


class WaveTransport(StandInTransport):
    """Writes counted on the class, over all connections; the write that makes the count
    `expected` sets the result of `waiter` (set both before feeding a wave)."""

    writes = 0
    expected = 0
    waiter: asyncio.Future[None] | None = None

    def __init__(self) -> None:
        pass  # the count is the class's: no per-instance one to start

    def write(self, data: bytes) -> None:
        WaveTransport.writes += 1
        if WaveTransport.writes == WaveTransport.expected and WaveTransport.waiter is not None:
            WaveTransport.waiter.set_result(None)
