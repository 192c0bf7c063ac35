"""`dbsvc replicate` as a subprocess against real servers that change under it: stopped
and restarted under writes, a restarted server, a torn tail of FILE cut, an offline
compaction within the retention (and past it: offset gone)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from support.consumer_kit import (
    Consumer,
    base,
    clean_env,
    follow,
    head,
    last_offset,
    server_frames,
    wait_until,
    write_users,
)
from support.ports import free_port
from support.server import ROOT, server_pool, start_server
from support.storage import file_offsets


def test_stopped_and_restarted_under_writes_it_resumes_without_gap_or_duplicate(serve, tmp_path):
    server = serve()
    write_users(server.port, 20, "pre")
    writer = threading.Thread(target=write_users, args=(server.port, 300, "w"))
    writer.start()
    out = tmp_path / "replica.log"
    try:
        first = Consumer(tmp_path, base(server), "--out", str(out))
        wait_until(lambda: last_offset(out) >= 60, "60 frames", consumer=first)
        assert first.stop() == 0, first.stderr
        stopped_at = last_offset(out)
        second = Consumer(tmp_path, base(server), "--out", str(out))
    finally:
        writer.join(60)
    target = head(server)
    assert target == 320
    wait_until(lambda: last_offset(out) == target, "the head", consumer=second)
    assert second.stop() == 0
    assert f"after={stopped_at} " in second.stderr
    assert file_offsets(out) == list(range(1, 321))
    assert out.read_bytes() == server_frames(server, 0, 320)


def test_it_reconnects_to_a_restarted_server_and_goes_on(tmp_path):
    port = free_port()
    data = tmp_path / "data"
    env = {"SERVICE_PORT": str(port)}
    server = start_server(ROOT / "schemas" / "blog.dbs", data, env)
    out = tmp_path / "replica.log"
    try:
        write_users(server.port, 5, "a")
        consumer = Consumer(tmp_path, f"ws://127.0.0.1:{port}", "--out", str(out))
        wait_until(lambda: last_offset(out) == 5, "offset 5", consumer=consumer)
        assert server.stop() == 0
        server = start_server(ROOT / "schemas" / "blog.dbs", data, env)
        write_users(server.port, 5, "b")
        wait_until(lambda: last_offset(out) == 10, "offset 10 after the restart", consumer=consumer)
        assert consumer.stop() == 0
        assert "reconnecting after offset 5" in consumer.stderr
        assert out.read_bytes() == server_frames(server, 0, 10)
    finally:
        if server.proc.poll() is None:
            server.stop()


@pytest.fixture(scope="module")
def eight_users(tmp_path_factory):
    """One blog server holding eight users for the torn-tail cases: each writes a replica
    file of its own and none writes to the server, so the three read the same frames."""
    with server_pool(tmp_path_factory.mktemp("torn") / "data") as pool:
        server = pool()
        write_users(server.port, 8, "a")
        yield server


@pytest.mark.parametrize("tail", ["half frame", "header only", "zeros"])
def test_a_torn_tail_is_cut_and_the_run_resumes(eight_users, tmp_path, tail):
    server = eight_users
    out = tmp_path / "replica.log"
    follow(tmp_path, server, out)
    with open(out, "r+b") as f:  # where a run stopped at offset 6 left it
        f.truncate(len(server_frames(server, 0, 6)))
    seventh = server_frames(server, 6, 1)
    torn = {"half frame": seventh[: len(seventh) // 2], "header only": seventh[:9], "zeros": b"\0" * 4096}[tail]
    good_size = out.stat().st_size
    with open(out, "ab") as f:
        f.write(torn)
    consumer = follow(tmp_path, server, out)
    assert f"cutting a torn tail of {len(torn)} bytes at byte {good_size}" in consumer.stderr
    assert "resuming after offset 6" in consumer.stderr
    assert out.read_bytes() == server_frames(server, 0, 8)


def compacted_server(serve, tmp_path, retain_mb: int | None):
    """A blog server with 5 rows, stopped, compacted offline (`dbsvc compact`), restarted;
    `[runtime] replication_retain_mb` set to `retain_mb` unless None (the default)."""
    schema = tmp_path / "blog.dbs"
    text = (ROOT / "schemas" / "blog.dbs").read_text()
    if retain_mb is not None:
        text = text.replace("replication = true", f"replication = true\nreplication_retain_mb = {retain_mb}", 1)
    schema.write_text(text)
    data = tmp_path / "data"
    server = serve(schema, data_dir=data)
    write_users(server.port, 5)
    out = tmp_path / "replica.log"
    follow(tmp_path, server, out)
    frames = server_frames(server, 0, 5)
    with open(out, "r+b") as f:  # keep offsets 1..2 only
        f.truncate(len(server_frames(server, 0, 2)))
    assert server.stop() == 0
    compact = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "compact"],
        cwd=ROOT,
        env=clean_env({"SERVICE_DATA": str(data)}),
        capture_output=True,
        timeout=60,
    )
    assert compact.returncode == 0, compact.stderr
    return serve(schema, data_dir=data), out, frames


def test_offset_gone_ends_the_run_and_says_to_rebootstrap(serve, tmp_path):
    server, out, _frames = compacted_server(serve, tmp_path, retain_mb=0)
    before = out.read_bytes()
    consumer = Consumer(tmp_path, base(server), "--out", str(out))
    assert consumer.wait() == 1
    assert "HTTP 410 offset_gone: the server no longer holds the rows after offset 2" in consumer.stderr
    assert "Re-bootstrap" in consumer.stderr
    assert out.read_bytes() == before


def test_a_compaction_within_the_retention_does_not_stop_a_replica(serve, tmp_path):
    server, out, frames = compacted_server(serve, tmp_path, retain_mb=None)
    write_users(server.port, 1, "after")
    consumer = follow(tmp_path, server, out)
    assert "after=2 " in consumer.stderr
    assert out.read_bytes() == frames + server_frames(server, 5, 1)
