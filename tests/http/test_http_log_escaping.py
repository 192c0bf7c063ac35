"""dbsvc.logs: a client cannot forge a text log line (issue 14, item 3). Whatever a client
controls (the decoded path, a message argument, an exception message) is written with its
non-printable characters escaped; span values with spaces or quotes are quoted; tracebacks
are indented, and for request failures carry types and frames but no messages."""

from __future__ import annotations

import io
import json
import logging

import pytest

from dbsvc.logformat import escape, exception_text, field_text
from dbsvc.logs import flush_logs, log_request
from support.logkit import logging_to

FORGE = "\n2026-11-23T07:00:00.000Z ERROR dbsvc.storage: FORGED"


def lines_of(stream: io.StringIO) -> list[str]:
    flush_logs()
    return stream.getvalue().splitlines()


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("/api/user", "/api/user"),
        ("/é/日本", "/é/日本"),
        ("/a\nb", "/a\\nb"),
        ("/a\r\tb", "/a\\r\\tb"),
        ("/\x1b[31mred", "/\\x1b[31mred"),
        ("/\x9b31m", "/\\x9b31m"),  # C1 CSI: a terminal escape on its own
        ("/\x7f", "/\\x7f"),
        ("/\u2028\u2029", "/\\u2028\\u2029"),  # line and paragraph separators
        ("/\u202eevil", "/\\u202eevil"),  # bidi override
        ("/\ud800", "/\\ud800"),  # lone surrogate
        ("/\U000e0001", "/\\U000e0001"),
    ],
)
def test_escape_writes_every_non_printable_character_as_an_escape(raw, shown):
    assert escape(raw) == shown


@pytest.mark.parametrize(
    "value, shown",
    [
        ("/api/user", "/api/user"),
        (200, "200"),
        ("", ""),
        ("/a b", '"/a b"'),
        ('/a"b', '"/a\\"b"'),
        ("/a\\b", "/a\\b"),  # plain: a backslash alone is not an escape
        ("/a\\b c", '"/a\\\\b c"'),
        ("/a\nb", '"/a\\nb"'),
    ],
)
def test_span_field_values_are_quoted_when_not_plain(value, shown):
    assert field_text(value) == shown


def test_request_span_path_cannot_start_a_line():
    with logging_to() as stream:
        log_request("GET", "/x" + FORGE + "\x1b[2J", 404, 1.0, 10, "r-1")
        lines = lines_of(stream)
    assert len(lines) == 1
    assert lines[0].endswith(
        'path="/x\\n2026-11-23T07:00:00.000Z ERROR dbsvc.storage: FORGED\\x1b[2J" '
        "status=404 duration_ms=1.0 bytes=10 request_id=r-1"
    )


def test_span_through_the_logging_path_is_escaped_the_same_way():
    handler = logging.NullHandler()  # a second handler: the ordinary path
    logging.getLogger("dbsvc.http.request").addHandler(handler)
    try:
        with logging_to() as stream:
            log_request("GET", "/a b" + FORGE, 200, 1.0, 1, "r-2")
            lines = lines_of(stream)
    finally:
        logging.getLogger("dbsvc.http.request").removeHandler(handler)
    assert len(lines) == 1 and 'path="/a b\\n2026' in lines[0]


def test_message_arguments_cannot_start_a_line():
    with logging_to() as stream:
        logging.getLogger("dbsvc.test").warning("refused %s from %s", "/p" + FORGE, ("127.0.0.1", 5))
        lines = lines_of(stream)
    assert len(lines) == 1
    assert "refused /p\\n2026-11-23T07:00:00.000Z ERROR dbsvc.storage: FORGED from" in lines[0]


def _raise_chain(message: str) -> BaseException:
    try:
        try:
            raise KeyError(message)
        except KeyError as inner:
            raise RuntimeError(message) from inner
    except RuntimeError as exc:
        return exc


def test_traceback_is_indented_and_its_messages_escaped():
    with logging_to() as stream:
        logging.getLogger("dbsvc.test").error("failed", exc_info=_raise_chain("bad" + FORGE))
        lines = lines_of(stream)
    assert lines[0].endswith("ERROR dbsvc.test: failed")
    assert all(line.startswith("  ") or not line for line in lines[1:])
    assert not any(line.startswith("2026-11-23T07") for line in lines)
    text = "\n".join(lines)
    assert "direct cause" in text
    assert "  RuntimeError: bad\\n2026-11-23T07:00:00.000Z ERROR dbsvc.storage: FORGED" in text


def test_request_failures_log_types_and_frames_but_no_messages():
    with logging_to() as stream:
        logging.getLogger("dbsvc.test").error(
            "unhandled", exc_info=_raise_chain("CLIENT-DATA"), extra={"exc_messages": False}
        )
        text = "\n".join(lines_of(stream))
    assert "CLIENT-DATA" not in text
    assert "  KeyError" in text and "  RuntimeError" in text
    assert "_raise_chain" in text  # the frames are kept


def test_json_format_carries_the_same_traceback_unindented():
    with logging_to("json") as stream:
        logging.getLogger("dbsvc.test").error(
            "unhandled", exc_info=_raise_chain("CLIENT-DATA"), extra={"exc_messages": False}
        )
        lines = lines_of(stream)
    assert len(lines) == 1
    payload = json.loads(lines[0])
    assert payload["error"].startswith("Traceback (most recent call last):")
    assert payload["error"].endswith("RuntimeError") and "CLIENT-DATA" not in lines[0]


def test_exception_text_survives_a_broken_str():
    class Broken(Exception):
        def __str__(self) -> str:
            raise ValueError("no")

    try:
        raise Broken()
    except Broken as exc:
        text = exception_text(exc)
    assert "<the exception's str() failed>" in text
