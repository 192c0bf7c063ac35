"""Operators on `/live-query` and `/subscribe` through a real server (issue 34 item 5).

A live query with a range: Init holds the records inside it; an update that moves a record
into the range is `Added`, one that changes it inside `Updated`, one that moves it out (past
the bound, or to null, which no range holds) `Removed`; exact frames. A change feed with a
range passes inserts and deletes inside it and updates with a side inside. A feed query the
parser refuses is the HTTP 400 before the upgrade, with the list's detail, and changes nothing.
"""

from __future__ import annotations

import pytest

from support.wskit import nothing_within, open_ws, post, recv_json, recv_n, refusal, request, run

JOINED = "2024-05-01T12:00:00Z"
ALLOWED = (
    "filters on email, name, role; projection, after; "
    "operators __gt, __gte, __lt, __lte on name, age, joined; __prefix on name; __null on age"
)


def user(email: str, age, name: str = "Ann") -> dict:
    return {"email": email, "name": name, "age": age, "role": "reader", "joined": JOINED, "profile": None}


def heads(server) -> tuple[int, int]:
    """(global offset, User watermark) now, from a read's headers."""
    reply = server.get("/api/user?limit=0")
    return int(reply.headers["dbsvc-offset"]), int(reply.headers["dbsvc-watermark"])


def test_a_live_query_range_sends_added_updated_removed_as_records_cross_it(blog):
    inside = blog.post("/api/user", user("in@r.io", 20)).json["id"]
    outside = blog.post("/api/user", user("out@r.io", 70)).json["id"]
    unknown = blog.post("/api/user", user("null@r.io", None)).json["id"]

    async def live():
        offset, watermark = heads(blog)
        async with open_ws(blog, "/live-query/user?age__gte=18&age__lt=65&name__prefix=A") as ws:
            init = await recv_json(ws)
            assert init == {
                "type": "Init",
                "model": "User",
                "records": blog.get("/api/user?age__gte=18&age__lt=65&name__prefix=A&limit=1000").json["data"],
                "watermark": watermark,
                "offset": offset,
                "complete": True,
            }
            assert [r["id"] for r in init["records"]].count(inside) == 1
            assert all(r["id"] not in (outside, unknown) for r in init["records"])
            writes = [
                (outside, {"age": 40}),  # enters the range: Added
                (outside, {"name": "Ayla"}),  # changes inside it: Updated
                (inside, {"age": 65}),  # reaches the exclusive bound: Removed
                (unknown, {"age": 30}),  # from null into the range: Added
                (outside, {"age": None}),  # to null, which no range holds: Removed
                (inside, {"name": "Al"}),  # outside: nothing
                (unknown, {"name": "Bea"}),  # leaves by the prefix: Removed
            ]
            stored = [(await request(blog, "PATCH", f"/api/user/{id_}", change)).json for id_, change in writes]
            got = await recv_n(ws, 5)
            frame = {"model": "User"}
            assert got == [
                {"type": "Added", **frame, "offset": offset + 1, "watermark": watermark + 1, "record": stored[0]},
                {"type": "Updated", **frame, "offset": offset + 2, "watermark": watermark + 2, "record": stored[1]},
                {"type": "Removed", **frame, "offset": offset + 3, "watermark": watermark + 3, "id": inside},
                {"type": "Added", **frame, "offset": offset + 4, "watermark": watermark + 4, "record": stored[3]},
                {"type": "Removed", **frame, "offset": offset + 5, "watermark": watermark + 5, "id": outside},
            ]
            got = await recv_json(ws)
            assert got == {"type": "Removed", **frame, "offset": offset + 7, "watermark": watermark + 7, "id": unknown}
            created = (await post(blog, "/api/user", user("new@r.io", 64))).json["id"]  # Added by insert
            assert (await request(blog, "DELETE", f"/api/user/{created}")).status == 204  # Removed by delete
            got = await recv_n(ws, 2)
            assert [(d["type"], d.get("id", d.get("record", {}).get("id")), d["offset"]) for d in got] == [
                ("Added", created, offset + 8),
                ("Removed", created, offset + 9),
            ]
            assert await nothing_within(ws, 0.2)

    run(live())


def test_a_change_feed_with_a_range_passes_events_with_a_side_inside_it(blog):
    async def body():
        author = (await post(blog, "/api/user", user("author@r.io", 40))).json["id"]
        offset, _ = heads(blog)
        async with open_ws(blog, "/subscribe/blog-post?score__gte=3&score__lt=5") as ws:
            new = {"author_id": author, "title": "t", "body": "b"}
            low = (await post(blog, "/api/blog-post", {**new, "score": 2.5})).json["id"]  # outside
            mid = (await post(blog, "/api/blog-post", {**new, "score": 3})).json["id"]  # inside (3 is 3.0)
            await request(blog, "PATCH", f"/api/blog-post/{low}", {"score": 4.5})  # enters
            await request(blog, "PATCH", f"/api/blog-post/{mid}", {"score": 5})  # leaves
            await request(blog, "PATCH", f"/api/blog-post/{mid}", {"score": 6})  # outside both times
            await request(blog, "DELETE", f"/api/blog-post/{low}")  # inside
            got = await recv_n(ws, 4)
            assert [(e["kind"], e["id"], e["offset"]) for e in got] == [
                ("insert", mid, offset + 2),
                ("update", low, offset + 3),
                ("update", mid, offset + 4),
                ("delete", low, offset + 6),
            ]
            assert [(e["previous"]["score"], e["record"]["score"]) for e in got[1:3]] == [(2.5, 4.5), (3.0, 5.0)]
            assert await nothing_within(ws, 0.2)

    run(body())


@pytest.mark.parametrize(
    "query, detail",
    [
        ("age__gte=abc", "invalid value 'abc' for 'age__gte': expected an integer"),
        ("age__null=maybe", "invalid value 'maybe' for 'age__null': expected true or false"),
        (
            "email__gt=a",
            "cannot use 'email__gt': 'email' is not marked @sort, and range operators apply to sort fields "
            f"(name, age, joined); allowed: {ALLOWED}",
        ),
        (
            "age__prefix=1",
            "cannot use 'age__prefix': 'age' is int, not str; __prefix applies to str @sort fields (name); "
            f"allowed: {ALLOWED}",
        ),
        (
            "cursor=abc",
            "'cursor' does not apply to a feed: /subscribe and /live-query have no pages "
            f"(a live query's Init is the whole result set); allowed: {ALLOWED}",
        ),
        (
            "offset=10",
            "'offset' does not apply to a feed: /subscribe and /live-query have no pages "
            f"(a live query's Init is the whole result set); allowed: {ALLOWED}",
        ),
    ],
)
@pytest.mark.parametrize("route", ["/subscribe/user", "/live-query/user"])
def test_a_refused_feed_query_is_the_lists_400_and_changes_nothing(blog, route, query, detail):
    before = blog.get("/api/user?limit=1000")
    status, problem, headers = run(refusal(blog, f"{route}?{query}"))
    assert (status, problem["code"], problem["detail"]) == (400, "bad_query", detail)
    assert headers["content-type"] == "application/problem+json"
    after = blog.get("/api/user?limit=1000")
    assert (after.json, after.headers["dbsvc-offset"]) == (before.json, before.headers["dbsvc-offset"])
