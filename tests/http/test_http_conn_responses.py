"""What dbsvc/http/connection.py writes back, byte for byte, and what it logs about it.

The answer to each request (`_send`): the status line and the headers h11 would write, no
body on a 204 or 304, an empty reason phrase for a status HTTP names none for; a closing
answer's `connection: close` and its linger (rule 7: FIN, input discarded, closed at the
client's FIN); an answer that cannot be sent turning into a 500, and when even that fails,
the fixed last words of rule 8 (`_crash`); the answers the layer makes itself (a 100
Continue, `OPTIONS *`'s 204, the body-memory 503), their header names spelled as h11 would
write them; the 503 refusal past `max_connections` (`_refuse`); rule 10's 101 and the
answers to a handshake it refuses; and the span line of every request (`_log_span`):
method, path, status, duration, bytes, request id.

The server runs in this process (support/inprocess.py) so that mutation testing sees it
(docs/mutation.md); its app, the server's log and the raw readers of an answer are
tests/support/answerkit.py. A bug of the layer's own is brought about the way an operator could:
a logging filter that raises, installed on one of the layer's loggers (a filter's exception
goes through `Logger.info`, unlike a handler's). The server's state is only read, on its
own loop (`InProcessServer.call`).
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time
from collections.abc import Callable, Iterator

import pytest

import dbsvc.http.connection as connection_module
import dbsvc.http.respond as respond_module
from dbsvc.http.connection import Phase
from dbsvc.http.hub import PROBE_RESERVE
from support.answerkit import (
    ACCEPT,
    DATE,
    HANDSHAKE,
    MAX_BODY,
    ORIGIN,
    PARSER,
    SECRET,
    App,
    Served,
    error_records,
    last_words,
    problem,
    read_head,
    read_to_end,
    settings,
)
from support.inprocess import WAIT


@pytest.fixture(scope="module")
def servers() -> Iterator[Callable[..., Served]]:
    """Servers by (parser, max_connections), started once per module."""
    started: dict[tuple[str, int], Served] = {}

    def get(parser: str = PARSER, max_connections: int = 64) -> Served:
        key = (parser, max_connections)
        if key not in started:
            started[key] = Served(App(), settings(parser, max_connections=max_connections)).start()
        return started[key]

    yield get
    for server in started.values():
        server.stop()


@pytest.fixture
def served(servers) -> Served:
    return servers()


@pytest.fixture
def capped(servers) -> Served:
    """The server with room for one connection, once the connections of earlier tests are gone."""
    server = servers(max_connections=1)
    wait_until(
        lambda: server.call(lambda: server.hub.counted + server.hub.reserved) == 0, "the earlier connections to close"
    )
    return server


@pytest.fixture
def faulty_filter() -> Iterator[Callable[[str, Callable[[logging.LogRecord], bool]], None]]:
    """Install on a logger a filter that raises for the records `when` picks: an operator's
    broken filter, the bug of the layer's own these tests need (removed afterwards)."""
    installed: list[tuple[logging.Logger, logging.Filter]] = []

    def install(logger_name: str, when: Callable[[logging.LogRecord], bool]) -> None:
        class Faulty(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                if when(record):
                    raise RuntimeError(SECRET)
                return True

        logger = logging.getLogger(logger_name)
        faulty = Faulty()
        logger.addFilter(faulty)
        installed.append((logger, faulty))

    yield install
    for logger, faulty in installed:
        logger.removeFilter(faulty)


# -- rule 8: the answer as written --------------------------------------------------------------


@pytest.mark.parametrize("status, reason", [(204, b"No Content"), (304, b"Not Modified")])
def test_a_204_or_304_goes_out_without_its_body_and_the_connection_goes_on(served, status, reason):
    client = served.client()
    client.send(
        f"GET /status?code={status}&body=dropped HTTP/1.1\r\nHost: t\r\nX-Request-Id: st-{status}\r\n\r\n".encode()
    )
    content_type = b"" if status == 204 else b"content-type: application/json\r\n"
    assert read_head(client) == (
        b"HTTP/1.1 %d %s\r\n%sdate: <date>\r\nserver: dbsvc\r\n"
        b"x-request-id: st-%d\r\nvary: Origin\r\n\r\n" % (status, reason, content_type, status)
    )
    # Nothing of the body came: the next answer starts right after the head.
    client.send(b"GET /status?code=200&body=next HTTP/1.1\r\nHost: t\r\n\r\n")
    assert read_head(client).startswith(b"HTTP/1.1 200 OK\r\n")
    assert client.reader.read(4) == b"next"
    client.close()


def test_a_status_http_names_no_reason_for_has_an_empty_reason_phrase(served):
    client = served.client()
    client.send(b"GET /status?code=599&body=abc HTTP/1.1\r\nHost: t\r\nX-Request-Id: st-599\r\n\r\n")
    assert read_head(client) == (
        b"HTTP/1.1 599 \r\ncontent-type: application/json\r\ncontent-length: 3\r\n"
        b"date: <date>\r\nserver: dbsvc\r\nx-request-id: st-599\r\nvary: Origin\r\n\r\n"
    )
    assert client.reader.read(3) == b"abc"
    assert client.request("GET", "/echo").status == 200
    client.close()


def test_an_answer_that_cannot_be_sent_is_a_500_without_the_extra_headers(served):
    # /bad-header answers a header value with CR/LF in it. The 500 that replaces it goes out
    # without the CORS headers the answer would have had (they may be what broke it).
    client = served.client()
    assert client.request("GET", "/echo", {"Origin": ORIGIN}).header("access-control-allow-origin") == ORIGIN
    since = served.mark()
    client.send(f"GET /bad-header HTTP/1.1\r\nHost: t\r\nOrigin: {ORIGIN}\r\nX-Request-Id: unsent-1\r\n\r\n".encode())
    body = json.dumps(problem(500, "Internal Server Error", "internal", "internal server error", "unsent-1")).encode()
    assert read_head(client) == (
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/problem+json\r\n"
        b"content-length: %d\r\ndate: <date>\r\nserver: dbsvc\r\n"
        b"x-request-id: unsent-1\r\n\r\n" % len(body)
    )
    assert client.reader.read(len(body)) == body
    assert client.request("GET", "/echo").status == 200  # the connection goes on
    [record] = error_records(served.records(since), "")
    assert record.partition("\n")[0].endswith(
        " ERROR dbsvc.http: unhandled error in GET /bad-header (request_id=unsent-1)"
    )
    assert record.rstrip().endswith("LocalProtocolError") and "Set-Cookie" not in record
    client.close()


@pytest.mark.parametrize("parser", ["fast", "h11"])
def test_a_2xx_answer_to_connect_is_a_500_and_the_connection_goes_on(servers, parser):
    # A 2xx to CONNECT opens a tunnel (RFC 9110 §9.3.6), which h11 would switch to and this
    # layer does not do: before, the answer failed inside h11, and so did the 500 meant to
    # replace it, and the client was dropped without a word. Another status goes out as is.
    served = servers(parser)
    client = served.client()
    since = served.mark()
    client.send(b"CONNECT /status?code=200 HTTP/1.1\r\nHost: t\r\nX-Request-Id: tunnel-1\r\n\r\n")
    body = json.dumps(problem(500, "Internal Server Error", "internal", "internal server error", "tunnel-1")).encode()
    assert read_head(client) == (
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/problem+json\r\n"
        b"content-length: %d\r\ndate: <date>\r\nserver: dbsvc\r\n"
        b"x-request-id: tunnel-1\r\n\r\n" % len(body)
    )
    assert client.reader.read(len(body)) == body
    [record] = error_records(served.records(since), "")
    assert record.partition("\n")[0].endswith(
        " ERROR dbsvc.http: unhandled error in CONNECT /status (request_id=tunnel-1)"
    )
    assert record.rstrip().endswith("ValueError")
    for status in (300, 405):  # 300: the first status past 2xx
        assert client.request("CONNECT", f"/status?code={status}").status == status
    assert client.request("GET", "/echo").status == 200  # the same connection, still HTTP
    client.close()


def test_when_even_the_500_cannot_be_rendered_the_last_words_go_out_and_the_connection_closes(served):
    # /renamed sets a request id that no header can carry: its answer fails, so does the 500
    # replacing it (once, logged once), and the connection says its fixed last words.
    since = served.mark()
    client = served.client()
    client.send(b"GET /renamed HTTP/1.1\r\nHost: t\r\n\r\n")
    assert read_to_end(client) == last_words("r?q")
    records = served.records(since)
    unhandled = error_records(records, "unhandled error")
    assert [r.partition("\n")[0].partition("dbsvc.http: ")[2] for r in unhandled] == [
        "unhandled error in GET /renamed (request_id=r\u00e9q)"
    ]
    [crash] = error_records(records, "internal error in the http layer")
    assert crash.partition("\n")[0].endswith("internal error in the http layer (phase app, request_id=r\u00e9q)")
    assert crash.rstrip().endswith("UnicodeEncodeError")
    assert served.client().request("GET", "/echo").status == 200
    client.close()


def test_a_bug_before_anything_was_answered_is_the_last_words_with_no_request_id(capped, faulty_filter, debug_log):
    # The refusal past max_connections meets a bug (its debug line's filter raises) before
    # it answered: no request exists, the last words name the request id "-".
    holder = capped.client()
    assert holder.request("GET", "/echo").status == 200
    probes = [capped.client() for _ in range(PROBE_RESERVE)]  # the probes' places (hub.py rule 7)
    for probe in probes:
        assert probe.request("GET", "/health").status == 200
    faulty_filter("dbsvc.http", lambda record: record.getMessage().startswith("refusing"))
    since = capped.mark()
    client = capped.client()
    assert read_to_end(client) == last_words("-")
    [crash] = error_records(capped.records(since), "internal error in the http layer")
    assert crash.partition("\n")[0].endswith("internal error in the http layer (phase head, request_id=-)")
    assert crash.rstrip().endswith("RuntimeError") and SECRET not in crash
    client.close()
    holder.close()


def test_with_h11_a_bug_after_the_answer_was_rendered_closes_without_a_word(servers, faulty_filter):
    # h11 holds a rendered answer as sent: no second answer may follow it, so the bug (the
    # span line's filter raises) drops the connection with nothing written. (The fast path
    # keeps no such state and says its last words instead.)
    served = servers("h11")
    faulty_filter("dbsvc.http.request", lambda record: record.fields["request_id"] == "span-bug")
    since = served.mark()
    client = served.client()
    client.send(b"GET /echo HTTP/1.1\r\nHost: t\r\nX-Request-Id: span-bug\r\n\r\n")
    assert read_to_end(client) == b""
    [crash] = error_records(served.records(since), "internal error in the http layer")
    assert crash.partition("\n")[0].endswith("internal error in the http layer (phase app, request_id=span-bug)")
    client.close()


def test_a_bug_met_while_a_shutdown_close_drains_is_logged_and_adds_nothing_to_the_answer(faulty_filter, debug_log):
    # A graceful shutdown closes an idle connection whose client is slow to read 16 MiB:
    # close(), which still sends what is buffered. Its idle deadline comes meanwhile, and the
    # "timed out" line meets a bug (its filter raises). The transport is closing already, so
    # rule 8 logs the bug with its type and leaves the answer to drain: nothing after it, and
    # no deadline left for the sweeper.
    served = Served(App(), settings(PARSER, idle_timeout=1.0, shutdown_timeout=WAIT)).start()
    try:
        client = served.client()
        size = 16 << 20
        client.send(b"GET /big?n=%d HTTP/1.1\r\nHost: t\r\n\r\n" % size)
        me = client.sock.getsockname()[:2]
        wait_until(
            lambda: served.call(lambda: [c.writing_paused for c in served.hub.connections if c.peer == me]) == [True],
            "the transport to ask the server to stop writing",
        )
        faulty_filter("dbsvc.http", lambda record: record.getMessage().startswith("closing"))
        since = served.mark()
        served.begin_stop()
        wait_until(
            lambda: error_records(served.records(since), "internal error in the http layer"),
            "the bug at the idle deadline",
        )
        served.call(served.hub.sweep)  # the sweeper looks again: nothing to do
        response = client.read_response()
        assert response.status == 200 and len(response.body) == size
        assert read_to_end(client) == b""
        [crash] = error_records(served.records(since), "internal error in the http layer")
        assert crash.partition("\n")[0].endswith("internal error in the http layer (phase idle, request_id=-)")
        assert crash.rstrip().endswith("RuntimeError") and SECRET not in crash
    finally:
        served.stop()


# -- rules 6, 11, 13: the answers this layer writes itself, as h11 would write them ---------------


def test_options_asterisk_is_a_204_with_the_allow_header_as_written(served):
    client = served.client()
    client.send(b"OPTIONS * HTTP/1.1\r\nHost: t\r\nX-Request-Id: star-1\r\n\r\n")
    assert read_head(client) == (
        b"HTTP/1.1 204 No Content\r\nAllow: %s\r\ndate: <date>\r\nserver: dbsvc\r\n"
        b"x-request-id: star-1\r\nvary: Origin\r\n\r\n" % connection_module.ASTERISK_ALLOW.encode()
    )
    assert client.request("GET", "/echo").status == 200  # no body came, and the connection goes on
    client.close()


def test_a_body_the_memory_budget_cannot_hold_is_a_503_with_retry_after_as_written():
    served = Served(App(), settings(PARSER, body_memory=MAX_BODY // 2)).start()
    try:
        client = served.client()
        client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nX-Request-Id: mem-1\r\nContent-Length: %d\r\n\r\n" % MAX_BODY)
        body = json.dumps(
            problem(
                503,
                "Service Unavailable",
                "unavailable",
                f"request bodies being received hold 0 bytes; a body of {MAX_BODY} bytes "
                f"would pass the limit of {MAX_BODY // 2} bytes: retry later",
                "mem-1",
            )
        ).encode()
        assert DATE.sub(b"\r\ndate: <date>\r\n", read_to_end(client)) == (
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nRetry-After: 1\r\n"
            b"content-length: %d\r\ndate: <date>\r\nserver: dbsvc\r\nx-request-id: mem-1\r\nvary: Origin\r\n"
            b"connection: close\r\n\r\n%s" % (len(body), body)
        )
        client.close()
    finally:
        served.stop()


def test_a_100_continue_is_its_status_line_with_an_empty_reason_and_no_headers(served):
    client = served.client()
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
    assert read_head(client) == b"HTTP/1.1 100 \r\n\r\n"
    client.send(b"hello")
    assert client.read_response().json()["body"] == "hello"
    client.close()


# -- rules 4, 5, 7: closing answers and the linger -----------------------------------------------


def test_a_refused_body_is_answered_with_the_clients_request_id_and_close(served):
    since = served.mark()
    client = served.client()
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nX-Request-Id: big-1\r\nContent-Length: 5000\r\n\r\n")
    body = json.dumps(
        problem(
            413,
            "Content Too Large",
            "payload_too_large",
            "request body of 5000 bytes is over the limit of 1024 bytes",
            "big-1",
            limit=MAX_BODY,
        )
    ).encode()
    assert DATE.sub(b"\r\ndate: <date>\r\n", read_to_end(client)) == (
        b"HTTP/1.1 413 Content Too Large\r\ncontent-type: application/problem+json\r\n"
        b"content-length: %d\r\ndate: <date>\r\nserver: dbsvc\r\nx-request-id: big-1\r\nvary: Origin\r\n"
        b"connection: close\r\n\r\n%s" % (len(body), body)
    )
    [span] = served.spans(since, "request_id=big-1")
    assert re.fullmatch(
        r"method=POST path=/echo status=413 duration_ms=\S+ bytes=%d request_id=big-1" % len(body), span
    ), span
    client.close()


def test_a_body_h11_refuses_is_400_for_the_request_it_belongs_to(served):
    since = served.mark()
    client = served.client()
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nX-Request-Id: chunk-1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n")
    head = read_head(client)
    assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n") and head.endswith(b"connection: close\r\n\r\n")
    assert b"\r\nx-request-id: chunk-1\r\n" in head
    answer = json.loads(read_to_end(client))
    assert answer["code"] == "bad_request" and answer["request_id"] == "chunk-1"
    [span] = served.spans(since, "request_id=chunk-1")
    assert span.startswith("method=POST path=/echo status=400 ") and span.endswith(" request_id=chunk-1")
    client.close()


def test_rule_7_a_closing_answer_lingers_discarding_input_until_the_clients_fin(served, monkeypatch):
    linger = WAIT  # more than this test can take
    monkeypatch.setattr(respond_module, "LINGER_SECONDS", linger)
    since = served.mark()
    client = served.client()
    # The refused body follows the head at once: unread input the linger discards.
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000)
    answer = read_to_end(client)  # the 413, then the server's FIN
    assert answer.startswith(b"HTTP/1.1 413 ") and answer.endswith(b"}")
    # The server still holds the connection, lingering, until at most LINGER_SECONDS from now,
    # and a sweep of the deadlines does not end it early.
    [(phase, left)] = served.connection_state(client)
    assert phase is Phase.LINGER and 0 < left <= linger
    served.call(served.hub.sweep)
    assert [phase for phase, _ in served.connection_state(client)] == [Phase.LINGER]
    client.send(b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n")  # discarded: never answered
    assert [phase for phase, _ in served.connection_state(client)] == [Phase.LINGER]
    client.sock.shutdown(socket.SHUT_WR)  # the client's FIN ends it at once
    wait_until(lambda: not served.connection_state(client), "the lingering connection to close")
    assert error_records(served.records(since), "") == []
    client.close()


def wait_until(check: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)


# -- the refusal past max_connections ------------------------------------------------------------


def test_past_max_connections_a_connection_gets_a_503_problem_and_close(capped, debug_log):
    holder = capped.client()
    assert holder.request("GET", "/echo").status == 200  # the one place, taken
    probes = [capped.client() for _ in range(PROBE_RESERVE)]  # and the probes' (hub.py rule 7)
    for probe in probes:
        assert probe.request("GET", "/health").status == 200
    since = capped.mark()
    client = capped.client()
    answer = read_to_end(client)
    head, _, body = answer.partition(b"\r\n\r\n")
    request_id = re.search(rb"\r\nx-request-id: (\S+)\r\n", head).group(1).decode()
    assert json.loads(body) == problem(
        503, "Service Unavailable", "unavailable", "connection limit of 1 reached", request_id
    )
    assert DATE.sub(b"\r\ndate: <date>\r\n", head + b"\r\n\r\n") == (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\ncontent-length: %d\r\n"
        b"date: <date>\r\nserver: dbsvc\r\nx-request-id: %s\r\nconnection: close\r\n\r\n"
        % (len(body), request_id.encode())
    )
    records = capped.records(since)
    host, port = client.sock.getsockname()[:2]
    assert [r.partition(" dbsvc.http: ")[2] for r in records if " DEBUG dbsvc.http: " in r] == [
        f"refusing ('{host}', {port}): connection limit of 1 reached"
    ]
    assert capped.spans(since, "method=- ") == [
        f"method=- path=- status=503 duration_ms=0.0 bytes={len(body)} request_id={request_id}"
    ]
    assert holder.request("GET", "/echo").status == 200  # the holder is served on
    client.close()
    holder.close()


# -- the span line ----------------------------------------------------------------------------


class SteppingClock:
    """`time.perf_counter` for the connection's two modules: each reading 0.25 s after the last."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        self.now += 0.25
        return self.now


def test_each_request_has_a_span_line_with_its_method_path_status_duration_bytes_and_id(served, monkeypatch):
    # One clock reading as the head arrives, one as the answer goes: 250 ms apart.
    clock = SteppingClock()  # read as the head is parsed (connection.py), as the answer goes (respond.py)
    monkeypatch.setattr(connection_module, "time", clock)
    monkeypatch.setattr(respond_module, "time", clock)
    since = served.mark()
    client = served.client()
    assert len(client.request("GET", "/big?n=123", {"X-Request-Id": "span-1"}).body) == 123
    assert client.request("HEAD", "/big?n=77", {"X-Request-Id": "span-2"}).status == 200
    assert client.request("POST", "/bad", {"X-Request-Id": "span-3"}).status == 400
    monkeypatch.undo()
    bad = len(json.dumps(problem(400, "Bad Request", "bad_request", "this route always refuses", "span-3")))
    assert served.spans(since, "request_id=span-") == [
        "method=GET path=/big status=200 duration_ms=250.0 bytes=123 request_id=span-1",
        "method=HEAD path=/big status=200 duration_ms=250.0 bytes=0 request_id=span-2",
        f"method=POST path=/bad status=400 duration_ms=250.0 bytes={bad} request_id=span-3",
    ]
    client.close()


# -- rule 10: the upgrade ---------------------------------------------------------------------


def masked_text(text: str) -> bytes:
    payload = text.encode()
    mask = b"\x01\x02\x03\x04"
    return bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def test_a_valid_handshake_gets_a_101_with_its_subprotocol_and_the_socket_is_a_websocket(served):
    client = served.client()
    client.send(
        f"GET /socket?protocol=chat HTTP/1.1\r\nHost: t\r\nX-Request-Id: ws-1\r\n{HANDSHAKE}"
        "Sec-WebSocket-Protocol: chat\r\n\r\n".encode()
    )
    assert read_head(client) == (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: chat\r\ndate: <date>\r\nserver: dbsvc\r\n"
        b"x-request-id: ws-1\r\n\r\n" % ACCEPT.encode()
    )
    assert [phase for phase, _ in served.connection_state(client)] == [Phase.UPGRADED]
    served.call(served.hub.sweep)  # an upgraded socket has no HTTP deadline
    client.send(masked_text("hello"))
    assert client.reader.read(7) == b"\x81\x05hello"
    [(phase, left)] = served.connection_state(client)
    assert phase is Phase.UPGRADED and left == float("inf")
    client.close()


def test_a_refused_handshake_is_its_problem_the_session_hears_1006_and_the_connection_goes_on(served):
    app: App = served.app  # type: ignore[assignment]
    client = served.client()
    response = client.request("GET", "/socket", {"X-Request-Id": "ws-no"})  # no Upgrade headers
    assert response.status == 426 and response.header("upgrade") == "websocket"
    assert response.json() == problem(
        426,
        "Upgrade Required",
        "upgrade_required",
        "/socket is a WebSocket route: expected a GET with 'Upgrade: websocket' and 'Connection: Upgrade'",
        "ws-no",
    )
    assert app.sessions[-1].closes == [1006]
    assert client.request("GET", "/echo").status == 200
    client.close()


def test_a_101_that_cannot_be_sent_is_a_logged_500_the_session_hears_1006_and_the_connection_goes_on(served):
    app: App = served.app  # type: ignore[assignment]
    since = served.mark()
    client = served.client()
    client.send(
        f"GET /socket?protocol=a%0D%0Ab HTTP/1.1\r\nHost: t\r\nX-Request-Id: ws-bad\r\n{HANDSHAKE}\r\n".encode()
    )
    response = client.read_response()
    assert response.status == 500
    assert response.json() == problem(500, "Internal Server Error", "internal", "internal server error", "ws-bad")
    assert app.sessions[-1].closes == [1006]
    assert client.request("GET", "/echo").status == 200  # still HTTP, still open
    [record] = error_records(served.records(since), "")
    assert record.partition("\n")[0].endswith("unhandled error in GET /socket (request_id=ws-bad)")
    assert record.rstrip().endswith("LocalProtocolError")
    client.close()
