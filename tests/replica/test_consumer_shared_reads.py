"""`dbsvc replicate` as a subprocess against one blog server it only reads (a consumer is
a reader), shared by the module: the file holds exactly the server's frames, the refusals
about FILE and `--after` (an offset ahead, damage before the tail, `--after` against the
file, a second consumer), stdout's JSON lines, the terminal's progress; and bad URLs."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import time

import pytest

from support.consumer_kit import (
    DEADLINE,
    Consumer,
    base,
    follow,
    head,
    last_offset,
    server_frames,
    wait_until,
    write_users,
)
from support.server import server_pool
from support.storage import file_offsets

WRITTEN_HEAD = 12  # the shared server's frames: ten inserts, one update, one delete


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One blog server for the tests that only read it (a consumer is a reader): ten users,
    user 3 renamed, user 4 deleted, so offsets 1..12 hold all three kinds of frame. Shared to
    save a server start a test; the teardown fails the module if a test wrote to it (its head
    moved or its frames differ), since each test's figures assume these twelve frames."""
    with server_pool(tmp_path_factory.mktemp("written") / "data") as pool:
        server = pool()
        write_users(server.port, 10)
        assert server.request("PATCH", "/api/user/3", {"name": "B"}).status == 200
        assert server.request("DELETE", "/api/user/4").status == 204
        frames = server_frames(server, 0, WRITTEN_HEAD)
        yield server
        assert server.proc.poll() is None, "a test stopped the shared server"
        assert head(server) == WRITTEN_HEAD, "a test wrote to the shared server"
        assert server_frames(server, 0, WRITTEN_HEAD) == frames


def test_file_holds_exactly_the_frames_the_server_holds(written, tmp_path):
    server = written
    out = tmp_path / "replica.log"
    consumer = follow(tmp_path, server, out)
    assert out.read_bytes() == server_frames(server, 0, 12)
    assert file_offsets(out) == list(range(1, 13))
    assert "stopped by SIGTERM at offset 12" in consumer.stderr


def test_an_offset_ahead_of_the_server_ends_the_run(written, tmp_path):
    server = written
    consumer = Consumer(tmp_path, base(server), "--after", str(WRITTEN_HEAD + 1))
    assert consumer.wait() == 1
    assert "HTTP 400 offset_out_of_range" in consumer.stderr


def test_damage_before_the_tail_is_refused_and_nothing_is_cut(written, tmp_path):
    server = written
    out = tmp_path / "replica.log"
    follow(tmp_path, server, out)
    frames = server_frames(server, 0, 2)
    data = bytearray(out.read_bytes())
    data[len(frames) + 20] ^= 0x01  # a payload byte of frame 3
    out.write_bytes(bytes(data))
    consumer = Consumer(tmp_path, base(server), "--out", str(out))
    assert consumer.wait() == 1
    assert f"corrupt at byte {len(frames)}: payload checksum mismatch; a good frame follows" in consumer.stderr
    assert out.read_bytes() == bytes(data)


def test_after_must_agree_with_the_file(written, tmp_path):
    server = written
    out = tmp_path / "replica.log"
    follow(tmp_path, server, out)
    before = out.read_bytes()
    consumer = Consumer(tmp_path, base(server), "--out", str(out), "--after", "1")
    assert consumer.wait() == 2
    assert "--after 1 disagrees with" in consumer.stderr and "ends at offset 12" in consumer.stderr
    assert out.read_bytes() == before
    follow(tmp_path, server, out, "--after", "12")  # agreeing is fine
    assert out.read_bytes() == before


def test_a_second_consumer_on_the_same_file_is_refused(written, tmp_path):
    server = written
    out = tmp_path / "replica.log"
    first = Consumer(tmp_path, base(server), "--out", str(out))
    wait_until(lambda: last_offset(out) == WRITTEN_HEAD, "the head", consumer=first)
    second = Consumer(tmp_path, base(server), "--out", str(out))
    assert second.wait() == 2
    assert "in use by another" in second.stderr
    assert first.stop() == 0


def test_without_out_each_event_is_a_json_line_on_stdout(written, tmp_path):
    server = written
    consumer = Consumer(tmp_path, base(server), "--after", "10")
    wait_until(lambda: consumer.stdout.count(b"\n") == 2, "two lines", consumer=consumer)
    assert consumer.stop(signal.SIGINT) == 0
    lines = consumer.stdout.splitlines()
    frames = server_frames(server, 10, 2)
    assert lines == [frames[16 : 16 + len(lines[0])], frames[32 + len(lines[0]) :]]
    assert [(json.loads(line)["offset"], json.loads(line)["kind"]) for line in lines] == [
        (11, "update"),
        (12, "delete"),
    ]


def test_progress_is_drawn_on_a_terminal(written, tmp_path):
    server = written
    master, slave = pty.openpty()
    consumer = Consumer(tmp_path, base(server), "--out", str(tmp_path / "r.log"), stderr=slave)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + DEADLINE
    try:
        while b"lag 0" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 65536)
        assert b"lag 0" in seen, seen
        assert b"\r12 frames" in seen and b"offset 12" in seen
        assert consumer.stop() == 0
    finally:
        os.close(master)


def test_bad_urls_are_usage_errors(tmp_path):
    for url in ("ftp://127.0.0.1:1", "http://", "http://127.0.0.1:1/?after=3"):
        consumer = Consumer(tmp_path, url)
        assert consumer.wait() == 2, url
        assert "dbsvc: error: URL" in consumer.stderr
