"""A request's way through dbsvc/http/connection.py as the application and the operator see
it (rules 3-6 and 8, and rule 11's body memory), against a server running in this test
process so that mutation testing can see it (docs/mutation.md).

The other protocol tests send these requests too; these pin what they leave loose: the
exact status and problem body of each refusal (its `detail` naming the limit, the client's
own request id), the log lines, `Hub.body_bytes` back at 0 after every body (answered,
refused, cut off, lost mid-body), `Expect: 100-continue` answered only after every check,
Deferred answers and their failures, and coroutine apps that raise or answer nonsense.

The server's limits: bodies up to MAX_BODY each, and BODY_MEMORY for all unfinished bodies
together (less than two bodies, so that two connections can fill it).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import Callable, Iterator

import pytest

from dbsvc.http.connection import Phase
from dbsvc.http.types import Deferred, Request, Response, Upgrade
from support import demo_app
from support.httpkit import Client, HttpResponse
from support.inprocess import WAIT, InProcessServer, lab_settings

MAX_BODY = 2000
BODY_MEMORY = 3000

HELD: dict[str, asyncio.Future] = {}  # the futures of /deferred-hold, by request id


class Answer(Response):
    """An application's own kind of Response (served like a Response)."""

    __slots__ = ()


async def _async_none(request: Request) -> None:
    await asyncio.sleep(0)


async def _async_bad_upgrade(request: Request) -> Upgrade:
    await asyncio.sleep(0)
    return Upgrade(demo_app.EchoSession(), close_at=("soon", 1000, ""))  # type: ignore[arg-type]


def _deferred_cancelled(request: Request) -> Deferred:
    future = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(future.cancel)
    return Deferred(future, Response(200, b'{"never": "sent"}'))


def _deferred_held(request: Request) -> Deferred:
    future = asyncio.get_running_loop().create_future()
    HELD[request.request_id] = future
    return Deferred(future, Response(200, json.dumps({"held": request.request_id}).encode()))


def app(request: Request):
    """demo_app's routes, and a few answers it does not give."""
    path = request.path
    if path == "/answer":
        return Answer(201, b'{"kind": "answer"}', [("X-Kind", "subclass")])
    if path == "/async-none":
        return _async_none(request)
    if path == "/async-bad-upgrade":
        return _async_bad_upgrade(request)
    if path == "/deferred-cancel":
        return _deferred_cancelled(request)
    if path == "/deferred-hold":
        return _deferred_held(request)
    return demo_app.app(request)


class Served(InProcessServer):
    def client(self) -> Client:
        return Client(self.port, timeout=WAIT)

    def held(self) -> int:
        """The bytes every unfinished request body holds (rule 11's budget)."""
        return self.call(lambda: self.hub.body_bytes)  # type: ignore[union-attr,return-value]

    def open_connections(self) -> int:
        return self.call(lambda: len(self.hub.connections))  # type: ignore[union-attr,return-value]

    def phases(self) -> list[Phase]:
        return self.call(lambda: [c.phase for c in self.hub.connections])  # type: ignore[union-attr,return-value]

    def log_lines(self, needle: str) -> list[str]:
        return [line for line in self.log.text().splitlines() if needle in line]

    def errors(self, message: str) -> list[list[str]]:
        """For each log line whose message is `message`: the lines of its traceback, stripped."""
        found: list[list[str]] = []
        lines = self.log.text().splitlines()
        for n, line in enumerate(lines):
            if line.endswith(f" ERROR dbsvc.http: {message}"):
                block = []
                for following in lines[n + 1 :]:
                    if not following.startswith(" "):
                        break
                    block.append(following.strip())
                found.append(block)
        return found


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    settings = lab_settings(MAX_BODY, body_memory=BODY_MEMORY)
    server = Served(app, settings).start()
    yield server
    server.stop()


def wait_until(check: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"waited {WAIT} s for {what}"
        time.sleep(0.01)


@pytest.fixture(autouse=True)
def nothing_held_afterwards(served: Served) -> Iterator[list[Client]]:
    """Every test's clients are closed after it; once the server has let go of their
    connections, no body bytes may be left counted."""
    clients: list[Client] = []
    yield clients
    for client in clients:
        client.close()
    wait_until(lambda: served.open_connections() == 0, "the server to close every connection")
    assert served.held() == 0


@pytest.fixture
def connect(served: Served, nothing_held_afterwards: list[Client]) -> Callable[[], Client]:
    def make() -> Client:
        client = served.client()
        nothing_held_afterwards.append(client)
        return client

    return make


def post_head(length: int, request_id: str, extra: str = "") -> bytes:
    return (
        f"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {length}\r\nX-Request-Id: {request_id}\r\n{extra}\r\n"
    ).encode()


def assert_problem(
    response: HttpResponse, status: int, title: str, code: str, detail: str, request_id: str, **extra: object
) -> None:
    assert response.status == status
    assert response.header("content-type") == "application/problem+json"
    assert response.header("x-request-id") == request_id
    assert response.json() == {
        "type": "about:blank",
        "title": title,
        "status": status,
        "code": code,
        "detail": detail,
        "request_id": request_id,
        **extra,
    }


def reset(client: Client) -> None:
    """Close with an RST (SO_LINGER 0): the server sees the connection lost, not an EOF."""
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()


# -- bodies and rule 11's memory -------------------------------------------------------------


def test_each_answered_body_gives_its_bytes_back_to_the_budget(served, connect):
    client = connect()
    # A body at the limit, twice on one connection: the second must not find the first
    # one's bytes (or any remainder of them) still counted.
    for n in range(2):
        response = client.request("POST", "/echo", {"X-Request-Id": f"whole-{n}"}, b"w" * MAX_BODY)
        assert response.status == 200
        assert response.json()["body_len"] == MAX_BODY and response.json()["request_id"] == f"whole-{n}"
        assert served.held() == 0


def test_a_body_in_pieces_is_counted_while_it_arrives_and_delivered_whole(served, connect):
    client = connect()
    client.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n384\r\n" + b"a" * 900 + b"\r\n")
    wait_until(lambda: served.held() == 900, "the first piece to be counted")
    client.send(b"384\r\n" + b"b" * 900 + b"\r\n")
    wait_until(lambda: served.held() == 1800, "the second piece to be counted")
    client.send(b"5\r\nccccc\r\n0\r\n\r\n")
    response = client.read_response()
    assert response.status == 200
    assert response.json()["body"] == "a" * 900 + "b" * 900 + "ccccc"
    assert served.held() == 0
    assert client.request("GET", "/echo").json()["body"] == ""  # the next request has no body


def test_a_declared_length_over_max_body_is_413_naming_the_limit(served, connect):
    client = connect()
    client.send(post_head(MAX_BODY + 1, "big-1"))
    response = client.read_response()
    assert_problem(
        response,
        413,
        "Content Too Large",
        "payload_too_large",
        f"request body of {MAX_BODY + 1} bytes is over the limit of {MAX_BODY} bytes",
        "big-1",
        limit=MAX_BODY,
    )
    assert response.header("connection") == "close"
    assert client.is_closed(WAIT)
    assert served.held() == 0


def test_a_chunked_body_crossing_max_body_is_413_and_its_bytes_are_given_back(served, connect):
    client = connect()
    client.send(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nX-Request-Id: big-2\r\n\r\n"
        + f"{MAX_BODY:x}\r\n".encode()
        + b"a" * MAX_BODY
        + b"\r\n"
    )
    wait_until(lambda: served.held() == MAX_BODY, "the body up to the limit to be counted")
    client.send(b"1\r\nz\r\n")
    response = client.read_response()
    assert_problem(
        response,
        413,
        "Content Too Large",
        "payload_too_large",
        f"request body is over the limit of {MAX_BODY} bytes",
        "big-2",
        limit=MAX_BODY,
    )
    assert response.header("connection") == "close"
    assert client.is_closed(WAIT)
    assert served.held() == 0


def test_a_declared_length_the_body_memory_cannot_hold_is_503_retry_after(served, connect):
    holder = connect()
    holder.send(post_head(MAX_BODY, "holder") + b"h" * 1500)
    wait_until(lambda: served.held() == 1500, "the holder's first part to be counted")
    refused = connect()
    refused.send(post_head(1501, "mem-1"))
    response = refused.read_response()
    assert_problem(
        response,
        503,
        "Service Unavailable",
        "unavailable",
        f"request bodies being received hold 1500 bytes; a body of 1501 bytes "
        f"would pass the limit of {BODY_MEMORY} bytes: retry later",
        "mem-1",
    )
    assert response.header("retry-after") == "1"
    assert response.header("connection") == "close"
    assert refused.is_closed(WAIT)
    assert served.held() == 1500
    fits = connect()  # 1500 held + 1500 declared: just fits
    assert fits.request("POST", "/echo", body=b"f" * 1500).json()["body_len"] == 1500
    holder.send(b"h" * (MAX_BODY - 1500))
    response = holder.read_response()
    assert response.status == 200 and response.json()["body"] == "h" * MAX_BODY
    assert served.held() == 0


def test_a_body_crossing_the_memory_budget_is_503_and_the_others_complete(served, connect):
    # Both lengths fit when declared (nothing is held yet); the second body's last byte
    # crosses the budget while the first is still unfinished.
    first, second = connect(), connect()
    first.send(post_head(MAX_BODY, "first"))
    second.send(post_head(MAX_BODY, "cross-1"))
    wait_until(lambda: served.phases().count(Phase.BODY) == 2, "both heads to be read")
    first.send(b"1" * (MAX_BODY - 1))
    wait_until(lambda: served.held() == MAX_BODY - 1, "the first body's bytes to be counted")
    crossing = BODY_MEMORY - (MAX_BODY - 1) + 1
    second.send(b"2" * crossing)
    response = second.read_response()
    assert_problem(
        response,
        503,
        "Service Unavailable",
        "unavailable",
        f"request bodies being received hold {BODY_MEMORY + 1} bytes; a body of "
        f"{crossing} bytes would pass the limit of {BODY_MEMORY} bytes: retry later",
        "cross-1",
    )
    assert response.header("retry-after") == "1"
    assert second.is_closed(WAIT)
    assert served.held() == MAX_BODY - 1  # the refused body's bytes went back
    first.send(b"1")
    response = first.read_response()
    assert response.status == 200 and response.json()["body"] == "1" * MAX_BODY
    assert served.held() == 0


@pytest.mark.parametrize("how", ["eof", "reset"])
def test_a_body_whose_client_goes_away_gives_its_bytes_back(served, connect, how):
    client = connect()
    client.send(post_head(MAX_BODY, f"gone-{how}") + b"g" * 1500)
    wait_until(lambda: served.held() == 1500, "the partial body to be counted")
    if how == "eof":
        client.sock.shutdown(socket.SHUT_WR)  # the body ends early: 400, then closed
        response = client.read_response()
        assert response.status == 400 and response.json()["request_id"] == "gone-eof"
    else:
        reset(client)
    wait_until(lambda: served.open_connections() == 0, "the connection to be closed")
    assert served.held() == 0


def test_a_client_closing_mid_body_is_not_logged_as_an_internal_error(served, connect):
    crash = "internal error in the http layer (phase linger, request_id=-)"
    before = len(served.errors(crash))
    client = connect()
    client.send(post_head(MAX_BODY, "quit-1") + b"q" * 1500)
    wait_until(lambda: served.held() == 1500, "the partial body to be counted")
    client.close()
    wait_until(lambda: served.open_connections() == 0, "the connection to be closed")
    assert served.held() == 0
    assert len(served.errors(crash)) == before


def test_a_sweep_between_the_head_and_its_body_leaves_the_body_welcome(served, connect):
    # The sweep the server runs every tick, between the head and the body, finds the
    # body's deadline ahead (it is body_wait after the head).
    client = connect()
    client.send(post_head(5, "sweep-1"))
    wait_until(lambda: served.phases() == [Phase.BODY], "the head to be read")
    served.call(served.hub.sweep)  # type: ignore[union-attr]
    client.send(b"hello")
    response = client.read_response()
    assert response.status == 200 and response.json()["body"] == "hello"


# -- rule 4 and rule 6 -----------------------------------------------------------------------


def test_content_length_with_transfer_encoding_is_400_with_the_request_id(served, connect):
    client = connect()
    client.send(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n"
        b"X-Request-Id: smuggle-1\r\nExpect: 100-continue\r\n\r\n"
    )
    response = client.read_response()  # no 100 first
    assert_problem(
        response,
        400,
        "Bad Request",
        "bad_request",
        "request has both content-length and transfer-encoding",
        "smuggle-1",
    )
    assert response.header("connection") == "close"
    assert client.is_closed(WAIT)


def test_100_continue_comes_only_after_the_head_passed_every_check(served, connect):
    client = connect()
    client.send(post_head(5, "cont-1", "Expect: 100-continue\r\n"))
    interim = client.read_response()
    assert interim.status == 100 and interim.headers == [] and interim.body == b""
    client.send(b"hello")
    response = client.read_response()
    assert response.status == 200 and response.json()["body"] == "hello"
    assert served.held() == 0
    # Refused by the memory budget: the 503 comes first, and no 100 at all.
    holder = connect()
    holder.send(post_head(MAX_BODY, "cont-holder") + b"h" * 1500)
    wait_until(lambda: served.held() == 1500, "the holder's first part to be counted")
    refused = connect()
    refused.send(post_head(1501, "cont-2", "Expect: 100-continue\r\n"))
    response = refused.read_response()
    assert response.status == 503 and response.json()["request_id"] == "cont-2"
    assert refused.is_closed(WAIT)
    holder.send(b"h" * (MAX_BODY - 1500))
    assert holder.read_response().status == 200


def test_an_http_1_0_expect_100_continue_is_ignored(served, connect):
    # RFC 9110 §10.1.1: a server MUST ignore a 100-continue expectation in an HTTP/1.0 request.
    client = connect()
    client.send(b"POST /echo HTTP/1.0\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello")
    response = client.read_response()
    assert response.status == 200 and response.json()["body"] == "hello"
    assert client.is_closed(WAIT)


# -- rule 8: what the application answers ----------------------------------------------------


def test_a_response_subclass_is_served_as_it_is(served, connect):
    client = connect()
    response = client.request("GET", "/answer")
    assert response.status == 201
    assert response.json() == {"kind": "answer"}
    assert response.header("x-kind") == "subclass"
    assert client.request("GET", "/echo").status == 200


INTERNAL = {
    "type": "about:blank",
    "title": "Internal Server Error",
    "status": 500,
    "code": "internal",
    "detail": "internal server error",
}


@pytest.mark.parametrize(
    "route, kind", [("/async-error", "RuntimeError"), ("/none", "TypeError"), ("/async-none", "TypeError")]
)
def test_a_failing_app_is_logged_with_the_type_of_its_failure(served, connect, route, kind):
    client = connect()
    request_id = f"fail{route.replace('/', '-')}"
    response = client.request("GET", route, {"X-Request-Id": request_id})
    assert response.status == 500 and response.json() == {**INTERNAL, "request_id": request_id}
    assert client.request("GET", "/echo").status == 200  # the connection goes on
    [error] = served.errors(f"unhandled error in GET {route} (request_id={request_id})")
    assert error[-1] == kind  # its type, never its message


def test_a_cancelled_deferred_is_a_logged_500(served, connect):
    client = connect()
    response = client.request("GET", "/deferred-cancel", {"X-Request-Id": "cancel-1"})
    assert response.status == 500 and response.json() == {**INTERNAL, "request_id": "cancel-1"}
    assert client.request("GET", "/echo").status == 200
    [error] = served.errors("unhandled error in GET /deferred-cancel (request_id=cancel-1)")
    assert error[-1] == "asyncio.exceptions.CancelledError"


def test_a_deferred_whose_client_is_gone_sends_and_logs_nothing(served, connect):
    client = connect()
    client.send(b"GET /deferred-hold HTTP/1.1\r\nHost: t\r\nX-Request-Id: held-gone\r\n\r\n")
    wait_until(lambda: served.call(lambda: "held-gone" in HELD), "the deferred answer")
    reset(client)
    wait_until(lambda: served.open_connections() == 0, "the connection to be lost")
    served.call(lambda: HELD.pop("held-gone").set_result(None))
    served.call(lambda: None)  # the future's callbacks have run
    served.call(lambda: None)  # and what they deferred
    assert served.log_lines("held-gone") == []
    assert connect().request("GET", "/echo").status == 200


def test_a_held_deferred_is_answered_when_its_future_completes(served, connect):
    client = connect()
    client.send(
        b"GET /deferred-hold HTTP/1.1\r\nHost: t\r\nX-Request-Id: held-1\r\n\r\n"
        b"GET /echo?after=held HTTP/1.1\r\nHost: t\r\n\r\n"
    )
    wait_until(lambda: served.call(lambda: "held-1" in HELD), "the deferred answer")
    served.call(lambda: HELD.pop("held-1").set_result(None))
    assert client.read_response().json() == {"held": "held-1"}
    assert client.read_response().json()["query"] == [["after", "held"]]  # the next one follows


def test_the_error_response_that_cannot_be_rendered_is_logged_with_its_request_id(served, connect):
    client = connect()
    response = client.request("GET", "/unrenderable?v=SECRET-9", {"X-Request-Id": "unr-1"})
    assert response.status == 500 and response.json() == {**INTERNAL, "request_id": "unr-1"}
    assert client.request("GET", "/echo").status == 200
    [error] = served.errors("the error response of request_id=unr-1 could not be rendered")
    assert error[0] == "Traceback (most recent call last):" and error[-1] == "TypeError"
    assert "SECRET-9" not in served.log.text()


@pytest.mark.parametrize("how", ["coroutine", "deferred"])
def test_a_bug_of_the_layer_after_an_awaited_answer_is_logged_with_its_type(served, connect, how):
    # /bad-upgrade chokes the WebSocket layer after its 101: an exception of the protocol
    # layer's own, here met while the loop goes on after a coroutine's or a Deferred's answer.
    client = connect()
    upgrade = (
        b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    )
    request_id = f"crash-{how}"
    if how == "coroutine":
        client.send(
            b"GET /async-bad-upgrade HTTP/1.1\r\nHost: t\r\n" + upgrade + f"X-Request-Id: {request_id}\r\n\r\n".encode()
        )
    else:
        client.send(
            b"GET /deferred?ms=50 HTTP/1.1\r\nHost: t\r\n\r\n"
            b"GET /bad-upgrade HTTP/1.1\r\nHost: t\r\n" + upgrade + f"X-Request-Id: {request_id}\r\n\r\n".encode()
        )
        assert client.read_response().status == 200
    assert client.read_response().status == 101
    assert client.is_closed(WAIT)
    [error] = served.errors(f"internal error in the http layer (phase upgraded, request_id={request_id})")
    assert error[0] == "Traceback (most recent call last):" and error[-1] == "TypeError"
    assert connect().request("GET", "/echo").status == 200
