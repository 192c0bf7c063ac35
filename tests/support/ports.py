"""Loopback ports for tests that start a listener of their own choosing the port first (a
worker's private port, nginx's, a TLS front's): one free now, and a wait until one accepts.

`free_port` asks the kernel for a free port and releases it: another process may take it
before the test binds it, so it is only for listeners that cannot be told port 0 and report
back (most servers in tests are started on port 0 and print theirs: support/server.py)."""

from __future__ import annotations

import asyncio
import socket


def free_port() -> int:
    """A loopback port no socket holds at this moment."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def listening(port: int, seconds: float = 5.0) -> None:
    """Until `port` accepts a connection, polled with a bound: a listener's task started by
    `start` runs on the loop only after `start` returns."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            assert loop.time() < deadline, f"nothing listens on {port}"
            await asyncio.sleep(0.01)
            continue
        writer.close()
        return
