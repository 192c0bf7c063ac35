"""A small application served by the real protocol layer, for the tests in tests/http.

Run as `python tests/support/demo_app.py [--max-body N ...]`; prints `PORT <n>` on stdout once
listening, serves until SIGTERM/SIGINT, exits 0. Logging follows RUST_LOG and
SERVICE_LOG_FORMAT like the real service.

Routes (any method unless noted):
    /echo             JSON of what arrived: method, path, query, body, request_id, headers
    /health           {"status": "ok"}, as the service's liveness probe answers
    /async-echo       the same, answered from a coroutine
    /slow?ms=N        answers after N ms (a coroutine)
    /big?n=N          N bytes of body
    /error            raises RuntimeError (-> 500 internal)
    /async-error      the same from a coroutine
    /bad              raises BadRequest (-> 400 problem)
    /bad-header       answers a header value with CR/LF in it (-> 500)
    /none             returns None (-> 500)
    /deferred?ms=N    a Deferred: the answer now, sent when a future set after N ms completes
    /deferred-error?kind=bad|boom  a Deferred whose future fails with BadRequest / RuntimeError
    /upgrade          a WebSocket that echoes every message back
    /echo-error       a 422 whose message holds the body's "v" as sent (it may be any string)
    /leaky-error...   raises RuntimeError holding the body and the path (any path below it)
    /unrenderable?v=  a 400 whose problem body cannot be rendered (a value json cannot encode)
    /bad-body         answers a str body (-> 500)
    /bad-status       answers status 99 (-> 500)
    /bad-upgrade      an Upgrade the WebSocket layer chokes on (a bug of the layer's own: abort)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from dbsvc.errors import BadRequest, ConstraintViolation  # noqa: E402
from dbsvc.http.server import serve_until_signalled  # noqa: E402
from dbsvc.http.types import Deferred, HttpSettings, Request, Response, Upgrade  # noqa: E402
from dbsvc.logs import configure_logging  # noqa: E402


def echo_body(request: Request) -> Response:
    payload = {
        "method": request.method,
        "path": request.path,
        "target": request.target,
        "query": request.query,
        "body": request.body.decode("utf-8", "replace"),
        "body_len": len(request.body),
        "request_id": request.request_id,
        "headers": request.headers,
    }
    return Response(200, json.dumps(payload).encode())


class EchoSession:
    """After the WebSocket upgrade: echo every data message back."""

    def __init__(self) -> None:
        self.channel = None

    def on_open(self, channel) -> None:
        self.channel = channel

    def on_message(self, data) -> None:
        if isinstance(data, str):
            self.channel.send_text(data)
        else:
            self.channel.send_bytes(data)

    def on_writable(self) -> None:
        pass

    def on_close(self, code: int) -> None:
        pass


async def slow(request: Request) -> Response:
    ms = int(dict(request.query).get("ms", "100"))
    await asyncio.sleep(ms / 1000)
    return Response(200, json.dumps({"slept_ms": ms, "request_id": request.request_id}).encode())


async def async_echo(request: Request) -> Response:
    await asyncio.sleep(0)
    return echo_body(request)


async def async_error(request: Request) -> Response:
    await asyncio.sleep(0)
    raise RuntimeError("async boom")


def deferred(request: Request) -> Deferred:
    ms = int(dict(request.query).get("ms", "0"))
    future = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(ms / 1000, future.set_result, None)
    return Deferred(future, Response(200, json.dumps({"deferred_ms": ms, "request_id": request.request_id}).encode()))


def deferred_error(request: Request) -> Deferred:
    kind = dict(request.query).get("kind", "boom")
    future = asyncio.get_running_loop().create_future()
    future.set_exception(
        BadRequest("the deferred work was refused") if kind == "bad" else RuntimeError("deferred boom")
    )
    return Deferred(future, Response(200, b'{"never": "sent"}'))


def app(request: Request):
    path = request.path
    if path == "/echo":
        return echo_body(request)
    if path == "/health":
        return Response(200, b'{"status": "ok"}')
    if path == "/async-echo":
        return async_echo(request)
    if path == "/slow":
        return slow(request)
    if path == "/big":
        return Response(200, b"x" * int(dict(request.query).get("n", "1000")), [], "text/plain")
    if path == "/error":
        raise RuntimeError("boom")
    if path == "/async-error":
        return async_error(request)
    if path == "/bad":
        raise BadRequest("this route always refuses")
    if path == "/bad-header":
        return Response(200, b"{}", [("X-Evil", "a\r\nSet-Cookie: x=1")])
    if path == "/none":
        return None
    if path == "/deferred":
        return deferred(request)
    if path == "/deferred-error":
        return deferred_error(request)
    if path == "/upgrade":
        return Upgrade(EchoSession(), route="echo")
    if path == "/echo-error":
        value = json.loads(request.body)["v"]
        raise ConstraintViolation([{"field": "v", "message": f"got the string {value}"}])
    if path.startswith("/leaky-error"):
        raise RuntimeError(f"cannot handle {request.body!r} at {path}")
    if path == "/unrenderable":
        raise BadRequest(f"refused {dict(request.query).get('v')}", thing=object())
    if path == "/bad-body":
        return Response(200, "a str, not bytes")  # type: ignore[arg-type]
    if path == "/bad-status":
        return Response(99, b"{}")
    if path == "/bad-upgrade":
        return Upgrade(EchoSession(), close_at=("soon", 1000, ""))  # type: ignore[arg-type]
    return Response(404, b'{"code": "not_found"}')


def parse_args(argv: list[str]) -> tuple[HttpSettings, int]:
    """The settings this command line asks for, and the RLIMIT_NOFILE to lower to (0: none).
    Also used by support.inprocess, which serves the same app in the test process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-body", type=int, default=1024)
    parser.add_argument("--max-connections", type=int, default=64)
    parser.add_argument("--max-sockets", type=int, default=64)
    parser.add_argument("--header-timeout", type=float, default=1.0)
    parser.add_argument("--idle-timeout", type=float, default=2.0)
    parser.add_argument("--shutdown-timeout", type=float, default=5.0)
    parser.add_argument("--min-body-rate", type=float, default=240.0)
    parser.add_argument("--body-grace", type=float, default=5.0)
    parser.add_argument("--body-memory", type=int, default=64 << 20)
    parser.add_argument("--cors", default="")
    parser.add_argument("--nofile", type=int, default=0, help="lower RLIMIT_NOFILE to this")
    args = parser.parse_args(argv)
    settings = HttpSettings(
        host="127.0.0.1",
        port=0,
        max_body=args.max_body,
        max_connections=args.max_connections,
        max_sockets=args.max_sockets,
        header_timeout=args.header_timeout,
        idle_timeout=args.idle_timeout,
        shutdown_timeout=args.shutdown_timeout,
        min_body_rate=args.min_body_rate,
        body_rate_grace=args.body_grace,
        body_memory=args.body_memory,
        cors_origins=tuple(o for o in args.cors.split(",") if o),
        http_parser=os.environ.get("SERVICE_HTTP_PARSER", "fast"),
    )
    return settings, args.nofile


def main(argv: list[str]) -> int:
    settings, nofile = parse_args(argv)
    configure_logging(os.environ.get("RUST_LOG", "info"), os.environ.get("SERVICE_LOG_FORMAT", "text"))
    if nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    async def run() -> None:

        def ready(port: int) -> None:
            sys.stdout.write(f"PORT {port}\n")
            sys.stdout.flush()

        await serve_until_signalled(app, settings, on_ready=ready)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
