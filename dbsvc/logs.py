r"""Logging set-up: the `RUST_LOG` filter syntax on top of stdlib `logging`.

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

Formats (SERVICE_LOG_FORMAT): `text` (default), one line per record
    2024-05-01T12:00:00.123Z  INFO dbsvc.http.request: request method=GET path=/health status=200 ...
or `json`, one object per line:
    {"ts": "2024-05-01T12:00:00.123Z", "level": "INFO", "target": "dbsvc.http.request",
     "message": "request", "method": "GET", "path": "/health", "status": 200, ...}
Span fields travel as `extra={"fields": {...}}` and are merged into the JSON object.
A worker of `serve --workers N` (docs/workers.md) ends every line, spans included, with
`worker=reader-1` (text) or `"worker": "reader-1"` (json); its supervisor's with `supervisor`.

Cost: the request span is the one per-request line, so its path is kept short. Records skip
the caller/thread/process look-ups (`logging._srcfile`, `logThreads`, ... as the logging
docs' "Optimization" section suggests), and span lines are buffered like nginx's
`access_log buffer= flush=`: written when SPAN_BUFFER_LINES are pending, when any other
record is logged (order is kept), or by a flusher thread at most 0.5 s later. A flush per
request would cost a write(2) and a reader wake-up each, a real share of a request's
server CPU. What a request's span holds until then is its raw values (`log_request`: one
tuple); the lines are formatted when written, a batch at a time with one format string,
for much less than formatting each line on its request's path. (bench/README.md, "Figures
that were in docstrings", has both figures.)

Invariants:
- Credentials are never written. The HTTP layer logs no headers and no query strings; as a
  second line of defence every formatted line has `Bearer <token>` and
  `Authorization: <value>` redacted.
- A client cannot forge a text line. A record is one line plus, when it carries an
  exception, indented traceback lines. Whatever a client controls (a decoded path, an
  exception message, any argument of a message) is written with every non-printable
  character escaped (`\n`, `\x1b`, `\x9b`, `\u2028`, `\ud800`: `str.isprintable`, so
  C0 and C1 controls, line and paragraph separators, bidi controls, lone surrogates); a
  span field holding a space, a quote or an escape is written in double quotes
  (`path="/a b"`). The JSON format escapes the same characters, as JSON escapes
  (`\u2028`, `\u0085`, a surrogate pair past U+FFFF: `printable_json`), so a line
  decodes to the very value logged; json itself escapes only C0 controls, which would
  leave U+0085, U+2028 and U+2029 raw, and a collector splitting on them (`str.splitlines`
  does) would cut the line in two.
- A record logged with `extra={"exc_messages": False}` (an unhandled error in a request)
  shows the exception's type and frames, never its message, which may hold client data.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TextIO

from dbsvc.errors import ConfigError

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
_SECRET = re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:[a-z]+\s+)?|bearer\s+)[^\s\"',;]+")

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


SPAN_LOGGER = "dbsvc.http.request"
_second_cache: list[Any] = [-1, ""]


def _timestamp(created: float) -> str:
    second = int(created)
    if second != _second_cache[0]:
        _second_cache[0] = second
        _second_cache[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_second_cache[1]}.{int(created % 1 * 1000):03d}Z"


def _may_hold_secret(text: str) -> bool:
    """A cheap test before the regex: most text names no credential at all."""
    return "earer" in text or "uthorization" in text or "EARER" in text or "UTHORIZATION" in text


def _redact(text: str) -> str:
    if _may_hold_secret(text):
        return _SECRET.sub(r"\1[redacted]", text)
    return text


# The fields of a request span, in line order (connection.py passes them positionally).
SPAN_FIELDS = ("method", "path", "status", "duration_ms", "bytes", "request_id")


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_QUOTED_ESCAPES = dict(_ESCAPES, **{'"': '\\"', "\\": "\\\\"})


def escape(text: str, quoted: bool = False) -> str:
    """`text` with each non-printable character as an escape (`\\n`, `\\x1b`, `\\u2028`);
    `quoted` also escapes `"` and backslashes, for a value written between quotes.

    >>> escape("a\\nb\\x1b[31m\\u2028")
    'a\\\\nb\\\\x1b[31m\\\\u2028'
    """
    table = _QUOTED_ESCAPES if quoted else _ESCAPES
    out = []
    for char in text:
        if char in table:
            out.append(table[char])
        elif char.isprintable():
            out.append(char)
        else:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def printable_json(text: str) -> str:
    """`text`, a `json.dumps` output, with each non-printable character (the ones `escape`
    escapes) written as a JSON escape: one line to every line splitter, the same value to
    every JSON reader. Outside strings json writes only printable ASCII, so every such
    character is inside a string, where an escape means the character itself.

    >>> printable_json('"a\\u2028b\\x85"')
    '"a\\\\u2028b\\\\u0085"'
    """
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable():
            out.append(char)
            continue
        code = ord(char)
        if code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:  # RFC 8259 §7: a UTF-16 surrogate pair
            code -= 0x10000
            out.append(f"\\u{0xD800 | code >> 10:04x}\\u{0xDC00 | code & 0x3FF:04x}")
    return "".join(out)


def field_text(value: object) -> str:
    """A span field's value as the text format writes it: as is when it is plain, else
    quoted and escaped, so a value cannot end its field or its line."""
    text = value if type(value) is str else str(value)
    if text.isprintable() and " " not in text and '"' not in text:
        return text
    return '"' + escape(text, quoted=True) + '"'


def exception_text(exc: BaseException, messages: bool = True, indent: str = "  ") -> str:
    """The traceback of `exc` and the exceptions it chains, as `traceback.format_exception`
    writes it, except that each exception's message is one escaped line, or left out when
    `messages` is False: then only types and frames remain, which hold no client data.
    Every line is indented (text format), so none can pass for a record of its own."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    parts: list[str] = []
    for index, each in enumerate(reversed(chain)):
        if index:
            parts.append(
                "\nThe above exception was the direct cause of the following exception:\n\n"
                if each.__cause__ is not None
                else "\nDuring handling of the above exception, another exception occurred:\n\n"
            )
        if each.__traceback__ is not None:
            parts.append("Traceback (most recent call last):\n")
            parts.extend(traceback.format_tb(each.__traceback__))
        kind = type(each)
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        if messages:
            try:
                message = str(each)
            except Exception:
                message = "<the exception's str() failed>"
            parts.append(f"{name}: {escape(message)}\n" if message else f"{name}\n")
        else:
            parts.append(f"{name}\n")
    return "\n".join(indent + line for line in "".join(parts).rstrip("\n").split("\n"))


def _record_exception(record: logging.LogRecord, indent: str) -> str | None:
    info = record.exc_info
    if not info or info[1] is None:
        return None
    return exception_text(info[1], getattr(record, "exc_messages", True), indent)


class LineFormat(logging.Formatter):
    """One log format (SERVICE_LOG_FORMAT). Every line, a record's or a span's, is rendered
    by `line`; `request_lines` renders request spans held as raw tuples a batch at a time,
    byte for byte what `line` writes for the same fields (tests/http/test_http_logs.py)."""

    indent = ""  # before each traceback line

    def __init__(self, worker: str | None = None) -> None:
        super().__init__()
        self.worker = worker  # `serve --workers N`: the label every line ends with

    def format(self, record: logging.LogRecord) -> str:
        return self.line(
            record.created,
            record.levelname,
            record.name,
            record.getMessage(),
            getattr(record, "fields", None),
            _record_exception(record, self.indent),
        )

    def line(
        self,
        created: float,
        level: str,
        target: str,
        message: str,
        fields: dict[str, Any] | None,
        error: str | None = None,
    ) -> str:
        raise NotImplementedError

    def request_lines(self, spans: list[tuple[Any, ...]]) -> list[str]:
        raise NotImplementedError


class TextFormat(LineFormat):
    """`ts LEVEL target: message k=v ...`, then the traceback if any, indented."""

    indent = "  "
    _REQUEST = f" {'INFO':>5} {SPAN_LOGGER}: request " + " ".join(f"{name}=%s" for name in SPAN_FIELDS)

    def line(
        self,
        created: float,
        level: str,
        target: str,
        message: str,
        fields: dict[str, Any] | None,
        error: str | None = None,
    ) -> str:
        if not message.isprintable():
            message = escape(message)
        line = f"{_timestamp(created)} {level:>5} {target}: {message}"
        if fields:
            line += " " + " ".join(f"{key}={field_text(value)}" for key, value in fields.items())
        if self.worker is not None:
            line += f" worker={self.worker}"
        if error is not None:
            line += "\n" + error
        return _redact(line)

    def request_lines(self, spans: list[tuple[Any, ...]]) -> list[str]:
        """One format string per line. Of the fields only the path needs `field_text`: h11
        admits only token characters in a method, and a request id is `[A-Za-z0-9._-]`
        (message.RequestIds). Not redacted here: the handler redacts the batch."""
        template = self._REQUEST if self.worker is None else f"{self._REQUEST} worker={self.worker}"
        # `_timestamp`'s text, its second kept in `_second_cache`, in the line's own format
        template = "%s.%03dZ" + template
        second_cache = _second_cache
        lines = []
        for t in spans:
            path = t[2]
            if not path.isprintable() or " " in path or '"' in path:
                path = field_text(path)
            created = t[0]
            if int(created) != second_cache[0]:
                _timestamp(created)
            lines.append(
                template % (second_cache[1], int(created % 1 * 1000), t[1], path, t[3], round(t[4], 3), t[5], t[6])
            )
        return lines


class JsonFormat(LineFormat):
    """One JSON object per line: ts, level, target, message, span fields, error."""

    def line(
        self,
        created: float,
        level: str,
        target: str,
        message: str,
        fields: dict[str, Any] | None,
        error: str | None = None,
    ) -> str:
        payload: dict[str, Any] = {"ts": _timestamp(created), "level": level, "target": target, "message": message}
        if fields:
            for key, value in fields.items():
                payload.setdefault(key, value)
        if self.worker is not None:
            payload["worker"] = self.worker
        if error is not None:
            payload["error"] = error
        return _redact(printable_json(json.dumps(payload, ensure_ascii=False, default=str)))

    def request_lines(self, spans: list[tuple[Any, ...]]) -> list[str]:
        """One `json.dumps` per line, of the dict `line` would build. Of the fields only the
        path may hold a character `printable_json` escapes (see TextFormat.request_lines)."""
        dumps = json.dumps
        worker = {} if self.worker is None else {"worker": self.worker}
        lines = []
        for t in spans:
            line = dumps(
                {
                    "ts": _timestamp(t[0]),
                    "level": "INFO",
                    "target": SPAN_LOGGER,
                    "message": "request",
                    "method": t[1],
                    "path": t[2],
                    "status": t[3],
                    "duration_ms": round(t[4], 3),
                    "bytes": t[5],
                    "request_id": t[6],
                    **worker,
                },
                ensure_ascii=False,
                default=str,
            )
            lines.append(line if t[2].isprintable() else printable_json(line))
        return lines


SPAN_BUFFER_LINES = 256  # about 40 KiB of text lines
SPAN_FLUSH_SECONDS = 0.5


class SpanLog(logging.StreamHandler[TextIO]):
    """The span log: the one handler `configure_logging` installs. It owns the line format,
    the buffer of pending lines, and the fast path by which spans skip `logging`.

    Records other than spans are written at once, after the pending lines (order is kept).
    `_pending` holds, in order, formatted lines (str) and runs of unformatted request
    spans (a list of `log_request` tuples, always the last item while it grows)."""

    def __init__(self, stream: TextIO, line_format: LineFormat) -> None:
        super().__init__(stream)
        self.setFormatter(line_format)
        self.line_format = line_format
        self._pending: list[Any] = []
        self._pending_count = 0
        self._requests: list[tuple[Any, ...]] | None = None  # the run being appended to, if any
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
            logging.root.handlers == [self]
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
        with self.lock:  # type: ignore[union-attr]
            self._append(line)
            if record.name != SPAN_LOGGER:
                self._write_pending()

    def append_span(self, fields: dict[str, Any]) -> None:
        """A span given as fields, formatted straight into the buffer (no LogRecord)."""
        line = self.line_format.line(time.time(), "INFO", SPAN_LOGGER, "request", fields)
        with self.lock:  # type: ignore[union-attr]
            self._append(line)

    def append_request(self, span: tuple[Any, ...]) -> None:
        """A `log_request` tuple, kept unformatted until the buffer is written."""
        with self.lock:  # type: ignore[union-attr]
            requests = self._requests
            if requests is None:
                requests = self._requests = []
                self._pending.append(requests)
            requests.append(span)
            self._counted()

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
            if _may_hold_secret(text):  # line by line: a match never spans two
                text = "\n".join(map(_redact, lines))
            self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stderr must never take a request down with it

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
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
    if _installed and _installed[0].alone():
        _installed[0].append_request((time.time(), method, path, status, duration_ms, size, request_id))
    else:
        fields = dict(zip(SPAN_FIELDS, (method, path, status, round(duration_ms, 3), size, request_id)))
        _span_logger.info("request", extra={"fields": fields})


def flush_logs() -> None:
    """Write any buffered span lines now (tests, and before a process exits)."""
    for handler in _installed:
        handler.flush()
