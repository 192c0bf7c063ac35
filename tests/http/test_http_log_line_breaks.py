"""dbsvc.logs: a log line stays one line for every reader (issue 30, item 7).

A collector that splits its input with `str.splitlines` (or any Unicode-aware line reader)
breaks a line at U+000A and U+000D, and also at U+000B, U+000C, U+001C-U+001E, U+0085,
U+2028 and U+2029. JSON mode writes each of them as a JSON escape (`\\u2028`), text mode as
its escape (`\\u2028`), so every line of either format is one line to every reader, and a
JSON line still decodes to the very value the client sent.
"""

from __future__ import annotations

import io
import json
import logging
import time
import urllib.parse

import pytest

from dbsvc.logs import flush_logs, log_request, log_span
from support.logkit import logging_to

# Every character str.splitlines splits on (docs: "str.splitlines"), \r\n aside.
BREAKS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
# Other characters the text format escapes (not printable): JSON mode escapes them too.
OTHERS = ["\x7f", "\x9b", "\u202e", "\xa0", "\U000e0001"]


def test_the_list_is_every_character_splitlines_splits_on():
    splitters = {chr(c) for c in range(0x110000) if len(f"a{chr(c)}b".splitlines()) == 2}
    assert splitters == set(BREAKS)


def written(stream: io.StringIO) -> str:
    flush_logs()
    return stream.getvalue()


@pytest.mark.parametrize("char", BREAKS + OTHERS, ids=[f"U+{ord(c):04X}" for c in BREAKS + OTHERS])
def test_json_lines_escape_the_character_and_keep_the_value(char):
    path = f"/api/user/a{char}b"
    with logging_to("json") as stream:
        log_request("GET", path, 404, 0.5, 10, "r-1")  # the fast path
        log_span({"method": "GET", "path": path, "status": 404})  # a span as fields
        logging.getLogger("dbsvc.test").warning("refused %s", path)  # a message argument
        text = written(stream)
    lines = text.splitlines()
    assert len(lines) == 3, lines
    assert all(char not in line for line in text.split("\n"))
    assert f"\\u{ord(char):04x}" in text or char in "\n\r\x0b\x0c" or ord(char) > 0xFFFF
    first, second, third = map(json.loads, lines)
    assert first["path"] == second["path"] == path
    assert third["message"] == f"refused {path}"


@pytest.mark.parametrize("char", BREAKS + OTHERS, ids=[f"U+{ord(c):04X}" for c in BREAKS + OTHERS])
def test_text_lines_escape_the_same_characters(char):
    path = f"/api/user/a{char}b"
    with logging_to("text") as stream:
        log_request("GET", path, 404, 0.5, 10, "r-1")
        logging.getLogger("dbsvc.test").warning("refused %s", path)
        text = written(stream)
    assert len(text.splitlines()) == 2 and all(char not in line for line in text.split("\n"))


def test_json_escape_of_a_character_past_the_bmp_is_a_surrogate_pair():
    with logging_to("json") as stream:
        log_request("GET", "/\U000e0001", 404, 0.5, 10, "r-1")
        line = written(stream)
    assert '"path": "/\\udb40\\udc01"' in line and json.loads(line)["path"] == "/\U000e0001"


def test_json_lines_keep_printable_text_as_it_is():
    with logging_to("json") as stream:
        log_request("GET", "/é/日本/🙂", 200, 0.5, 10, "r-1")
        line = written(stream)
    assert '"path": "/é/日本/🙂"' in line


def test_a_served_request_with_each_break_in_its_path_logs_one_json_line_each(make_server):
    demo = make_server(env={"SERVICE_LOG_FORMAT": "json"})
    client = demo.client()
    for n, char in enumerate(BREAKS):
        target = "/echo/" + urllib.parse.quote(f"x{char}y", safe="")
        # obs-text in a header value (RFC 9110 §5.5): a request id that is not kept
        headers = {"X-Request-Id": f"brk-{n}"} if n % 2 else {"X-Request-Id": "brk\x85x"}
        assert client.request("GET", target, headers).status == 404
    deadline = time.monotonic() + 5
    while demo.log().count('"dbsvc.http.request"') < len(BREAKS) and time.monotonic() < deadline:
        time.sleep(0.05)
    log = demo.log()
    spans = []
    for line in log.splitlines():
        record = json.loads(line)  # every piece is one whole object
        if record["target"] == "dbsvc.http.request":
            spans.append(record)
    assert [s["path"] for s in spans] == [f"/echo/x{char}y" for char in BREAKS]
    assert all(char not in log for char in BREAKS[2:])
