"""fsync audit under strace: no acknowledgement before its data's fsync, and every create or
rename made durable by a directory fsync before anything relies on it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

CHILD = os.path.join(os.path.dirname(__file__), "audit_child.py")
LINE = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(?P<body>.*)$")
CALL = re.compile(r"^(?P<name>\w+)\((?P<args>.*?)(?:\)\s+=\s+(?P<ret>-?\d+).*| <unfinished \.\.\.>)$")
RESUMED = re.compile(r"^<\.\.\. (?P<name>\w+) resumed>.*\)\s+=\s+(?P<ret>-?\d+)")


def _trace(tmp_path) -> list[tuple[str, str, int | None]]:
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    out = tmp_path / "trace.txt"
    data = tmp_path / "data"
    res = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-o",
            str(out),
            "-e",
            "trace=fsync,fdatasync,rename,renameat,renameat2,openat,write,mkdir,mkdirat",
            sys.executable,
            CHILD,
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if res.returncode != 0 and ("ptrace" in res.stderr or "Operation not permitted" in res.stderr):
        pytest.skip(f"ptrace not permitted: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr
    events = []
    for raw in out.read_text().splitlines():
        body = LINE.match(raw).group("body")
        m = RESUMED.match(body)
        if m:
            events.append((m.group("name") + "-done", "", int(m.group("ret"))))
            continue
        m = CALL.match(body)
        if m:
            ret = m.group("ret")
            events.append((m.group("name"), m.group("args"), int(ret) if ret is not None else None))
    return events


def test_fsync_audit(tmp_path):
    events = _trace(tmp_path)
    data = str(tmp_path / "data")
    fds: dict[int, str] = {}
    dir_fds: set[int] = set()
    log_fds: set[int] = set()
    dirty_log = False  # a frame written and not yet covered by a finished fsync
    needs_dir_sync: list[str] = []
    acks = dir_syncs = 0
    in_flight_fd: int | None = None
    write_since_start = False
    for name, args, ret in events:
        if name == "openat" and ret is not None and ret >= 0:
            path = args.split('"')[1]
            fds[ret] = path
            dir_fds.discard(ret)
            log_fds.discard(ret)
            if "O_DIRECTORY" in args:
                dir_fds.add(ret)
            if path.startswith(data) and os.path.basename(path) == "log" and "O_WRONLY" in args:
                log_fds.add(ret)
            if path.startswith(data) and "O_CREAT" in args and not path.endswith(("/LOCK", ".tmp", ".new")):
                needs_dir_sync.append(f"create {path}")
        elif name in ("rename", "renameat", "renameat2") and data in args:
            needs_dir_sync.append(f"rename {args}")
        elif name in ("mkdir", "mkdirat") and data in args:
            needs_dir_sync.append(f"mkdir {args}")
        elif name in ("fsync", "fdatasync"):
            fd = int(args.split(",")[0].strip())
            if ret is None:  # unfinished: runs in the committer thread
                in_flight_fd, write_since_start = fd, False
                continue
            if fd in dir_fds:
                needs_dir_sync.clear()
                dir_syncs += 1
            if fd in log_fds:
                dirty_log = False
        elif name in ("fsync-done", "fdatasync-done"):
            if in_flight_fd in log_fds and ret == 0 and not write_since_start:
                dirty_log = False
            in_flight_fd = None
        elif name == "write":
            fd = int(args.split(",")[0])
            if fd in log_fds:
                dirty_log = True
                write_since_start = True
            elif fd == 1 and '"ACK' in args:
                acks += 1
                assert not dirty_log, f"acknowledgement {acks} before the log's fsync"
                assert not needs_dir_sync, f"acknowledgement relies on {needs_dir_sync} without a directory fsync"
            elif fd == 1 and '"PHASE' in args:
                assert not needs_dir_sync, f"{args}: {needs_dir_sync} not followed by a directory fsync"
    assert acks == 44 and dir_syncs >= 5
