"""The server side of bench/realtime_bench.py: writers, the server runner, cores, statistics.

The paced and flooding writers, a fresh `dbsvc serve` on core 0 (`Server`), per-core busy
shares from /proc/stat, the figures of a run of writes (`write_figures`) and the measured part
that the fanout and owned runs share (`fanout_figures`), percentiles and the small text
helpers the reports share. Imports realtime_kit and http_bench only; the runs
(realtime_latency, realtime_scale, realtime_rules) import it.
"""

from __future__ import annotations

import array
import asyncio
import json
import os
import random
import re
import signal
import socket
import threading
import time
import urllib.request
from pathlib import Path

from http_bench import LOAD_CORE, SERVER_CORE, core_times, process_cpu_seconds, start_dbsvc
from realtime_kit import ANCILLARY, HOST, ROOT, SO_TIMESTAMPNS, Receivers, kernel_stamp, pin

# -- writers --------------------------------------------------------------------------------------


def user_body(tag: str, seq: int, name: str, sent_ns: int) -> bytes:
    return json.dumps(
        {"email": f"{tag}-{seq}@bench.io", "name": name, "profile": {"bench_ts": sent_ns}}, separators=(",", ":")
    ).encode()


CONTENT_LENGTH = re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")


def paced_writes(
    port: int,
    rate: float,
    count: int,
    names: list[str],
    tag: str,
    time_limit: float,
    connections: int = 8,
    target: bytes = b"/api/user",
    make_body=user_body,
    headers: bytes = b"",
) -> dict:
    """`count` POST /api/user at `rate` per second, open loop: write i is due at a random
    point of the first half of its slot [i/rate, (i+1)/rate) and goes on keep-alive socket
    i % `connections`, each socket served by its own thread, so a slow response (an fsync)
    delays no other write unless `connections` of them are in flight at once (the writes
    sent more than 2 ms after they were due are counted as `late`). Not on the slot's edge:
    a strict 10 ms beat locks in phase with the kernel's 4 ms accounting tick (HZ=250,
    tick-sampled CPU time) and the CPU figures then read 1-2% for a real 7%. Per write, the
    time to its complete response, stamped by the kernel (`kernel_ns`) and when read (`user_ns`)."""
    jitter = random.Random(f"{tag}-{count}")
    interval = 1e9 / rate
    start = time.monotonic_ns() + 50_000_000  # the threads' sockets open first
    due = [start + int((seq + jitter.random() / 2) * interval) for seq in range(count)]
    deadline = start + time_limit * 1e9
    kernel = [-1] * count
    user = [-1] * count
    status = [b""] * count
    sent_at = [0] * count  # monotonic, for the achieved rate
    late = [0]
    failures: list[BaseException] = []

    def serve(first: int) -> None:
        try:
            sock = socket.create_connection((HOST, port), timeout=30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            with sock:
                for seq in range(first, count, connections):
                    wait = due[seq] - time.monotonic_ns()
                    if wait > 0:
                        time.sleep(wait / 1e9)
                    elif wait < -2_000_000:
                        late[0] += 1
                    if time.monotonic_ns() > deadline:
                        return
                    sent_at[seq] = time.monotonic_ns()
                    sent = time.time_ns()
                    body = make_body(tag, seq, names[seq % len(names)], sent)
                    sock.sendall(
                        b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Type: application/json"
                        b"\r\nContent-Length: %d\r\n\r\n%s" % (target, headers, len(body), body)
                    )
                    data = b""
                    need = -1
                    stamp = 0
                    while need < 0 or len(data) < need:
                        chunk, ancillary, _flags, _addr = sock.recvmsg(65536, ANCILLARY)
                        if not chunk:
                            raise ConnectionError("the server closed a writer's connection")
                        stamp = kernel_stamp(ancillary, time.time_ns())
                        data += chunk
                        if need < 0 and b"\r\n\r\n" in data:
                            head_end = data.index(b"\r\n\r\n") + 4
                            match = CONTENT_LENGTH.search(data, 0, head_end)
                            need = head_end + (int(match.group(1)) if match else 0)
                    user[seq] = time.time_ns() - sent
                    kernel[seq] = stamp - sent
                    status[seq] = data[:12]
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=serve, args=(j,), daemon=True) for j in range(min(connections, count))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(time_limit + 60)
    if failures:
        raise failures[0]
    done = [seq for seq in range(count) if user[seq] >= 0]
    first = min((sent_at[seq] for seq in done), default=start)
    last = max((sent_at[seq] for seq in done), default=start)
    return {
        "writes": len(done),
        "errors": sum(1 for seq in done if status[seq] != b"HTTP/1.1 201"),
        "late": late[0],
        "elapsed": (last - first) / 1e9 + 1 / rate,
        "kernel_ns": array.array("q", (kernel[seq] for seq in done)),
        "user_ns": array.array("q", (user[seq] for seq in done)),
    }


def flood_main(conn, port: int, connections: int, seconds: float, cap: int) -> None:
    """A writer process: POST /api/user as fast as `connections` keep-alive sockets allow."""
    pin(LOAD_CORE)
    conn.send(asyncio.run(_flood(port, connections, seconds, cap)))


async def _flood(port: int, connections: int, seconds: float, cap: int) -> dict:
    deadline = time.monotonic() + seconds
    done = [0, 0]  # writes, errors
    pid = os.getpid()

    async def one(index: int) -> None:
        reader, writer = await asyncio.open_connection(HOST, port)
        seq = 0
        while time.monotonic() < deadline and done[0] < cap:
            body = json.dumps(
                {"email": f"f{pid}-{index}-{seq}@bench.io", "name": f"flood {index}"}, separators=(",", ":")
            ).encode()
            writer.write(
                b"POST /api/user HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            head = await reader.readuntil(b"\r\n\r\n")
            match = CONTENT_LENGTH.search(head)
            await reader.readexactly(int(match.group(1)) if match else 0)
            done[0] += 1
            if not head.startswith(b"HTTP/1.1 201"):
                done[1] += 1
            seq += 1
        writer.close()

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(connections)))
    return {"writes": done[0], "errors": done[1], "elapsed": time.monotonic() - started}


def core_busy(before: dict, after: dict) -> dict[str, dict[str, float]]:
    """Share of each core busy (user, nice, system, irq, softirq) and stolen between two reads."""
    result = {}
    for name, (busy, steal, total) in after.items():
        b0, s0, t0 = before.get(name, (0, 0, 0))
        span = max(1, total - t0)
        result[name] = {"busy": (busy - b0) / span, "steal": (steal - s0) / span}
    return result


# -- server helpers ---------------------------------------------------------------------------------


class Server:
    """A fresh dbsvc on core 0 with its own data dir."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        sync: str,
        extra: dict[str, str] | None = None,
        code: Path = ROOT,
        schema: Path = ROOT / "schemas" / "blog.dbs",
        tenant: str = "",
    ) -> None:
        self.data = tmp / name
        if tenant:
            (self.data / tenant).mkdir(parents=True, exist_ok=True)
        # RUST_LOG stays at info: below it the server never prints the port it listens on
        env = {
            "SERVICE_DATA": str(self.data),
            "SERVICE_SYNC": sync,
            "SERVICE_MAX_CONNECTIONS": "20000",
            "RUST_LOG": "info",
            **(extra or {}),
        }
        self.proc, self.port, self.log = start_dbsvc(env, schema=schema, code=code)
        self.sync = sync

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://{HOST}:{self.port}{path}", timeout=60) as response:
            return json.loads(response.read())

    def realtime(self) -> dict:
        return self.get("/metrics")["realtime"]

    def users(self) -> int:
        return self.get("/metrics")["rows_per_model"]["User"]

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def settled_rss(self, limit: float = 20.0) -> int:
        """VmRSS once two reads a second apart agree within 64 KiB (or after `limit` s)."""
        deadline = time.monotonic() + limit
        last = self.rss()
        while time.monotonic() < deadline:
            time.sleep(1.0)
            now = self.rss()
            if abs(now - last) < 65536:
                return now
            last = now
        return last

    def cpu(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def wait_for(self, key: str, value: int, limit: float = 60.0) -> int:
        deadline = time.monotonic() + limit
        seen = -1
        while time.monotonic() < deadline:
            seen = self.realtime()[key]
            if seen == value:
                break
            time.sleep(0.2)
        return seen

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except Exception:  # noqa: BLE001 - kill whatever state it is in
                self.proc.kill()
                self.proc.wait(10)

    def warnings(self) -> list[str]:
        return [line.rstrip() for line in self.log if " WARN " in line or " ERROR " in line]


def health_probe(port: int, stop: threading.Event, samples: list[float], server: Server, peak: list[int]) -> None:
    """Ask /health every 50 ms until `stop`: each answer's seconds (inf on a socket error) into
    `samples`, the server's largest VmRSS so far into `peak[0]`."""
    import http.client

    while not stop.is_set():
        started = time.perf_counter()
        try:
            conn = http.client.HTTPConnection(HOST, port, timeout=60)
            conn.request("GET", "/health")
            conn.getresponse().read()
            conn.close()
            samples.append(time.perf_counter() - started)
        except OSError:
            samples.append(float("inf"))
        peak[0] = max(peak[0], server.rss())
        stop.wait(0.05)


# -- the measured writes -------------------------------------------------------------------------


def write_figures(run: dict, cpu: float, cores: dict) -> dict:
    """The figures of one `paced_writes` run, given the server's CPU seconds and the cores'
    shares over it: what the latency run reports of the writes alone and with subscribers."""
    return {
        "writes": run["writes"],
        "errors": run["errors"],
        "late": run["late"],
        "rate": run["writes"] / run["elapsed"],
        "http": ms_summary(run["kernel_ns"]),
        "http_client": ms_summary(run["user_ns"]),
        "cpu_us_per_write": cpu / max(1, run["writes"]) * 1e6,
        "cores": cores,
        "others_core0": others_on_server_core(cores, cpu, run["elapsed"]),
    }


def fanout_figures(
    server: Server, receivers: Receivers, args, names: list[str], tag: str, per_write: int, **write
) -> dict:
    """The measured part of a run of many subscribers (realtime_scale's fanout, realtime_rules'
    owned): `--warmup` s of writes until their frames are read (30 s at most), the receivers'
    tallies reset, then `--rate` writes/s for `--duration` s (`paced_writes`, given `write`:
    another target, body or token) with /health asked every 50 ms, until each write's
    `per_write` deliveries are in (30 s at most). The caller stops the receivers and server."""
    limit = args.duration * 3 + 30
    warm = int(args.rate * args.warmup)
    paced_writes(server.port, args.rate, warm, names, "warm", limit, **write)
    deadline = time.monotonic() + 30
    while receivers.frames() < per_write * warm and time.monotonic() < deadline:
        time.sleep(0.2)
    receivers.ask("reset")  # the counts start again from 0
    before = server.realtime()
    stop, samples, peak = threading.Event(), [], [server.rss()]
    probe = threading.Thread(target=health_probe, args=(server.port, stop, samples, server, peak), daemon=True)
    cpu0, client0, cores0 = server.cpu(), receivers.cpu(), core_times()
    probe.start()
    fan = paced_writes(server.port, args.rate, int(args.rate * args.duration), names, tag, limit, **write)
    fan_cpu, client_cpu = server.cpu() - cpu0, receivers.cpu() - client0
    cores = core_busy(cores0, core_times())
    expected = fan["writes"] * per_write
    deadline = time.monotonic() + 30
    while receivers.frames() < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    probe.join(70)
    after = server.realtime()
    kernel, user = receiver_stamps(receivers.ask("stats"))
    health = sorted(samples)
    return {
        "writes": fan["writes"],
        "errors": fan["errors"],
        "late": fan["late"],
        "writes_per_s": fan["writes"] / fan["elapsed"],
        "http": ms_summary(fan["kernel_ns"]),
        "expected": expected,
        "received": len(kernel),
        "socket": ms_summary(kernel),
        "client": ms_summary(user),
        "cpu_us_per_write": fan_cpu / max(1, fan["writes"]) * 1e6,
        "server_cpu_share": fan_cpu / max(1e-9, fan["elapsed"]),
        "client_cpu_share": client_cpu / max(1e-9, fan["elapsed"]),
        "cores": cores,
        "health": {
            "n": len(health),
            "p50_ms": pct(health, 50) * 1e3,
            "p99_ms": pct(health, 99) * 1e3,
            "max_ms": (health[-1] * 1e3) if health else float("nan"),
        },
        "events_sent": after["events_sent"] - before["events_sent"],
        "lagged_closes": after["lagged_closes"] - before["lagged_closes"],
        "rss_peak": peak[0],
    }


# -- statistics -------------------------------------------------------------------------------------


def pct(values: list[int] | list[float], p: float) -> float:
    """Nearest-rank percentile of an already sorted sequence."""
    if not values:
        return float("nan")
    rank = max(0, min(len(values) - 1, int(round(p / 100 * len(values) + 0.5)) - 1))
    return values[rank]


def receiver_stamps(stats) -> tuple[array.array, array.array]:
    """Every receiver process's latencies, (at the socket, in the client), in ns: each answer
    carries them as packed int64 arrays per kind of frame."""
    kernel, user = array.array("q"), array.array("q")
    for answer in stats:
        for kind in (False, True):
            k, u = array.array("q"), array.array("q")
            k.frombytes(answer["kernel"][kind])
            u.frombytes(answer["user"][kind])
            kernel.extend(k)
            user.extend(u)
    return kernel, user


def ms_summary(ns_values) -> dict:
    ordered = sorted(ns_values)
    return {
        "n": len(ordered),
        "p50_ms": pct(ordered, 50) / 1e6,
        "p99_ms": pct(ordered, 99) / 1e6,
        "p999_ms": pct(ordered, 99.9) / 1e6,
        "max_ms": (ordered[-1] / 1e6) if ordered else float("nan"),
    }


# -- report helpers -------------------------------------------------------------------------------


def others_on_server_core(cores: dict, server_cpu: float, seconds: float) -> float:
    """The share of the server's core that went to other processes (a shared machine's
    neighbours): the core's busy share minus the server's own CPU time over the span."""
    core = cores.get(f"cpu{SERVER_CORE}")
    return max(0.0, core["busy"] - server_cpu / max(1e-9, seconds)) if core else 0.0


DISTURBED = 0.10  # other processes took more than this share of core 0: say so


def disturbed_text(share: float) -> str:
    return f"; others on core 0 {share:.0%}" if share >= DISTURBED else ""


def cores_text(cores: dict) -> str:
    return ", ".join(
        f"{name} {c['busy']:.0%}" + (f" (stolen {c['steal']:.0%})" if c["steal"] >= 0.005 else "")
        for name, c in sorted(cores.items())
    )
