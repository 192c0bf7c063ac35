"""`dbsvc import --frames FILE`: an empty tenant rebuilt from a `dbsvc replicate --out` file.

The round trip runs real processes: a server written to over HTTP, `dbsvc replicate --out`
following it, `dbsvc import --frames` into a new data directory, a server on the rebuilt
tenant (same records, same offsets, same head), and `replicate --out` resuming the same
FILE against it. The refusals use a FILE cut from a real tenant's log (a `replicate --out`
file is that log's frames without its 40-byte header, byte for byte: docs/replication.md)
and check the message and that the tenant's bytes did not change.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from dbsvc.storage.tenants import create_tenant
from support.cli import clean_env
from support.cli import run_on_tenant as cli
from support.server import ROOT, start_server
from support.storage import file_offsets, open_store, post, user, write_eight_rows
from support.tree import dir_image

SCHEMA = str(ROOT / "schemas" / "blog.dbs")
NOTES = str(ROOT / "schemas" / "notes.dbs")
LOG_HEADER = 40  # storage/logfile.py: the log's header, which a `replicate --out` file lacks
DEADLINE = 60.0


def wait_until(predicate, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"replicate exited {proc.returncode} before {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def replicate_into(out: Path, port: int, head: int, tmp: Path) -> str:
    """`dbsvc replicate --out out` until `out` holds offset `head`, then SIGINT; its stderr."""
    err = tmp / f"replicate-{out.stat().st_size if out.exists() else 0}.stderr"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "dbsvc.py"), "replicate", f"http://127.0.0.1:{port}", "--out", str(out)],
            cwd=ROOT,
            env=clean_env(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        wait_until(lambda: (file_offsets(out) or [0])[-1] == head, f"offset {head} in {out.name}", proc)
        wait_until(lambda: b"dbsvc replicate: " in err.read_bytes(), "the consumer's first line", proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=DEADLINE) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return err.read_text()


def send(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict | None]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, None if body is None else json.dumps(body), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        data = reply.read()
        return reply.status, json.loads(data) if data else None
    finally:
        conn.close()


def everything(port: int) -> dict[str, list[dict]]:
    return {path: send(port, "GET", f"/api/{path}?limit=1000")[1] for path in ("user", "blog-post")}  # type: ignore[misc]


def test_round_trip_keeps_records_offsets_and_head_and_a_consumer_resumes(tmp_path):
    primary = start_server(SCHEMA, tmp_path / "primary")
    try:
        for i in range(1, 6):
            assert send(primary.port, "POST", "/api/user", user(i, email=f"u{i}@x.io"))[0] == 201
        assert send(primary.port, "POST", "/api/blog-post", post(1, author=2))[0] == 201
        assert send(primary.port, "PATCH", "/api/user/3", {"name": "Three"})[0] == 200
        assert send(primary.port, "DELETE", "/api/user/4")[0] == 204
        head = primary.get("/snapshot").json["offset"]
        assert head == 8
        out = tmp_path / "events.log"
        replicate_into(out, primary.port, head, tmp_path)
        expected = everything(primary.port)
        as_of = send(primary.port, "GET", "/api/user/3?as_of=3")
    finally:
        primary.stop()

    rebuilt_data = tmp_path / "rebuilt"
    create_tenant(str(rebuilt_data), "default")
    done = cli(rebuilt_data, "import", SCHEMA, "--frames", str(out), tenant="default")
    assert done.returncode == 0, done.stderr
    assert "imported 8 frames" in done.stderr and "head offset 8" in done.stderr
    assert f"forked at offset 8 from {out.name}.history's" in done.stderr

    rebuilt = start_server(SCHEMA, rebuilt_data)
    try:
        assert rebuilt.get("/snapshot").json["offset"] == head
        assert everything(rebuilt.port) == expected
        assert send(rebuilt.port, "GET", "/api/user/3?as_of=3") == as_of  # history kept, not just rows
        # The same FILE resumes against the rebuilt tenant: its history continues FILE's.
        assert send(rebuilt.port, "POST", "/api/user", user(9, email="u9@x.io"))[0] == 201
        said = replicate_into(out, rebuilt.port, head + 1, tmp_path)
        assert f"after={head}" in said
    finally:
        rebuilt.stop()
    assert file_offsets(out) == list(range(1, head + 2))


# -- refusals, on a FILE cut from a real tenant's log -----------------------------------------


@pytest.fixture
def frames(tmp_path) -> Path:
    """A `replicate --out` file of 8 frames: 5 users, a post, an update and a delete (the
    log of a real tenant without its header)."""
    source = tmp_path / "source"
    source.mkdir()
    write_eight_rows(str(source))
    out = tmp_path / "events.log"
    out.write_bytes((source / "log").read_bytes()[LOG_HEADER:])
    assert file_offsets(out) == list(range(1, 9))
    return out


def frame_starts(path: Path) -> list[int]:
    data, starts, pos = path.read_bytes(), [], 0
    while pos + 16 <= len(data):
        starts.append(pos)
        pos += 16 + int.from_bytes(data[pos + 12 : pos + 16], "big")
    return starts


def image(data: Path) -> dict[str, bytes]:
    """Every file's bytes but LOCK's (a tool that locks the tenant writes its pid there), and
    no staging directory left behind."""
    assert all(".frames-import" not in dirs for _path, dirs, _files in os.walk(data))
    return {name: blob for name, blob in dir_image(data).items() if not name.endswith("LOCK")}


def refused(data: Path, run, *args: str, served: bool = True) -> str:
    """Run `import ARGS` through `run` on tenant t, empty (head 0) and, when `served`, opened
    once by the blog schema; it must fail and leave every byte as it was. Its standard error.
    `run` is the `cli_in_process` fixture: these are import's own checks, which cost less than
    a Python start each; a refused import still runs as a subprocess in the tests of a tenant
    holding rows, of FILE given with --frames, and of an empty file."""
    create_tenant(str(data), "t")
    if served:
        open_store(str(data / "t")).close()
    before = image(data)
    assert ("t/log" in before) == served
    done = run(data, "import", *args)
    assert done.returncode != 0, done.stderr
    assert image(data) == before, "a refused import changed the tenant"
    return done.stderr


def test_damaged_frame_is_refused_naming_byte_and_offset(data, frames, cli_in_process):
    blob = bytearray(frames.read_bytes())
    third = frame_starts(frames)[2]
    blob[third + 20] ^= 0x01
    frames.write_bytes(bytes(blob))
    err = refused(data, cli_in_process, SCHEMA, "--frames", str(frames))
    assert f"corrupt at byte {third}: the frame of offset 3: payload checksum mismatch" in err


def test_torn_tail_is_left_out_and_reported(data, frames):
    size = frames.stat().st_size
    last = frame_starts(frames)[-1]
    with open(frames, "r+b") as f:
        f.truncate(last + 10)
    create_tenant(str(data), "default")
    done = cli(data, "import", SCHEMA, "--frames", str(frames), tenant="default")
    assert done.returncode == 0, done.stderr
    assert f"left out a torn tail of 10 bytes at byte {last}" in done.stderr
    assert "head offset 7" in done.stderr
    assert size > frames.stat().st_size == last + 10  # FILE itself is not changed
    store = open_store(str(data / "default"), readonly=True)
    try:
        assert store.head_offset == 7
        assert store.get("User", 5)[0] is not None  # the delete at offset 8 was the torn frame
        assert store.get("User", 2)[0]["name"] == "second"
    finally:
        store.close()


def test_a_tenant_holding_rows_is_refused(data, frames):
    create_tenant(str(data), "t")
    store = open_store(str(data / "t"))
    asyncio.run(store.insert("User", user(1)))
    store.close()
    before = image(data)
    done = cli(data, "import", SCHEMA, "--frames", str(frames))
    assert done.returncode == 1, done.stderr
    assert "tenant 't' holds rows up to offset 1: --frames rebuilds an empty tenant only" in done.stderr
    assert image(data) == before


def test_frames_of_a_model_the_schema_lacks_are_refused(data, frames, cli_in_process):
    err = refused(data, cli_in_process, NOTES, "--frames", str(frames), served=False)
    assert f"{frames}: offset 1: unknown model 'User'" in err


def test_a_file_started_after_offset_1_is_refused(data, frames, cli_in_process):
    blob = frames.read_bytes()
    frames.write_bytes(blob[frame_starts(frames)[3] :])
    err = refused(data, cli_in_process, SCHEMA, "--frames", str(frames))
    assert "starts at offset 4, expected 1: it holds the changes after offset 3" in err


def test_a_history_record_that_does_not_verify_is_refused(data, frames, cli_in_process):
    history = Path(str(frames) + ".history")
    history.write_bytes(b"0badc0de {\"format\":1,\"id\":\"00\",\"forks\":[]}\n")
    err = refused(data, cli_in_process, SCHEMA, "--frames", str(frames))
    assert f"{history}: corrupt at byte 0" in err


def test_a_late_bad_frame_writes_nothing(data, frames, cli_in_process):
    """A frame that fails the replica's checks after good ones (an update of an absent id):
    nothing of the good ones reaches the tenant."""
    blob = frames.read_bytes()
    head = blob[: frame_starts(frames)[6]]  # frames 1-6, good
    payload = json.dumps(
        {"kind": "delete", "model": "User", "offset": 7, "watermark": 7, "id": 99, "record": user(99)},
        separators=(",", ":"),
    ).encode()
    frame = (7).to_bytes(8, "big") + zlib.crc32(payload).to_bytes(4, "big") + len(payload).to_bytes(4, "big")
    frames.write_bytes(head + frame + payload)
    err = refused(data, cli_in_process, SCHEMA, "--frames", str(frames))
    assert "offset 7:" in err and "99" in err


def test_import_needs_a_file_or_frames_not_both(data, frames):
    create_tenant(str(data), "t")
    done = cli(data, "import", SCHEMA, str(frames), "--frames", str(frames))
    assert done.returncode == 2
    assert "give FILE (JSON Lines) or --frames FILE" in done.stderr
    assert os.listdir(data / "t") == []


def test_watermarks_that_restart_midway_are_renumbered(data, frames):
    """An online compaction on the primary while FILE was written restarts the watermarks of
    the frames after it (docs/replication.md); offsets go on. Such a FILE still rebuilds."""
    blob = frames.read_bytes()
    starts = frame_starts(frames)
    tail = b""
    for start, end in zip(starts[6:], [*starts[7:], len(blob)]):
        payload = blob[start + 16 : end]
        event = json.loads(payload)
        event["watermark"] -= 5  # User counted 6 and 7 here; the new epoch counts 1 and 2
        body = json.dumps(event, separators=(",", ":")).encode()
        tail += blob[start : start + 8] + zlib.crc32(body).to_bytes(4, "big") + len(body).to_bytes(4, "big") + body
    frames.write_bytes(blob[: starts[6]] + tail)
    create_tenant(str(data), "default")
    done = cli(data, "import", SCHEMA, "--frames", str(frames), tenant="default")
    assert done.returncode == 0, done.stderr
    store = open_store(str(data / "default"), readonly=True)
    try:
        assert store.head_offset == 8
        assert store.get("User", 2)[0]["name"] == "second"
        assert store.get("User", 5)[0] is None
        assert store.get("User", 2, as_of=5)[0]["name"] == "user 2"  # User watermarks, renumbered
    finally:
        store.close()


def test_a_directory_or_an_empty_file_is_refused(data, tmp_path, cli_in_process):
    err = refused(data, cli_in_process, SCHEMA, "--frames", str(tmp_path))
    assert f"--frames {str(tmp_path)!r}: not a file" in err
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    done = cli(data, "import", SCHEMA, "--frames", str(empty))
    assert done.returncode == 1
    assert f"{empty}: holds no frame (an empty file)" in done.stderr
