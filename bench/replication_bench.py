"""Replication figures: catch-up rate, a replica's apply rate, replication lag under writes.

    python bench/replication_bench.py                  # 1,000,000 events (built once, cached)
    python bench/replication_bench.py --quick          # a smoke run: 50,000 events, 5 s of writes
    python bench/replication_bench.py --only catchup,consumer --rounds 3
    python bench/replication_bench.py --only lag --rate 1000 --duration 20
    python bench/replication_bench.py --rebuild        # build the cached tenant again
    python bench/replication_bench.py --only catchup --retained   # also from a compacted copy
    python bench/replication_bench.py --events 200000 --only replica,restart
    python bench/replication_bench.py --events 200000 --only replica --replica-pyspy /tmp/prof
    python bench/replication_bench.py --events 200000 --only inprocess --rounds 3   # the loop's share

The target (docs/guide/operations.md#performance): replication catch-up of at least 50,000 frames/s from disk
to one consumer.

0. build: a tenant `default` of `--events` User inserts, written in-process through
   `Store.apply_insert` (sync="off", replication=True), never compacted, so its log holds
   every row. Cached under `--cache` (default /tmp/dbsvc-replication-bench/users-N) with
   build.json; `--rebuild` writes it again. The build time is printed when it is built.
1. catchup: `python dbsvc.py serve schemas/blog.dbs` on that tenant (pinned to core 0; its
   store's compaction size rule off, NEVER_COMPACTS, so the log stays whole) and
   a lean client in this process (pinned to core 1): a hand-made WebSocket handshake to
   `/replicate?after=0`, then only the WebSocket frame headers and the 16-byte PersistedEvent
   header of each message are parsed (frames counted, bytes counted, offsets checked
   consecutive, length checked), until the head offset of `/snapshot`. That is the
   server's rate. `--rounds` rounds on the same server; the log is in the page cache (the
   build, or the previous round, has just read or written it), so "from disk" means from
   the log file through read(), not from the device.
2. consumer: `python dbsvc.py replicate URL --after 0 --out FILE` as a subprocess on core 1,
   the checking consumer (CRC + JSON of every frame, fsync every 8 MiB / 1 s), timed from
   its "streaming" line to FILE holding every frame (FILE's size polled every 20 ms; FILE
   is written in 1 MiB pieces, so the end is seen within a piece), then SIGTERM.
3. replica: `python dbsvc.py serve schemas/blog.dbs --follow http://127.0.0.1:PRIMARY` with
   an empty SERVICE_DATA, pinned to `--replica-core` (1), once per `--replica-sync` mode.
   The bootstrap (an empty snapshot for a never-compacted primary) happens before it listens;
   from its first `/metrics` on, `replica.lag_offsets` is polled every 0.25 s until it is 0:
   frames applied per second over that span, the replica's CPU per frame, and its VmRSS at
   the end beside the primary's.
4. lag: a fresh primary (SERVICE_SYNC=full, core 0) and a fresh replica of it (SERVICE_SYNC
   `--lag-replica-sync`, full by default, on `--replica-core`). This process (core 1) opens
   a raw `/subscribe/user` WebSocket on the replica (and one on the primary, for comparison),
   then POSTs `--rate` users per second for `--duration` seconds over `--connections`
   keep-alive connections on a fixed schedule (write i is due at t0 + i / rate). Every
   write's send and acknowledgement times and its `Dbsvc-Offset` are kept; every event's
   arrival on the subscribers is stamped (time.monotonic_ns, one clock); matched by
   offset: p50/p99/max of (replica arrival - primary ack) and (replica arrival - send),
   and whether the writes kept the schedule.
6. restart: a copy of the tenant as a primary, a replica of it caught up, then restarted
   (its log: the primary's whole history, replayed: "before"); then the copy compacted
   (`dbsvc compact`), the primary started again, the replica started again on its data
   dir: it compacts at the primary's cut (follower.py rule 9), and is restarted once more
   (its snapshot and an empty log: "after"). Each restart timed from spawn to listening
   (the store opened) and to `/ready`, with the replica's RSS then.
7. inprocess: the tenant's frames applied by `Store.apply_replicated_frames` in this
   process (a fresh store, sync off, groups of 512, pinned to core 1): the CPU of the
   loop's apply a frame, with no socket, reading thread or fsync (best of `--rounds`).
   Steadier under load than frames/s, and the part of a replica this bench's changes touch.
5. `--retained` (off by default): a copy of the tenant compacted with `dbsvc compact`, so
   that every row after 0 is served from `log.retained` (retain.py), caught up as in 1.

Before each measurement it waits (up to `--wait-idle` seconds) until no other bench
(realtime_bench, service_bench, http_bench, auth_bench, storage_bench, wrk) runs, and it
prints the load average and how busy each core was during the measurement (/proc/stat,
steal included). Servers run with RUST_LOG=info; everything started is stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import http.client
import itertools
import json
import os
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from http_bench import LISTENING, _pinned, process_cpu_seconds  # noqa: E402

SCHEMA = ROOT / "schemas" / "blog.dbs"
SERVER_CORE, CLIENT_CORE = "0", "1"
LOG_HEADER = 40  # dbsvc/storage/logfile.py HEADER_SIZE
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OTHER_BENCHES = re.compile(r"realtime_bench|service_bench|http_bench|auth_bench|storage_bench|(^|/)wrk(\s|$)")
PEH = struct.Struct(">QII")  # PersistedEvent header: offset, crc32, length
# `dbsvc serve` with the store's compaction size rule off (recovery.AUTO_COMPACT_BYTES, read
# when the store opens): a primary opened on the never-compacted tenant compacts it at open
# once its log is past 64 MiB (1,000,000 users: 251 MiB), and would leave a replica nothing
# to apply (it bootstraps from the new snapshot) and rewrite the cached tenant.
NEVER_COMPACTS = (
    "import runpy, sys; import dbsvc.storage.recovery as r; r.AUTO_COMPACT_BYTES = 1 << 62; "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


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


def core_times() -> dict[str, tuple[int, int, int]]:
    """Per core from /proc/stat: (busy, steal, total) ticks."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *vals = line.split()
            v = [int(x) for x in vals]
            out[name] = (v[0] + v[1] + v[2] + v[5] + v[6], v[7] if len(v) > 7 else 0, sum(v[:8]))
    return out


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
    """`python dbsvc.py serve SCHEMA [args]` on port 0, pinned; stderr drained in a thread."""

    def __init__(
        self,
        name: str,
        env: dict[str, str],
        args: tuple[str, ...] = (),
        core: str = SERVER_CORE,
        timeout: float = 300.0,
        profile_to: str | None = None,
        never_compacts: bool = False,
    ) -> None:
        self.name = name
        full = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_") and k != "RUST_LOG"}
        full.update({"SERVICE_PORT": "0", "RUST_LOG": "info"}, **env)
        python = [sys.executable] + (["-m", "cProfile", "-o", profile_to] if profile_to else [])
        if never_compacts:  # the store's size rule off: a never-compacted log stays one (see `primary`)
            python = [sys.executable, "-c", NEVER_COMPACTS]
        command = _pinned(core, [*python, str(ROOT / "dbsvc.py"), "serve", str(SCHEMA), *args])
        self.proc = subprocess.Popen(
            command, cwd=ROOT, env=full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.log: list[str] = []
        self.port = 0
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            if "dbsvc.http.request" not in line:
                self.log.append(line)
            match = LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
                self.listening_at = time.monotonic()
                threading.Thread(target=self._drain, daemon=True).start()
                return
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError(f"{name} did not start:\n" + "".join(self.log[-30:]))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if "dbsvc.http.request" not in line:
                self.log.append(line)

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


def build_tenant(cache: Path, count: int, rebuild: bool) -> tuple[Path, dict]:
    """The data dir (holding tenant `default`) with `count` User inserts; built or cached."""
    data = cache / "data"
    marker = cache / "build.json"
    log_path = data / "default" / "log"
    if not rebuild and marker.exists() and log_path.exists():
        info = json.loads(marker.read_text())
        if info.get("events") == count and info.get("log_bytes") == log_path.stat().st_size:
            print(
                f"cached tenant: {count:,} events, log {info['log_bytes'] / 2**20:.1f} MiB at {data} "
                f"(built in {info['build_s']:.1f} s; --rebuild to build again)"
            )
            return data, info
        print("cached tenant does not match build.json: building again")
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)

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
    marker.write_text(json.dumps(info))
    print(
        f"built {count:,} events in {took:.1f} s ({count / took:,.0f} inserts/s), "
        f"log {info['log_bytes'] / 2**20:.1f} MiB ({(info['log_bytes'] - LOG_HEADER) / count:.0f} bytes/frame)"
    )
    return data, info


# -- 1. the lean /replicate client ------------------------------------------------------------


def ws_handshake(port: int, target: str, timeout: float = 10.0) -> tuple[socket.socket, bytearray]:
    """A WebSocket opening handshake by hand; the socket and the bytes that followed the 101."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    key = base64.b64encode(os.urandom(16))
    sock.sendall(
        b"GET "
        + target.encode()
        + b" HTTP/1.1\r\nHost: 127.0.0.1:"
        + str(port).encode()
        + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: "
        + key
        + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
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


def lean_catchup(port: int, after: int, head: int, timeout: float) -> dict:
    """Stream /replicate?after=N to `head`, parsing only frame headers (see the module doc)."""
    t0 = time.perf_counter()
    sock, data = ws_handshake(port, f"/replicate?after={after}")
    sock.settimeout(timeout)
    expected = after + 1
    frames = payload_bytes = 0
    wire_bytes = len(data)
    unpack_peh = PEH.unpack_from
    deadline = time.monotonic() + timeout
    recv = sock.recv
    pos = 0
    try:
        while expected <= head:
            end = len(data)
            while True:
                if end - pos < 2:
                    break
                b1 = data[pos + 1] & 0x7F
                if b1 == 126:
                    if end - pos < 4:
                        break
                    length = (data[pos + 2] << 8) | data[pos + 3]
                    hl = 4
                elif b1 == 127:
                    if end - pos < 10:
                        break
                    length = int.from_bytes(data[pos + 2 : pos + 10], "big")
                    hl = 10
                else:
                    length, hl = b1, 2
                if end - pos < hl + length:
                    break
                opcode = data[pos] & 0x0F
                if opcode == 2:
                    offset, _crc, plen = unpack_peh(data, pos + hl)
                    if offset != expected:
                        raise RuntimeError(f"offset {offset}, expected {expected}")
                    if plen != length - 16:
                        raise RuntimeError(f"offset {offset}: length {plen} but the message holds {length - 16}")
                    expected += 1
                    frames += 1
                    payload_bytes += length
                elif opcode == 9:
                    sock.sendall(masked_frame(10, bytes(data[pos + hl : pos + hl + length])))
                elif opcode == 8:
                    raise RuntimeError(f"server closed the stream: {bytes(data[pos + hl : pos + hl + length])!r}")
                else:
                    raise RuntimeError(f"unexpected opcode {opcode} (byte 0 {data[pos]:#x})")
                pos += hl + length
            if expected > head:
                break
            if pos:
                del data[:pos]
                pos = 0
            chunk = recv(1 << 20)
            if not chunk:
                raise RuntimeError(f"connection closed at offset {expected - 1}")
            wire_bytes += len(chunk)
            data += chunk
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out at offset {expected - 1}")
        elapsed = time.perf_counter() - t0
    finally:
        try:
            sock.sendall(masked_frame(8, struct.pack(">H", 1000)))
        except OSError:
            pass
        sock.close()
    return {
        "frames": frames,
        "payload_bytes": payload_bytes,
        "wire_bytes": wire_bytes,
        "seconds": elapsed,
        "last": expected - 1,
    }


def measure_catchup(primary: Server, head: int, rounds: int, timeout: float) -> list[dict]:
    results = []
    for r in range(rounds):
        wait_idle(ARGS.wait_idle, "catch-up")
        load0, cores0 = loadavg(), core_times()
        cpu0, me0, rss0 = (
            cpu_split(primary.proc.pid),
            resource.getrusage(resource.RUSAGE_SELF),
            rss_mib(primary.proc.pid),
        )
        result = lean_catchup(primary.port, 0, head, timeout)
        cpu1, me1 = cpu_split(primary.proc.pid), resource.getrusage(resource.RUSAGE_SELF)
        user, system = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
        n, s = result["frames"], result["seconds"]
        result.update(
            server_user_s=user,
            server_sys_s=system,
            client_cpu_s=(me1.ru_utime + me1.ru_stime) - (me0.ru_utime + me0.ru_stime),
            load=load0,
            cores=core_busy(cores0, core_times()),
            rss_before=rss0,
            rss_after=rss_mib(primary.proc.pid),
        )
        results.append(result)
        print(
            f"  round {r + 1}: {n:,} frames in {s:.2f} s = {n / s:8,.0f} frames/s, "
            f"{result['payload_bytes'] / s / 1e6:6.1f} MB/s of frames ({result['wire_bytes'] / s / 1e6:.1f} MB/s "
            f"on the wire); server CPU {(user + system) / n * 1e6:.1f} us/frame "
            f"(user {user:.1f} s, sys {system:.1f} s, {100 * (user + system) / s:.0f}% of a core); "
            f"client CPU {result['client_cpu_s'] / n * 1e6:.1f} us/frame",
            flush=True,
        )
        print(
            f"           load average {load0}; {result['cores']}; server RSS {rss0:.0f} -> "
            f"{result['rss_after']:.0f} MiB",
            flush=True,
        )
    return results


def measure_retained(servers: Servers, data: Path, head: int, workdir: Path) -> list[dict]:
    """--retained: the same lean catch-up from a compacted copy, whose rows after 0 come from
    `log.retained` (retain.py) instead of the log."""
    wait_idle(ARGS.wait_idle, "the compaction of a copy")
    copy = workdir / "compacted"
    shutil.copytree(data, copy)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update(SERVICE_DATA=str(copy), SERVICE_TENANT="default")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "compact"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    print(f"  compacted a copy in {time.perf_counter() - started:.1f} s: {(done.stdout + done.stderr).strip()[:300]}")
    if done.returncode != 0:
        raise RuntimeError("dbsvc compact failed")
    spawned = time.monotonic()
    server = servers.add(Server("compacted primary", {"SERVICE_DATA": str(copy)}))
    print(
        f"  served after {server.listening_at - spawned:.1f} s (RSS {rss_mib(server.proc.pid):.0f} MiB); "
        f"catch-up after=0 from log.retained:"
    )
    try:
        return measure_catchup(server, head, ARGS.rounds, ARGS.timeout)
    finally:
        servers.stop(server)
        shutil.rmtree(copy, ignore_errors=True)


# -- 6. a replica's restart, before and after it compacted at its primary's cut ---------------


def replica_restart(servers: Servers, data: Path, primary: Server, label: str) -> dict:
    """Stop the replica on `data` (if any), start it again following `primary`, and time it:
    from spawn to listening (its store opened: replayed), then to `/ready`."""
    spawned = time.monotonic()
    replica = servers.add(
        Server(f"replica ({label})", {"SERVICE_DATA": str(data)}, ("--follow", primary.url), core=ARGS.replica_core)
    )
    listening = replica.listening_at - spawned
    deadline = time.monotonic() + ARGS.timeout
    while True:
        try:
            replica.get_json("/ready")
            break
        except (RuntimeError, OSError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica ({label}) never became ready") from None
            time.sleep(0.05)
    ready = time.monotonic() - spawned
    rss = rss_mib(replica.proc.pid)
    return {"replica": replica, "listening_s": listening, "ready_s": ready, "rss_mib": rss}


def measure_restart(servers: Servers, data: Path, head: int, workdir: Path) -> dict:
    """restart: a replica of a never-compacted primary restarts by replaying the primary's whole
    history (before); once the primary compacted and the replica compacted at its cut
    (follower.py rule 9), it restarts from its snapshot (after)."""
    wait_idle(ARGS.wait_idle, "the restart measurement")
    copy = workdir / "restart-primary"
    shutil.copytree(data, copy)
    replica_data = workdir / "restart-replica"
    shutil.rmtree(replica_data, ignore_errors=True)
    primary = servers.add(Server("primary (restart)", {"SERVICE_DATA": str(copy)}, never_compacts=True))
    first = replica_restart(servers, replica_data, primary, "first start")
    replica = first["replica"]
    deadline = time.monotonic() + ARGS.timeout
    while (replica.get_json("/metrics").get("replica") or {}).get("lag_offsets", 1) != 0 or replica.get_json(
        "/snapshot"
    )["offset"] < head:
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not catch up")
        time.sleep(0.25)
    servers.stop(replica)
    before = replica_restart(servers, replica_data, primary, "never compacted")
    servers.stop(before.pop("replica"))
    print(
        f"  before: the replica (its log: the primary's {head:,} rows) restarts: listening after "
        f"{before['listening_s']:.2f} s, ready after {before['ready_s']:.2f} s, RSS {before['rss_mib']:.0f} MiB",
        flush=True,
    )
    servers.stop(primary)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update(SERVICE_DATA=str(copy), SERVICE_TENANT="default")
    done = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "compact"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"dbsvc compact failed: {done.stderr[-500:]}")
    primary = servers.add(Server("compacted primary (restart)", {"SERVICE_DATA": str(copy)}))
    epoch = primary.get_json("/snapshot")["epoch"]
    started = time.monotonic()
    cut = replica_restart(servers, replica_data, primary, "meets the primary's new epoch")
    replica = cut["replica"]
    while replica.get_json("/snapshot")["epoch"] != epoch:
        if time.monotonic() - started > ARGS.timeout:
            raise RuntimeError(f"the replica never took epoch {epoch}: {replica.get_json('/metrics').get('replica')}")
        time.sleep(0.05)
    took = time.monotonic() - started
    status = replica.get_json("/metrics").get("replica") or {}
    while status.get("compactions", 0) + status.get("bootstraps", 0) == 0:  # counted once the task ends
        time.sleep(0.05)
        status = replica.get_json("/metrics").get("replica") or {}
    servers.stop(replica)
    after = replica_restart(servers, replica_data, primary, "compacted at the cut")
    servers.stop(after.pop("replica"))
    servers.stop(primary)
    print(
        f"  the replica took the primary's epoch {took:.2f} s after its start (bootstraps "
        f"{status.get('bootstraps')}, compactions at the cut {status.get('compactions')})",
        flush=True,
    )
    print(
        f"  after: the replica (its snapshot at the cut) restarts: listening after "
        f"{after['listening_s']:.2f} s, ready after {after['ready_s']:.2f} s, RSS {after['rss_mib']:.0f} MiB; "
        f"load average {loadavg()}",
        flush=True,
    )
    shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(replica_data, ignore_errors=True)
    first.pop("replica")
    cut.pop("replica")
    return {"before": before, "after": after, "epoch_taken_s": took, "status": status}


# -- 2. the checking consumer -----------------------------------------------------------------


def measure_consumer(
    servers: Servers, primary: Server, head: int, frame_bytes: int, workdir: Path, timeout: float
) -> dict:
    wait_idle(ARGS.wait_idle, "the consumer")
    out = workdir / "replica.frames"
    out.unlink(missing_ok=True)
    load0, cores0 = loadavg(), core_times()
    cpu0 = primary.cpu()
    proc = servers.add(
        subprocess.Popen(
            _pinned(
                CLIENT_CORE,
                [sys.executable, str(ROOT / "dbsvc.py"), "replicate", primary.url, "--after", "0", "--out", str(out)],
            ),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    )
    lines: list[str] = []
    streaming = threading.Event()
    started_at: list[float] = []

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "streaming" in line and not streaming.is_set():
                started_at.append(time.perf_counter())
                streaming.set()
            lines.append(line)

    threading.Thread(target=drain, daemon=True).start()
    spawned = time.perf_counter()
    if not streaming.wait(60):
        raise RuntimeError("dbsvc replicate did not start streaming:\n" + "".join(lines))
    deadline = time.monotonic() + timeout
    size = 0
    while time.monotonic() < deadline and proc.poll() is None:
        size = out.stat().st_size if out.exists() else 0
        if size >= frame_bytes:
            break
        time.sleep(0.02)
    done = time.perf_counter()
    consumer_cpu = cpu_split(proc.pid)
    server_cpu = primary.cpu() - cpu0
    cores = core_busy(cores0, core_times())
    servers.stop(proc)
    status = proc.returncode
    size = out.stat().st_size if out.exists() else 0
    seconds = done - started_at[0]
    ok = size == frame_bytes and status == 0
    c = consumer_cpu[0] + consumer_cpu[1]
    print(
        f"  {head:,} frames in {seconds:.2f} s = {head / seconds:8,.0f} frames/s, {size / seconds / 1e6:6.1f} MB/s "
        f"(start-up before the stream: {started_at[0] - spawned:.2f} s, not counted); consumer CPU "
        f"{c / head * 1e6:.1f} us/frame (user {consumer_cpu[0]:.1f} s, sys {consumer_cpu[1]:.1f} s), server CPU "
        f"{server_cpu / head * 1e6:.1f} us/frame",
        flush=True,
    )
    print(
        f"           FILE {size:,} bytes (expected {frame_bytes:,}), exit status {status}"
        f"{'' if ok else '  <-- MISMATCH'}; load average {load0}; {cores}",
        flush=True,
    )
    if not ok:
        print("".join(lines[-20:]))
    out.unlink(missing_ok=True)
    return {
        "frames": head,
        "seconds": seconds,
        "bytes": size,
        "consumer_cpu_s": c,
        "server_cpu_s": server_cpu,
        "ok": ok,
        "load": load0,
        "cores": cores,
    }


# -- 3. a replica's apply rate ----------------------------------------------------------------


def measure_inprocess(data: Path, rounds: int, group: int = 512) -> dict:
    """The loop's share of a replica's apply, without sockets or threads: the tenant's log
    frames handed to `Store.apply_replicated_frames` of a fresh store (sync off, the
    server's collector thresholds) in groups of `group`, each awaited after the next is
    applied (as follower.py pipelines them); CPU of this thread a frame, best of `rounds`."""
    import gc

    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.service import GC_THRESHOLDS
    from dbsvc.storage import Store
    from dbsvc.storage.logfile import FRAME, FRAME_HEADER_SIZE
    from dbsvc.storage.tenants import create_tenant

    log = (data / "default" / "log").read_bytes()
    frames, pos = [], LOG_HEADER
    while pos < len(log):
        length = FRAME.unpack_from(log, pos)[2]
        frames.append(log[pos : pos + FRAME_HEADER_SIZE + length])
        pos += FRAME_HEADER_SIZE + length
    module = compile_schema(load_schema(str(SCHEMA)))
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)

    async def apply(store) -> None:
        pending = None
        for at in range(0, len(frames), group):
            future = store.apply_replicated_frames(frames[at : at + group])
            if pending is not None:
                await pending
            pending = future
        if pending is not None:
            await pending

    figures = []
    for _ in range(rounds):
        directory = tempfile.mkdtemp(prefix="dbsvc-inprocess-")
        try:
            store = Store.open(
                create_tenant(directory + "/r", "t"), module.MODELS, module.DESCRIPTION, sync="off", replication=True
            )
            start = time.thread_time()
            asyncio.run(apply(store))
            figures.append((time.thread_time() - start) / len(frames) * 1e6)
            assert store.head_offset == len(frames), store.head_offset
            store.close()
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    print(
        f"  {len(frames):,} frames in groups of {group}: {min(figures):.2f} us of loop CPU a frame "
        f"(rounds: {', '.join(f'{f:.2f}' for f in figures)}); load average {loadavg()}"
    )
    return {"frames": len(frames), "us_per_frame": figures}


def measure_replica(servers: Servers, primary: Server, head: int, sync: str, workdir: Path, timeout: float) -> dict:
    wait_idle(ARGS.wait_idle, f"the replica (SERVICE_SYNC={sync})")
    data = workdir / f"replica-{sync}"
    shutil.rmtree(data, ignore_errors=True)
    load0, cores0 = loadavg(), core_times()
    primary_cpu0 = primary.cpu()
    spawned = time.monotonic()
    replica = servers.add(
        Server(
            f"replica ({sync})",
            {"SERVICE_DATA": str(data), "SERVICE_SYNC": sync},
            ("--follow", primary.url),
            core=ARGS.replica_core,
        )
    )
    startup = replica.listening_at - spawned
    spy = None
    if ARGS.replica_pyspy:
        out = Path(ARGS.replica_pyspy) / f"replica-{sync}.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        spy = subprocess.Popen(
            [
                "py-spy",
                "record",
                "--pid",
                str(replica.proc.pid),
                "--rate",
                "200",
                "--format",
                "raw",
                "--threads",
                "--output",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    first: tuple[float, int] | None = None
    last: tuple[float, int] = (time.monotonic(), 0)
    deadline = time.monotonic() + timeout
    state = {}
    while time.monotonic() < deadline:
        body = replica.get_json("/metrics")
        state = body.get("replica") or {}
        now = time.monotonic()
        applied = state.get("primary_offset", 0) - state.get("lag_offsets", 0)
        if first is None:
            first = (now, applied)
            cpu_first = replica.cpu()  # the apply's own CPU, start-up left out
        last = (now, applied)
        if state.get("state") == "stopped":
            raise RuntimeError(f"the replica stopped following: {state}")
        if state.get("lag_offsets") == 0 and applied >= head:
            break
        # Polled every 0.25 s, the end was read up to 0.25 s late (-4% on average, up to -7%,
        # on a 3.5 s run): within about 0.3 s of the end, at the rate so far, poll every 10 ms.
        done = applied - first[1]
        near = done > 0 and (head - applied) * (now - first[0]) / done < 0.3
        time.sleep(0.01 if near else 0.25)
    else:
        raise RuntimeError(f"the replica did not catch up within {timeout:.0f} s: {state}")
    assert first is not None
    cpu = replica.cpu()
    applying = (cpu - cpu_first) / max(last[1] - first[1], 1)
    replica_rss, primary_rss = rss_mib(replica.proc.pid), rss_mib(primary.proc.pid)
    primary_cpu = primary.cpu() - primary_cpu0
    cores = core_busy(cores0, core_times())
    frames = last[1] - first[1]
    span = last[0] - first[0]
    rate = frames / span if span > 0 else float("nan")
    bootstraps = state.get("bootstraps")
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        spy.wait(60)
        print(f"  py-spy samples of the replica: {Path(ARGS.replica_pyspy) / f'replica-{sync}.txt'}", flush=True)
    servers.stop(replica)
    replica_log = data / "default" / "log"
    size = replica_log.stat().st_size if replica_log.exists() else 0
    print(
        f"  SERVICE_SYNC={sync}: {frames:,} frames applied in {span:.2f} s = {rate:8,.0f} frames/s "
        f"(from its first /metrics at offset {first[1]:,}, {startup:.2f} s after spawn, bootstrap "
        f"included there; bootstraps {bootstraps}); replica CPU {cpu / head * 1e6:.1f} us/frame over the "
        f"whole run, {applying * 1e6:.1f} us/frame while applying; primary CPU {primary_cpu / head * 1e6:.1f} us/frame",
        flush=True,
    )
    print(
        f"           RSS at the end: replica {replica_rss:.0f} MiB, primary {primary_rss:.0f} MiB; replica log "
        f"{size:,} bytes; load average {load0}; {cores}",
        flush=True,
    )
    shutil.rmtree(data, ignore_errors=True)
    return {
        "sync": sync,
        "frames": frames,
        "seconds": span,
        "rate": rate,
        "startup_s": startup,
        "replica_cpu_s": cpu,
        "replica_cpu_us_applying": applying * 1e6,
        "replica_rss_mib": replica_rss,
        "primary_rss_mib": primary_rss,
        "replica_log_bytes": size,
        "load": load0,
        "cores": cores,
    }


# -- 4. lag at a steady write rate ------------------------------------------------------------


class FeedClient(asyncio.Protocol):
    """A raw `/subscribe` WebSocket: stamps each event's arrival (monotonic_ns) by offset."""

    def __init__(self, port: int, target: str, arrivals: dict[int, int], ready: asyncio.Future) -> None:
        self.port, self.target, self.arrivals, self.ready = port, target, arrivals, ready
        self.buf = bytearray()
        self.open = False
        self.closed: str | None = None
        self.key = base64.b64encode(os.urandom(16))
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(
            b"GET "
            + self.target.encode()
            + b" HTTP/1.1\r\nHost: 127.0.0.1:"
            + str(self.port).encode()
            + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + self.key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        buf = self.buf
        buf += data
        if not self.open:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            if not buf.startswith(b"HTTP/1.1 101"):
                self.ready.set_exception(RuntimeError(f"{self.target}: {bytes(buf[:300])!r}"))
                return
            del buf[: end + 4]
            self.open = True
            self.ready.set_result(None)
        pos, size = 0, len(buf)
        while size - pos >= 2:
            b1 = buf[pos + 1] & 0x7F
            hl = 2
            if b1 == 126:
                if size - pos < 4:
                    break
                b1, hl = (buf[pos + 2] << 8) | buf[pos + 3], 4
            elif b1 == 127:
                if size - pos < 10:
                    break
                b1, hl = int.from_bytes(buf[pos + 2 : pos + 10], "big"), 10
            if size - pos < hl + b1:
                break
            opcode, payload = buf[pos] & 0x0F, bytes(buf[pos + hl : pos + hl + b1])
            pos += hl + b1
            if opcode == 1:
                event = json.loads(payload)
                offset = event.get("offset")
                if isinstance(offset, int) and event.get("kind") != "link":
                    self.arrivals.setdefault(offset, now)
            elif opcode == 9 and self.transport is not None:
                self.transport.write(masked_frame(10, payload))
            elif opcode == 8:
                self.closed = repr(payload)
        del buf[:pos]

    def connection_lost(self, exc) -> None:
        if self.closed is None:
            self.closed = f"connection lost ({exc})"


async def open_feed(port: int, target: str, arrivals: dict[int, int]) -> FeedClient:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    _transport, client = await loop.create_connection(
        lambda: FeedClient(port, target, arrivals, ready), "127.0.0.1", port
    )
    await asyncio.wait_for(ready, 10)
    return client


async def paced_writes(port: int, rate: float, duration: float, connections: int, tag: str) -> dict:
    """`rate` POST /api/user per second for `duration` s over `connections` keep-alive connections."""
    total = int(rate * duration)
    period = int(1e9 / rate)
    sends, acks, offsets, statuses = [0] * total, [0] * total, [0] * total, [0] * total
    counter = itertools.count()
    t0 = time.monotonic_ns() + 100_000_000

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                i = next(counter)
                if i >= total:
                    return
                due = t0 + i * period
                delay = due - time.monotonic_ns()
                if delay > 0:
                    await asyncio.sleep(delay / 1e9)
                body = json.dumps({"email": f"lag-{tag}-{i}@bench.example.com", "name": f"lag {i}"}).encode()
                request = (
                    b"POST /api/user HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )
                sends[i] = time.monotonic_ns()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                acks[i] = time.monotonic_ns()
                lines = head.split(b"\r\n")
                statuses[i] = int(lines[0].split()[1])
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"dbsvc-offset":
                        offsets[i] = int(value)
                if length:
                    await reader.readexactly(length)
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return {"t0": t0, "period": period, "sends": sends, "acks": acks, "offsets": offsets, "statuses": statuses}


async def lag_run(primary: Server, replica: Server, rate: float, duration: float, connections: int) -> dict:
    at_replica: dict[int, int] = {}
    at_primary: dict[int, int] = {}
    feed_r = await open_feed(replica.port, "/subscribe/user", at_replica)
    feed_p = await open_feed(primary.port, "/subscribe/user", at_primary)
    writes = await paced_writes(primary.port, rate, duration, connections, str(os.getpid()))
    wanted = [o for o in writes["offsets"] if o]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(o in at_replica for o in wanted[-50:]):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    for feed in (feed_r, feed_p):
        if feed.transport is not None:
            feed.transport.close()
    writes.update(at_replica=at_replica, at_primary=at_primary, feed_closed=(feed_r.closed, feed_p.closed))
    return writes


def ms(ns: float) -> str:
    return f"{ns / 1e6:7.2f}"


def measure_lag(
    servers: Servers, workdir: Path, rate: float, duration: float, connections: int, replica_sync: str
) -> dict:
    wait_idle(ARGS.wait_idle, "the lag run")
    pdata, rdata = workdir / "lag-primary", workdir / "lag-replica"
    for d in (pdata, rdata):
        shutil.rmtree(d, ignore_errors=True)
    primary = servers.add(Server("lag primary", {"SERVICE_DATA": str(pdata), "SERVICE_SYNC": "full"}))
    replica = servers.add(
        Server(
            "lag replica",
            {"SERVICE_DATA": str(rdata), "SERVICE_SYNC": replica_sync},
            ("--follow", primary.url),
            core=ARGS.replica_core,
        )
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (replica.get_json("/metrics").get("replica") or {}).get("state") == "following":
            break
        time.sleep(0.1)
    load0, cores0 = loadavg(), core_times()
    p0, r0 = cpu_split(primary.proc.pid), cpu_split(replica.proc.pid)
    me0 = resource.getrusage(resource.RUSAGE_SELF)
    w = asyncio.run(lag_run(primary, replica, rate, duration, connections))
    p1, r1 = cpu_split(primary.proc.pid), cpu_split(replica.proc.pid)
    pcpu, rcpu = sum(p1) - sum(p0), sum(r1) - sum(r0)
    psys, rsys = p1[1] - p0[1], r1[1] - r0[1]
    me1 = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = me1.ru_utime + me1.ru_stime - me0.ru_utime - me0.ru_stime
    cores = core_busy(cores0, core_times())
    metrics = replica.get_json("/metrics").get("replica")
    servers.stop(replica)
    servers.stop(primary)
    shutil.rmtree(pdata, ignore_errors=True)
    shutil.rmtree(rdata, ignore_errors=True)

    total = len(w["sends"])
    ok = [i for i in range(total) if w["statuses"][i] == 201 and w["offsets"][i]]
    bad = total - len(ok)
    sends, acks, offsets = w["sends"], w["acks"], w["offsets"]
    slip = [sends[i] - (w["t0"] + i * w["period"]) for i in range(total) if sends[i]]
    span = (max(sends) - min(s for s in sends if s)) / 1e9
    achieved = (total - 1) / span if span > 0 else float("nan")
    post = [acks[i] - sends[i] for i in ok]
    r_ack = [w["at_replica"][offsets[i]] - acks[i] for i in ok if offsets[i] in w["at_replica"]]
    r_send = [w["at_replica"][offsets[i]] - sends[i] for i in ok if offsets[i] in w["at_replica"]]
    p_ack = [w["at_primary"][offsets[i]] - acks[i] for i in ok if offsets[i] in w["at_primary"]]
    missing_r = sum(1 for i in ok if offsets[i] not in w["at_replica"])
    missing_p = sum(1 for i in ok if offsets[i] not in w["at_primary"])

    def line(name: str, values: list[int]) -> str:
        return (
            f"    {name:<40} p50 {ms(pct(values, 50))} ms  p99 {ms(pct(values, 99))} ms  "
            f"max {ms(max(values) if values else float('nan'))} ms  min {ms(min(values) if values else float('nan'))} ms"
        )

    print(
        f"  {total:,} writes scheduled at {rate:,.0f}/s for {duration:g} s over {connections} connections: "
        f"sent at {achieved:,.0f}/s; schedule slip p50 {ms(pct(slip, 50))} ms p99 {ms(pct(slip, 99))} ms "
        f"max {ms(max(slip))} ms; {bad} not 201",
        flush=True,
    )
    print(line("POST latency (ack - send)", post))
    print(line("replica arrival - primary ack", r_ack))
    print(line("replica arrival - write sent", r_send))
    print(line("(primary's own feed) arrival - ack", p_ack))
    print(
        f"    missing on the replica feed: {missing_r}, on the primary feed: {missing_p}; feeds closed: "
        f"{w['feed_closed']}; replica at the end: {metrics}"
    )
    n = max(1, len(ok))
    print(
        f"    primary CPU {pcpu / n * 1e6:.0f} us/write (sys {psys / n * 1e6:.0f}), replica CPU "
        f"{rcpu / n * 1e6:.0f} us/write (sys {rsys / n * 1e6:.0f}; replica SERVICE_SYNC={replica_sync}), this client (writer + "
        f"2 feeds) {client_cpu / n * 1e6:.0f} us/write; load average {load0}; "
        f"{cores}",
        flush=True,
    )
    return {
        "writes": total,
        "achieved_rate": achieved,
        "slip_p99_ms": pct(slip, 99) / 1e6,
        "post_p50_ms": pct(post, 50) / 1e6,
        "post_p99_ms": pct(post, 99) / 1e6,
        "replica_minus_ack_ms": [pct(r_ack, 50) / 1e6, pct(r_ack, 99) / 1e6, max(r_ack, default=0) / 1e6],
        "replica_minus_send_ms": [pct(r_send, 50) / 1e6, pct(r_send, 99) / 1e6, max(r_send, default=0) / 1e6],
        "primary_feed_minus_ack_ms": [pct(p_ack, 50) / 1e6, pct(p_ack, 99) / 1e6],
        "missing_replica": missing_r,
        "not_201": bad,
        "load": load0,
        "cores": cores,
        "primary_us_per_write": pcpu / n * 1e6,
        "replica_us_per_write": rcpu / n * 1e6,
        "client_us_per_write": client_cpu / n * 1e6,
    }


# -- main -------------------------------------------------------------------------------------


def profile_report(path: str, top: int = 30) -> None:
    import pstats

    stats = pstats.Stats(path)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


ARGS: argparse.Namespace


def main(argv: list[str]) -> int:
    global ARGS
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument("--events", type=int, default=1_000_000, help="size of the catch-up tenant")
    parser.add_argument("--quick", action="store_true", help="smoke run: 50,000 events, 5 s of writes")
    parser.add_argument("--rebuild", action="store_true", help="build the cached tenant again")
    parser.add_argument("--cache", default="/tmp/dbsvc-replication-bench", help="where built tenants are kept")
    parser.add_argument(
        "--only",
        default="catchup,consumer,replica,lag,restart",
        help="comma list of: catchup, consumer, replica, lag, restart, inprocess",
    )
    parser.add_argument("--rounds", type=int, default=3, help="lean catch-up rounds")
    parser.add_argument("--replica-sync", default="full,off", help="SERVICE_SYNC modes of the apply-rate replica")
    parser.add_argument("--replica-core", default=CLIENT_CORE, help="core of the replicas (default 1)")
    parser.add_argument("--rate", type=float, default=1000.0, help="writes/s of the lag run")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of writes in the lag run")
    parser.add_argument("--connections", type=int, default=16, help="keep-alive connections of the lag writer")
    parser.add_argument("--lag-replica-sync", default="full", help="SERVICE_SYNC of the lag run's replica")
    parser.add_argument("--timeout", type=float, default=900.0, help="bound of each catch-up, seconds")
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=1200.0,
        help="wait at most this long for other benches before each measurement",
    )
    parser.add_argument(
        "--profile", action="store_true", help="run the catch-up primary under cProfile and print its top functions"
    )
    parser.add_argument(
        "--replica-pyspy",
        default=None,
        metavar="DIR",
        help="record the apply-rate replica with py-spy (200 Hz, raw, per thread) into DIR/replica-SYNC.txt",
    )
    parser.add_argument(
        "--retained", action="store_true", help="also: compact a copy of the tenant and catch up from its log.retained"
    )
    parser.add_argument("--json", action="store_true", help="print all results as one JSON line at the end")
    ARGS = parser.parse_args(argv)
    if ARGS.quick:
        ARGS.events = 50_000 if ARGS.events == 1_000_000 else ARGS.events
        ARGS.duration = min(ARGS.duration, 5.0)
    only = set(ARGS.only.split(","))
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {int(CLIENT_CORE)})
    print(f"load average at start: {loadavg()} on {os.cpu_count()} cores")
    results: dict = {"events": ARGS.events}
    servers = Servers()
    workdir = Path(tempfile.mkdtemp(prefix="dbsvc-replication-bench-"))

    def on_term(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        if only & {"catchup", "consumer", "replica", "restart", "inprocess"}:
            wait_idle(ARGS.wait_idle, "the build")
            data, info = build_tenant(Path(ARGS.cache) / f"users-{ARGS.events}", ARGS.events, ARGS.rebuild)
            results["build"] = info
            if "inprocess" in only:
                print("apply in process (`Store.apply_replicated_frames`, the loop's share of a replica):")
                results["inprocess"] = measure_inprocess(data, ARGS.rounds)
        if only & {"catchup", "consumer", "replica", "restart"}:
            frame_bytes = info["log_bytes"] - LOG_HEADER
            profile_to = str(workdir / "primary.prof") if ARGS.profile else None
            wait_idle(ARGS.wait_idle, "the primary's start")
            spawned = time.monotonic()
            primary = servers.add(
                Server("primary", {"SERVICE_DATA": str(data)}, profile_to=profile_to, never_compacts=True)
            )
            snap = primary.get_json("/snapshot")
            head = snap["offset"]
            print(
                f"primary on port {primary.port} (listening {primary.listening_at - spawned:.1f} s after spawn): "
                f"head offset {head:,}, RSS {rss_mib(primary.proc.pid):.0f} MiB, "
                f"replication {snap['replication']}"
            )
            if head != ARGS.events:
                print(f"  NOTE: head {head} differs from --events {ARGS.events}")
            try:
                if "catchup" in only:
                    print(f"catch-up, lean client (server side), after=0 to {head:,}:")
                    results["catchup"] = measure_catchup(primary, head, ARGS.rounds, ARGS.timeout)
                if "consumer" in only:
                    print("catch-up, `dbsvc replicate --out FILE` (the checking consumer):")
                    results["consumer"] = measure_consumer(servers, primary, head, frame_bytes, workdir, ARGS.timeout)
                if "replica" in only:
                    print(f"replica apply rate (`serve --follow`, replica on core {ARGS.replica_core}):")
                    results["replica"] = [
                        measure_replica(servers, primary, head, sync, workdir, ARGS.timeout)
                        for sync in ARGS.replica_sync.split(",")
                        if sync
                    ]
            finally:
                servers.stop(primary)
                if primary.log and any("Traceback" in line or "ERROR" in line for line in primary.log):
                    print(
                        "primary log (errors):", "".join(l for l in primary.log if "ERROR" in l or "Error" in l)[-3000:]
                    )
            if profile_to:
                profile_report(profile_to)
            if ARGS.retained:
                results["retained"] = measure_retained(servers, data, head, workdir)
            if "restart" in only:
                print("replica restart, before and after it compacted at the primary's cut:")
                results["restart"] = measure_restart(servers, data, info["events"], workdir)
        if "lag" in only:
            print(
                f"replication lag at {ARGS.rate:,.0f} writes/s (primary SERVICE_SYNC=full on core {SERVER_CORE}, "
                f"replica on core {ARGS.replica_core}, writer and feeds on core {CLIENT_CORE}):"
            )
            results["lag"] = measure_lag(
                servers, workdir, ARGS.rate, ARGS.duration, ARGS.connections, ARGS.lag_replica_sync
            )
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        servers.stop_all()
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average at the end: {loadavg()} on {os.cpu_count()} cores")
    if ARGS.json:
        print(json.dumps(results, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
