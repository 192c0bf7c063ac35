"""A durable write's whole server path in process: bytes in, the store, the group's fsync,
bytes out, and what of it is the request's own (issue 36 item 3).

    python bench/write_inprocess.py DATA [--code DIR] [--figure post|put|patch] [--requests 6400]
        [--runs 5] [--profile] [--span]

DATA is a tenant seeded by `service_bench.seed` (20,000 peers' posts: `--seed N` writes one
there first); each run copies it to /dev/shm (or the temporary directory) and opens it with
SERVICE_SYNC=full, so each group's fsync is real and the commit queue's thread runs it.
64 `HttpConnection`s (as wrk -c64) over a stand-in transport get the bytes wrk sends (the
service_bench scripts' bodies, each one different), a wave of one request each; the loop
then runs until every one of them has its response written, which is one commit group of
64, as the server's groups at c64 are about 30-60 (and, since wt-grp, one pass of the
turn's writes: dbsvc/writeroutes.py). Printed: the loop thread's CPU a request
(`time.thread_time`: the fsync thread's own time is not in it, its hand-over is), the best
of `--runs`, each run on a fresh copy. `--span` logs the request spans to /dev/null as the
server does (RUST_LOG=info); without it the span logger is off. `--profile` prints cProfile's
Python calls a request (the harness's own included, the same in every checkout) and the top
functions. `--code DIR` runs another checkout: run two in turns for an A/B pair. SPLIT=1
prints the loop thread's CPU inside the app call and the turn's pass (where there is one),
and of it the store's write (`insert_then`, `replace_then`, `insert_run_then`).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from standin import WaveTransport as Transport  # the stand-in shared with http_layer_bench.py

HERE = Path(__file__).resolve().parent
CONNECTIONS = 64
BODY = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et "
    "dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip ex ea "
    "commodo consequat duis aute irure in reprehenderit voluptate velit esse cillum fugiat nulla pariatur"
)[:300]


def request_bytes(figure: str, counter: int, rng: random.Random, records: int) -> bytes:
    """The bytes wrk sends for one request of `figure` (bench/service_bench.py's scripts)."""
    if figure == "post":
        body = '{"author_id": %d, "title": "bench %d-%d", "body": "%s", "score": %d.5}' % (
            counter % 1000 + 1, rng.randint(1, 1_000_000_000), counter, BODY, rng.randint(0, 99))  # fmt: skip
        target = "/api/blog-post"
        method = "POST"
    elif figure == "put":
        key = rng.randint(1, records)
        body = '{"author_id": %d, "title": "put %d", "body": "%s", "score": %d.5}' % (
            key % 1000 + 1, key, BODY, rng.randint(0, 99))  # fmt: skip
        target, method = f"/api/blog-post/{key}", "PUT"
    else:
        key = rng.randint(1, records)
        body = '{"score": %d.25}' % rng.randint(0, 99)
        target, method = f"/api/blog-post/{key}", "PATCH"
    data = body.encode()
    return b"%s %s HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        method.encode(), target.encode(), len(data), data)  # fmt: skip


_gc_spent: list[Any] = [0.0, 0, 0.0]
_split = [0.0, 0.0, 0.0]


def _timed(function: Any, slot: int) -> Any:
    """`function`, adding the loop thread's CPU inside it to `_split[slot]` (SPLIT=1)."""

    def timed(*args: Any) -> Any:
        started = time.thread_time()
        try:
            return function(*args)
        finally:
            _split[slot] += time.thread_time() - started

    return timed


def _gc_clock(phase: str, info: dict[str, Any]) -> None:
    """Adds up the cyclic GC's collections (GC_TIME=1 prints them)."""
    if phase == "start":
        _gc_spent[2] = time.thread_time()
    else:
        _gc_spent[0] += time.thread_time() - _gc_spent[2]
        _gc_spent[1] += 1


async def run(data: Path, figure: str, requests: int, records: int, profile: Any) -> float:
    from dbsvc.app import Application
    from dbsvc.compiler import compile_schema
    from dbsvc.http.connection import HttpConnection
    from dbsvc.http.hub import Hub
    from dbsvc.http.types import HttpSettings
    from dbsvc.realtime.broker import Broker
    from dbsvc.schema import load_schema
    from dbsvc.service import settle_heap
    from dbsvc.storage import Store

    loop = asyncio.get_running_loop()
    module = compile_schema(load_schema(str(HERE / "peers_blog.dbs")))
    store = Store.open(str(data / "default"), module.MODELS, module.DESCRIPTION, sync="full", replication=True)
    broker = Broker(store, module.BY_NAME, 1024)
    broker.attach(loop.call_soon, loop.call_later)
    app = Application(module, store, broker, replication=True)
    hub = Hub(app, HttpSettings(port=0), loop)
    if os.environ.get("SPLIT"):  # the loop thread's CPU inside the app call and the store's write
        hub.app = _timed(app, 0)
        store.insert_then = _timed(store.insert_then, 1)  # type: ignore[method-assign]
        store.replace_then = _timed(store.replace_then, 1)  # type: ignore[method-assign]
        if hasattr(store, "insert_run_then"):  # a pass's run of inserts in one call (wt-wrun)
            store.insert_run_then = _timed(store.insert_run_then, 1)  # type: ignore[method-assign]
        if hasattr(app, "apply_turn"):  # a turn's writes in one pass (writeroutes.py): the store's step is there
            app.apply_turn = _timed(app.apply_turn, 2)  # type: ignore[method-assign]
    settle_heap()  # as the server does before serving
    transports = [Transport() for _ in range(CONNECTIONS)]
    connections = []
    for transport in transports:
        connection = HttpConnection(hub)
        connection.connection_made(transport)
        connections.append(connection)
    rng = random.Random(11)
    waves = max(1, requests // CONNECTIONS)
    payloads = [
        [request_bytes(figure, w * CONNECTIONS + i, rng, records) for i in range(CONNECTIONS)] for w in range(waves)
    ]
    warm = 5
    Transport.writes = 0
    for wave, inputs in enumerate(payloads):
        if wave == warm:
            if profile is not None:
                profile.enable()
            started = time.thread_time()
            _gc_spent[:] = [0.0, 0, 0.0]
            _split[:] = [0.0, 0.0, 0.0]
            gc.callbacks.append(_gc_clock)
        Transport.expected = Transport.writes + CONNECTIONS
        waiter = Transport.waiter = loop.create_future()
        for connection, piece in zip(connections, inputs):
            connection.data_received(piece)
        await waiter
    if profile is not None:
        profile.disable()
    cost = (time.thread_time() - started) / ((waves - warm) * CONNECTIONS) * 1e6
    gc.callbacks.remove(_gc_clock)
    if os.environ.get("SPLIT"):
        count = (waves - warm) * CONNECTIONS
        app_us, store_us, pass_us = (part / count * 1e6 for part in _split)
        print(f"app call and the turn's pass {app_us + pass_us:.1f} us (the store's write {store_us:.1f},"
              f" the rest {app_us + pass_us - store_us:.1f}), outside them {cost - app_us - pass_us:.1f}")  # fmt: skip
    if os.environ.get("GC_TIME"):
        print(f"gc {_gc_spent[0] / ((waves - warm) * CONNECTIONS) * 1e6:.1f} us a request, {_gc_spent[1]} collections")
    await store.aclose()
    return cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--code", type=Path, default=HERE.parent)
    parser.add_argument("--figure", default="post", choices=("post", "put", "patch"))
    parser.add_argument("--requests", type=int, default=6400)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="seed DATA with this many posts first")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--span", action="store_true", help="span log on, to /dev/null")
    args = parser.parse_args()
    sys.path[:0] = [str(args.code.resolve()), str(HERE)]
    if args.seed:
        from service_bench import PEERS_SCHEMA, seed

        seed(args.data, args.seed, schema=PEERS_SCHEMA)
    import logging

    from dbsvc.logs import configure_logging

    configure_logging("info" if args.span else "warn", "text", stream=open(os.devnull, "w"))  # noqa: SIM115
    logging.getLogger("dbsvc.storage").setLevel(logging.WARNING)
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    best = float("inf")
    for _ in range(args.runs):
        copy = Path(tempfile.mkdtemp(prefix="write-inprocess-", dir=base))
        shutil.rmtree(copy)
        shutil.copytree(args.data, copy)
        profile = None
        if args.profile:
            import cProfile

            profile = cProfile.Profile(time.thread_time)
        try:
            best = min(best, asyncio.run(run(copy, args.figure, args.requests, args.records, profile)))
        finally:
            shutil.rmtree(copy, ignore_errors=True)
        if profile is not None:
            import pstats

            stats = pstats.Stats(profile)
            total = sum(s[1] for s in stats.stats.values())  # type: ignore[attr-defined]
            measured = args.requests - 5 * CONNECTIONS
            print(f"{total / measured:.1f} calls a request (builtins included)")
            by_part: dict[str, int] = {}
            for (filename, _line, _name), row in stats.stats.items():  # type: ignore[attr-defined]
                part = filename.split("/dbsvc/")[-1].rsplit("/", 1)[0] if "/dbsvc/" in filename else filename
                if filename == "~":
                    part = "builtins"
                elif "generated" in filename:
                    part = "generated"
                elif "/dbsvc/" not in filename:
                    part = Path(filename).parent.name or filename
                by_part[part] = by_part.get(part, 0) + row[1]
            for part, calls in sorted(by_part.items(), key=lambda kv: -kv[1]):
                print(f"  {calls / measured:6.1f}  {part}")
            if os.environ.get("CALLS"):  # every function of the parts named, calls a request
                for (filename, line, name), row in sorted(stats.stats.items(), key=lambda kv: -kv[1][1]):  # type: ignore[attr-defined]
                    if any(part in filename for part in os.environ["CALLS"].split(",")):
                        print(f"  {row[1] / measured:5.2f}  {Path(filename).name}:{line}({name})")
            stats.sort_stats("tottime").print_stats(int(os.environ.get("TOP", "25")))
            if os.environ.get("CALLERS"):
                stats.print_callers(os.environ["CALLERS"])
            break
    print(f"{args.figure}: {best:.1f} us of the loop thread a request ({args.code})")


if __name__ == "__main__":
    main()
