"""Histories that cannot silently diverge (issue 30 item 1; docs/replication.md, "Histories").

The story: back up a primary at offset 20, write to 40, let a replica (or a `dbsvc replicate
--out` file) follow to 40, restore the backup as the primary and write 30 new rows (offsets
21-50). The replica must not resume at 40 and serve rows the primary no longer has under the
same offsets: it bootstraps again, or, when the primary holds fewer rows than it does, stops
as `diverged` and keeps its data until the operator says otherwise. Real server processes,
real sockets, real files; every wait is a poll with a deadline.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dbsvc.errors import CorruptLog
from dbsvc.storage.history import Fork, History, decode_history, encode_history
from support.server import ROOT, Server, server_pool
from support.storage import file_offsets
from support.wskit import open_ws, run

BLOG = ROOT / "schemas" / "blog.dbs"
DEADLINE = 60.0


# -- the history record (sans-IO units) --------------------------------------------------------


def test_a_history_shares_a_prefix_only_up_to_every_later_fork():
    a = History("a" * 32)
    b = a.fork(40)  # b holds a's rows up to 40
    c = b.fork(20)  # c holds b's rows up to 20, so a's up to 20 only
    assert b.shares_prefix(a.id, 40) and not b.shares_prefix(a.id, 41)
    assert c.shares_prefix(b.id, 20) and not c.shares_prefix(b.id, 21)
    assert c.shares_prefix(a.id, 20) and not c.shares_prefix(a.id, 30)
    assert c.shares_prefix(c.id, 10**9)
    assert not c.shares_prefix("d" * 32, 0) and c.forks == (Fork(a.id, 40), Fork(b.id, 20))


def test_the_history_file_is_checksummed():
    record = History("a" * 32).fork(7)
    data = encode_history(record)
    assert decode_history("history", data) == record
    with pytest.raises(CorruptLog, match="checksum"):
        decode_history("history", data.replace(b'"at":7', b'"at":8'))


# -- helpers ------------------------------------------------------------------------------------


def dbsvc(data: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update(SERVICE_DATA=str(data), SERVICE_TENANT="default")
    done = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done


def write_users(port: int, count: int, prefix: str, **fields) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i in range(count):
        conn.request(
            "POST",
            "/api/user",
            json.dumps({"email": f"{prefix}{i}@x.io", "name": prefix, **fields}),
            {"Content-Type": "application/json"},
        )
        reply = conn.getresponse()
        assert reply.status == 201, reply.read()
        reply.read()
    conn.close()


def consumer(tmp_path: Path, server: Server, out: Path) -> tuple[subprocess.Popen, Path]:
    """`dbsvc replicate URL --out FILE`, its stderr in a file (no pipe can fill)."""
    err = tmp_path / f"consumer-{time.monotonic_ns()}.stderr"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    with open(err, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "dbsvc.py"), "replicate", f"http://127.0.0.1:{server.port}", "--out", str(out)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=f,
        )
    return proc, err


def restore(primary: Server, backup: Path) -> None:
    """Stop the primary and put the backup back as its tenant (the old one moved aside)."""
    assert primary.stop() == 0
    restore_files(primary.data_dir, backup)


def restore_files(data: Path, backup: Path) -> None:
    """Put the backup back as the tenant of the stopped primary at `data` (the old one moved aside)."""
    os.rename(data / "default", data / "before-restore")
    dbsvc(data, "tenant", "create", "default", "--from", str(backup))


def emails(server: Server) -> list[str]:
    return [u["email"] for u in server.get("/api/user?limit=1000").json["data"]]


def wait_for(predicate, what: str, server: Server | None = None) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    log = "".join(server.log) if server is not None else ""
    raise AssertionError(f"timed out waiting for {what}\n{log}")


def caught_up(primary: Server, replica: Server) -> bool:
    snap = replica.get("/snapshot").json
    return snap["offset"] == primary.get("/snapshot").json["offset"] and snap["replica"]["state"] == "following"


@pytest.fixture
def nodes(tmp_path):
    with server_pool(tmp_path) as pool:

        def start(name: str, follow: Server | None = None, args: tuple[str, ...] = ()) -> Server:
            if follow is not None:
                args = ("--follow", f"http://127.0.0.1:{follow.port}", *args)
            return pool(BLOG, None, tmp_path / name, args)

        yield start


@pytest.fixture(scope="module")
def story_seed(tmp_path_factory):
    """The story's start, built once for the module: a primary backed up at 20 and written
    to 40, a replica that followed it to 40, both stopped (SIGTERM, as a routine restart);
    (the directory holding `primary`, `replica` and the backup `bk`, the primary's history
    at 40). Each test restores the primary differently, so it works on copies (`story`)."""
    root = tmp_path_factory.mktemp("story")
    with server_pool(root) as pool:
        primary = pool(BLOG, None, root / "primary")
        write_users(primary.port, 20, "old")
        dbsvc(primary.data_dir, "backup", str(root / "bk"))
        write_users(primary.port, 20, "lost")
        replica = pool(BLOG, None, root / "replica", ("--follow", f"http://127.0.0.1:{primary.port}"))
        wait_for(lambda: caught_up(primary, replica), "the replica at 40", replica)
        assert replica.get("/snapshot").json["offset"] == 40
        history = primary.get("/snapshot").json.get("history")
        assert replica.stop() == 0 and primary.stop() == 0
    return root, history


@pytest.fixture
def story(story_seed, tmp_path):
    """This test's copy of the story's start, restored: the primary's tenant is the backup
    at 20 again (`restore`), the replica still holds 40; nothing is running. Returns the
    primary's history before the restore."""
    root, history = story_seed
    for name in ("primary", "replica", "bk"):
        shutil.copytree(root / name, tmp_path / name, symlinks=True)
    restore_files(tmp_path / "primary", tmp_path / "bk")
    return history


# -- a replica (`serve --follow`) ----------------------------------------------------------------


def test_a_replica_of_a_primary_restored_from_a_backup_bootstraps_again(nodes, story):
    before = story
    primary = nodes("primary")
    write_users(primary.port, 30, "new")  # offsets 21-50: not the rows 21-40 it had
    replica = nodes("replica", follow=primary)
    wait_for(lambda: caught_up(primary, replica), "the replica at 50", replica)
    assert not any(e.startswith("lost") for e in emails(replica))
    assert emails(replica) == emails(primary)
    status = replica.get("/metrics").json["replica"]
    assert status["bootstraps"] == 1 and status["state"] == "following" and status["lag_offsets"] == 0
    after = primary.get("/snapshot").json["history"]
    assert after["id"] != before["id"] and after["forks"][-1] == {"id": before["id"], "at": 20}
    assert replica.get("/snapshot").json["history"] == after


def test_the_head_frame_alone_catches_a_restore_when_neither_side_has_a_history(nodes, story, tmp_path):
    """Tenants written before histories have no history file: the byte-equal head frame
    is then what tells the two histories apart."""
    (tmp_path / "primary" / "default" / "history").unlink(missing_ok=True)
    (tmp_path / "replica" / "default" / "history").unlink(missing_ok=True)
    primary = nodes("primary")
    assert primary.get("/snapshot").json.get("history") is None
    write_users(primary.port, 30, "new")
    replica = nodes("replica", follow=primary)
    wait_for(lambda: caught_up(primary, replica), "the replica at 50", replica)
    assert emails(replica) == emails(primary)
    assert replica.get("/metrics").json["replica"]["bootstraps"] == 1
    assert any("differs from this replica's" in line for line in replica.log)


def test_a_replica_ahead_of_its_restored_primary_keeps_its_rows_until_told(nodes, story):
    primary = nodes("primary")  # head 20, the replica holds 40
    replica = nodes("replica", follow=primary)
    wait_for(lambda: replica.get("/metrics").json["replica"]["state"] == "diverged", "diverged", replica)
    status = replica.get("/metrics").json["replica"]
    assert "primary holds offsets up to 20" in status["error"]
    health = replica.get("/health")
    assert health.status == 200 and health.json["replica"]["state"] == "diverged"
    assert replica.get("/snapshot").json["offset"] == 40 and len(emails(replica)) == 40  # still served
    assert any("--rebootstrap" in line for line in replica.log)
    assert replica.stop() == 0
    replica = nodes("replica", follow=primary, args=("--rebootstrap",))
    wait_for(lambda: caught_up(primary, replica), "the replica at 20", replica)
    assert emails(replica) == emails(primary) and len(emails(replica)) == 20


def test_an_empty_primary_does_not_empty_its_replica(nodes, tmp_path):
    primary = nodes("primary")
    write_users(primary.port, 5, "a")
    replica = nodes("replica", follow=primary)
    wait_for(lambda: caught_up(primary, replica), "the replica at 5", replica)
    assert replica.stop() == 0 and primary.stop() == 0
    shutil.rmtree(primary.data_dir / "default")  # the primary starts over, empty
    primary = nodes("primary")
    replica = nodes("replica", follow=primary)
    wait_for(lambda: replica.get("/metrics").json["replica"]["state"] == "diverged", "diverged", replica)
    assert len(emails(replica)) == 5


def test_an_import_into_a_used_tenant_forks_its_history_and_a_replica_at_its_head_continues(nodes, tmp_path):
    primary = nodes("primary")
    write_users(primary.port, 5, "a")
    replica = nodes("replica", follow=primary)
    wait_for(lambda: caught_up(primary, replica), "the replica at 5", replica)
    before = primary.get("/snapshot").json.get("history")
    assert replica.stop() == 0 and primary.stop() == 0
    lines = tmp_path / "more.jsonl"
    lines.write_text(
        "".join(f'{{"model": "User", "record": {{"email": "i{i}@x.io", "name": "I"}}}}\n' for i in range(3))
    )
    dbsvc(primary.data_dir, "import", str(BLOG), str(lines))
    primary = nodes("primary")
    replica = nodes("replica", follow=primary)
    wait_for(lambda: caught_up(primary, replica), "the replica at 8", replica)
    assert emails(replica) == emails(primary)
    assert replica.get("/metrics").json["replica"]["bootstraps"] == 0  # continued, not rebuilt
    after = primary.get("/snapshot").json["history"]
    assert after["id"] != before["id"] and after["forks"][-1] == {"id": before["id"], "at": 5}
    assert replica.get("/snapshot").json["history"] == after


# -- a `dbsvc replicate --out` file ---------------------------------------------------------------


def test_a_replica_file_of_a_primary_restored_from_a_backup_stops_naming_the_offset(nodes, tmp_path):
    primary = nodes("primary")
    write_users(primary.port, 20, "old")
    backup = tmp_path / "bk"
    dbsvc(primary.data_dir, "backup", str(backup))
    write_users(primary.port, 20, "lost")
    out = tmp_path / "replica.log"
    first, err = consumer(tmp_path, primary, out)
    try:
        wait_for(lambda: file_offsets(out)[-1:] == [40], "offset 40 in the file")
    finally:
        first.terminate()
    assert first.wait(timeout=30) == 0, err.read_text()
    held = out.read_bytes()
    restore(primary, backup)
    primary = nodes("primary")
    write_users(primary.port, 30, "new")
    again, err = consumer(tmp_path, primary, out)
    try:
        status = again.wait(timeout=DEADLINE)
    finally:
        if again.poll() is None:
            again.kill()
    message = err.read_text()
    assert status == 3, message  # dbsvc/exits.py: diverged, distinct from a failure a restart may cure
    assert "history" in message and "start a new replica file" in message
    assert out.read_bytes() == held and file_offsets(out) == list(range(1, 41))


def run_consumer_until(tmp_path: Path, server: Server, out: Path, offset: int) -> None:
    """A consumer run that follows to `offset`, then is stopped (SIGTERM, status 0)."""
    proc, err = consumer(tmp_path, server, out)
    try:
        wait_for(lambda: file_offsets(out)[-1:] == [offset], f"offset {offset} in the file")
    finally:
        proc.terminate()
    assert proc.wait(timeout=30) == 0, err.read_text()


def frame_at(server: Server, offset: int) -> bytes:
    async def take():
        async with open_ws(server, f"/replicate?after={offset - 1}", max_size=None) as ws:
            return await asyncio.wait_for(ws.recv(), 10)

    return run(take())


def rerun_consumer(tmp_path: Path, server: Server, out: Path) -> tuple[int, str]:
    proc, err = consumer(tmp_path, server, out)
    try:
        status = proc.wait(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
    return status, err.read_text()


def test_a_replica_file_records_its_servers_history(nodes, tmp_path):
    primary = nodes("primary")
    write_users(primary.port, 5, "a")
    out = tmp_path / "replica.log"
    run_consumer_until(tmp_path, primary, out, 5)
    recorded = decode_history(str(out) + ".history", (tmp_path / "replica.log.history").read_bytes())
    assert recorded.to_json() == primary.get("/snapshot").json["history"]


def test_a_replica_file_stops_on_a_rewrite_whose_head_frame_is_byte_identical(nodes, tmp_path):
    """The rows 21-40 written again, byte for byte, after a restore from a backup at 20: the
    head frame passes, the history id does not (issue 30 item 1)."""
    same = {"joined": "2025-01-01T00:00:00Z"}  # no `now` default: the frames repeat exactly
    primary = nodes("primary")
    write_users(primary.port, 20, "old", **same)
    backup = tmp_path / "bk"
    dbsvc(primary.data_dir, "backup", str(backup))
    write_users(primary.port, 20, "lost", **same)
    out = tmp_path / "replica.log"
    run_consumer_until(tmp_path, primary, out, 40)
    held, record = out.read_bytes(), (tmp_path / "replica.log.history").read_bytes()
    restore(primary, backup)
    primary = nodes("primary")
    write_users(primary.port, 20, "lost", **same)
    assert held.endswith(frame_at(primary, 40))  # the head-frame check alone would pass
    status, message = rerun_consumer(tmp_path, primary, out)
    assert status == 3, message
    assert "does not continue the history" in message and "offset 40" in message
    assert out.read_bytes() == held and (tmp_path / "replica.log.history").read_bytes() == record


def test_a_replica_file_at_the_head_of_an_import_continues_into_the_new_history(nodes, tmp_path):
    primary = nodes("primary")
    write_users(primary.port, 5, "a")
    out = tmp_path / "replica.log"
    run_consumer_until(tmp_path, primary, out, 5)
    assert primary.stop() == 0
    lines = tmp_path / "more.jsonl"
    lines.write_text(
        "".join(f'{{"model": "User", "record": {{"email": "i{i}@x.io", "name": "I"}}}}\n' for i in range(3))
    )
    dbsvc(primary.data_dir, "import", str(BLOG), str(lines))
    primary = nodes("primary")
    run_consumer_until(tmp_path, primary, out, 8)
    recorded = decode_history(str(out) + ".history", (tmp_path / "replica.log.history").read_bytes())
    assert recorded.to_json() == primary.get("/snapshot").json["history"]
    assert recorded.forks[-1].at == 5
