"""`dbsvc backup DIR` beside a running server and `dbsvc tenant create NAME --from DIR`.

The concurrent test drives a real server process with 32 HTTP writer connections (each its
own thread and `http.client` connection) while `dbsvc backup` runs as a subprocess, then
restores the backup and compares it with the server's own log: the restored state must be
exactly the state after some prefix of the rows the server wrote, and hold every write
acknowledged before the backup started.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from dbsvc.datatools.backup import restore_backup, take_backup
from dbsvc.runtime import Query
from dbsvc.storage.compact import compact_directory
from dbsvc.storage.lock import WriterLock
from dbsvc.storage.logfile import LogScan
from dbsvc.storage.migrate import read_description
from dbsvc.storage.tenants import create_tenant
from support.cli import run_on_tenant as cli
from support.server import start_server
from support.storage import BLOG, open_store, post, user
from support.tree import dir_image

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCHEMA = str(ROOT / "schemas" / "blog.dbs")


def state(directory: str) -> dict[str, dict]:
    store = open_store(directory, readonly=True)
    try:
        return {m.name: {r["id"]: r for r in store.list_records(m.name, Query(limit=1 << 40))[0]} for m in BLOG.MODELS}
    finally:
        store.close()


def seed(directory: str, users: int = 40, posts: int = 80) -> None:
    store = open_store(directory)

    async def go() -> None:
        for i in range(1, users + 1):
            await store.insert("User", user(i, profile={"i": i}))
        for i in range(1, posts + 1):
            await store.insert("BlogPost", post(i, author=1 + i % users, score=i / 3))
        await store.replace("User", 2, user(2, name="second"))
        await store.delete("BlogPost", 3)

    asyncio.run(go())
    store.close()


@pytest.fixture
def seeded(data) -> str:
    directory = create_tenant(str(data), "t")
    seed(directory)
    return directory


def test_backup_and_restore_through_the_command_line(data, seeded, tmp_path):
    backup = tmp_path / "bk"
    done = cli(data, "backup", str(backup))
    assert done.returncode == 0, done.stderr
    assert "head offset 122" in done.stdout
    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["kind"] == "dbsvc-backup" and manifest["tenant"] == "t" and manifest["head_offset"] == 122
    assert sorted(os.listdir(backup)) == ["history", "log", "manifest.json", "schema.json"]
    for name, meta in manifest["files"].items():
        assert hashlib.sha256((backup / name).read_bytes()).hexdigest() == meta["sha256"]
    done = cli(data, "tenant", "create", "copy", "--from", str(backup))
    assert done.returncode == 0, done.stderr
    assert state(str(data / "copy")) == state(seeded)
    listed = cli(data, "tenant", "list").stdout.split()
    assert "copy" in listed and not any(name.startswith(".") for name in listed)


def test_backup_changes_no_byte_of_the_tenant(data, seeded, tmp_path):
    os.unlink(os.path.join(seeded, "LOCK"))  # a backup must not even create the lock file
    image = dir_image(seeded)
    stat = {name: os.stat(os.path.join(seeded, name)).st_mtime_ns for name in os.listdir(seeded)}
    take_backup(seeded, str(tmp_path / "bk"), "t")
    assert dir_image(seeded) == image
    assert {name: os.stat(os.path.join(seeded, name)).st_mtime_ns for name in os.listdir(seeded)} == stat


def test_backup_of_a_compacted_tenant_keeps_snapshot_log_epoch_and_offsets(data, seeded, tmp_path):
    with_lock(seeded, lambda: compact_directory(seeded, read_description(seeded), retain_bytes=1 << 20))
    store = open_store(seeded)
    asyncio.run(store.insert("User", user(900)))
    epoch, head, marks = store.epoch, store.head_offset, store.watermarks()
    versions = _versions(store)  # each record's ETag (issue 35): the snapshot's and the log's
    store.close()
    take_backup(seeded, str(tmp_path / "bk"), "t")
    assert sorted(os.listdir(tmp_path / "bk")) == ["history", "log", "manifest.json", "schema.json", "snapshot"]
    restore_backup(str(tmp_path / "bk"), str(data), "copy")
    copy = open_store(str(data / "copy"), readonly=True)
    assert (copy.epoch, copy.head_offset, copy.watermarks()) == (epoch, head, marks)
    assert _versions(copy) == versions and len(set(versions["User"].values())) > 1
    copy.close()
    assert state(str(data / "copy")) == state(seeded)


def _versions(store) -> dict:
    return {name: {i: store.version(name, i) for i in table.live} for name, table in store.tables.items()}


def with_lock(directory: str, action):
    lock = WriterLock.acquire(directory)
    try:
        return action()
    finally:
        lock.release()


def test_backup_cuts_a_torn_tail_at_the_last_whole_frame(data, seeded, tmp_path):
    with open(os.path.join(seeded, "log"), "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x7b\x00\x00")  # half a frame header: an append in flight
    manifest = take_backup(seeded, str(tmp_path / "bk"), "t")
    assert manifest["head_offset"] == 122
    restore_backup(str(tmp_path / "bk"), str(data), "copy")
    assert state(str(data / "copy")) == state(seeded)


def test_backup_between_a_compactions_commit_point_and_its_log_rename_reads_log_new(data, seeded, tmp_path):
    """The files a compaction leaves between its steps 5 and 8 (storage/compact.py): the new
    snapshot is in place, its log still under log.new, the old log under log."""
    with_lock(seeded, lambda: compact_directory(seeded, read_description(seeded), retain_bytes=0))
    store = open_store(seeded)
    asyncio.run(store.insert("User", user(901)))
    store.close()
    old_log = Path(seeded, "log").read_bytes()
    expected = state(seeded)
    with_lock(seeded, lambda: compact_directory(seeded, read_description(seeded), retain_bytes=0))
    os.rename(os.path.join(seeded, "log"), os.path.join(seeded, "log.new"))
    Path(seeded, "log").write_bytes(old_log)
    take_backup(seeded, str(tmp_path / "bk"), "t")
    restore_backup(str(tmp_path / "bk"), str(data), "copy")
    assert state(str(data / "copy")) == expected


def test_backup_before_a_compactions_commit_point_reads_the_old_pair(data, seeded, tmp_path):
    expected = state(seeded)
    Path(seeded, "snapshot.new").write_bytes(b"half a snapshot")
    Path(seeded, "log.new").write_bytes(b"a log header in the making")
    take_backup(seeded, str(tmp_path / "bk"), "t")
    restore_backup(str(tmp_path / "bk"), str(data), "copy")
    assert state(str(data / "copy")) == expected


def test_backups_racing_compactions_are_never_torn(data, seeded, tmp_path):
    expected = state(seeded)
    stop = threading.Event()
    compactions = []

    def compact_in_a_loop() -> None:
        while not stop.is_set():
            compactions.append(
                with_lock(seeded, lambda: compact_directory(seeded, read_description(seeded), retain_bytes=0))
            )

    thread = threading.Thread(target=compact_in_a_loop)
    thread.start()
    try:
        for i in range(12):
            take_backup(seeded, str(tmp_path / f"bk{i}"), "t")
            # The next backup starts once a compaction begun after this one has ended (the
            # second to end from here: the first may have committed during the backup). The
            # loop goes on during each backup, but a compaction slower than the backups (the
            # first took six of them in a run at load) left runs of them on one generation,
            # and one slower than all twelve would have left "different generations" unmet.
            made, deadline = len(compactions), time.monotonic() + 60
            while len(compactions) < made + 2:
                assert time.monotonic() < deadline, "no compaction ended within 60 s"
                time.sleep(0.005)
    finally:
        stop.set()
        thread.join(timeout=120)
    epochs = set()
    for i in range(12):
        restore_backup(str(tmp_path / f"bk{i}"), str(data), f"copy{i}")
        assert state(str(data / f"copy{i}")) == expected
        epochs.add(json.loads((tmp_path / f"bk{i}" / "manifest.json").read_text())["epoch"])
    assert len(epochs) == 12  # each backup met a later generation than the one before it


# -- the backup under 32 concurrent writers of a real server ------------------------------------


class Writer(threading.Thread):
    """One HTTP connection creating users (and now and then replacing its last one); records
    the ids of acknowledged creates with the time of the acknowledgement."""

    def __init__(self, port: int, number: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port, self.number, self.stop = port, number, stop
        self.acked: list[tuple[float, int]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            i = 0
            while not self.stop.is_set():
                i += 1
                email = f"w{self.number}-{i}@example.com"
                body = json.dumps({"email": email, "name": f"writer {self.number}", "age": i % 100})
                conn.request("POST", "/api/user", body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                reply = resp.read()
                assert resp.status == 201, reply
                id_ = json.loads(reply)["id"]
                self.acked.append((time.monotonic(), id_))
                if i % 5 == 0:
                    body = json.dumps({"email": email, "name": f"writer {self.number} again", "age": i % 100})
                    conn.request("PUT", f"/api/user/{id_}", body=body, headers={"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    reply = resp.read()
                    assert resp.status == 200, reply
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def replay_prefix(log_path: str, head: int) -> dict:
    """User records after the first `head` rows of the server's log (no compaction ran)."""
    with open(log_path, "rb") as f:
        scan = LogScan(log_path, f.read())
    users: dict = {}
    for offset, payload in scan.records():
        if offset > head:
            break
        event = json.loads(payload)
        if event["model"] != "User":
            continue
        if event["kind"] == "delete":
            users.pop(event["id"], None)
        else:
            users[event["id"]] = event["record"]
    return users


def run_backup_under_writers(data: Path, tmp_path: Path, writers: int, before_s: float, after_s: float) -> None:
    directory = create_tenant(str(data), "t")
    seed(directory, users=20, posts=10)
    server = start_server(SCHEMA, data, env={"SERVICE_TENANT": "t", "SERVICE_SYNC": "full"})
    stop = threading.Event()
    threads = [Writer(server.port, n, stop) for n in range(writers)]
    try:
        started = time.monotonic()
        for t in threads:
            t.start()
        # Let every writer get going (and at least `before_s` pass) before the backup starts.
        while sum(len(t.acked) for t in threads) < 20 * writers or time.monotonic() < started + before_s:
            assert time.monotonic() < started + 120, "writers made no progress"
            assert not any(t.error for t in threads), [t.error for t in threads]
            time.sleep(0.05)
        began = time.monotonic()
        acked_before = {id_ for t in threads for when, id_ in list(t.acked) if when < began}
        done = cli(data, "backup", str(tmp_path / "bk"))
        assert done.returncode == 0, done.stderr
        writes_during = sum(1 for t in threads for when, _id in list(t.acked) if when >= began)
        time.sleep(after_s)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
        assert server.stop() == 0
    assert not any(t.error for t in threads), [t.error for t in threads]
    assert writes_during > 0, "the backup ran while nobody wrote"
    manifest = json.loads((tmp_path / "bk" / "manifest.json").read_text())
    done = cli(data, "tenant", "create", "restored", "--from", str(tmp_path / "bk"))
    assert done.returncode == 0, done.stderr
    restored = state(str(data / "restored"))
    assert acked_before <= set(restored["User"])
    assert restored["User"] == replay_prefix(os.path.join(directory, "log"), manifest["head_offset"])
    later = state(directory)["User"]
    assert set(restored["User"]) < set(later)  # writes went on after the backup


def test_backup_under_32_concurrent_writers_restores_an_acknowledged_prefix(data, tmp_path):
    run_backup_under_writers(data, tmp_path, writers=32, before_s=0.5, after_s=0.3)


@pytest.mark.slow
def test_backups_under_32_writers_soak(tmp_path):
    for round_ in range(5):
        run_backup_under_writers(
            tmp_path / f"data{round_}", tmp_path / f"r{round_}", writers=32, before_s=2.0, after_s=1.0
        )


# -- restore refusals ---------------------------------------------------------------------------


@pytest.fixture
def backup(seeded, tmp_path) -> Path:
    take_backup(seeded, str(tmp_path / "bk"), "t")
    return tmp_path / "bk"


def rewrite_manifest(backup: Path) -> None:
    manifest = json.loads((backup / "manifest.json").read_text())
    for name, meta in manifest["files"].items():
        data = (backup / name).read_bytes()
        meta["bytes"], meta["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (backup / "manifest.json").write_text(json.dumps(manifest))


def flip_log_byte(backup: Path) -> None:
    raw = bytearray((backup / "log").read_bytes())
    raw[200] ^= 0x01
    (backup / "log").write_bytes(bytes(raw))


def cut_log(backup: Path) -> None:
    raw = (backup / "log").read_bytes()
    (backup / "log").write_bytes(raw[:-10])


def drop_frames(backup: Path) -> None:
    raw = (backup / "log").read_bytes()
    with open(backup / "log", "rb") as f:
        scan = LogScan("log", f.read())
        starts = []  # inside the loop, scan.end is where this frame starts
        for _record in scan.records():
            starts.append(scan.end)
    (backup / "log").write_bytes(raw[: starts[-3]])  # frames 120-122 gone


DAMAGE = [
    ("altered file", flip_log_byte, "log: SHA-256 differs from the manifest's (the file was altered)"),
    ("truncated file", cut_log, "bytes, the manifest says"),
    ("no manifest", lambda b: os.unlink(b / "manifest.json"), "is not a complete backup: manifest.json is missing"),
    (
        "foreign manifest",
        lambda b: (b / "manifest.json").write_text('{"kind": "other"}'),
        "not a dbsvc backup manifest of format 1",
    ),
    (
        "path in manifest",
        lambda b: (b / "manifest.json").write_text('{"kind": "dbsvc-backup", "format": 1, "files": {"../x": {}}}'),
        '"files" must map some of',
    ),
    ("bad crc, manifest matching", lambda b: (flip_log_byte(b), rewrite_manifest(b)), "corrupt at byte"),
    (
        "frames missing, manifest matching",
        lambda b: (drop_frames(b), rewrite_manifest(b)),
        "ends at offset 119, the manifest says 122",
    ),
]


@pytest.mark.parametrize("damage, message", [(d, m) for _n, d, m in DAMAGE], ids=[n for n, _d, _m in DAMAGE])
def test_restore_verifies_the_backup_before_installing_anything(data, backup, damage, message, cli_in_process):
    # restore's checks, in process (seven Python starts fewer); the command line's restore
    # and its refusals run as subprocesses in the round trip above and the test below
    damage(backup)
    done = cli_in_process(data, "tenant", "create", "copy", "--from", str(backup))
    assert done.returncode == 1, done.stderr
    assert message in done.stderr
    assert sorted(os.listdir(data)) == ["t"]  # no tenant, no staging directory left


def test_restore_refuses_an_existing_tenant_and_a_bad_name(data, backup):
    image = dir_image(str(data / "t"))
    done = cli(data, "tenant", "create", "t", "--from", str(backup))
    assert done.returncode == 1 and "tenant 't' already exists" in done.stderr
    assert dir_image(str(data / "t")) == image
    done = cli(data, "tenant", "create", "../up", "--from", str(backup))
    assert done.returncode == 1 and "invalid tenant name '../up'" in done.stderr
    assert sorted(os.listdir(data)) == ["t"]


def test_backup_refuses_a_non_empty_directory_and_a_missing_tenant(data, seeded, tmp_path):
    target = tmp_path / "full"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    done = cli(data, "backup", str(target))
    assert done.returncode == 1 and "already exists and is not empty" in done.stderr
    assert os.listdir(target) == ["keep.txt"]
    done = cli(data, "backup", str(tmp_path / "new"), tenant="ghost")
    assert done.returncode == 1 and "dbsvc tenant create ghost" in done.stderr


def test_backup_of_a_never_opened_tenant_restores_an_empty_tenant(data, tmp_path):
    create_tenant(str(data), "empty")
    take_backup(str(data / "empty"), str(tmp_path / "bk"), "empty")
    restore_backup(str(tmp_path / "bk"), str(data), "copy")
    assert os.listdir(data / "copy") == []
    assert state(str(data / "copy")) == {"User": {}, "BlogPost": {}, "Comment": {}}
    shutil.rmtree(tmp_path / "bk")
