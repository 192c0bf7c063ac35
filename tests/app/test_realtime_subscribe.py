"""`/subscribe/<model>` through a real server and the `websockets` client (docs/guide/realtime.md):
every event kind, the matcher's rules, links, projections, and resuming with `after`."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading

import pytest

from support.server import ROOT
from support.wskit import closed_with, nothing_within, open_ws, post, recv_json, recv_n, refusal, request, run

USER = {"email": "ann@x.io", "name": "Ann", "age": 31}


@pytest.fixture
def blog(serve):
    return serve()


def test_insert_update_delete_events_in_contract_layout(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user") as ws:
            assert (await post(blog, "/api/user", USER)).status == 201
            inserted = await recv_json(ws)
            assert list(inserted) == ["kind", "model", "offset", "watermark", "id", "record"]
            assert inserted["kind"] == "insert" and inserted["model"] == "User"
            assert (inserted["offset"], inserted["watermark"], inserted["id"]) == (1, 1, 1)
            assert list(inserted["record"]) == ["id", "email", "name", "age", "role", "joined", "profile"]
            assert (await request(blog, "PATCH", "/api/user/1", {"age": 32})).status == 200
            updated = await recv_json(ws)
            assert list(updated) == ["kind", "model", "offset", "watermark", "id", "record", "previous"]
            assert updated["kind"] == "update" and updated["offset"] == 2 and updated["watermark"] == 2
            assert (updated["previous"]["age"], updated["record"]["age"]) == (31, 32)
            assert (await request(blog, "DELETE", "/api/user/1")).status == 204
            deleted = await recv_json(ws)
            assert deleted["kind"] == "delete" and deleted["offset"] == 3
            assert deleted["record"] == updated["record"]  # the last record
            assert "previous" not in deleted

    run(body())


def test_events_of_other_models_do_not_reach_a_feed(blog):
    async def body():
        async with open_ws(blog, "/subscribe/comment") as ws:
            await post(blog, "/api/user", USER)
            assert await nothing_within(ws, 0.3)

    run(body())


def test_matcher_passes_inserts_and_deletes_whose_record_matches(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user?role=admin") as ws:
            await post(blog, "/api/user", {**USER, "role": "reader"})
            await post(blog, "/api/user", {**USER, "email": "b@x.io", "role": "admin"})
            got = await recv_json(ws)
            assert (got["kind"], got["id"]) == ("insert", 2)
            await request(blog, "DELETE", "/api/user/1")
            await request(blog, "DELETE", "/api/user/2")
            got = await recv_json(ws)
            assert (got["kind"], got["id"], got["offset"]) == ("delete", 2, 4)

    run(body())


def test_matcher_passes_updates_whose_old_or_new_record_matches(blog):
    async def body():
        await post(blog, "/api/user", USER)  # role reader
        async with open_ws(blog, "/subscribe/user?role=admin") as ws:
            await request(blog, "PATCH", "/api/user/1", {"name": "still a reader"})  # neither
            await request(blog, "PATCH", "/api/user/1", {"role": "admin"})  # new matches
            await request(blog, "PATCH", "/api/user/1", {"name": "admin Ann"})  # both
            await request(blog, "PATCH", "/api/user/1", {"role": "editor"})  # old matches
            await request(blog, "PATCH", "/api/user/1", {"name": "editor Ann"})  # neither
            got = await recv_n(ws, 3)
            assert [e["offset"] for e in got] == [3, 4, 5]
            assert [(e["previous"]["role"], e["record"]["role"]) for e in got] == [
                ("reader", "admin"),
                ("admin", "admin"),
                ("admin", "editor"),
            ]
            assert await nothing_within(ws, 0.3)

    run(body())


def test_repeated_filter_is_or_and_fields_are_and(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user?role=admin&role=editor&name=Ann") as ws:
            await post(blog, "/api/user", {**USER, "email": "1@x.io", "role": "admin"})  # match
            await post(blog, "/api/user", {**USER, "email": "2@x.io", "role": "reader"})  # role no
            await post(blog, "/api/user", {**USER, "email": "3@x.io", "role": "editor"})  # match
            await post(blog, "/api/user", {**USER, "email": "4@x.io", "role": "editor", "name": "Bo"})
            got = await recv_n(ws, 2)
            assert [e["id"] for e in got] == [1, 3]
            assert await nothing_within(ws, 0.3)

    run(body())


def test_typed_filter_matches_the_same_float(blog):
    async def body():
        await post(blog, "/api/user", USER)
        async with open_ws(blog, "/subscribe/blog-post?score=3") as ws:
            post_body = {"author_id": 1, "title": "t", "body": "b"}
            await post(blog, "/api/blog-post", {**post_body, "score": 3.0})
            await post(blog, "/api/blog-post", {**post_body, "score": 3.5})
            got = await recv_json(ws)
            assert got["record"]["score"] == 3.0
            assert await nothing_within(ws, 0.3)

    run(body())


def test_projection_applies_to_record_and_previous(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user?projection=card") as ws:
            await post(blog, "/api/user", USER)
            await request(blog, "PATCH", "/api/user/1", {"name": "Anna"})
            inserted, updated = await recv_n(ws, 2)
            assert inserted["record"] == {"id": 1, "name": "Ann"}
            assert updated["record"] == {"id": 1, "name": "Anna"}
            assert updated["previous"] == {"id": 1, "name": "Ann"}

    run(body())


def test_links_follow_child_references(blog):
    async def body():
        await post(blog, "/api/user", USER)
        await post(blog, "/api/user", {**USER, "email": "b@x.io", "name": "Bo"})
        async with open_ws(blog, "/subscribe/user") as ws:
            assert (
                await post(blog, "/api/blog-post", {"author_id": 1, "title": "t", "body": "b", "score": 1})
            ).status == 201
            linked = await recv_json(ws)
            assert linked == {
                "kind": "link",
                "model": "User",
                "id": 1,
                "child_model": "BlogPost",
                "child_id": 1,
                "field": "author_id",
                "linked": True,
                "offset": 3,
            }
            await request(blog, "PATCH", "/api/blog-post/1", {"author_id": 2})
            moved = await recv_n(ws, 2)
            assert [(e["id"], e["linked"], e["offset"]) for e in moved] == [(1, False, 4), (2, True, 4)]
            await request(blog, "PATCH", "/api/blog-post/1", {"title": "same author"})
            await request(blog, "DELETE", "/api/blog-post/1")
            unlinked = await recv_json(ws)
            assert (unlinked["id"], unlinked["linked"], unlinked["offset"]) == (2, False, 6)

    run(body())


def test_link_reaches_a_filtered_feed_only_when_the_parent_matches(blog):
    async def body():
        await post(blog, "/api/user", {**USER, "role": "admin"})
        await post(blog, "/api/user", {**USER, "email": "b@x.io", "role": "reader"})
        async with open_ws(blog, "/subscribe/user?role=admin") as ws:
            for author in (2, 1):
                await post(blog, "/api/blog-post", {"author_id": author, "title": "t", "body": "b", "score": 1})
            got = await recv_json(ws)
            assert (got["kind"], got["id"], got["child_id"]) == ("link", 1, 2)
            assert await nothing_within(ws, 0.3)

    run(body())


def test_after_replays_then_follows_live(blog):
    async def body():
        for i in range(5):
            await post(blog, "/api/user", {**USER, "email": f"{i}@x.io"})
        async with open_ws(blog, "/subscribe/user?after=2") as ws:
            replayed = await recv_n(ws, 3)
            assert [e["offset"] for e in replayed] == [3, 4, 5]
            await post(blog, "/api/user", {**USER, "email": "live@x.io"})
            assert (await recv_json(ws))["offset"] == 6
        async with open_ws(blog, "/subscribe/user?after=6") as ws:  # at the head: live only
            assert await nothing_within(ws, 0.2)

    run(body())


def test_after_replays_links_and_filters_like_live(blog):
    async def body():
        await post(blog, "/api/user", {**USER, "role": "admin"})
        await post(blog, "/api/user", {**USER, "email": "b@x.io"})
        await post(blog, "/api/blog-post", {"author_id": 1, "title": "t", "body": "b", "score": 1})
        async with open_ws(blog, "/subscribe/user?role=admin&after=0") as ws:
            got = await recv_n(ws, 2)
            assert [(e["kind"], e["offset"]) for e in got] == [("insert", 1), ("link", 3)]
            assert await nothing_within(ws, 0.2)

    run(body())


@pytest.mark.parametrize("schema", ["blog.dbs", "inventory.dbs"], ids=["log", "ring"])
def test_after_resume_has_no_gap_and_no_duplicate_under_concurrent_writes(serve, schema):
    server = serve(ROOT / "schemas" / schema)
    model, body_of = (
        ("user", lambda i, p: {**USER, "email": f"{p}{i}@x.io"})
        if schema == "blog.dbs"
        else ("warehouse", lambda i, p: {"code": f"{p}{i}", "city": "Oslo", "opened": "2020-01-01"})
    )
    total = 120

    def writer(count: int, start: threading.Event, prefix: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        start.wait(10)
        for i in range(count):
            conn.request("POST", f"/api/{model}", json.dumps(body_of(i, prefix)), {"Content-Type": "application/json"})
            assert conn.getresponse().read()
        conn.close()

    async def body():
        for i in range(40):
            await post(server, f"/api/{model}", body_of(i, "pre"))
        start = threading.Event()
        threads = [threading.Thread(target=writer, args=(total // 2, start, f"w{n}-")) for n in range(2)]
        for t in threads:
            t.start()
        start.set()
        await asyncio.sleep(0.01)  # writes are racing the replay now
        async with open_ws(server, f"/subscribe/{model}?after=10") as ws:
            offsets = [(await recv_json(ws))["offset"] for _ in range(40 + total - 10)]
            for t in threads:
                await asyncio.to_thread(t.join, 30)
            assert offsets == list(range(11, 40 + total + 1))
            assert await nothing_within(ws, 0.3)

    run(body())


def test_after_beyond_the_ring_is_410_offset_gone(serve):
    server = serve(ROOT / "schemas" / "inventory.dbs")  # replication off: a ring of 256

    async def body():
        for i in range(300):
            await post(server, "/api/warehouse", {"code": f"w{i}", "city": "Oslo", "opened": "2020-01-01"})
        status, problem, _ = await refusal(server, "/subscribe/warehouse?after=10")
        assert (status, problem["code"]) == (410, "offset_gone")
        assert "no longer retained" in problem["detail"]
        # Still in the ring. max_queue=None: the 199 events behind the one read would fill the
        # websockets client's queue, which then stops reading the socket, and its close would
        # wait its 10 s close timeout for the server's close frame queued behind them.
        async with open_ws(server, "/subscribe/warehouse?after=100", max_queue=None) as ws:
            assert (await recv_json(ws))["offset"] == 101

    run(body())


def test_a_client_message_is_ignored_and_the_feed_goes_on(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user") as ws:
            await ws.send("hello")
            await ws.send(b"\x00\x01")
            await post(blog, "/api/user", USER)
            assert (await recv_json(ws))["kind"] == "insert"

    run(body())


def test_a_client_close_is_answered_and_the_subscription_ends(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user") as ws:
            assert (await request(blog, "GET", "/metrics")).json["realtime"]["subscriptions"] == 1
            await ws.close(1000, "bye")
            assert ws.close_code == 1000
        for _ in range(100):
            if (await request(blog, "GET", "/metrics")).json["realtime"]["subscriptions"] == 0:
                break
            await asyncio.sleep(0.02)
        assert (await request(blog, "GET", "/metrics")).json["realtime"]["subscriptions"] == 0

    run(body())


def test_socket_span_line_names_route_frames_and_close_code(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user") as ws:
            await post(blog, "/api/user", USER)
            await recv_json(ws)

    run(body())
    blog.stop()
    spans = [line for line in blog.log if "path=/subscribe/user" in line]
    assert len(spans) == 1
    assert "status=101" in spans[0] and "route=subscribe" in spans[0]
    assert "frames=1" in spans[0] and "close_code=1000" in spans[0]


def test_closed_with_helper_sees_a_server_close(blog):
    async def body():
        async with open_ws(blog, "/subscribe/user") as ws:
            blog.proc.send_signal(__import__("signal").SIGTERM)
            assert await closed_with(ws) == (1001, "server shutting down")

    run(body())
    assert blog.proc.wait(timeout=30) == 0
