"""bench/replication_bench.py's catch-up measurements: 1. the lean /replicate client, 5. from
log.retained, 2. the checking consumer.

What they measure is in replication_bench.py's docstring.
"""

from __future__ import annotations

import os
import resource
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from http_bench import _pinned
from replication_kit import (
    ARGS,
    CLIENT_CORE,
    PEH,
    ROOT,
    Server,
    Servers,
    core_busy,
    core_times,
    cpu_split,
    loadavg,
    masked_frame,
    rss_mib,
    wait_idle,
    ws_handshake,
)

# -- 1. the lean /replicate client ------------------------------------------------------------


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
