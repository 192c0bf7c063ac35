"""Readers see `POST /batch` whole (issue 35): lists on a primary and on its read replica,
a `/subscribe` feed, a live query and a `/replicate` stream each read after every frame,
and a `dbsvc replicate --out` file cut inside a batch."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
from collections import Counter

import pytest

from dbsvc.replica.consumer import BATCH
from dbsvc.replica.sinks import ReplicaFile
from dbsvc.runtime import Query
from dbsvc.storage.logfile import frame_payload
from dbsvc.storage.tenants import create_tenant
from support.server import ROOT, Server, server_pool
from support.storage import open_store, post, user
from support.wskit import open_ws, recv_json, run

BLOG = ROOT / "schemas" / "blog.dbs"
SIZE, BATCHES, WRITERS = 5, 10, 4  # users per batch, batches per writer, writers
# One batch larger than the others. Not more rows than a replica's group (groups.py G1: BATCH
# frames, 1,024 since session 20, when it was 512; a batch holds at most 1,000 ops): a group
# cuts it only when it begins before it, so a batch held across groups (storage/follow.py rule
# 4) is test_replica_apply_group.py's case, not one this test can count on.
BIG = 600
TOTAL = SIZE * BATCHES * WRITERS + BIG


def size_of(tag: str) -> int:
    return BIG if tag == "big" else SIZE


@pytest.fixture
def nodes(tmp_path):
    with server_pool(tmp_path) as pool:

        def start(name: str, follow: Server | None = None) -> Server:
            args = ("--follow", f"http://127.0.0.1:{follow.port}") if follow is not None else ()
            return pool(BLOG, None, tmp_path / name, args)

        yield start


def write_batches(port: int, writer: int, errors: list, big: bool, between: threading.Event) -> None:
    """A writer's batches; halfway it waits (30 s at most) until a read of the replica's list
    saw part of the history (`between`), so a replica slow to read its stream (or a primary
    fast to write it: all of it within one group of the replica's) still meets a read
    between its batches."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for b in range(BATCHES + big):
            if b == BATCHES // 2:
                between.wait(30)
            tag = "big" if big and b == BATCHES // 2 else f"w{writer}b{b}"
            ops = [
                {"op": "create", "model": "user", "record": {"email": f"{tag}-{i}@x.io", "name": tag}}
                for i in range(size_of(tag))
            ]
            conn.request("POST", "/batch", json.dumps({"ops": ops}), {"Content-Type": "application/json"})
            reply = conn.getresponse()
            body = reply.read()
            if reply.status != 200:
                errors.append(body)
    finally:
        conn.close()


def poll_lists(server: Server, done: threading.Event, halves: list, reads: list, between: threading.Event) -> None:
    """Read the whole user list until `done`: every tag must count 0 or SIZE users. A read
    of part of the history (neither none of it nor all) sets `between`."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        while True:
            finished = done.is_set()
            conn.request("GET", "/api/user?limit=1000")
            counts = Counter(u["name"] for u in json.loads(conn.getresponse().read())["data"])
            halves.extend((tag, n) for tag, n in counts.items() if n != size_of(tag))
            reads.append(sum(counts.values()))
            if 0 < reads[-1] < TOTAL:
                between.set()
            if finished:
                return
    finally:
        conn.close()


class BatchReader:
    """The events of one feed, checked as each arrives: a batch's rows come one after the
    other, at consecutive offsets, each naming the same batch, and when a batch ends the
    rows read so far hold whole batches only."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.open: tuple[int, int] | None = None  # (first, last) of the batch under way
        self.expected = 0
        self.tags: Counter = Counter()
        self.rows = 0

    def add(self, event: dict) -> None:
        mark, offset = event.get("batch"), event["offset"]
        assert mark is not None, f"{self.name}: offset {offset} carries no batch mark"
        if self.open is None:
            assert offset == mark["first"], f"{self.name}: offset {offset} starts inside its batch {mark}"
            self.open = (mark["first"], mark["last"])
        else:
            assert offset == self.expected and (mark["first"], mark["last"]) == self.open, (
                f"{self.name}: offset {offset} ({mark}) inside the batch {self.open}"
            )
        self.tags[event["record"]["name"]] += 1
        self.rows += 1
        self.expected = offset + 1
        if offset == mark["last"]:
            self.open = None
            halves = {t: n for t, n in self.tags.items() if n != size_of(t)}
            assert not halves, f"{self.name}: after offset {offset}, half batches {halves}"


async def read_text(ws, reader: BatchReader, skip_init: bool = False) -> None:
    if skip_init:
        init = await recv_json(ws)
        assert init["type"] == "Init" and init["records"] == []
    while reader.rows < TOTAL:
        reader.add(await recv_json(ws, timeout=30))


async def read_binary(ws, reader: BatchReader) -> None:
    while reader.rows < TOTAL:
        frame = await asyncio.wait_for(ws.recv(), 30)
        reader.add(json.loads(bytes(frame_payload(frame))))


def test_lists_feeds_streams_and_a_replica_see_batches_whole(nodes):
    primary = nodes("primary")
    replica = nodes("replica", follow=primary)
    readers = [BatchReader(n) for n in ("subscribe", "live-query", "replicate", "replica subscribe")]

    async def main() -> None:
        async with (
            open_ws(primary, "/subscribe/user") as sub,
            open_ws(primary, "/live-query/user") as live,
            open_ws(primary, "/replicate?after=0") as rep,
            open_ws(replica, "/subscribe/user") as rsub,
        ):
            errors: list = []
            done = threading.Event()
            halves: dict[str, list] = {"primary": [], "replica": []}
            reads: dict[str, list] = {"primary": [], "replica": []}
            between = {"primary": threading.Event(), "replica": threading.Event()}
            pollers = [
                threading.Thread(target=poll_lists, args=(node, done, halves[name], reads[name], between[name]))
                for name, node in (("primary", primary), ("replica", replica))
            ]
            writers = [
                threading.Thread(target=write_batches, args=(primary.port, w, errors, w == 0, between["replica"]))
                for w in range(WRITERS)
            ]
            for t in pollers + writers:
                t.start()
            feeds = asyncio.gather(
                read_text(sub, readers[0]),
                read_text(live, readers[1], skip_init=True),
                read_binary(rep, readers[2]),
                read_text(rsub, readers[3]),
            )
            for t in writers:
                await asyncio.to_thread(t.join, 60)
            await feeds
            deadline = time.monotonic() + 30
            while replica.get("/snapshot").json["offset"] < TOTAL and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            done.set()
            for t in pollers:
                await asyncio.to_thread(t.join, 60)
            assert not errors, errors[:3]
            assert halves == {"primary": [], "replica": []}, {k: v[:5] for k, v in halves.items()}
            assert reads["primary"][-1] == reads["replica"][-1] == TOTAL
            # Not "more than two distinct counts": a replica handed the whole history in one
            # group (BATCH frames, more than TOTAL) shows none of it, then all of it.
            assert any(0 < n < TOTAL for n in reads["replica"]), "the replica's reads never saw it between batches"

    run(main(), timeout=120)
    assert all(r.rows == TOTAL and r.open is None for r in readers)
    refused = replica.post("/batch", {"ops": [{"op": "delete", "model": "user", "id": 1}]})
    assert refused.status == 405 and refused.json["code"] == "read_only_replica"


def test_a_replicate_out_file_cut_inside_a_batch_is_cut_back_to_its_start(tmp_path):
    """A FILE of `dbsvc replicate --out` (a log without its header) holding two batches of
    SIZE and part of a third: opened again, it is cut back to the end of the second."""
    tenant = create_tenant(str(tmp_path / "data"), "t")

    async def write() -> None:
        store = open_store(tenant)
        try:
            await store.insert("User", user(None, email="a@x"))
            for b in range(3):
                batch = store.begin_batch()
                for i in range(SIZE):
                    batch.insert("BlogPost", post(None, author=1, title=f"b{b}-{i}"))
                await batch.commit()
        finally:
            await store.aclose()

    asyncio.run(write())
    primary = open_store(tenant, readonly=True, replication=True)
    try:
        sizes = [len(f) for f in primary.frames_after(0)]
        data = b"".join(primary.frames_after(0))
    finally:
        primary.close()
    two = 1 + 2 * SIZE  # the user and two whole batches
    boundary = sum(sizes[:two])
    third = sizes[two : two + SIZE]
    cuts = [
        (boundary, two),
        (boundary + third[0] + 3, two),  # inside the third batch's second frame
        (boundary + sum(third) - 1, two),  # its last frame torn
        (boundary + sum(third[:-1]), two),  # every frame of it whole but the last
        (boundary + sum(third), two + SIZE),
    ]
    for cut, last in cuts:
        out = tmp_path / f"out{cut}"
        out.write_bytes(data[:cut])
        said: list[str] = []

        class Say:
            def say(self, message: str) -> None:
                said.append(message)

        sink = ReplicaFile.open(str(out), Say())
        try:
            assert sink.last_offset == last, (cut, said)
        finally:
            sink.close()
        assert out.stat().st_size == sum(sizes[:last]), cut


def test_a_replica_killed_with_9_mid_apply_keeps_whole_batches_and_loses_nothing(tmp_path):
    """A replica whose first group's fsync is held (DBSVC_FAULT, storage/files.py) is
    killed with -9 there: its log, opened again, ends at a batch's end (a group never
    holds part of a batch: follow.py rule 4), and restarted it catches up to the primary."""
    # batches of SIZE rows: more rows than a group holds (groups.py G1: up to BATCH frames, a
    # frame a row), so a group held at its fsync can never be the whole history
    count = BATCH // SIZE + 20
    gate = tmp_path / "gate"
    with server_pool(tmp_path) as pool:
        primary = pool(BLOG, None, tmp_path / "primary")
        conn = http.client.HTTPConnection("127.0.0.1", primary.port, timeout=30)
        try:
            for b in range(count):
                ops = [
                    {"op": "create", "model": "user", "record": {"email": f"k{b}-{i}@x.io", "name": f"k{b}"}}
                    for i in range(SIZE)
                ]
                conn.request("POST", "/batch", json.dumps({"ops": ops}), {"Content-Type": "application/json"})
                reply = conn.getresponse()
                assert reply.status == 200, reply.read()
                reply.read()
        finally:
            conn.close()
        follow = ("--follow", f"http://127.0.0.1:{primary.port}")
        replica = pool(BLOG, {"DBSVC_FAULT": f"fsync:1:HOLD={gate}"}, tmp_path / "replica", follow)
        deadline = time.monotonic() + 60
        while not (tmp_path / "gate.held").exists():
            assert time.monotonic() < deadline, "the replica never reached its first group's fsync"
            time.sleep(0.01)
        replica.proc.kill()
        replica.proc.wait(timeout=10)
        kept = open_store(str(tmp_path / "replica" / "default"), readonly=True)
        try:
            head = kept.head_offset
            names = Counter(
                u["name"]
                for at in range(0, head, 1000)
                for u in kept.list_records("User", Query(limit=1000, offset=at))[0]
            )
        finally:
            kept.close()
        assert head % SIZE == 0 and 0 < head < count * SIZE, head
        assert set(names.values()) == {SIZE} and len(names) == head // SIZE
        again = pool(BLOG, None, tmp_path / "replica", follow)
        deadline = time.monotonic() + 60
        while again.get("/snapshot").json["offset"] < count * SIZE:
            assert time.monotonic() < deadline, again.get("/metrics").json.get("replica")
            time.sleep(0.05)
        for at in range(0, count * SIZE, 1000):
            a, b = (srv.get(f"/api/user?limit=1000&offset={at}") for srv in (primary, again))
            assert (a.body, a.headers["dbsvc-watermark"]) == (b.body, b.headers["dbsvc-watermark"])
