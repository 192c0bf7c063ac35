"""A replica that caught up through every path of its apply holds the primary's files byte for
byte and answers as the primary does (docs/replication.md: a replica's log, offsets and
`as_of` history are the primary's; storage/follow.py rule 1).

The writes are made so that a catch-up meets each of the apply's paths: a group of plain
inserts into one model (followrun.py `insert_group`), runs of plain inserts of two models in
turn, runs of PATCHes and PUTs of one model (`update_run`), deletes and a batch (the general
path, follow.py `_take`), then a compaction of the primary (the replica compacts at its cut,
follower.py rule 9) and more of the same after it. Real servers on loopback ports, real files;
every wait is a poll with a deadline."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.server import ROOT, Server, server_pool

BLOG = ROOT / "schemas" / "blog.dbs"
ROUTES = ("user", "blog-post", "comment")


@pytest.fixture
def pool(tmp_path):
    with server_pool(tmp_path) as start:
        yield start


def ok(reply, *statuses: int):
    assert reply.status in (statuses or (200, 201, 204)), reply
    return reply


def write_story(primary: Server, tag: str, users: int) -> None:
    """Inserts in runs (users alone, then users and posts in turn), PATCH and PUT runs, deletes
    of children and parents, a comment on each kept post, and one batch."""
    ids = [
        ok(primary.post("/api/user", {"email": f"{tag}{i}@x.io", "name": f"{tag} {i}", "age": i % 9})).json["id"]
        for i in range(users)
    ]
    posts = []
    for n, uid in enumerate(ids[: users // 2]):
        ok(primary.request("PATCH", f"/api/user/{uid}", {"name": f"{tag} patched {n}"}))
        body = {"author_id": uid, "title": f"{tag} title {n}", "body": "b" * (n % 5), "score": n / 4}
        posts.append(ok(primary.post("/api/blog-post", body)).json["id"])
    for n, uid in enumerate(ids[:8]):  # a run of plain updates of one model (once its shape is known)
        record = {"email": f"{tag}put{n}@x.io", "name": f"{tag} put {n}", "age": None, "role": "admin"}
        ok(primary.request("PUT", f"/api/user/{uid}", record))
    for pid in posts[:3]:
        ok(primary.request("DELETE", f"/api/blog-post/{pid}"))
    for uid in ids[-4:]:
        ok(primary.request("DELETE", f"/api/user/{uid}"))
    for pid in posts[3:-1]:  # the last one is the batch's to delete
        ok(primary.post("/api/comment", {"post_id": pid, "author_id": ids[0], "body": f"{tag} on {pid}"}))
    ops = [
        {"op": "create", "model": "user", "record": {"email": f"{tag}batch@x.io", "name": "in a batch"}},
        {"op": "patch", "model": "user", "id": ids[1], "record": {"age": 77}},
        {"op": "delete", "model": "blog-post", "id": posts[-1]},
    ]
    ok(primary.post("/batch", {"ops": ops}), 200)


def caught_up(primary: Server, replica: Server, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        head = primary.get("/snapshot").json
        mine = replica.get("/snapshot").json
        assert mine["replica"]["state"] != "stopped", mine["replica"]  # a frame it refused: no use waiting
        if (mine["offset"], mine["epoch"], mine["replica"]["lag_offsets"]) == (head["offset"], head["epoch"], 0):
            return
        assert time.monotonic() < deadline, replica.get("/metrics").json.get("replica")
        time.sleep(0.05)


def same_bytes(primary: Path, replica: Path, name: str, timeout: float = 30) -> None:
    """The replica's file `name` equals the primary's, once its last group is written."""
    deadline = time.monotonic() + timeout
    while True:
        theirs, mine = (primary / name).read_bytes(), (replica / name).read_bytes()
        if mine == theirs:
            return
        assert time.monotonic() < deadline, f"{name}: {len(mine):,} bytes against the primary's {len(theirs):,}"
        time.sleep(0.05)


def same_answers(primary: Server, replica: Server) -> None:
    a, b = primary.get("/snapshot").json, replica.get("/snapshot").json
    assert (a["watermarks"], a["offset"], a["epoch"]) == (b["watermarks"], b["offset"], b["epoch"])
    for route, model in zip(ROUTES, ("User", "BlogPost", "Comment")):
        for n in range(0, a["watermarks"][model] + 1, 9):
            query = f"/api/{route}?limit=1000&as_of={n}"
            theirs, mine = primary.get(query), replica.get(query)
            assert (mine.status, mine.body, mine.headers["dbsvc-watermark"]) == (
                theirs.status,
                theirs.body,
                theirs.headers["dbsvc-watermark"],
            ), query
        listed = ok(primary.get(f"/api/{route}?limit=1000")).json["data"]
        assert listed == ok(replica.get(f"/api/{route}?limit=1000")).json["data"]
        for record in listed:
            theirs, mine = primary.get(f"/api/{route}/{record['id']}"), replica.get(f"/api/{route}/{record['id']}")
            assert (mine.body, mine.headers["etag"]) == (theirs.body, theirs.headers["etag"]), record


def test_a_replica_after_runs_updates_deletes_and_a_compaction_has_the_primarys_files_and_answers(pool, tmp_path):
    primary = pool(BLOG, {"SERVICE_SYNC": "off"}, tmp_path / "primary")
    write_story(primary, "a", 48)  # before the replica starts: its catch-up takes them in groups
    replica = pool(BLOG, None, tmp_path / "replica", ("--follow", f"http://127.0.0.1:{primary.port}"))
    caught_up(primary, replica)
    write_story(primary, "b", 16)  # while it follows
    caught_up(primary, replica)
    theirs, mine = tmp_path / "primary" / "default", tmp_path / "replica" / "default"
    same_bytes(theirs, mine, "log")  # its answers are compared once, at the end

    assert primary.stop() == 0
    env = dict(os.environ, SERVICE_DATA=str(tmp_path / "primary"), SERVICE_TENANT="default")
    done = subprocess.run([sys.executable, str(ROOT / "dbsvc.py"), "compact"], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    primary = pool(BLOG, {"SERVICE_SYNC": "off", "SERVICE_PORT": str(primary.port)}, tmp_path / "primary")
    write_story(primary, "c", 24)
    caught_up(primary, replica)
    state = replica.get("/metrics").json["replica"]
    assert (state["bootstraps"], state["compactions"]) == (1, 1)  # its own compaction, no snapshot fetched
    same_bytes(theirs, mine, "snapshot")
    same_bytes(theirs, mine, "log")
    same_answers(primary, replica)
