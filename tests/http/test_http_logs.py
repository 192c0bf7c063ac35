"""dbsvc.logs: the RUST_LOG syntax, the text and JSON line shapes, one span per request, and
no credentials in any log line."""

from __future__ import annotations

import io
import json
import logging
import time

import pytest

from dbsvc.errors import ConfigError
from dbsvc.logs import SPAN_FLUSH_SECONDS, configure_logging, flush_logs, log_request, log_span, parse_level_spec
from support.logkit import logging_to

D, I, W, E, OFF = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL + 10


@pytest.mark.parametrize(
    "spec, default, targets",
    [
        ("", I, {}),
        ("info", I, {}),
        ("debug", D, {}),
        ("trace", D, {}),
        ("warn", W, {}),
        ("WARN", W, {}),
        ("error", E, {}),
        ("off", OFF, {}),
        ("dbsvc::http=debug,warn", W, {"dbsvc.http": D}),
        ("warn,dbsvc::http=debug", W, {"dbsvc.http": D}),
        ("dbsvc::storage=trace, dbsvc::http = error", I, {"dbsvc.storage": D, "dbsvc.http": E}),
        ("dbsvc.realtime=off", I, {"dbsvc.realtime": OFF}),
        ("dbsvc::http", I, {"dbsvc.http": D}),
    ],
)
def test_rust_log_spec_is_parsed(spec, default, targets):
    assert parse_level_spec(spec) == (default, targets)


@pytest.mark.parametrize("spec", ["loud", "dbsvc::http=loud", "dbsvc[span]=debug", "/re.*/", "a::=info"])
def test_bad_rust_log_spec_is_a_config_error_naming_rust_log(spec):
    with pytest.raises(ConfigError) as info:
        parse_level_spec(spec)
    assert "RUST_LOG" in str(info.value)
    assert "off, error, warn, info, debug, trace" in str(info.value)


def test_bad_log_format_is_a_config_error():
    with pytest.raises(ConfigError, match="SERVICE_LOG_FORMAT"):
        configure_logging("info", "yaml")


def test_configure_logging_applies_levels_and_formats_json():
    with logging_to("json", spec="warn,dbsvc::http=debug") as stream:
        logging.getLogger("dbsvc.http.request").debug("kept", extra={"fields": {"status": 200}})
        logging.getLogger("dbsvc.storage").info("dropped")
        flush_logs()
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert len(lines) == 1
        assert lines[0]["level"] == "DEBUG" and lines[0]["target"] == "dbsvc.http.request"
        assert lines[0]["message"] == "kept" and lines[0]["status"] == 200


def test_span_lines_are_buffered_then_flushed_within_the_flush_interval():
    with logging_to() as stream:
        logging.getLogger("dbsvc.http.request").info("request", extra={"fields": {"status": 200}})
        assert stream.getvalue() == ""
        deadline = time.monotonic() + SPAN_FLUSH_SECONDS * 6
        while "status=200" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "status=200" in stream.getvalue()


def test_other_records_flush_buffered_spans_first_keeping_order():
    with logging_to() as stream:
        logging.getLogger("dbsvc.http.request").info("request", extra={"fields": {"status": 201}})
        logging.getLogger("dbsvc.storage").warning("disk nearly full")
        text = stream.getvalue()
        assert text.index("status=201") < text.index("disk nearly full")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_fast_span_path_writes_exactly_what_the_logging_path_writes(fmt):
    fields = {"method": "GET", "path": "/api/user", "status": 200, "duration_ms": 0.25, "bytes": 9, "request_id": "r-1"}
    with logging_to(fmt) as stream:
        log_span(fields)
        logging.getLogger("dbsvc.http.request").info("request", extra={"fields": fields})
        flush_logs()
        fast, slow = stream.getvalue().splitlines()
        cut = 24 if fmt == "text" else fast.index('"level"')  # past the timestamps
        assert fast[cut:] == slow[cut:]


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("path", ["/api/user", "/api/user/Bearer abc.def", "/api/ünï còde", "/a\u2028b\x85c\U000e0001"])
def test_request_spans_held_unformatted_write_what_log_span_writes(fmt, path):
    fields = {"method": "GET", "path": path, "status": 200, "duration_ms": 0.123, "bytes": 9, "request_id": "r-1"}
    with logging_to(fmt) as stream:
        log_request("GET", path, 200, 0.1234567, 9, "r-1")
        log_span(fields)
        log_request("GET", path, 200, 0.1234567, 9, "r-1")
        flush_logs()
        first, middle, last = stream.getvalue().splitlines()
        cut = 24 if fmt == "text" else first.index('"level"')  # past the timestamps
        assert first[cut:] == middle[cut:] == last[cut:]
        assert "abc.def" not in stream.getvalue()


def test_span_falls_back_to_logging_when_another_handler_listens():
    stream, seen = io.StringIO(), []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record)

    extra = Collect()
    try:
        configure_logging("info", "text", stream=stream)
        logging.getLogger().addHandler(extra)
        log_span({"status": 204, "request_id": "r-2"})
        assert [r.fields["request_id"] for r in seen] == ["r-2"]
    finally:
        logging.getLogger().removeHandler(extra)
        configure_logging("info", "text", stream=io.StringIO())


def test_text_formatter_redacts_bearer_tokens():
    with logging_to() as stream:
        logging.getLogger("dbsvc.test").info("header was Authorization: Bearer abc.def.ghi")
        assert "abc.def.ghi" not in stream.getvalue()
        assert "[redacted]" in stream.getvalue()


def _wait_for_lines(demo, count: int, needle: str) -> list[str]:
    deadline = time.monotonic() + 3
    while True:
        lines = [line for line in demo.log().splitlines() if needle in line]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines


def test_json_span_line_per_request(make_server):
    demo = make_server(env={"SERVICE_LOG_FORMAT": "json"})
    response = demo.get("/echo?secret=hunter2", {"X-Request-Id": "span-1"})
    assert response.status == 200
    [line] = _wait_for_lines(demo, 1, '"span-1"')
    span = json.loads(line)
    assert set(span) >= {
        "ts",
        "level",
        "target",
        "message",
        "method",
        "path",
        "status",
        "duration_ms",
        "bytes",
        "request_id",
    }
    assert span["target"] == "dbsvc.http.request" and span["level"] == "INFO"
    assert span["method"] == "GET" and span["path"] == "/echo" and span["status"] == 200
    assert span["bytes"] == len(response.body) and span["request_id"] == "span-1"
    assert isinstance(span["duration_ms"], float)
    assert "hunter2" not in demo.log()  # no query strings in logs
    for raw in demo.log().splitlines():
        json.loads(raw)  # every line is one JSON object


def test_one_text_span_per_request(make_server):
    demo = make_server()
    client = demo.client()
    for n in range(3):
        client.request("GET", "/echo", {"X-Request-Id": f"text-{n}"})
    lines = _wait_for_lines(demo, 3, "dbsvc.http.request")
    assert len(lines) == 3
    assert "method=GET path=/echo status=200" in lines[0]
    assert "request_id=text-0" in lines[0]


def test_spans_off_when_rust_log_excludes_them(make_server):
    demo = make_server(env={"RUST_LOG": "warn"})
    assert demo.get("/echo").status == 200
    assert demo.get("/error").status == 500
    log = demo.log()
    assert "dbsvc.http.request" not in log
    assert "unhandled error in GET /error" in log


def test_authorization_never_reaches_the_logs(make_server):
    demo = make_server(env={"RUST_LOG": "debug"})
    token = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0.c2lnbmF0dXJl"
    for route in ("/echo", "/error", "/bad", "/async-error"):
        demo.get(route, {"Authorization": f"Bearer {token}"})
    client = demo.client()
    client.send(f"GET /echo HTTP/1.1\r\nAuthorization: Bearer {token}\r\nBroken\r\n\r\n".encode())
    assert client.read_response().status == 400
    _wait_for_lines(demo, 5, "dbsvc.http.request")
    assert token not in demo.log()
    assert "c2VjcmV0" not in demo.log()
