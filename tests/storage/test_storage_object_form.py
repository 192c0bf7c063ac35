"""Every writer leaves a stored record that is exactly its record's JSON (session 27, wt-objform).

A table's live stored record is `compact_json(record)` as UTF-8 (rows.py), whoever wrote it:
a server's POST, PUT, PATCH, DELETE and `POST /batch` (a real server process on loopback),
the log replayed on open, a replica's runs and its general path, an offline import (one
record at a time and in bulk), a compaction and the reopen from its snapshot (format 4,
whose rows are those very texts), a migration to a schema with an added field; and a
tenant written by the tree before this form (snapshot format 3 and a log tail, kept in
tests/storage/golden/, written by tests/support/golden_tenant.py at c99385c) or turned into
format 1 or 2, opens to the same answers (records by id, `as_of` reads, list pages), byte
for byte as compact JSON. Real files in a temporary directory; no mocks.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.runtime import compact_json
from dbsvc.schema import parse_schema
from dbsvc.storage import Store, snapshot
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.tenants import compact_tenant, create_tenant
from support.golden_tenant import answers
from support.server import start_server
from support.storage import ROOT, open_store, post, run, snapshot_in_format_1, snapshot_in_format_2, user

GOLDEN = Path(__file__).resolve().parent / "golden"
ODD = ["a, b", 'q"uote\\back', "tab\tnl\n\x1f", "[,]", "{},{", "%s%%", "ünï ✓ 🙂", "한국어"]


def stored_as_json(store: Store) -> int:
    """Assert every live record of every table is stored as its record's JSON; the count."""
    seen = 0
    for name, table in store.tables.items():
        for id_, stored in table.live.items():
            record, _watermark = store.get(name, id_)
            assert stored == compact_json(record).encode("utf-8", "surrogatepass"), (name, id_, stored)
            assert list(record) == list(table.model.fields)
            seen += 1
    return seen


def reopened(tenant: str, **kw) -> int:
    s = open_store(tenant, **kw)
    try:
        return stored_as_json(s)
    finally:
        s.close()


def test_a_server_s_writes_are_stored_as_the_json_it_answers(tmp_path):
    """POST, PUT, PATCH, DELETE and a batch through a real server: a GET's body is the
    stored text byte for byte; then the log replayed, compacted, reopened from the snapshot."""
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path / "data")
    try:
        uids = [
            server.post("/api/user", {"email": f"u{i}@x.io", "name": ODD[i % len(ODD)]}).json["id"] for i in range(4)
        ]
        pids = []
        for i, text in enumerate(ODD):
            body = {
                "author_id": uids[i % 4],
                "title": text,
                "body": text[::-1],
                "score": i / 3,
                "tags": [text, {"k": i}],
            }
            pids.append(server.post("/api/blog-post", body).json["id"])
        put = {"author_id": uids[1], "title": "put, again", "body": "b", "score": 2, "published": True, "tags": None}
        assert server.request("PUT", f"/api/blog-post/{pids[0]}", put).status == 200
        assert (
            server.request("PATCH", f"/api/blog-post/{pids[1]}", {"title": "patched ✓", "tags": {"a": []}}).status
            == 200
        )
        assert server.request("DELETE", f"/api/blog-post/{pids[2]}").status == 204
        ops = [
            {"op": "create", "model": "user", "record": {"email": "batch@x.io", "name": "B, atch"}},
            {
                "op": "create",
                "model": "blog-post",
                "record": {"author_id": {"$op": 0}, "title": "t", "body": "b", "score": 1},
            },
            {"op": "patch", "model": "blog-post", "id": pids[3], "record": {"score": -0.5}},
            {"op": "delete", "model": "blog-post", "id": pids[4]},
        ]
        assert server.post("/batch", {"ops": ops}).status == 200
        live = [(m, r["id"]) for m in ("user", "blog-post") for r in server.get(f"/api/{m}?limit=1000").json["data"]]
        bodies = {key: server.get(f"/api/{key[0]}/{key[1]}").body for key in live}
    finally:
        server.stop()
    tenant = str(tmp_path / "data" / "default")
    s = open_store(tenant, readonly=True)  # the log replayed: no snapshot yet
    try:
        assert stored_as_json(s) == len(live) == 4 + 1 + len(ODD) - 2 + 1
        names = {"user": "User", "blog-post": "BlogPost"}
        for (model, id_), body in bodies.items():
            assert s.table(names[model]).live[id_] == body  # the GET answered the stored text
    finally:
        s.close()
    compact_tenant(str(tmp_path / "data"), "default")
    assert reopened(tenant) == len(live)
    assert _snapshot_rows(tenant) == {key: body for key, body in _stored_texts(tenant).items()}


def _stored_texts(tenant: str) -> dict[tuple[str, int], bytes]:
    s = open_store(tenant, readonly=True)
    try:
        return {(name, i): t for name, table in s.tables.items() for i, t in table.live.items()}
    finally:
        s.close()


def _snapshot_rows(tenant: str) -> dict[tuple[str, int], bytes]:
    """Each row of a format-4 snapshot, by model and id: the text as the file holds it."""
    lines = open(os.path.join(tenant, "snapshot"), "rb").read().split(b"\n")[:-1]
    header = json.loads(lines[0][9:])
    assert header["format"] == snapshot.FORMAT == 4
    rows: dict[tuple[str, int], bytes] = {}
    at = 1
    for meta in header["models"]:
        for _block in range(-(-meta["count"] // header["block_rows"])):
            for text in lines[at + 1][9:][1:-1].split(b",\t"):
                rows[(meta["name"], json.loads(text)["id"])] = text
            at += 3
    return rows


def test_a_replica_s_runs_and_its_general_path_store_the_records_json(tmp_path):
    """A run of inserts (followrun.py), a run of updates, a delete and a record of new value
    types (the general path), applied in groups as a follower applies them."""
    records = [user(n, name=ODD[n % len(ODD)], profile=[ODD[n % 3], {"n": n}]) for n in range(1, 9)]
    frames = [ChangeEvent(EventKind.INSERT, "User", n, n, n, r).frame() for n, r in enumerate(records, 1)]
    for offset, id_ in ((9, 2), (10, 3)):
        new = user(id_, name="renamed, ✓", age=30)
        frames.append(ChangeEvent(EventKind.UPDATE, "User", offset, offset, id_, new, records[id_ - 1]).frame())
    frames.append(ChangeEvent(EventKind.DELETE, "User", 11, 11, 4, records[3]).frame())
    store = open_store(create_tenant(str(tmp_path / "replica"), "t"), replication=True)
    try:

        async def apply() -> None:
            await store.apply_replicated_frames(frames[:1])
            await store.apply_replicated_frames(frames[1:8])
            await store.apply_replicated_frames(frames[8:])

        run(apply())
        assert stored_as_json(store) == 7
        assert store.get("User", 2)[0]["name"] == "renamed, ✓"
    finally:
        store.close()


@pytest.mark.parametrize("count", [3, 40], ids=["one-by-one", "in-bulk"])
def test_an_offline_import_stores_the_records_json(tenant, count):
    """`Store.insert_batch`: a batch smaller than the table is inserted one at a time, one
    at least as large packed in one encode (table.py `insert_many`, rows.py `pack_many`)."""
    s = open_store(tenant)
    try:
        run(s.insert("User", user(1)))
        rows = [("User", user(i, name=ODD[i % len(ODD)], profile={"k": [i, "},{"]})) for i in range(2, 2 + count)]
        s.insert_batch(rows)
        assert stored_as_json(s) == 1 + count
    finally:
        s.close()
    assert reopened(tenant) == 1 + count


def test_a_migration_stores_the_records_json_with_the_added_field(tenant):
    """An added defaulted field: the records read from the log and from the snapshot are
    stored in the new schema's form, the default in its place."""
    s = open_store(tenant)
    try:

        async def fill() -> None:
            for i in range(1, 4):
                await s.insert("User", user(i))
            for i in range(1, 6):
                await s.insert("BlogPost", post(i, author=1 + i % 3, title=ODD[i], tags=[ODD[i]]))

        run(fill())
    finally:
        s.close()
    text = (ROOT / "schemas" / "blog.dbs").read_text()
    evolved = compile_schema(
        parse_schema(
            text.replace("  tags      json?\n", "  tags      json?\n  rank      int      @default(5)\n", 1), "e.dbs"
        )
    )
    for step in ("log", "snapshot"):
        if step == "snapshot":
            compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
        s = Store.open(tenant, evolved.MODELS, evolved.DESCRIPTION)
        try:
            assert stored_as_json(s) == 8
            assert all(t.endswith(b',"rank":5}') for t in s.table("BlogPost").live.values())
        finally:
            s.close()


def _golden_copy(tmp_path: Path) -> str:
    tenant = tmp_path / "data" / "format3"
    shutil.copytree(GOLDEN / "format3", tenant)
    return str(tenant)


def _answers(tenant: str) -> str:
    s = open_store(tenant, readonly=True)
    try:
        stored_as_json(s)
        return compact_json(answers(s))
    finally:
        s.close()


def test_a_tenant_the_older_tree_wrote_opens_to_the_same_answers(tmp_path):
    """Snapshot format 3 (array rows) and a log tail, written by the tree at c99385c: the
    same records, `as_of` reads and list pages as that tree answered, byte for byte."""
    tenant = _golden_copy(tmp_path)
    want = (GOLDEN / "format3.answers.json").read_text(encoding="utf-8").rstrip("\n")
    assert json.loads(open(os.path.join(tenant, "snapshot"), "rb").readline()[9:])["format"] == 3
    assert _answers(tenant) == want
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))  # into format 4: the same again
    assert json.loads(open(os.path.join(tenant, "snapshot"), "rb").readline()[9:])["format"] == 4
    got = json.loads(_answers(tenant))
    old = json.loads(want)
    for model in ("User", "BlogPost"):  # a new epoch: its watermarks count its rows, as_of from them
        assert got[model]["get"] == old[model]["get"]
        head = [(name, page, total, more) for name, page, total, _mark, more in got[model]["lists"]]
        was = [(name, page, total, more) for name, page, total, _mark, more in old[model]["lists"]]
        assert [e for e in head if not e[0].startswith("as_of")] == [e for e in was if not e[0].startswith("as_of")]


@pytest.mark.parametrize("form", ["format 1", "format 2"])
def test_a_snapshot_of_array_rows_opens_to_the_same_answers(tmp_path, form):
    """The same tenant compacted into format 4, then rewritten as the writers of formats 1
    and 2 wrote it (every row an array): the same answers."""
    tenant = _golden_copy(tmp_path)
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    want = _answers(tenant)
    path = os.path.join(tenant, "snapshot")
    if form == "format 1":
        snapshot_in_format_1(path)
    else:
        snapshot_in_format_2(path)
    assert json.loads(open(path, "rb").readline()[9:])["format"] == int(form[-1])
    assert _answers(tenant) == want
