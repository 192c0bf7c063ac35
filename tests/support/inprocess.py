"""An HTTP app served by `dbsvc.http.server.serve` on its own event loop in a thread of the
test process: a real socket on 127.0.0.1, port 0, real clients, but the server's code runs
in this process.

Why: mutation testing (mutmut, docs/mutation.md) only sees the calls made in its own
process, so a test that talks to a child process covers nothing for it. The protocol tests
therefore run the demo app in-process when mutmut runs them (and when
DBSVC_TEST_HTTP_INPROCESS=1 asks for it, to check that they pass that way); every other run
keeps the child process, which is what a user runs.

The server's log lines are caught by a handler that takes only the records emitted on the
server's own thread, formatted like the service's text log, so each server has its own log
even though `logging` is shared by the whole process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable

from dbsvc.http.hub import Hub
from dbsvc.http.server import serve
from dbsvc.http.types import HttpSettings
from dbsvc.logformat import TextFormat

WAIT = 30.0  # generous: a loaded two-core machine


def lab_settings(max_body: int, **overrides: object) -> HttpSettings:
    """The protocol tests' server settings: 127.0.0.1 on port 0, 64 connections, `WAIT` for
    the header and idle timeouts, no body-rate floor, the parser tests/http/conftest.py picks
    (SERVICE_HTTP_PARSER); `overrides` replace any of them."""
    values: dict[str, object] = dict(
        host="127.0.0.1",
        port=0,
        max_body=max_body,
        max_connections=64,
        header_timeout=WAIT,
        idle_timeout=WAIT,
        shutdown_timeout=5.0,
        min_body_rate=0.0,
        body_rate_grace=5.0,
        body_memory=64 << 20,
        http_parser=os.environ.get("SERVICE_HTTP_PARSER", "fast"),
    )
    values.update(overrides)
    return HttpSettings(**values)  # type: ignore[arg-type]


class ThreadLog(logging.Handler):
    """The text log lines of the records emitted on one thread, kept in memory."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(TextFormat())
        self.thread_id: int | None = None
        self.lines: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        return threading.get_ident() == self.thread_id

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def text(self) -> str:
        return "".join(line + "\n" for line in list(self.lines))


class InProcessServer:
    """`serve(app, settings)` on its own event loop in a daemon thread, until `stop()`."""

    def __init__(self, app: Callable, settings: HttpSettings) -> None:
        self.app = app
        self.settings = settings
        self.port = 0
        self.log = ThreadLog()
        self._ready = threading.Event()
        self.hub: Hub | None = None  # the server's shared state (open connections, body bytes)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="inprocess-http", daemon=True)
        self._failure: BaseException | None = None
        self._root_level = logging.root.level

    def _run(self) -> None:
        self.log.thread_id = threading.get_ident()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def ready(port: int) -> None:
                self.port = port
                self._ready.set()

            self.hub = Hub(self.app, self.settings, self._loop)
            await serve(self.app, self.settings, stop=self._stop, on_ready=ready, hub=self.hub)

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by start()/stop()
            self._failure = exc
            self._ready.set()

    def start(self) -> InProcessServer:
        logging.root.addHandler(self.log)
        if logging.root.level > logging.INFO:  # the service logs at info
            logging.root.setLevel(logging.INFO)
        self._thread.start()
        assert self._ready.wait(WAIT), "the in-process server did not start"
        assert self._failure is None, f"the in-process server failed: {self._failure!r}"
        return self

    def call(self, fn: Callable[[], object]) -> object:
        """`fn()` run on the server's loop (its state is only consistent there); its result."""
        assert self._loop is not None
        done = threading.Event()
        box: list = []

        def run() -> None:
            try:
                box.append((True, fn()))
            except BaseException as exc:  # handed back to the test
                box.append((False, exc))
            done.set()

        self._loop.call_soon_threadsafe(run)
        assert done.wait(WAIT), "the server's loop did not run the call"
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def running(self) -> bool:
        return self._thread.is_alive()

    def begin_stop(self) -> None:
        """Start a graceful shutdown, as SIGTERM starts the service's; returns at once."""
        if self._loop is None or self._stop is None or not self._thread.is_alive():
            return
        try:
            self._loop.call_soon_threadsafe(self._stop.set)
        except RuntimeError:
            # The shutdown a test began has ended between the liveness check and the call:
            # asyncio.run closed the loop and the thread is about to exit. Nothing to stop.
            if not self._loop.is_closed():
                raise

    def stop(self, timeout: float = WAIT) -> None:
        """A graceful shutdown; waits for it to end."""
        try:
            self.begin_stop()
            self._thread.join(timeout)
            assert not self._thread.is_alive(), "the in-process server did not stop"
            assert self._failure is None, f"the in-process server failed: {self._failure!r}"
        finally:
            logging.root.removeHandler(self.log)
            logging.root.setLevel(self._root_level)
