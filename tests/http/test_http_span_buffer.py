"""dbsvc.logs' span buffer: a request span skips `logging` only while the span log alone would
receive it, and every span is written exactly once, whichever thread appends or flushes.

`log_request` tests the span log's being alone itself (not through `SpanLog.alone`, a call a
request saved), so each condition of that test is held here one by one; and the buffer has a
plain lock of its own beside the handler's, so lines appended while the flusher and other
threads write are counted here line by line. pytest's own logging plugin keeps handlers on
the root logger during a test, so a test here takes them off for its block (`alone_to`):
otherwise every span would take the `logging` path and the fast one would go untested.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from dbsvc.logformat import SPAN_LOGGER
from dbsvc.logs import SPAN_BUFFER_LINES, SPAN_FLUSH_SECONDS, SpanLog, configure_logging, flush_logs, log_request
from support.logkit import logging_to


class Collect(logging.Handler):
    """A second handler, as pytest's caplog or an embedding application would add one."""

    def __init__(self, seen: list[logging.LogRecord]) -> None:
        super().__init__()
        self.seen = seen

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record)


@contextlib.contextmanager
def alone_to(fmt: str = "text") -> Iterator[io.StringIO]:
    """Logging in format `fmt` into a StringIO, the span log the root's only handler for the
    block (pytest's are put back after it), then back to a quiet default. A span log an earlier
    `configure_logging` installed is not put back: the one configured after the block replaces
    it (outside pytest, in bench/mutation_inprocess.py's one process, putting it back piled a
    span log on the root per test, every later span took `logging` through all of them, and
    the buffer tests of test_http_logs.py failed on the unmutated code: false kills)."""
    stream = io.StringIO()
    root = logging.getLogger()
    others = [handler for handler in root.handlers if not isinstance(handler, SpanLog)]
    try:
        configure_logging("info", fmt, stream=stream)
        for handler in others:
            root.removeHandler(handler)
        yield stream
    finally:
        configure_logging("info", "text", stream=io.StringIO())
        for handler in others:
            root.addHandler(handler)


def _span_log() -> logging.Handler:
    (handler,) = logging.getLogger().handlers
    return handler


def _root_handler(seen: list[logging.LogRecord]):
    extra = Collect(seen)
    logging.getLogger().addHandler(extra)
    return seen, lambda: logging.getLogger().removeHandler(extra)


def _span_logger_handler(seen: list[logging.LogRecord]):
    extra = Collect(seen)
    logging.getLogger(SPAN_LOGGER).addHandler(extra)
    return seen, lambda: logging.getLogger(SPAN_LOGGER).removeHandler(extra)


def _span_logger_filter(seen: list[logging.LogRecord]):
    def keep(record: logging.LogRecord) -> bool:
        seen.append(record)
        return True

    logging.getLogger(SPAN_LOGGER).addFilter(keep)
    return seen, lambda: logging.getLogger(SPAN_LOGGER).removeFilter(keep)


def _span_log_filter(seen: list[logging.LogRecord]):
    def keep(record: logging.LogRecord) -> bool:
        seen.append(record)
        return True

    handler = _span_log()
    handler.addFilter(keep)
    return seen, lambda: handler.removeFilter(keep)


@pytest.mark.parametrize(
    "listen", [_root_handler, _span_logger_handler, _span_logger_filter, _span_log_filter], ids=lambda f: f.__name__
)
def test_a_request_span_goes_through_logging_whenever_anyone_else_listens(listen):
    with alone_to() as stream:
        seen, stop = listen([])
        try:
            log_request("GET", "/api/post/7", 200, 0.25, 9, "r-listened")
        finally:
            stop()
        log_request("GET", "/api/post/8", 200, 0.25, 9, "r-alone")
        flush_logs()
        assert [record.fields["request_id"] for record in seen] == ["r-listened"]
        # both lines are written, each once, in order, by the span log itself
        lines = stream.getvalue().splitlines()
        assert [line.rsplit("request_id=", 1)[1] for line in lines] == ["r-listened", "r-alone"]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_request_span_kept_as_a_tuple_writes_what_the_logging_path_writes(fmt):
    spans = [
        ("GET", "/api/post/7", 200, 0.1234567, 9, "r-1"),
        ("POST", "/api/user/Bearer abc.def", 201, 2.5, 0, "r-2"),
        ("DELETE", "/api/ünï còde \"q\"", 404, 0.0005, 120, "r-3"),
        ("PATCH", "/a\u2028b\x85c\U000e0001 %s", 500, 1234.0625, 7, "r-4"),
    ]
    with alone_to(fmt) as stream:
        for span in spans:
            log_request(*span)
        seen, stop = _root_handler([])  # from here on every span takes `logging`
        try:
            for span in spans:
                log_request(*span)
        finally:
            stop()
        flush_logs()
        lines = stream.getvalue().splitlines()
        assert len(seen) == len(spans) and len(lines) == 2 * len(spans)
        cut = 24 if fmt == "text" else lines[0].index('"level"')  # past the timestamps
        fast, slow = lines[: len(spans)], lines[len(spans) :]
        assert [line[cut:] for line in fast] == [line[cut:] for line in slow]
        assert "abc.def" not in stream.getvalue()


def test_a_filter_that_drops_a_request_span_keeps_it_out_of_the_log():
    with alone_to() as stream:
        handler = _span_log()
        drop = lambda record: record.fields["request_id"] != "r-dropped"  # noqa: E731
        handler.addFilter(drop)
        try:
            log_request("GET", "/health", 200, 0.5, 15, "r-dropped")
            log_request("GET", "/health", 200, 0.5, 15, "r-kept")
        finally:
            handler.removeFilter(drop)
        flush_logs()
        assert "r-dropped" not in stream.getvalue()
        assert stream.getvalue().count("request_id=r-kept") == 1


@pytest.mark.parametrize("logged", [logging_to, alone_to], ids=["through logging", "kept as tuples"])
def test_request_spans_are_written_once_the_buffer_holds_its_line_count(logged):
    """The same count on both paths of `log_request`: with pytest's handlers on the root
    (`logging_to`) a span goes through `logging` into the span log's buffer; with the span
    log alone (`alone_to`) it is kept as a tuple. Either way nothing is written before the
    buffer holds SPAN_BUFFER_LINES lines, and then all of them, in order.

    The flusher writes whatever is pending SPAN_FLUSH_SECONDS after the first line: an
    attempt that took longer than that (a loaded host: at load 27 the logging path's 256
    spans did, and the flusher wrote them before the count) proves nothing either way and
    is made again with a new span log."""
    for _attempt in range(5):
        with logged() as stream:
            start = time.monotonic()
            for n in range(SPAN_BUFFER_LINES - 1):
                log_request("GET", "/health", 200, 0.5, 15, f"r-{n}")
            before_the_count = stream.getvalue()
            log_request("GET", "/health", 200, 0.5, 15, "r-last")
            lines = stream.getvalue().splitlines()
            if time.monotonic() - start >= SPAN_FLUSH_SECONDS:
                continue
            assert before_the_count == ""
            assert len(lines) == SPAN_BUFFER_LINES
            assert lines[0].endswith("request_id=r-0") and lines[-1].endswith("request_id=r-last")
            return
    pytest.fail(f"no attempt wrote {SPAN_BUFFER_LINES} spans within the flush interval of {SPAN_FLUSH_SECONDS} s")


def test_a_lone_request_span_kept_as_a_tuple_is_written_by_the_flusher():
    with alone_to() as stream:
        log_request("GET", "/health", 200, 0.5, 15, "r-lone")
        assert stream.getvalue() == ""
        deadline = time.monotonic() + SPAN_FLUSH_SECONDS * 6
        while "r-lone" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stream.getvalue().count("request_id=r-lone") == 1


def test_every_request_span_is_written_once_while_threads_append_and_flush():
    threads_count, each = 4, 12 * SPAN_BUFFER_LINES + 17  # a lost line shows in most runs
    interval = sys.getswitchinterval()
    with alone_to() as stream:
        sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter will
        try:
            start = threading.Barrier(threads_count + 1)
            done = threading.Event()

            def append(worker: int) -> None:
                start.wait()
                for n in range(each):
                    log_request("GET", f"/api/post/{n}", 200, 0.5, 15, f"r-{worker}-{n}")

            def flush() -> None:
                start.wait()
                while not done.is_set():
                    flush_logs()

            appenders = [threading.Thread(target=append, args=(worker,)) for worker in range(threads_count)]
            flusher = threading.Thread(target=flush)
            for thread in [*appenders, flusher]:
                thread.start()
            for thread in appenders:
                thread.join(timeout=60)
            done.set()
            flusher.join(timeout=60)
            flush_logs()
        finally:
            sys.setswitchinterval(interval)
    written = [line.rsplit("request_id=", 1)[1] for line in stream.getvalue().splitlines()]
    expected = [f"r-{worker}-{n}" for worker in range(threads_count) for n in range(each)]
    assert sorted(written) == sorted(expected)
    for worker in range(threads_count):  # one thread's spans keep their order
        mine = [request_id for request_id in written if request_id.startswith(f"r-{worker}-")]
        assert mine == [f"r-{worker}-{n}" for n in range(each)]


def test_a_request_span_makes_no_log_record_while_the_span_log_is_alone():
    """The fast path counted, not timed: with the span log alone a request span is one tuple
    (no LogRecord made); a record factory is not a listener, so it leaves the span log alone."""
    made: list[str] = []
    factory = logging.getLogRecordFactory()

    def counted(*args, **kwargs) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        made.append(record.name)
        return record

    with alone_to() as stream:
        logging.setLogRecordFactory(counted)
        try:
            for n in range(5):
                log_request("GET", "/api/post/7", 200, 0.25, 9, f"r-{n}")
        finally:
            logging.setLogRecordFactory(factory)
        flush_logs()
        assert len(stream.getvalue().splitlines()) == 5
    assert SPAN_LOGGER not in made


def test_a_record_that_cannot_be_formatted_is_reported_with_its_message_and_the_buffer_goes_on():
    """`emit`'s failure path: logging's own report on stderr names the record's message and
    arguments, nothing is buffered for it, and the next span is written as usual."""
    errors = io.StringIO()
    with alone_to() as stream, contextlib.redirect_stderr(errors):
        logging.getLogger("dbsvc.test").warning("count %d", "not a number")
        log_request("GET", "/api/post/7", 200, 0.25, 9, "r-after")
        flush_logs()
        assert [line.rsplit("request_id=", 1)[1] for line in stream.getvalue().splitlines()] == ["r-after"]
    assert "--- Logging error ---" in errors.getvalue()
    assert "Message: 'count %d'\nArguments: ('not a number',)" in errors.getvalue()
