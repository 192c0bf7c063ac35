"""dbsvc/http/upstream.py against a scripted server on 127.0.0.1: the request head as it goes
on the wire (rule 2), the answer as it comes back (rule 3) and each failure's words (rule 4).
Fixture-free (each test runs its own loop and server, bounded by `asyncio.wait_for`), so
`bench/mutation_inprocess.py` runs it; tests/workers/test_workers_units.py holds the rest
(session 16, wt-mpo6)."""

from __future__ import annotations

import asyncio

import h11
import pytest

from dbsvc.errors import UpstreamError
from dbsvc.http.types import Request
from dbsvc.http.upstream import Upstream, answer, forwarded_head

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def request(headers: list[tuple[str, str]] | None = None, body: bytes = b"{}") -> Request:
    return Request("POST", "/api/user", "/api/user", [], headers or [], body, request_id="rid-7", http_version="1.0")


def run(body, bound: float = 10.0):
    return asyncio.run(asyncio.wait_for(body(), bound))


async def scripted(reply: bytes | None, heads: list[bytes], host: str = "127.0.0.1", then_close: bool = False):
    """A server that keeps each request head and answers `reply` (None: never answers), then
    closes the connection if `then_close`."""

    async def handle(reader, writer):
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        await reader.readexactly(2)
        if reply is None:
            await asyncio.sleep(30)
        writer.write(reply)
        await writer.drain()
        if then_close:
            writer.close()

    server = await asyncio.start_server(handle, host, 0)
    return server, server.sockets[0].getsockname()[1]


def test_the_head_goes_on_the_wire_in_lower_case_with_the_upstreams_host_first():
    heads: list[bytes] = []

    async def body():
        server, port = await scripted(OK, heads)
        upstream = Upstream("127.0.0.1", port, headers=[("dbsvc-worker-key", "k")])
        await upstream.send(request([("accept", "*/*")]))
        upstream.close()
        server.close()
        return port

    port = run(body)
    assert heads == [
        b"POST /api/user HTTP/1.1\r\nhost: 127.0.0.1:%d\r\naccept: */*\r\ncontent-length: 2\r\n"
        b"x-request-id: rid-7\r\ndbsvc-worker-key: k\r\n\r\n" % port
    ]


def test_fields_named_by_connection_without_spaces_and_any_proxy_field_are_dropped():
    head = forwarded_head(
        request([("connection", "close,x-trace"), ("x-trace", "1"), ("proxy-foo", "2"), ("accept", "*/*")]), []
    )
    assert [name for name, _ in head.headers] == [b"host", b"accept", b"content-length", b"x-request-id"]
    assert head.headers[0] == (b"host", b"localhost")


def test_an_answer_without_a_content_type_has_none():
    response = answer(h11.Response(status_code=204, headers=[("X-Thing", "1")]), b"")
    assert (response.status, response.content_type, response.headers, response.body) == (
        204,
        None,
        [("X-Thing", "1")],
        b"",
    )


def test_a_chunked_answer_that_closes_the_connection_is_whole_and_not_kept():
    heads: list[bytes] = []
    reply = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )

    async def body():
        server, port = await scripted(reply, heads)
        upstream = Upstream("127.0.0.1", port)
        first = await upstream.send(request())
        second = await upstream.send(request())
        upstream.close()
        server.close()
        return first, second

    first, second = run(body)
    assert (first.status, first.body, first.headers) == (200, b"abcde", [])
    assert second.body == b"abcde" and len(heads) == 2


def test_the_defaults_are_32_idle_connections_and_60_seconds():
    upstream = Upstream("127.0.0.1", 1)
    assert (upstream.host, upstream.port, upstream.max_idle, upstream.timeout, upstream.headers) == (
        "127.0.0.1",
        1,
        32,
        60.0,
        [],
    )


def test_an_upstream_on_another_loopback_address_is_reached_there():
    heads: list[bytes] = []

    async def body():
        server, port = await scripted(OK, heads, host="127.0.0.2")
        upstream = Upstream("127.0.0.2", port)
        answered = await upstream.send(request())
        upstream.close()
        server.close()
        return answered

    assert run(body).body == b"ok"


def test_nobody_listening_names_the_address_and_the_refusal():
    async def body():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(UpstreamError) as caught:
            await Upstream("127.0.0.1", port).send(request())
        return port, caught.value

    port, error = run(body)
    assert str(error).startswith(f"cannot connect to 127.0.0.1:{port}: [Errno 111] ")
    assert "timed out" not in str(error) and error.sent is False


def test_a_closed_connection_and_a_silent_upstream_say_what_happened():
    heads: list[bytes] = []

    async def closes(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    async def body():
        server = await asyncio.start_server(closes, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(UpstreamError) as closed:
            await Upstream("127.0.0.1", port).send(request())
        server.close()
        silent, silent_port = await scripted(None, heads)
        with pytest.raises(UpstreamError) as timed_out:
            await Upstream("127.0.0.1", silent_port, timeout=1.0).send(request())
        silent.close()
        return port, closed.value, silent_port, timed_out.value

    port, closed, silent_port, timed_out = run(body)
    # Before: h11's words ("can't handle event type ConnectionClosed when role=SERVER ...")
    assert str(closed) == f"127.0.0.1:{port} did not answer: the upstream closed the connection before it answered"
    assert str(timed_out) == f"127.0.0.1:{silent_port} did not answer: no answer within 1 s"
    assert closed.sent is True and timed_out.sent is True


def test_past_max_idle_a_finished_connection_is_closed():
    closed: list[int] = []

    async def handle(reader, writer):
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                await reader.readexactly(2)
                await asyncio.sleep(0.2)  # both requests in flight at once: two connections
                writer.write(OK)
        except asyncio.IncompleteReadError:
            closed.append(1)

    async def body():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        upstream = Upstream("127.0.0.1", server.sockets[0].getsockname()[1], max_idle=1)
        await asyncio.gather(upstream.send(request()), upstream.send(request()))
        for _ in range(100):  # the server sees the second connection's EOF within a second
            if closed:
                break
            await asyncio.sleep(0.01)
        seen = len(closed)
        upstream.close()
        server.close()
        return seen

    assert run(body) == 1


def test_an_answer_cut_short_after_its_head_is_not_taken_for_a_whole_one():
    heads: list[bytes] = []

    async def body():
        server, port = await scripted(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", heads, then_close=True)
        with pytest.raises(UpstreamError) as caught:
            await Upstream("127.0.0.1", port).send(request())
        server.close()
        return port, caught.value

    port, error = run(body)
    # the head had come: h11 names the body it did not get in full
    assert str(error).startswith(f"127.0.0.1:{port} did not answer: peer closed connection without sending complete")
    assert error.sent is True and len(heads) == 1
