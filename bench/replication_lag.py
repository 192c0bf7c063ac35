"""bench/replication_bench.py's 4. lag at a steady write rate: a primary, its replica, a paced
writer and a raw /subscribe/user WebSocket on each, matched by offset.

What it measures is in replication_bench.py's docstring.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import resource
import shutil
import time
from pathlib import Path

from realtime_kit import upgrade_request
from replication_kit import (
    ARGS,
    Server,
    Servers,
    core_busy,
    core_times,
    cpu_split,
    loadavg,
    masked_frame,
    pct,
    wait_idle,
)

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
        transport.write(upgrade_request(self.port, self.target, self.key))

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
