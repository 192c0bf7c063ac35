r"""The log line formats: how a record or a request span becomes one line of text or JSON.

`TextFormat` and `JsonFormat` (SERVICE_LOG_FORMAT) render every line the process logs: a
record's (`format`), a span's given as fields (`line`), and the request spans the span log
(logs.py) holds as raw tuples, a batch at a time (`request_lines`), byte for byte what `line`
writes for the same fields. This module stands apart from logs.py, which configures logging
and owns the span buffer, because it is the one place that decides what a line may hold:
every escape and redaction below lives here, and the service's ready banner
(service.print_ready) uses a format without the rest of logging's set-up.

Formats: `text` (default), one line per record
    2024-05-01T12:00:00.123Z  INFO dbsvc.http.request: request method=GET path=/health status=200 ...
or `json`, one object per line:
    {"ts": "2024-05-01T12:00:00.123Z", "level": "INFO", "target": "dbsvc.http.request",
     "message": "request", "method": "GET", "path": "/health", "status": 200, ...}
Span fields travel as `extra={"fields": {...}}` and are merged into the JSON object.
A worker of `serve --workers N` (docs/workers.md) ends every line, spans included, with
`worker=reader-1` (text) or `"worker": "reader-1"` (json); its supervisor's with `supervisor`.

Cost: formatting a batch of request spans with one format string costs much less than
formatting each line on its request's path (bench/README.md, "Figures that were in
docstrings", has both figures).

Invariants:
- Credentials are never written. The HTTP layer logs no headers and no query strings; as a
  second line of defence every formatted line has `Bearer <token>` and
  `Authorization: <value>` redacted (`redact`; the span log redacts a batch of request
  lines the same way).
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

Imports nothing of dbsvc.
"""

from __future__ import annotations

import json
import logging
import re
import time
import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

_SECRET = re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:[a-z]+\s+)?|bearer\s+)[^\s\"',;]+")

SPAN_LOGGER = "dbsvc.http.request"
_second_cache: list[Any] = [-1, ""]


def format_timestamp(created: float) -> str:
    """`created` (seconds since the epoch) as every line writes it, UTC to the millisecond:
    `2026-11-30T10:13:20.007Z`; the second formatted once a second (`_second_cache`).
    Public so that a test counts its calls: the span lines must not format each second anew."""
    second = int(created)
    if second != _second_cache[0]:
        _second_cache[0] = second
        _second_cache[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_second_cache[1]}.{int(created % 1 * 1000):03d}Z"


def may_hold_secret(text: str) -> bool:
    """A cheap test before the regex: most text names no credential at all. False only
    where `_SECRET` cannot match: it ignores case, so `BeaRer` counts (the test of four
    spellings it replaced let mixed case through unredacted), and its ignoring of case
    also takes `ı` and `İ` for `i`, so text not all ASCII is left to the regex."""
    if not text.isascii():
        return True
    lowered = text.lower()
    return "bearer" in lowered or "authorization" in lowered


def redact(text: str) -> str:
    """`text` with every credential it names replaced by `[redacted]`."""
    if may_hold_secret(text):
        return _SECRET.sub(r"\1[redacted]", text)
    return text


# The fields of a request span, in line order (http/account.py passes them positionally to
# logs.log_request).
SPAN_FIELDS = ("method", "path", "status", "duration_ms", "bytes", "request_id")


# A timestamp's milliseconds as `format_timestamp` writes them: "007"
_THOUSANDTHS = tuple(f"{n:03d}" for n in range(1000))
# The decimals of a duration's microseconds as `str(round(ms, 3))` ends: ".0", ".5", ".25", ".125"
_FRACTIONS = tuple(("." + f"{n:03d}".rstrip("0")) if n else ".0" for n in range(1000))


def duration_parts(duration_ms: float) -> tuple[int | str, str | float]:
    """The two pieces whose text, one after the other, is `str(round(duration_ms, 3))`:
    whole milliseconds and the decimals of the microseconds (`_FRACTIONS`), without the
    two float conversions of `round` and `str` (most of a span line's cost;
    bench/README.md, session 21, wt-span). Exact: `round` rounds the float's exact value
    half to even, and `micros` is within 2**-14 of that value times 1,000 below 1e12, so
    `whole` is that rounding unless `micros` lies within 1e-4 of a half, where the answer
    is `round`'s own (as for 0, negative, huge or not finite durations). Below 1e12 the
    rounded value has at most 15 digits, so `str` writes it with no exponent, as here.

    >>> [f"{a}{b}" for a, b in map(duration_parts, (0.1234567, 2.0, 0.0045, 0.0))]
    ['0.123', '2.0', '0.004', '0.0']
    """
    micros = duration_ms * 1000.0
    if 0.0 < micros < 1e12:  # not NaN, not infinite: `int` takes it
        whole = int(micros + 0.5)
        if -0.4999 < micros - whole < 0.4999:
            return whole // 1000, _FRACTIONS[whole % 1000]
    return "", round(duration_ms, 3)


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

    # Each format's own method: line(created, level, target, message, fields, error=None), the
    # line's text (TextFormat.line and JsonFormat.line, one signature written there)
    line: Callable[..., str]

    def request_lines(self, spans: list[tuple[Any, ...]]) -> list[str]:
        raise NotImplementedError


class TextFormat(LineFormat):
    """`ts LEVEL target: message k=v ...`, then the traceback if any, indented."""

    indent = "  "

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
        line = f"{format_timestamp(created)} {level:>5} {target}: {message}"
        if fields:
            line += " " + " ".join(f"{key}={field_text(value)}" for key, value in fields.items())
        if self.worker is not None:
            line += f" worker={self.worker}"
        if error is not None:
            line += "\n" + error
        return redact(line)

    def request_lines(self, spans: list[tuple[Any, ...]]) -> list[str]:
        """One format string per line. Of the fields only the path needs `field_text`: h11
        admits only token characters in a method, and a request id is `[A-Za-z0-9._-]`
        (message.RequestIds). The duration is `duration_parts`' two pieces, the text
        `str(round(duration_ms, 3))` writes. Not redacted here: the handler redacts the batch."""
        # `format_timestamp`'s text, its second kept in `_second_cache`; its milliseconds from a table
        second_cache = _second_cache
        thousandths = _THOUSANDTHS
        fractions = _FRACTIONS
        head = f"Z {'INFO':>5} {SPAN_LOGGER}: request method="
        tail = "" if self.worker is None else f" worker={self.worker}"
        lines = []
        for created, method, path, status, duration_ms, size, request_id in spans:
            if not path.isprintable() or " " in path or '"' in path:
                path = field_text(path)
            if int(created) != second_cache[0]:
                format_timestamp(created)
            # duration_parts inlined: this loop runs once a request
            micros = duration_ms * 1000.0
            millis: int | str = ""
            decimals: str | float = ""
            if 0.0 < micros < 1e12:
                whole = int(micros + 0.5)
                if -0.4999 < micros - whole < 0.4999:
                    millis, decimals = whole // 1000, fractions[whole % 1000]
            if not decimals:  # `round` decides (duration_parts)
                decimals = round(duration_ms, 3)
            # an f-string of SPAN_FIELDS in order: about half of `%`'s cost (bench/README.md)
            lines.append(
                f"{second_cache[1]}.{thousandths[int(created % 1 * 1000)]}{head}{method} path={path} status={status}"
                f" duration_ms={millis}{decimals} bytes={size} request_id={request_id}{tail}"
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
        payload: dict[str, Any] = {
            "ts": format_timestamp(created),
            "level": level,
            "target": target,
            "message": message,
        }
        if fields:
            for key, value in fields.items():
                payload.setdefault(key, value)
        if self.worker is not None:
            payload["worker"] = self.worker
        if error is not None:
            payload["error"] = error
        return redact(printable_json(json.dumps(payload, ensure_ascii=False, default=str)))

    def request_lines(self, spans: list[tuple[Any, ...]]) -> list[str]:
        """One `json.dumps` per line, of the dict `line` would build. Of the fields only the
        path may hold a character `printable_json` escapes (see TextFormat.request_lines)."""
        dumps = json.dumps
        worker = {} if self.worker is None else {"worker": self.worker}
        lines = []
        for t in spans:
            line = dumps(
                {
                    "ts": format_timestamp(t[0]),
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
