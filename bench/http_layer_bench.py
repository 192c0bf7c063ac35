"""The HTTP layer's CPU a request, in process: what a write pays there beside a read.

    python bench/http_layer_bench.py [--code DIR] [--requests 20000] [--runs 3] [--profile [--span]]

Drives `HttpConnection`s (64, as wrk -c64 does) over a stand-in transport with the bytes
wrk sends for `GET /api/blog-post/20000` and for the peers' `POST /api/blog-post` (Host,
Content-Type, Content-Length and a ~380-byte body in one segment; like wrk's, the bodies
vary in size from one request to the next, so the header lines differ in the Content-Length
value: rounds alternate two bodies), answered by a canned
app: the GET with a `Response`, the POST with a `Deferred` whose future is resolved the way
the commit queue resolves it after an fsync (`--sync-post` answers it with a `Response`
instead, which leaves the body handling alone). No socket, no store, no span log: the
figure is the protocol layer's own CPU (`time.thread_time`), best of `--runs`, steady on a
loaded host where the HTTP figures are not. `--code DIR` measures another checkout.
`--profile` prints instead cProfile's calls a request of each method (one run; every call
below `data_received` and the settled callbacks, builtins included): a split or a cut of
the protocol layer is held to them, before and after. `--span` turns the span log on (to
/dev/null), its lines written once at the end of each method's run, inside the profile, so
the count does not depend on when the flusher thread wakes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from standin import StandInTransport

BODY = b'{"author_id": 7, "title": "bench 123456789-42", "body": "' + b"lorem ipsum " * 25 + b'", "score": 42.5}'
GET = b"GET /api/blog-post/20000 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
POSTS = tuple(
    b"POST /api/blog-post HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    for body in (BODY, BODY.replace(b"42.5", b"7.25"))
)
CONNECTIONS = 64


async def measure(requests: int, runs: int, sync_post: bool, profile: bool = False) -> dict[str, float]:
    """Each method's CPU a request in microseconds, or with `profile` its calls a request."""
    import cProfile
    import pstats

    from dbsvc.http.connection import HttpConnection
    from dbsvc.http.hub import Hub
    from dbsvc.http.types import Deferred, HttpSettings, Request, Response
    from dbsvc.logs import flush_logs

    loop = asyncio.get_running_loop()
    durable: list[asyncio.Future[None]] = []

    def app(request: Request) -> Response | Deferred:
        if request.method == "GET":
            return Response(200, b'{"id":20000}', [("Dbsvc-Watermark", "5"), ("Dbsvc-Offset", "9")])
        response = Response(
            201, b'{"id":7}', [("Location", "/api/blog-post/7"), ("Dbsvc-Offset", "9"), ("ETag", '"9"')]
        )
        if sync_post:
            return response
        future = loop.create_future()
        durable.append(future)
        return Deferred(future, response)

    hub = Hub(app, HttpSettings(port=0), loop)
    best: dict[str, float] = {}
    rounds = max(1, requests // CONNECTIONS)
    for _run in range(runs):
        for name, variants in (("GET", (GET,)), ("POST", POSTS)):
            connections = []
            for _ in range(CONNECTIONS):
                connection = HttpConnection(hub)
                connection.connection_made(StandInTransport())
                connections.append(connection)
            profiler = cProfile.Profile(time.thread_time) if profile else None
            if profiler is not None:
                profiler.enable()
            started = time.thread_time()
            for round_ in range(rounds):
                data = variants[round_ % len(variants)]
                for connection in connections:
                    connection.data_received(data)
                for future in durable:  # the group's fsync returned
                    future.set_result(None)
                durable.clear()
                await asyncio.sleep(0)  # the settled callbacks run
                await asyncio.sleep(0)  # the turn-end flush
            cost = (time.thread_time() - started) / (rounds * CONNECTIONS) * 1e6
            if profiler is not None:
                flush_logs()  # the span lines of this run, formatted and written (--span)
                profiler.disable()
                calls = sum(row[1] for row in pstats.Stats(profiler).stats.values())  # type: ignore[attr-defined]
                cost = calls / (rounds * CONNECTIONS)
            best[name] = min(best.get(name, cost), cost)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sync-post", action="store_true", help="answer the POST with a Response")
    parser.add_argument("--profile", action="store_true", help="cProfile's calls a request instead")
    parser.add_argument("--span", action="store_true", help="span log on, to /dev/null")
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    if args.span:
        import os

        import dbsvc.logs

        # No write by count or by the flusher thread during a run: measure() flushes at its end.
        dbsvc.logs.SPAN_BUFFER_LINES = 1 << 40
        dbsvc.logs.SPAN_FLUSH_SECONDS = 1 << 20
        dbsvc.logs.configure_logging("info", "text", stream=open(os.devnull, "w"))  # noqa: SIM115
    best = asyncio.run(measure(args.requests, 1 if args.profile else args.runs, args.sync_post, args.profile))
    unit = "calls a request" if args.profile else "us"
    print(" ".join(f"{name} {value:.2f} {unit}" for name, value in best.items()), f"({args.code})")


if __name__ == "__main__":
    main()
