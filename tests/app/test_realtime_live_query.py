"""`/live-query/<model>` through a real server and the `websockets` client: Init, then the
Added / Updated / Removed deltas, checked against a model of the result set under random
writes (a hypothesis state machine)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from support.cli import run_on_tenant
from support.server import ROOT, start_server
from support.wskit import nothing_within, open_ws, post, recv_json, recv_n, request, run

USER = {"email": "ann@x.io", "name": "Ann"}


@pytest.fixture
def blog(serve):
    return serve()


def test_init_holds_the_matching_records_then_deltas_follow(blog):
    async def body():
        await post(blog, "/api/user", {**USER, "role": "admin"})
        await post(blog, "/api/user", {**USER, "email": "b@x.io", "role": "reader"})
        async with open_ws(blog, "/live-query/User?role=reader") as ws:  # declared name
            init = await recv_json(ws)
            assert list(init) == ["type", "model", "records", "watermark", "offset", "complete"]
            assert init["complete"] is True  # one slice: all of it
            assert (init["type"], init["model"], init["watermark"], init["offset"]) == ("Init", "User", 2, 2)
            assert [r["id"] for r in init["records"]] == [2]
            await post(blog, "/api/user", {**USER, "email": "c@x.io"})  # enters
            await request(blog, "PATCH", "/api/user/3", {"name": "Cy"})  # changes inside
            await request(blog, "PATCH", "/api/user/1", {"name": "Ad"})  # outside: nothing
            await request(blog, "PATCH", "/api/user/2", {"role": "editor"})  # leaves
            await request(blog, "PATCH", "/api/user/1", {"role": "reader"})  # enters by update
            await request(blog, "DELETE", "/api/user/3")  # leaves by delete
            got = await recv_n(ws, 5)
            assert [(d["type"], d.get("id", d.get("record", {}).get("id")), d["offset"]) for d in got] == [
                ("Added", 3, 3),
                ("Updated", 3, 4),
                ("Removed", 2, 6),
                ("Added", 1, 7),
                ("Removed", 3, 8),
            ]
            assert got[0] == {"type": "Added", "model": "User", "offset": 3, "watermark": 3, "record": got[0]["record"]}
            assert got[2] == {"type": "Removed", "model": "User", "offset": 6, "watermark": 6, "id": 2}
            assert await nothing_within(ws, 0.2)

    run(body())


def test_kebab_route_and_projection(blog):
    async def body():
        await post(blog, "/api/user", USER)
        await post(blog, "/api/blog-post", {"author_id": 1, "title": "t", "body": "b", "score": 2})
        async with open_ws(blog, "/live-query/blog-post?projection=summary") as ws:
            init = await recv_json(ws)
            assert init["records"] == [{"id": 1, "title": "t", "score": 2.0}]
            await request(blog, "PATCH", "/api/blog-post/1", {"title": "u"})
            assert (await recv_json(ws))["record"] == {"id": 1, "title": "u", "score": 2.0}

    run(body())


def test_after_sends_no_init_only_later_deltas(blog):
    async def body():
        await post(blog, "/api/user", USER)  # offset 1
        await post(blog, "/api/user", {**USER, "email": "b@x.io"})  # offset 2
        await request(blog, "PATCH", "/api/user/1", {"role": "admin"})  # offset 3: leaves
        async with open_ws(blog, "/live-query/user?role=reader&after=1") as ws:
            got = await recv_n(ws, 2)
            assert [(d["type"], d["offset"]) for d in got] == [("Added", 2), ("Removed", 3)]
            assert await nothing_within(ws, 0.2)

    run(body())


def test_no_delta_is_lost_or_repeated_between_init_and_live(blog):
    """Writes race the live query's opening; Init plus deltas must add up to the truth."""
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set() and i < 300:
            blog_conn = start_conn(blog.port)
            for _ in range(20):
                body = json.dumps({**USER, "email": f"w{i}@x.io", "role": "reader" if i % 2 else "admin"})
                blog_conn.request("POST", "/api/user", body, {"Content-Type": "application/json"})
                blog_conn.getresponse().read()
                i += 1
            blog_conn.close()

    async def body():
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            await asyncio.sleep(0.05)
            async with open_ws(blog, "/live-query/user?role=reader") as ws:
                init = await recv_json(ws)
                held = {r["id"] for r in init["records"]}
                last = init["offset"]
                await asyncio.sleep(0.2)
                stop.set()
                await asyncio.to_thread(thread.join, 30)
                head = int((await request(blog, "GET", "/api/user?limit=1")).headers["dbsvc-offset"])
                while last < head:
                    delta = await recv_json(ws)
                    assert delta["offset"] > last
                    last = delta["offset"]
                    assert delta["type"] == "Added" and delta["record"]["id"] not in held
                    held.add(delta["record"]["id"])
                truth = (await request(blog, "GET", "/api/user?role=reader&limit=1000")).json
                assert held == {r["id"] for r in truth["data"]}
        finally:
            stop.set()
            thread.join(30)

    run(body())


def start_conn(port: int):
    import http.client

    return http.client.HTTPConnection("127.0.0.1", port, timeout=30)


# -- the state machine ---------------------------------------------------------------------------


class LiveQueryMachine(RuleBasedStateMachine):
    """Random creates, updates and deletes against one server; one live query on
    `role=reader&role=editor` keeps a client-side result set from its deltas, and every
    delta must be the one the model predicts (Added only for an id outside the set,
    Updated and Removed only for one inside)."""

    server = None  # one server for the whole run (started in the test below)

    @initialize()
    def open_query(self) -> None:
        for record in self._list(""):  # each example starts from no users
            assert self.server.request("DELETE", f"/api/user/{record['id']}").status == 204
        self.loop = asyncio.new_event_loop()
        self.ws = self.loop.run_until_complete(
            open_ws(self.server, "/live-query/user?role=reader&role=editor").__aenter__()
        )
        init = self._recv()
        assert init["type"] == "Init"
        assert init["records"] == []
        self.held: dict[int, dict] = {}  # the client's result set, from deltas only
        self.records: dict[int, dict] = {}  # every user, as the writes returned them
        self.seq = 0

    def _recv(self) -> dict:
        return json.loads(self.loop.run_until_complete(asyncio.wait_for(self.ws.recv(), 10)))

    def _list(self, query: str) -> list[dict]:
        reply = self.server.get(f"/api/user?limit=1000{query}")
        return reply.json["data"]

    def _expect(self, record_id: int, before: dict | None, after: dict | None) -> None:
        inside_before = before is not None and before["role"] in ("reader", "editor")
        inside_after = after is not None and after["role"] in ("reader", "editor")
        if not inside_before and not inside_after:
            return
        delta = self._recv()
        if inside_after:
            assert delta["type"] == ("Updated" if inside_before else "Added"), delta
            assert delta["record"] == after
            self.held[record_id] = delta["record"]
        else:
            assert delta == {**delta, "type": "Removed", "id": record_id}, delta
            del self.held[record_id]

    @rule(role=st.sampled_from(["admin", "editor", "reader"]))
    def create(self, role: str) -> None:
        self.seq += 1
        reply = self.server.post("/api/user", {"email": f"m{self.seq}-{id(self)}@x.io", "name": "N", "role": role})
        assert reply.status == 201
        new_id = reply.json["id"]
        record = self.server.get(f"/api/user/{new_id}").json
        self.records[new_id] = record
        self._expect(new_id, None, record)

    @rule(data=st.data(), role=st.sampled_from(["admin", "editor", "reader"]))
    def update(self, data, role: str) -> None:
        if not self.records:
            return
        target = data.draw(st.sampled_from(sorted(self.records)))
        before = self.records[target]
        reply = self.server.request("PATCH", f"/api/user/{target}", {"role": role, "name": f"n{self.seq}"})
        assert reply.status == 200
        self.seq += 1
        self.records[target] = reply.json
        self._expect(target, before, reply.json)

    @rule(data=st.data())
    def delete(self, data) -> None:
        if not self.records:
            return
        target = data.draw(st.sampled_from(sorted(self.records)))
        assert self.server.request("DELETE", f"/api/user/{target}").status == 204
        self._expect(target, self.records.pop(target), None)

    @invariant()
    def client_set_is_the_servers_result_set(self) -> None:
        if hasattr(self, "held"):
            truth = {r["id"]: r for r in self._list("&role=reader&role=editor")}
            assert self.held == truth

    def teardown(self) -> None:
        if hasattr(self, "ws"):
            self.loop.run_until_complete(self.ws.close())
            self.loop.close()


def test_live_query_deltas_follow_a_model_of_the_result_set(tmp_path):
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path / "data", env={"SERVICE_SYNC": "off"})
    try:
        LiveQueryMachine.server = server
        runner = LiveQueryMachine.TestCase
        runner.settings = settings(
            max_examples=15,
            stateful_step_count=20,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        runner().runTest()
    finally:
        server.stop()


# Under load the import and the server's replay of 100,000 records each took 30 s of wall
# or more (about 7 s of CPU each): the server's start met start_server's 30 s bound, which
# killed it before it answered. Bounds sized for a loaded host; what is checked is the same.
# The default run sends 20,000 records (about 2.6 MB: slices all the same); the issue's
# 100,000 run in the slow variant, which CI runs too (.ci/run's last step): 14 s of the
# default suite's wall at 100,000.
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("count", "least_slices"), [(20_000, 3), pytest.param(100_000, 20, marks=pytest.mark.slow)], ids=["20000", "100000"]
)
def test_a_client_with_a_1_mib_message_limit_receives_a_large_init(serve, tmp_path, count, least_slices):
    """Issue 30 item 4: the Init of 100,000 records (about 13 MB of JSON) arrives in Init
    slices a client with `max_size=2**20` (the `websockets` library) accepts, the last one
    complete, and `/health` answers while it is sent."""
    data = tmp_path / "big"
    lines = tmp_path / "users.jsonl"
    with open(lines, "w", encoding="utf-8") as out:
        for i in range(1, count + 1):
            out.write(
                json.dumps(
                    {
                        "model": "User",
                        "record": {
                            "id": i,
                            "email": f"u{i}@x.io",
                            "name": f"User {i}",
                            "age": None,
                            "role": "reader",
                            "joined": "2026-01-01T00:00:00Z",
                            "profile": None,
                        },
                    }
                )
                + "\n"
            )
    for args in (("tenant", "create", "t"), ("import", str(ROOT / "schemas" / "blog.dbs"), str(lines), "-q")):
        done = run_on_tenant(data, *args)
        assert done.returncode == 0, done.stderr
    server = serve(env={"SERVICE_TENANT": "t"}, data_dir=data, timeout=300)

    async def body():
        async with open_ws(server, "/live-query/user", max_size=2**20) as ws:
            ids: list[int] = []
            slices = 0
            health = asyncio.create_task(request(server, "GET", "/health"))
            while True:
                init = await recv_json(ws, timeout=30)
                assert (init["type"], init["offset"], init["watermark"]) == ("Init", count, count)
                slices += 1
                ids.extend(r["id"] for r in init["records"])
                if init["complete"]:
                    break
            assert ids == list(range(1, count + 1))
            assert slices > least_slices
            assert (await health).status == 200
            await post(server, "/api/user", {**USER, "email": "new@x.io"})
            added = await recv_json(ws, timeout=60)
            assert (added["type"], added["record"]["id"], added["offset"]) == ("Added", count + 1, count + 1)

    run(body(), timeout=300)
