"""A WebSocket echo on dbsvc's own server and WebSocket connection, for Autobahn|Testsuite.

    python bench/autobahn/echo_server.py [--port 0] [--max-message BYTES]

Every request is upgraded (route "echo", any path) to a `WebSocketConnection`
(dbsvc/http/ws/server.py) through the production path: `dbsvc.http.server.serve`, the
connection layer's handshake check and 101, production's `HttpSettings` (`load_config`
with an empty environment: the same timeouts, ping interval, connection cap) and
production's limits. The one limit it may raise is `Upgrade.max_message` (production:
64 KiB, closed with 1009), because Autobahn's cases 9.* send messages up to 16 MiB.

Prints `listening on PORT` on stdout once listening; SIGTERM or SIGINT stops it (graceful
shutdown: open sockets are closed with 1001). Logging follows RUST_LOG (default `warn`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from dbsvc.config import load_config  # noqa: E402
from dbsvc.http.server import serve_until_signalled  # noqa: E402
from dbsvc.http.types import Channel, Request, Upgrade  # noqa: E402
from dbsvc.logs import configure_logging  # noqa: E402

PRODUCTION_MAX_MESSAGE = Upgrade.__dataclass_fields__["max_message"].default


class EchoSession:
    """`types.Session`: every complete message goes back as it came (text as text)."""

    __slots__ = ("channel",)

    def __init__(self) -> None:
        self.channel: Channel | None = None

    def on_open(self, channel: Channel) -> None:
        self.channel = channel

    def on_message(self, data: str | bytes) -> None:
        assert self.channel is not None
        if isinstance(data, str):
            self.channel.send_text(data)
        else:
            self.channel.send_bytes(data)

    def on_writable(self) -> None:
        pass

    def on_close(self, code: int) -> None:
        self.channel = None


def make_app(max_message: int):
    def app(request: Request) -> Upgrade:
        return Upgrade(EchoSession(), route="echo", max_message=max_message)

    return app


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="WebSocket echo on dbsvc.http, for Autobahn|Testsuite")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--max-message",
        type=int,
        default=PRODUCTION_MAX_MESSAGE,
        help="incoming message limit in bytes (default: production's %(default)s)",
    )
    args = parser.parse_args(argv)
    configure_logging(os.environ.get("RUST_LOG", "warn"), os.environ.get("SERVICE_LOG_FORMAT", "text"))
    settings = dataclasses.replace(load_config({}).http, host=args.host, port=args.port)

    async def run() -> None:

        def ready(port: int) -> None:
            sys.stdout.write(f"listening on {port}\n")
            sys.stdout.flush()

        await serve_until_signalled(make_app(args.max_message), settings, on_ready=ready)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
