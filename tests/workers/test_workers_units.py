"""The parts of `serve --workers N` that need no process tree: the role a worker reads from its
environment, the forwarding client's request and answer (against a plain asyncio server,
not ours), the wait a forwarded write's answer makes, the `worker` field of the log lines,
and the command line's refusals."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json

import h11
import pytest

from dbsvc.cli import main
from dbsvc.errors import ConfigError, UpstreamError
from dbsvc.http.types import Request, Response
from dbsvc.http.upstream import Upstream, answer, forwarded_head
from dbsvc.logs import configure_logging, flush_logs, log_request
from dbsvc.workers.forward import AppliedOffsets, written_offset
from dbsvc.workers.role import Kind, WorkerRole, role_from_environ
from support.server import ROOT
from support.storage import open_store
from support.storage import user as user_record

BLOG = str(ROOT / "schemas" / "blog.dbs")
GOOD = {"DBSVC_WORKER": "reader-2", "DBSVC_WORKERS": "3", "DBSVC_WORKER_PORT": "40001", "DBSVC_WORKER_KEY": "k"}


def test_a_process_without_the_worker_variables_is_no_worker():
    assert role_from_environ({"SERVICE_PORT": "3000"}) is None


def test_the_worker_variables_make_a_role():
    role = role_from_environ(GOOD)
    assert role == WorkerRole(2, 3, 40001, "k")
    assert (role.kind, role.label) == (Kind.READER, "reader-2")
    assert role_from_environ({**GOOD, "DBSVC_WORKER": "writer"}).kind is Kind.WRITER
    assert role_from_environ(role.environ()) == role


@pytest.mark.parametrize(
    "change, message",
    [
        ({"DBSVC_WORKER_KEY": ""}, "DBSVC_WORKER_KEY not set beside"),
        ({"DBSVC_WORKER": "reader-0"}, "DBSVC_WORKER must be 'writer' or 'reader-K', got 'reader-0'"),
        ({"DBSVC_WORKER": "reader-3"}, "DBSVC_WORKER 'reader-3' is past DBSVC_WORKERS=3"),
        ({"DBSVC_WORKERS": "1"}, "DBSVC_WORKERS must be an integer from 2 to 1024, got '1'"),
        ({"DBSVC_WORKER_PORT": "http"}, "DBSVC_WORKER_PORT must be an integer from 1 to 65535, got 'http'"),
    ],
)
def test_a_malformed_worker_variable_is_a_config_error_naming_it(change, message):
    with pytest.raises(ConfigError) as caught:
        role_from_environ({**GOOD, **change})
    assert message in str(caught.value)


def request(method: str = "POST", headers: list[tuple[str, str]] | None = None, body: bytes = b"{}") -> Request:
    return Request(method, "/api/user?x=1", "/api/user", [("x", "1")], headers or [], body, request_id="rid-7")


def test_a_forwarded_request_drops_hop_by_hop_fields_and_a_clients_own_worker_key():
    head = forwarded_head(
        request(
            headers=[
                ("host", "example.com"),
                ("connection", "keep-alive, x-trace"),
                ("x-trace", "hop"),
                ("keep-alive", "timeout=5"),
                ("content-length", "999"),
                ("authorization", "Bearer t"),
                ("dbsvc-worker-key", "forged"),
                ("x-request-id", "client-id"),
            ]
        ),
        [("Dbsvc-Worker-Key", "real")],
    )
    fields = [(name.decode(), value.decode()) for name, value in head.headers]
    assert fields == [
        ("host", "example.com"),
        ("authorization", "Bearer t"),
        ("content-length", "2"),
        ("x-request-id", "rid-7"),
        ("dbsvc-worker-key", "real"),
    ]
    assert (head.method, head.target) == (b"POST", b"/api/user?x=1")


def test_an_upstream_answer_keeps_its_fields_but_those_the_protocol_layer_writes():
    event = h11.Response(
        status_code=201,
        headers=[
            ("Content-Type", "application/json"),
            ("Location", "/api/user/4"),
            ("Dbsvc-Offset", "12"),
            ("Content-Length", "8"),
            ("Date", "x"),
            ("Server", "dbsvc"),
            ("X-Request-Id", "rid-7"),
        ],
    )
    response = answer(event, b'{"id":4}')
    assert (response.status, response.body, response.content_type) == (201, b'{"id":4}', "application/json")
    assert response.headers == [("Location", "/api/user/4"), ("Dbsvc-Offset", "12")]
    assert written_offset(response) == 12


@pytest.mark.parametrize(
    "status, headers, expected",
    [
        (201, [("Dbsvc-Offset", "5")], 5),
        (204, [("dbsvc-offset", "6")], 6),
        (409, [("Dbsvc-Offset", "5")], None),
        (200, [], None),
    ],
)
def test_only_a_successful_writes_offset_is_waited_for(status, headers, expected):
    assert written_offset(Response(status, b"", headers)) == expected


async def plain_server(handle) -> tuple[asyncio.base_events.Server, int]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_the_upstream_reuses_one_kept_alive_connection():
    connections = []

    async def handle(reader, writer):
        connections.append(writer)
        while await reader.readuntil(b"\r\n\r\n"):
            await reader.readexactly(2)
            writer.write(
                b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nDbsvc-Offset: 3\r\nContent-Length: 2\r\n\r\n{}"
            )

    async def body():
        server, port = await plain_server(handle)
        upstream = Upstream("127.0.0.1", port)
        answers = [await upstream.send(request()) for _ in range(3)]
        upstream.close()
        server.close()
        return answers

    answers = asyncio.run(asyncio.wait_for(body(), 10))
    assert [a.status for a in answers] == [201, 201, 201] and len(connections) == 1


def test_an_upstream_nobody_listens_on_was_never_sent_the_request():
    async def body():
        server, port = await plain_server(lambda r, w: None)
        server.close()
        await server.wait_closed()
        with pytest.raises(UpstreamError) as caught:
            await Upstream("127.0.0.1", port).send(request())
        return caught.value

    assert asyncio.run(asyncio.wait_for(body(), 10)).sent is False


def test_an_upstream_that_closes_before_answering_may_have_applied_the_request():
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    async def body():
        server, port = await plain_server(handle)
        with pytest.raises(UpstreamError) as caught:
            await Upstream("127.0.0.1", port).send(request())
        server.close()
        return caught.value

    assert asyncio.run(asyncio.wait_for(body(), 10)).sent is True


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_every_line_of_a_worker_names_it(fmt):
    stream = io.StringIO()
    try:
        configure_logging("info", fmt, stream=stream, worker="reader-1")
        log_request("GET", "/api/user", 200, 0.5, 9, "r-1")
        import logging

        logging.getLogger("dbsvc").info("hello")
        flush_logs()
    finally:
        configure_logging("info", "text", stream=io.StringIO())
    span, line = stream.getvalue().splitlines()
    if fmt == "text":
        assert span.endswith(" request_id=r-1 worker=reader-1") and line.endswith("hello worker=reader-1")
    else:
        assert json.loads(span)["worker"] == json.loads(line)["worker"] == "reader-1"


def test_workers_must_be_a_positive_count(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["serve", BLOG, "--workers", "0"])
    assert caught.value.code == 2
    assert "--workers: expected an integer from 1 to 1024, got '0'" in capsys.readouterr().err


def test_workers_and_follow_do_not_go_together(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SERVICE_DATA", str(tmp_path))
    with contextlib.suppress(SystemExit):
        status = main(["serve", BLOG, "--workers", "2", "--follow", "http://127.0.0.1:9"])
    assert status == 2
    assert "--workers and --follow do not go together" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing touched


def test_a_forwarded_write_waits_until_its_offset_is_applied(tmp_path):
    """AppliedOffsets on a real store: a future for an offset not yet applied completes
    when the row is committed, one already applied needs none, and a rebind to another
    store (a bootstrap) releases what that store already holds."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()

    async def body():
        store = open_store(str(tmp_path / "a"), sync="off")
        applied = AppliedOffsets(store)
        assert applied.wait(0) is None
        first, second = applied.wait(1), applied.wait(2)
        assert not first.done() and applied.waiting == 2
        await store.insert("User", user_record(1))
        await asyncio.sleep(0)
        assert first.done() and not second.done()
        other = open_store(str(tmp_path / "b"), sync="off")
        for i in (1, 2):
            await other.insert("User", user_record(i))
        applied.rebind(other)
        assert second.done() and applied.waiting == 0
        late = applied.wait(3)
        await store.insert("User", user_record(2))  # the old store no longer counts
        await asyncio.sleep(0)
        assert not late.done()
        await other.insert("User", user_record(3))
        await asyncio.sleep(0)
        assert late.done()
        applied.close()
        store.close()
        other.close()

    asyncio.run(asyncio.wait_for(body(), 10))
