r"""Logging set-up: the `RUST_LOG` filter syntax on top of stdlib `logging`, and the span log.

`configure_logging(level_spec, fmt)` installs one handler on the root logger (stderr) and
sets logger levels from a RUST_LOG-style spec (env_logger's directive syntax, the subset
that maps onto logger names):

    spec       := directive ("," directive)*
    directive  := LEVEL                 the default level (root logger)
                | TARGET "=" LEVEL      level of one logger subtree
                | TARGET                that subtree at every level (as env_logger: trace);
                                        a bare TARGET must be `dbsvc` or contain `::` / `.`,
                                        so a mistyped level is an error, not a silent no-op
    LEVEL      := off | error | warn | info | debug | trace      (any case; trace = debug)
    TARGET     := a Rust module path `dbsvc::http` or a logger name `dbsvc.http`

Examples: `info`; `warn,dbsvc::http=debug`; `dbsvc::storage=trace,error`; `off`.
An empty spec means `info`. Anything else (span filters `[..]`, regex filters `/..`,
unknown levels) raises ConfigError naming RUST_LOG and the accepted syntax.

The formats (SERVICE_LOG_FORMAT: `text` or `json`), the escapes that keep a client from
forging a line and the redaction of credentials are logformat.py's: what a line may hold
is decided there; how lines are buffered and when they are written, here.

Cost: the request span is the one per-request line, so its path is kept short. Records skip
the caller/thread/process look-ups (`logging._srcfile`, `logThreads`, ... as the logging
docs' "Optimization" section suggests), and span lines are buffered like nginx's
`access_log buffer= flush=`: written when SPAN_BUFFER_LINES are pending, when any other
record is logged (order is kept), or by a flusher thread at most 0.5 s later. A flush per
request would cost a write(2) and a reader wake-up each, a real share of a request's
server CPU. What a request's span holds until then is its raw values (`log_request`: one
tuple); the lines are formatted when written, a batch at a time (`request_lines`). (bench/
README.md, "Figures that were in docstrings", has both figures.)
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TextIO

from dbsvc.errors import ConfigError
from dbsvc.logformat import SPAN_FIELDS, SPAN_LOGGER, JsonFormat, LineFormat, TextFormat, may_hold_secret, redact

LEVELS = {
    "off": logging.CRITICAL + 10,
    "error": logging.ERROR,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": logging.DEBUG,
}

_TARGET = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:(?:::|\.)[A-Za-z_][A-Za-z0-9_]*)*")

_ACCEPTS = (
    "RUST_LOG accepts a level (off, error, warn, info, debug, trace) and "
    "comma-separated directives target=level, e.g. 'warn,dbsvc::http=debug'"
)


def parse_level_spec(spec: str) -> tuple[int, dict[str, int]]:
    """The default level and the per-logger levels of a RUST_LOG spec.

    >>> parse_level_spec("warn,dbsvc::http=debug")
    (30, {'dbsvc.http': 10})
    """
    default = logging.INFO
    targets: dict[str, int] = {}
    for raw in spec.split(","):
        directive = raw.strip()
        if not directive:
            continue
        name, eq, level_name = directive.partition("=")
        name = name.strip()
        level_name = level_name.strip().lower()
        if not eq and name.lower() in LEVELS:
            default = LEVELS[name.lower()]
            continue
        if not eq and "::" not in name and "." not in name and name != "dbsvc":
            # env_logger would read a bare word as a crate name; here it is almost
            # always a mistyped level, so say so instead of silently logging nothing.
            raise ConfigError(f"RUST_LOG: unknown level {name!r}; {_ACCEPTS}")
        if not _TARGET.fullmatch(name):
            raise ConfigError(f"RUST_LOG: bad directive {directive!r}; {_ACCEPTS}")
        if eq and level_name not in LEVELS:
            raise ConfigError(f"RUST_LOG: unknown level {level_name!r} in {directive!r}; {_ACCEPTS}")
        targets[name.replace("::", ".")] = LEVELS[level_name] if eq else logging.DEBUG
    return default, targets


SPAN_BUFFER_LINES = 256  # about 40 KiB of text lines
SPAN_FLUSH_SECONDS = 0.5


class SpanLog(logging.StreamHandler[TextIO]):
    """The span log: the one handler `configure_logging` installs. It owns the line format,
    the buffer of pending lines, and the fast path by which spans skip `logging`.

    Records other than spans are written at once, after the pending lines (order is kept).
    `_pending` holds, in order, formatted lines (str) and runs of unformatted request
    spans (a list of `log_request` tuples, always the last item while it grows).

    Locks: the buffer has a plain Lock of its own (`_buffer`); the handler's RLock (`lock`)
    is left to `logging`, which holds it around `emit` (Handler.handle), around `flush` at
    exit (logging.shutdown) and in `setStream`. Every read or change of the buffer, by the
    loop's thread, the flusher thread or another, is under `_buffer`, and so is every write
    to the stream. The order is always `lock` then `_buffer`, never the reverse, so the two
    cannot deadlock; `_buffer` is never taken twice by one thread because nothing under it
    logs (it formats, redacts and writes the lines, no more). A request's span takes only
    `_buffer`: a plain Lock's `with` is cheaper than the RLock's (bench/README.md, wt-span2)."""

    def __init__(self, stream: TextIO, line_format: LineFormat) -> None:
        super().__init__(stream)
        self.setFormatter(line_format)
        self.line_format = line_format
        self._pending: list[Any] = []
        self._pending_count = 0
        self._requests: list[tuple[Any, ...]] | None = None  # the run being appended to, if any
        self._by_itself = [self]  # the root's handlers when this one is alone (`alone` builds no list a span)
        # The buffer's own lock (`_pending`, `_pending_count`, `_requests`), plain, not the
        # handler's RLock: see "Locks" in the class docstring.
        self._buffer = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._flusher = threading.Thread(target=self._flush_later, name="dbsvc-log-flush", daemon=True)
        self._flusher.start()

    def alone(self) -> bool:
        """True when this handler alone would receive a span record: then a span goes
        straight into the buffer, written exactly as the record would be, skipping LogRecord
        construction and dispatch (most of a span's cost; bench/README.md has the figure).
        Anyone adding a handler or a filter (pytest's caplog, an embedding application) gets
        the ordinary `logging` path."""
        return (
            logging.root.handlers == self._by_itself
            and not _span_logger.handlers
            and not _span_logger.filters
            and not self.filters
        )

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        with self._buffer:
            self._append(line)
            if record.name != SPAN_LOGGER:
                self._write_pending()

    def append_span(self, fields: dict[str, Any]) -> None:
        """A span given as fields, formatted straight into the buffer (no LogRecord)."""
        line = self.line_format.line(time.time(), "INFO", SPAN_LOGGER, "request", fields)
        with self._buffer:
            self._append(line)

    def append_request(
        self, method: str, path: str, status: int, duration_ms: float, size: int, request_id: str
    ) -> bool:
        """`log_request`'s fast path: when this handler is `alone`, keep the span as one tuple,
        unformatted until the buffer is written, and answer True; else keep nothing and answer
        False (the caller logs it the ordinary way). `alone`'s test and `_counted`'s lines are
        written out here, not called: this runs once per request, and the two calls were a
        measured share of it (bench/README.md, wt-span2); tests/http/test_http_span_buffer.py holds
        the two copies to the same answers."""
        if logging.root.handlers != self._by_itself or _span_logger.handlers or _span_logger.filters or self.filters:
            return False
        span = (_now(), method, path, status, duration_ms, size, request_id)
        with self._buffer:
            requests = self._requests
            if requests is None:
                requests = self._requests = []
                self._pending.append(requests)
            requests.append(span)
            self._pending_count += 1  # _counted, written out
            if self._pending_count >= SPAN_BUFFER_LINES:
                self._write_pending()
            elif self._pending_count == 1:
                self._wake.set()
        return True

    def _append(self, line: str) -> None:
        self._requests = None
        self._pending.append(line)
        self._counted()

    def _counted(self) -> None:
        self._pending_count += 1
        if self._pending_count >= SPAN_BUFFER_LINES:
            self._write_pending()
        elif self._pending_count == 1:
            self._wake.set()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        items, self._pending, self._pending_count, self._requests = self._pending, [], 0, None
        try:
            lines: list[str] = []
            for item in items:
                if type(item) is str:
                    lines.append(item)  # formatted, so already redacted
                else:
                    lines.extend(self.line_format.request_lines(item))
            text = "\n".join(lines)
            if may_hold_secret(text):  # line by line: a match never spans two
                text = "\n".join(map(redact, lines))
            self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stderr must never take a request down with it

    def flush(self) -> None:
        with self._buffer:
            self._write_pending()

    def _flush_later(self) -> None:
        while not self._closed:
            self._wake.wait()
            self._wake.clear()
            time.sleep(SPAN_FLUSH_SECONDS)
            self.flush()

    def close(self) -> None:
        self.flush()
        self._closed = True
        self._wake.set()
        super().close()


_span_logger = logging.getLogger(SPAN_LOGGER)
_now = time.time  # a span's timestamp, one name look-up a request
_installed: list[SpanLog] = []  # the span log configure_logging installed, if any
_configured: list[str] = []
_error_lines: list[Callable[[str], None]] = []  # JSON mode's error line writer (write_json_everywhere)
_hooks: list[tuple[Any, Any]] = []  # the exception hooks JSON mode replaced, put back on reconfiguring


def configure_logging(
    level_spec: str, fmt: str = "text", stream: TextIO | None = None, worker: str | None = None
) -> None:
    """Apply RUST_LOG `level_spec` and SERVICE_LOG_FORMAT `fmt`; idempotent (re-applies).
    `worker`: the label of a worker of `serve --workers N`, which every line then names."""
    format_name = (fmt or "text").strip().lower()
    if format_name not in ("text", "json"):
        raise ConfigError(f"SERVICE_LOG_FORMAT: unknown format {fmt!r}; expected 'text' or 'json'")
    default, targets = parse_level_spec(level_spec or "info")
    root = logging.getLogger()
    for handler in _installed:
        root.removeHandler(handler)
        handler.close()
    _installed.clear()
    # No caller, thread or process look-ups per record: none of them is ever formatted.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    for name in _configured:
        logging.getLogger(name).setLevel(logging.NOTSET)
    _configured.clear()
    span_log = SpanLog(
        stream if stream is not None else sys.stderr,
        JsonFormat(worker) if format_name == "json" else TextFormat(worker),
    )
    if _error_lines:  # a JSON configuration before this one: its hooks go
        _error_lines.clear()
        sys.excepthook, threading.excepthook = _hooks.pop()
        logging.captureWarnings(False)
    if format_name == "json":
        _hooks.append((sys.excepthook, threading.excepthook))
        _error_lines.append(write_json_everywhere(span_log.line_format))
    root.addHandler(span_log)
    _installed.append(span_log)
    root.setLevel(default)
    for name, level in targets.items():
        logging.getLogger(name).setLevel(level)
        _configured.append(name)


def write_json_everywhere(line_format: LineFormat) -> Callable[[str], None]:
    """SERVICE_LOG_FORMAT=json: whatever else the process writes becomes one JSON object too,
    so a collector reading its merged output meets no other line: warnings go through
    logging, an exception nothing caught (in the main thread or another) is one ERROR
    object whose `error` holds the traceback. Returns the writer of one ERROR line, which
    the service makes the exit's error report (exits.report: `json_error_writer`); the
    ready banner is written in this format by service.print_ready."""
    logging.captureWarnings(True)

    def error_line(message: str, error: str | None = None) -> None:
        flush_logs()
        sys.stderr.write(line_format.line(time.time(), "ERROR", "dbsvc", message, None, error) + "\n")
        sys.stderr.flush()

    def uncaught(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        error_line(f"unhandled {kind.__name__}", "".join(traceback.format_exception(kind, exc, tb)))

    def uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            uncaught(args.exc_type, args.exc_value, args.exc_traceback)

    sys.excepthook = uncaught
    threading.excepthook = uncaught_in_thread
    return error_line


def json_error_writer() -> Callable[[str], None] | None:
    """The writer of one JSON ERROR line when SERVICE_LOG_FORMAT=json is configured, else None."""
    return _error_lines[0] if _error_lines else None


def log_span(fields: dict[str, Any]) -> None:
    """Log one request span at INFO on `dbsvc.http.request` (the caller checked it is enabled)."""
    if _installed and _installed[0].alone():
        _installed[0].append_span(fields)
    else:
        _span_logger.info("request", extra={"fields": fields})


def log_request(method: str, path: str, status: int, duration_ms: float, size: int, request_id: str) -> None:
    """`log_span` of one HTTP request's fields (SPAN_FIELDS), as the protocol layer calls it
    once per request: on the fast path it stores one tuple and formats nothing."""
    if not (_installed and _installed[0].append_request(method, path, status, duration_ms, size, request_id)):
        fields = dict(zip(SPAN_FIELDS, (method, path, status, round(duration_ms, 3), size, request_id)))
        _span_logger.info("request", extra={"fields": fields})


def flush_logs() -> None:
    """Write any buffered span lines now (tests, and before a process exits)."""
    for handler in _installed:
        handler.flush()
