"""A batch's end on a filtered live query and change feed, through a real server (issue 35:
"a live query applies the batch's deltas and only then is consistent again").

A client that buffers a batch's deltas must know when the batch is over for its query. The
batch's last row may be outside the filter, so the last frame the socket gets from the batch
carries `"end":true` in its `batch` object (docs/realtime.md, "Batches"), live and when the
feed is resumed with `after=`.
"""

from __future__ import annotations

import itertools

from support.wskit import nothing_within, open_ws, recv_json, recv_n, run

JOINED = "2024-05-01T12:00:00Z"
COUNTER = itertools.count(1)


def create(role: str) -> dict:
    n = next(COUNTER)
    record = {"email": f"end{n}@b.io", "name": f"E{n}", "role": role, "joined": JOINED}
    return {"op": "create", "model": "user", "record": record}


def test_a_filtered_live_query_and_change_feed_are_told_where_each_batch_ends(blog):
    async def body():
        head = int(blog.get("/api/user?limit=0").headers["dbsvc-offset"])
        async with (
            open_ws(blog, "/live-query/user?role=admin") as live,
            open_ws(blog, "/subscribe/user?role=admin") as changes,
        ):
            assert (await recv_json(live))["type"] == "Init"
            first = blog.post("/batch", {"ops": [create("admin"), create("admin"), create("reader")]})
            second = blog.post("/batch", {"ops": [create("reader"), create("admin")]})
            assert (first.status, second.status) == (200, 200), (first, second)
            one, two = first.json, second.json
            assert (one["first"], two["first"]) == (head + 1, head + 4)
            deltas = await recv_n(live, 3)
            assert [(d["type"], d["offset"], d["batch"]) for d in deltas] == [
                ("Added", head + 1, {"first": head + 1, "last": head + 3}),
                ("Added", head + 2, {"first": head + 1, "last": head + 3, "end": True}),
                ("Added", head + 5, {"first": head + 4, "last": head + 5, "end": True}),
            ]
            ids = [one["results"][0]["id"], one["results"][1]["id"], two["results"][1]["id"]]
            assert [d["record"]["id"] for d in deltas] == ids
            events = await recv_n(changes, 3)
            assert [(e["kind"], e["offset"], e["batch"]) for e in events] == [
                (d["type"].replace("Added", "insert"), d["offset"], d["batch"]) for d in deltas
            ]
            assert await nothing_within(live, 0.2)
        async with open_ws(blog, f"/live-query/user?role=admin&after={head}") as resumed:
            assert await recv_n(resumed, 3) == deltas

    run(body())
