"""The canned server: a fixed small JSON body through the real dbsvc.http layer (h11 + asyncio).

It is the yardstick of docs/guide/operations.md#performance: every figure there is a ratio against this
server's requests/s, measured in the same run on the same core. It answers every request
synchronously (the fast path), so its cost is the protocol layer's and nothing else.

    python bench/canned_server.py [--port 0] [--host 127.0.0.1]

prints `PORT <n>` on stdout once listening; SIGTERM or SIGINT stops it. Logging follows
RUST_LOG (default `warn` here, so the request span is off, as in production benches).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dbsvc.http.server import serve_until_signalled  # noqa: E402
from dbsvc.http.types import HttpSettings, Request, Response  # noqa: E402
from dbsvc.logs import configure_logging  # noqa: E402

BODY = b'{"id":1,"title":"hello","published":true,"score":3.5}'
CANNED = Response(200, BODY)


def canned_app(request: Request) -> Response:
    return CANNED


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="canned-response server on the dbsvc.http layer")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    configure_logging(os.environ.get("RUST_LOG", "warn"), os.environ.get("SERVICE_LOG_FORMAT", "text"))
    settings = HttpSettings(
        host=args.host, port=args.port, max_connections=4096, http_parser=os.environ.get("SERVICE_HTTP_PARSER", "fast")
    )

    async def run() -> None:

        def ready(port: int) -> None:
            sys.stdout.write(f"PORT {port}\n")
            sys.stdout.flush()

        await serve_until_signalled(canned_app, settings, on_ready=ready)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
