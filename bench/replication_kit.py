"""The shared parts of bench/replication_bench.py: the machine, servers, the tenant, the WebSocket handshake.

The machine (load average, other benches running, per-core busy shares, RSS and CPU of a
process, percentiles), `Server`/`Servers` (a `dbsvc serve` primary or replica pinned to a
core, all stopped on exit), the cached tenant of `--events` users (`build_tenant`), and a
hand-made WebSocket handshake and client frame. Imports no other replication_* module (the
handshake's request is realtime_kit's, `core_times` http_bench's); the measurements
(replication_catchup, replication_replica, replication_lag) import it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from http_bench import core_times as core_times  # the measurements take it from here
from http_bench import process_cpu_seconds, start_dbsvc
from realtime_kit import upgrade_request

ROOT = Path(__file__).resolve().parent.parent
# the command line's options: replication_bench.main fills this one Namespace in, the measurements read it
ARGS = argparse.Namespace()
SCHEMA = ROOT / "schemas" / "blog.dbs"
SERVER_CORE, CLIENT_CORE = "0", "1"
LOG_HEADER = 40  # dbsvc/storage/logfile.py HEADER_SIZE
LOCK_NAME = "LOCK"  # dbsvc/storage/lock.py LOCK_NAME: the tenant's writer lock
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OTHER_BENCHES = re.compile(r"realtime_bench|service_bench|http_bench|auth_bench|storage_bench|(^|/)wrk(\s|$)")
PEH = struct.Struct(">QII")  # PersistedEvent header: offset, crc32, length
# `dbsvc serve` with the store's compaction size rule off (recovery.AUTO_COMPACT_BYTES, read
# when the store opens): a primary opened on the never-compacted tenant compacts it at open
# once its log is past 64 MiB (1,000,000 users: 251 MiB), and would leave a replica nothing
# to apply (it bootstraps from the new snapshot) and rewrite the cached tenant.
NEVER_COMPACTS = (
    "import cProfile, runpy, sys; import dbsvc.storage.recovery as r; r.AUTO_COMPACT_BYTES = 1 << 62; "
    "sys.argv = sys.argv[1:]; "
)
RUN_MAIN = "runpy.run_path(sys.argv[0], run_name='__main__')"


def never_compacting_python(profile_to: str | None) -> list[str]:
    """The interpreter command of a server whose store never compacts, under cProfile when
    `profile_to` names a file (`-m cProfile` cannot wrap a `-c` program, so the wrapper runs
    the profiler itself; `cProfile.run` writes the file when the server exits, as `-m` does)."""
    run = f"cProfile.run({RUN_MAIN!r}, {profile_to!r})" if profile_to else RUN_MAIN
    return [sys.executable, "-c", NEVER_COMPACTS + run]


# -- the machine ------------------------------------------------------------------------------


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def other_benches() -> list[str]:
    """Command lines of other bench processes running now (not this one)."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if cmd and "replication_bench" not in cmd and OTHER_BENCHES.search(cmd):
            found.append(f"{entry.name}: {cmd[:120]}")
    return found


def wait_idle(limit: float, what: str) -> None:
    """Wait (bounded) until no other bench runs, so its load does not skew ours."""
    deadline = time.monotonic() + limit
    said = False
    while True:
        busy = other_benches()
        if not busy:
            if said:
                print(f"  (other benches done; load average {loadavg()})", flush=True)
            return
        if time.monotonic() >= deadline:
            print(
                f"  WARNING: other benches still running after {limit:.0f} s; measuring {what} anyway: {busy[0]}",
                flush=True,
            )
            return
        if not said:
            print(f"  waiting for other benches before {what}: {busy[0]}", flush=True)
            said = True
        time.sleep(5)


def core_busy(before: dict, after: dict) -> str:
    parts = []
    for name, (busy, steal, total) in sorted(after.items()):
        b0, s0, t0 = before.get(name, (0, 0, 0))
        span = max(1, total - t0)
        parts.append(
            f"{name} {100 * (busy - b0) / span:.0f}% busy"
            + (f" ({100 * (steal - s0) / span:.0f}% stolen)" if steal - s0 else "")
        )
    return ", ".join(parts)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


# -- servers ----------------------------------------------------------------------------------


class Server:
    """`python dbsvc.py serve SCHEMA [args]` on port 0, pinned (http_bench.start_dbsvc)."""

    def __init__(
        self,
        name: str,
        env: dict[str, str],
        args: tuple[str, ...] = (),
        core: str = SERVER_CORE,
        timeout: float = 300.0,
        profile_to: str | None = None,
        never_compacts: bool = False,
        python: list[str] | None = None,
        code: Path = ROOT,
    ) -> None:
        """`python`: the interpreter's command line (the replica's with its switch interval
        set); `code`: the checkout to run (another tree's replica for an A/B)."""
        self.name = name
        python = python or [sys.executable] + (["-m", "cProfile", "-o", profile_to] if profile_to else [])
        if never_compacts:  # the store's size rule off: a never-compacted log stays one (see `primary`)
            python = never_compacting_python(profile_to)
        self.proc, self.port, self.log = start_dbsvc(env, SCHEMA, core, timeout, code, argv=args, python=python)
        self.listening_at = time.monotonic()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get_json(self, path: str, timeout: float = 10.0) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            reply = conn.getresponse()
            body = reply.read()
            if reply.status != 200:
                raise RuntimeError(f"{self.name} GET {path}: HTTP {reply.status} {body[:200]!r}")
            return json.loads(body)
        finally:
            conn.close()

    def cpu(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class Servers:
    """Everything started, stopped in reverse order on exit (also on errors and Ctrl-C)."""

    def __init__(self) -> None:
        self.running: list[Server | subprocess.Popen] = []

    def add(self, item):
        self.running.append(item)
        return item

    def stop(self, item) -> None:
        if item in self.running:
            self.running.remove(item)
        if isinstance(item, Server):
            item.stop()
        elif item.poll() is None:
            item.send_signal(signal.SIGTERM)
            try:
                item.wait(15)
            except subprocess.TimeoutExpired:
                item.kill()
                item.wait()

    def stop_all(self) -> None:
        for item in reversed(list(self.running)):
            try:
                self.stop(item)
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                print(f"  (stopping {item}: {exc})", file=sys.stderr)


# -- 0. the tenant ----------------------------------------------------------------------------


def user_body(i: int) -> dict:
    return {"email": f"user{i}@bench.example.com", "name": f"user number {i}", "age": i % 100, "role": "reader"}


def cache_dir(base: Path, count: int) -> Path:
    """Where the tenant of `count` events this tree builds is kept under `base` (`--cache`):
    one directory per (events, schema, tree), so that two runs from two trees on one host (two
    helpers' worktrees) never share a tenant, which each run's primary locks as its writer.
    The tree's storage code is checked against build.json too (`_storage_digest`): a tree
    whose log format changed builds again."""
    key = hashlib.sha256(f"{ROOT}\0{count}\0".encode() + SCHEMA.read_bytes()).hexdigest()[:12]
    return base / f"users-{count}-{key}"


def _storage_digest() -> str:
    """The sources of this tree's storage package, hashed: what writes the log's bytes."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "dbsvc" / "storage").rglob("*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def build_tenant(cache: Path, count: int, rebuild: bool) -> tuple[Path, dict]:
    """The data dir (holding tenant `default`) with `count` User inserts; built or cached.

    Built in a directory of this process's own beside `cache` and renamed into place once
    build.json is written, so another run never sees a half-built tenant as the cache: it
    finds no cache, or a whole one."""
    data = cache / "data"
    marker = cache / "build.json"
    log_path = data / "default" / "log"
    code = _storage_digest()
    if not rebuild and marker.exists() and log_path.exists():
        info = json.loads(marker.read_text())
        if (
            info.get("events") == count
            and info.get("log_bytes") == log_path.stat().st_size
            and info.get("code") == code
        ):
            print(
                f"cached tenant: {count:,} events, log {info['log_bytes'] / 2**20:.1f} MiB at {data} "
                f"(built in {info['build_s']:.1f} s; --rebuild to build again)"
            )
            return data, info
        print("cached tenant does not match build.json or this tree's storage code: building again")
    building = cache.with_name(f"{cache.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    try:
        info = _build(building / "data", count)
        info["code"] = code
        (building / "build.json").write_text(json.dumps(info))
        if cache.exists():  # an older build: moved aside whole, then removed
            stale = cache.with_name(f"{cache.name}.stale-{os.getpid()}")
            os.rename(cache, stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(building, cache)
        except OSError:  # another run's whole build took the place between the two renames: taken
            if not marker.exists():
                raise
            shutil.rmtree(building, ignore_errors=True)
            print(f"another run put its build at {cache} first: this run uses it")
            return data, json.loads(marker.read_text())
    except BaseException:  # a build cut short (^C, a full disk) leaves nothing behind
        shutil.rmtree(building, ignore_errors=True)
        raise
    return data, info


def tenant_for_run(cached: Path, run: Path) -> Path:
    """A data dir of this run's own (`run`, made here) whose tenant `default` holds the cached
    tenant's files as hard links: no byte copied (a copy would cost the log's size, ~250 MB
    at 1M events, each run), and no `LOCK`, so this run's primary takes a lock of its own.
    Two runs from one tree then serve the one cached tenant at once; served from the cache
    itself, the second primary was refused by the first's lock (TenantLocked).

    Safe to share because a store replaces every file but its log whole (files.write_atomic:
    a new file renamed over the link, the cache's file untouched) and appends to the log only
    on a write, which no primary here takes (the replicas write their own directories); a
    log changed anyway fails build.json's size check and is built again. On another file
    system than the cache (`--cache` elsewhere, no hard link possible) the files are copied."""
    source, target = cached / "default", run / "default"
    target.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        if path.name == LOCK_NAME or not path.is_file():
            continue
        try:
            os.link(path, target / path.name)
        except OSError:
            shutil.copy2(path, target / path.name)
    return run


def _build(data: Path, count: int) -> dict:
    """`count` User inserts into a new tenant `default` under `data`; build.json's figures."""
    log_path = data / "default" / "log"
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.storage import Store
    from dbsvc.storage.tenants import create_tenant

    module = compile_schema(load_schema(str(SCHEMA)))
    directory = create_tenant(str(data), "default")
    user = module.BY_NAME["User"]

    async def fill() -> None:
        store = Store.open(str(directory), module.MODELS, module.DESCRIPTION, sync="off", replication=True)
        try:
            pending = None
            for i in range(1, count + 1):
                _record, pending = store.apply_insert("User", user.validate_create(user_body(i)))
                if i % 10_000 == 0:
                    await pending  # let the committer run: memory stays flat
                if i % 200_000 == 0:
                    print(f"  {i:,} events, {time.perf_counter() - started:.1f} s", flush=True)
            if pending is not None:
                await pending
        finally:
            store.close()

    print(f"building a tenant of {count:,} User inserts (in-process, sync=off) ...", flush=True)
    started = time.perf_counter()
    asyncio.run(fill())
    took = time.perf_counter() - started
    info = {"events": count, "log_bytes": log_path.stat().st_size, "build_s": took, "built_at": time.time()}
    print(
        f"built {count:,} events in {took:.1f} s ({count / took:,.0f} inserts/s), "
        f"log {info['log_bytes'] / 2**20:.1f} MiB ({(info['log_bytes'] - LOG_HEADER) / count:.0f} bytes/frame)"
    )
    return info


# -- the WebSocket handshake and a client frame -------------------------------------------------


def ws_handshake(port: int, target: str, timeout: float = 10.0) -> tuple[socket.socket, bytearray]:
    """A WebSocket opening handshake by hand; the socket and the bytes that followed the 101."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    key = base64.b64encode(os.urandom(16))
    sock.sendall(upgrade_request(port, target, key))
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError(f"{target}: closed during the handshake: {bytes(buf[:300])!r}")
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    if not lines[0].startswith(b"HTTP/1.1 101"):
        raise RuntimeError(f"{target}: handshake refused: {head[:300]!r} {rest[:300]!r}")
    accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
    if not any(line.lower() == b"sec-websocket-accept: " + accept.lower() for line in lines[1:]):
        raise RuntimeError(f"{target}: bad Sec-WebSocket-Accept in {head!r}")
    return sock, bytearray(rest)


def masked_frame(opcode: int, payload: bytes) -> bytes:
    """A client frame (masked with a zero key: the payload goes as is)."""
    assert len(payload) < 126
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + b"\0\0\0\0" + payload
