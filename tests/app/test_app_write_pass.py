"""A turn's writes applied in one pass (dbsvc/writeroutes.py, issue 36 item 3).

The server's writes arriving in one loop turn are applied back to back after that turn's
parses, each with its own checks, in arrival order. To make writes arrive in one turn,
the tests open their connections first (each answered once, so the server has accepted
and registered them), stop the server with SIGSTOP, send one request on each, and let it
go on with SIGCONT: its next `select` finds every socket readable at once, so every
request is parsed and dispatched in one turn, and their writes are one pass. What must
hold then is what holds for writes applied one by one: one of two equal unique values
refused (409) with the data intact, a PATCH merged onto what a PUT of the same pass
stored, a refusal in the middle of the pass leaving the others applied, and nothing
acknowledged lost to a kill -9.

The first test holds the pass itself, in process over a real store: the handlers queue,
and the writes are applied on the loop's next turn, in arrival order.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
from contextlib import ExitStack

from dbsvc.app import Application
from dbsvc.compiler import compile_schema
from dbsvc.http.message import split_target
from dbsvc.http.types import Deferred, Request
from dbsvc.realtime.broker import Broker
from dbsvc.schema import load_schema
from dbsvc.storage import Store
from support.server import ROOT, start_server
from support.storage import BLOG, open_store

TIMEOUT = 30.0


def request_bytes(method: str, path: str, body: dict | None = None, headers: dict | None = None) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(data)}\r\n"
    if body is not None:
        head += "Content-Type: application/json\r\n"
    for name, value in (headers or {}).items():
        head += f"{name}: {value}\r\n"
    return head.encode() + b"\r\n" + data


def read_answer(sock: socket.socket, method: str) -> tuple[int, dict, dict | None]:
    answer = http.client.HTTPResponse(sock, method=method)
    answer.begin()
    body = answer.read()
    return answer.status, dict(answer.getheaders()), json.loads(body) if body else None


def one_turn(server, requests: list[tuple[str, bytes]]) -> list[tuple[int, dict, dict | None]]:
    """Send `requests` ((method, bytes) each, on a connection of its own) so that the server
    reads them in one loop turn (module docstring); their answers, in the same order."""
    with ExitStack() as stack:
        socks = []
        for _ in requests:
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT))
            sock.sendall(request_bytes("GET", "/health"))
            assert read_answer(sock, "GET")[0] == 200  # accepted and registered: read in the next select
            socks.append(sock)
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            for sock, (_method, data) in zip(socks, requests):
                sock.sendall(data)
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        return [read_answer(sock, method) for sock, (method, _data) in zip(socks, requests)]


def users(server) -> dict[int, dict]:
    reply = server.get("/api/user?limit=100")
    assert reply.status == 200, reply
    return {r["id"]: r for r in reply.json["data"]}


def user(key: int, email: str, name: str = "U", age: int | None = None) -> dict:
    body = {"id": key, "email": email, "name": name}
    if age is not None:
        body["age"] = age
    return body


# -- the pass, in process ------------------------------------------------------------------


def test_a_turns_writes_are_applied_after_its_handlers_in_arrival_order(tmp_path):
    """Fails before the pass: the handler applied each write at once."""
    store = open_store(str(tmp_path), sync="off")
    app = Application(BLOG, store, Broker(store, BLOG.BY_NAME, 64))
    model = BLOG.ROUTES["user"]

    def post(body: dict) -> Deferred:
        raw = json.dumps(body).encode()
        path, pairs = split_target("/api/user")
        answer = app.dispatch(
            Request("POST", "/api/user", path, pairs, [("content-type", "application/json")], raw), model, None
        )
        assert isinstance(answer, Deferred)
        return answer

    async def run() -> None:
        first = post({"email": "a@example.com", "name": "A"})
        second = post({"email": "b@example.com", "name": "B"})
        clash = post({"email": "a@example.com", "name": "C"})
        assert store.watermarks()["User"] == 0  # queued: nothing applied in the handlers' turn
        assert first.response.body == b""
        await first.future
        await second.future
        assert [json.loads(first.response.body), json.loads(second.response.body)] == [{"id": 1}, {"id": 2}]
        assert dict(first.response.headers)["Location"] == "/api/user/1"
        try:
            await clash.future
        except Exception as exc:  # the refusal the handler would have raised
            assert (getattr(exc, "status", None), getattr(exc, "code", None)) == (409, "unique_violation")
        else:
            raise AssertionError("the second 'a@example.com' was stored")
        assert store.watermarks()["User"] == 2

    try:
        asyncio.run(run())
    finally:
        store.close()


def test_a_passs_writes_are_handed_to_the_commit_queue_once(tmp_path):
    """Fails before the runs (writeroutes.py rule 5): each write was its own entry in the
    commit queue. The pass's writes (inserts into two models, a refusal, a PATCH) are one
    entry; each answer has its own id, Location, offset and ETag, as applied alone."""
    store = open_store(str(tmp_path))
    app = Application(BLOG, store, Broker(store, BLOG.BY_NAME, 64))

    def write(method: str, target: str, body: dict, model: str, segment: str | None = None) -> Deferred:
        path, pairs = split_target(target)
        request = Request(
            method, target, path, pairs, [("content-type", "application/json")], json.dumps(body).encode()
        )
        answer = app.dispatch(request, BLOG.ROUTES[model], segment)
        assert isinstance(answer, Deferred)
        return answer

    async def run() -> None:
        loop = asyncio.get_running_loop()
        answers = [
            write("POST", "/api/user", {"email": "a@example.com", "name": "A"}, "user"),
            write("POST", "/api/user", {"email": "a@example.com", "name": "Clash"}, "user"),
            write("POST", "/api/user", {"email": "c@example.com", "name": "C"}, "user"),
            write("POST", "/api/user", {"email": "d@example.com", "name": "D"}, "user"),
            write("POST", "/api/blog-post", {"author_id": 2, "title": "t", "body": "b", "score": 1.5}, "blog-post"),
            write("PATCH", "/api/user/1", {"name": "A2"}, "user", "1"),
            write("PATCH", "/api/user/99", {"name": "Nobody"}, "user", "99"),
            write("POST", "/api/user", {"email": "e@example.com", "name": "E"}, "user"),
        ]
        entries = loop.create_future()
        loop.call_soon(lambda: entries.set_result(store.writes.commit.pending))  # after the pass, before the commit
        assert await entries == 1  # A, C, D, the post, the patch, E (the clash and the 404 refused)
        refused = {1: (409, "unique_violation"), 6: (404, "not_found")}
        for at, answer in enumerate(answers):
            try:
                await asyncio.wait_for(answer.future, 30)
            except Exception as exc:
                assert (exc.status, exc.code) == refused.pop(at)
        assert refused == {}
        stored = [answers[i] for i in (0, 2, 3, 4, 5, 7)]
        assert [a.response.status for a in stored] == [201, 201, 201, 201, 200, 201]
        heads = [dict(a.response.headers) for a in stored]
        assert [h["Dbsvc-Offset"] for h in heads] == ["1", "2", "3", "4", "5", "6"]
        assert [h["ETag"] for h in heads] == ['"1"', '"2"', '"3"', '"4"', '"5"', '"6"']
        assert [h.get("Location") for h in heads] == [
            "/api/user/1",
            "/api/user/2",
            "/api/user/3",
            "/api/blog-post/1",
            None,
            "/api/user/4",
        ]
        assert [json.loads(stored[i].response.body) for i in (0, 1, 2, 3, 5)] == [
            {"id": 1},
            {"id": 2},
            {"id": 3},
            {"id": 1},
            {"id": 4},
        ]
        assert json.loads(stored[4].response.body)["name"] == "A2"
        assert store.watermarks()["User"] == 5 and store.head_offset == 6

    try:
        asyncio.run(run())
    finally:
        store.close()


def test_a_runs_answers_of_str_ids_name_them_percent_encoded(tmp_path):
    """A run of inserts into a model whose id is a str (schemas/inventory.dbs): each answer's
    body is its id as JSON and its Location the id as one percent-encoded path segment."""
    inventory = compile_schema(load_schema(str(ROOT / "schemas" / "inventory.dbs")))
    store = Store.open(str(tmp_path), inventory.MODELS, inventory.DESCRIPTION, sync="off")
    app = Application(inventory, store, Broker(store, inventory.BY_NAME, 64))

    def post(code: str) -> Deferred:
        raw = json.dumps({"code": code, "city": "Oslo", "opened": "2020-01-02"}).encode()
        path, pairs = split_target("/api/warehouse")
        request = Request("POST", "/api/warehouse", path, pairs, [("content-type", "application/json")], raw)
        answer = app.dispatch(request, inventory.ROUTES["warehouse"], None)
        assert isinstance(answer, Deferred)
        return answer

    async def run() -> list[Deferred]:
        answers = [post("a/b"), post("w 1%"), post("caf\u00e9")]
        for answer in answers:
            await answer.future
        return answers

    try:
        answers = asyncio.run(run())
        assert [a.response.body for a in answers] == [
            b'{"id":"a/b"}',
            b'{"id":"w 1%"}',
            "{\"id\":\"caf\u00e9\"}".encode(),
        ]
        assert [dict(a.response.headers)["Location"] for a in answers] == [
            "/api/warehouse/a%2Fb",
            "/api/warehouse/w%201%25",
            "/api/warehouse/caf%C3%A9",
        ]
    finally:
        store.close()


# -- the pass, served ------------------------------------------------------------------------


def test_two_posts_of_one_unique_value_in_one_pass_store_one(serve):
    server = serve()
    answers = one_turn(
        server,
        [
            ("POST", request_bytes("POST", "/api/user", {"email": "same@example.com", "name": "First"})),
            ("POST", request_bytes("POST", "/api/user", {"email": "same@example.com", "name": "Second"})),
        ],
    )
    statuses = sorted(status for status, _h, _b in answers)
    assert statuses == [201, 409], answers
    (created,) = [body for status, _h, body in answers if status == 201]
    (refused,) = [body for status, _h, body in answers if status == 409]
    assert refused["code"] == "unique_violation"
    stored = users(server)
    assert list(stored) == [created["id"]]
    assert stored[created["id"]]["email"] == "same@example.com"


def test_a_put_and_a_patch_of_one_record_in_one_pass_apply_in_turn(serve):
    server = serve()
    assert server.post("/api/user", user(1, "one@example.com", "One", 30)).status == 201
    put = user(1, "put@example.com", "Put", 40)
    del put["id"]
    answers = one_turn(
        server,
        [
            ("PUT", request_bytes("PUT", "/api/user/1", put)),
            ("PATCH", request_bytes("PATCH", "/api/user/1", {"name": "Patched"})),
        ],
    )
    assert [status for status, _h, _b in answers] == [200, 200], answers
    (_s, put_headers, put_body), (_s2, patch_headers, patch_body) = answers
    # Whichever was applied first, the other one's answer is what it made of that record.
    if int(put_headers["Dbsvc-Offset"]) < int(patch_headers["Dbsvc-Offset"]):
        assert patch_body == {**put_body, "name": "Patched"}
        final = patch_body
    else:
        assert put_body["name"] == "Put" and patch_body["email"] == "one@example.com"
        final = put_body
    assert put_headers["ETag"] != patch_headers["ETag"]
    assert users(server)[1] == final


def test_a_write_refused_in_the_middle_of_a_pass_leaves_the_others_applied(serve):
    server = serve()
    assert server.post("/api/user", user(1, "taken@example.com", "Taken")).status == 201
    assert server.post("/api/user", user(2, "two@example.com", "Two")).status == 201
    etag = server.get("/api/user/2").headers["etag"]
    requests = [
        ("POST", request_bytes("POST", "/api/user", user(10, "ten@example.com"))),
        ("POST", request_bytes("POST", "/api/user", user(11, "taken@example.com"))),  # 409
        ("PATCH", request_bytes("PATCH", "/api/user/2", {"age": 22}, {"If-Match": etag})),
        ("PATCH", request_bytes("PATCH", "/api/user/2", {"age": 23}, {"If-Match": '"999999"'})),  # 412
        ("PUT", request_bytes("PUT", "/api/user/404", {"email": "nobody@example.com", "name": "N"})),  # 404
        ("POST", request_bytes("POST", "/api/user", user(12, "twelve@example.com"))),
    ]
    answers = one_turn(server, requests)
    assert [status for status, _h, _b in answers] == [201, 409, 200, 412, 404, 201], answers
    assert answers[1][2]["code"] == "unique_violation"
    stored = users(server)
    assert sorted(stored) == [1, 2, 10, 12]
    assert stored[1]["name"] == "Taken" and stored[2]["age"] == 22
    assert stored[10]["email"] == "ten@example.com" and stored[12]["email"] == "twelve@example.com"


def test_a_kill_after_a_pass_loses_nothing_acknowledged(tmp_path):
    data = tmp_path / "data"
    server = start_server(ROOT / "schemas" / "blog.dbs", data)
    try:
        requests = [
            ("POST", request_bytes("POST", "/api/user", user(key, f"u{key}@example.com"))) for key in range(1, 17)
        ]
        requests.insert(8, ("POST", request_bytes("POST", "/api/user", user(99, "u3@example.com"))))  # 409
        answers = one_turn(server, requests)
        acknowledged = {body["id"] for status, _h, body in answers if status == 201}
        assert len(acknowledged) == 16 and [a[0] for a in answers].count(409) == 1, answers
    finally:
        server.stop(signal.SIGKILL)
    server = start_server(ROOT / "schemas" / "blog.dbs", data)
    try:
        stored = users(server)
        assert set(stored) == acknowledged
        assert all(stored[key]["email"] == f"u{key}@example.com" for key in acknowledged)
    finally:
        server.stop()
