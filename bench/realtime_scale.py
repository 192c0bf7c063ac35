"""bench/realtime_bench.py's runs of many sockets: 4. inits, 5. fanout, 6. flood (issue 30).

Each a run function (a dict of figures) and its show function (the printed rows); what they
measure is in realtime_bench.py's docstring.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from realtime_kit import HOST, ROOT, Receivers, upgrade_request
from realtime_serve import Server, cores_text, disturbed_text, fanout_figures, health_probe, others_on_server_core, pct

# -- 4. live-query Inits of a large table ------------------------------------------------------------


def _seed_users(data: Path, count: int, code: Path) -> None:
    lines = data.parent / f"{data.name}-users.jsonl"
    with open(lines, "w", encoding="utf-8") as out:
        for i in range(1, count + 1):
            out.write(
                json.dumps(
                    {
                        "model": "User",
                        "record": {
                            "id": i,
                            "email": f"user{i}@example.com",
                            "name": f"User number {i}",
                            "age": 30,
                            "role": "reader",
                            "joined": "2026-01-01T00:00:00Z",
                            "profile": None,
                        },
                    }
                )
                + "\n"
            )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update({"SERVICE_DATA": str(data), "SERVICE_TENANT": "default", "PYTHONPATH": str(code)})
    for argv in (["tenant", "create", "default"], ["import", str(ROOT / "schemas" / "blog.dbs"), str(lines), "-q"]):
        done = __import__("subprocess").run(
            [sys.executable, str(code / "dbsvc.py"), *argv], env=env, capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
    lines.unlink()


def _open_raw(port: int, path: str) -> socket.socket:
    """A WebSocket whose handshake is sent and never read (a client that stalls)."""
    sock = socket.create_connection((HOST, port), timeout=30)
    sock.sendall(upgrade_request(port, path, base64.b64encode(os.urandom(16))))
    return sock


def _drain(sock: socket.socket, stop: threading.Event, got: list[int]) -> None:
    sock.settimeout(0.5)
    while not stop.is_set():
        try:
            data = sock.recv(1 << 20)
        except socket.timeout:
            continue
        except OSError:
            return
        if not data:
            return
        got[0] += len(data)


def inits_run(tmp: Path, args: argparse.Namespace, reading: bool) -> dict:
    code = Path(args.code).resolve() if args.code else ROOT
    data = tmp / f"inits-{'reading' if reading else 'stalled'}"
    _seed_users(data, args.init_records, code)
    server = Server(tmp, data.name, "off", code=code)
    port = server.port
    try:
        before = server.settled_rss(5)
        stop, samples, peak = threading.Event(), [], [before]
        probe = threading.Thread(target=health_probe, args=(port, stop, samples, server, peak), daemon=True)
        probe.start()
        socks = [_open_raw(port, "/live-query/user") for _ in range(args.init_sockets)]
        got = [0]
        drains = [threading.Thread(target=_drain, args=(s, stop, got), daemon=True) for s in socks] if reading else []
        for t in drains:
            t.start()
        time.sleep(args.init_window)
        stop.set()
        probe.join(70)
        for t in drains:
            t.join(5)
        for sock in socks:
            sock.close()
        after = server.settled_rss(20)
    finally:
        server.stop()
    finite = sorted(x for x in samples if x != float("inf"))
    return {
        "mode": "reading" if reading else "stalled",
        "records": args.init_records,
        "sockets": args.init_sockets,
        "health_n": len(samples),
        "health_p50_ms": pct(finite, 50) * 1000 if finite else None,
        "health_p99_ms": pct(finite, 99) * 1000 if finite else None,
        "health_max_ms": finite[-1] * 1000 if finite else None,
        "rss_before": before,
        "rss_peak": peak[0],
        "rss_after_close": after,
        "bytes_received": got[0],
        "code": str(code),
    }


def show_inits(runs: list[dict]) -> None:
    if not runs:
        return
    print("\n4. live-query Inits of a large table (/health during, RSS before / peak / after close)")
    mib = 1 << 20
    for r in runs:
        print(
            f"   {r['sockets']} x {r['records']:,} records, {r['mode']}: /health p50 {r['health_p50_ms']:.1f} ms, "
            f"p99 {r['health_p99_ms']:.1f} ms, max {r['health_max_ms']:.1f} ms ({r['health_n']} probes); "
            f"RSS {r['rss_before'] / mib:.0f} / {r['rss_peak'] / mib:.0f} / {r['rss_after_close'] / mib:.0f} MiB"
            + (f"; {r['bytes_received'] / mib:.0f} MiB received" if r["mode"] == "reading" else "")
        )


# -- 5. fan-out to many unfiltered subscribers (issue 30 item 7, scenario b) ------------------------


def fanout_run(tmp: Path, subscribers: int, args: argparse.Namespace) -> dict:
    """`subscribers` unfiltered `/subscribe/user` sockets (receiver processes, timed), `--rate`
    writes/s for `--duration` s (paced_writes), `/health` asked every 50 ms meanwhile."""
    code = Path(args.code).resolve() if args.code else ROOT
    extra = {"SERVICE_MAX_SOCKETS": str(subscribers + 100)}
    server = Server(tmp, f"fanout-{subscribers}", "off", extra, code)
    receivers = None
    result: dict = {"subscribers": subscribers, "rate": args.rate, "procs": args.fanout_b_procs}
    try:
        result["rss_idle"] = server.rss()
        opened_at = time.monotonic()
        receivers = Receivers(server.port, [("/subscribe/user", False)] * subscribers, args.fanout_b_procs, timed=True)
        result["open_seconds"] = time.monotonic() - opened_at
        result["opened"] = receivers.opened
        result["open_errors"] = receivers.errors
        server.wait_for("subscriptions", subscribers, 60)
        result.update(fanout_figures(server, receivers, args, ["w"], "fan", receivers.opened))
    finally:
        if receivers is not None:
            receivers.stop()
        server.stop()
    result["warnings"] = server.warnings()[:10]
    return result


def show_fanout(runs: list[dict]) -> None:
    if not runs:
        return
    print(
        "\n5. fan-out to unfiltered subscribers (issue 30 item 7): N /subscribe/user, writes paced at "
        f"{runs[0]['rate']:g}/s, /health every 50 ms; latency = writer's clock before send() to the "
        "kernel's receive stamp at the subscriber's socket (\"at socket\") / the receiver reading it; ms"
    )
    print(
        f"   {'subs':>6} {'w/s':>6} | {'at socket p50':>13} {'p99':>7} {'max':>7} | {'in client p99':>13} | "
        f"{'HTTP p99':>8} | {'/health p50':>11} {'p99':>7} {'max':>7} | {'us/write':>8} {'srv CPU':>7} "
        f"{'rcv CPU':>7} | {'RSS idle/peak':>14} | received/expected"
    )
    for r in runs:
        k, h = r["socket"], r["health"]
        print(
            f"   {r['opened']:>6} {r['writes_per_s']:>6.1f} | {k['p50_ms']:>13.2f} {k['p99_ms']:>7.2f} "
            f"{k['max_ms']:>7.2f} | {r['client']['p99_ms']:>13.2f} | {r['http']['p99_ms']:>8.2f} | "
            f"{h['p50_ms']:>11.2f} {h['p99_ms']:>7.2f} {h['max_ms']:>7.2f} | {r['cpu_us_per_write']:>8.0f} "
            f"{r['server_cpu_share']:>7.0%} {r['client_cpu_share']:>7.0%} | "
            f"{r['rss_idle'] / 2**20:>5.0f}/{r['rss_peak'] / 2**20:<5.0f}MiB | {r['received']}/{r['expected']}"
            f"{'; lagged closes ' + str(r['lagged_closes']) if r['lagged_closes'] else ''}"
            f"{'; late ' + str(r['late']) if r['late'] else ''}"
            f"{'; open errors ' + str(r['open_errors']) if r['open_errors'] else ''}"
        )
        # The server's share of core 0 says whether it could go faster; the clients' of
        # core 1 whether the latencies are theirs; others on core 0 whether to trust the run.
        others = others_on_server_core(r["cores"], r["server_cpu_share"], 1.0)
        print(f"          busy: {cores_text(r['cores'])}{disturbed_text(others)}")


# -- 6. /health under a WebSocket flood (scenario c): bench/ws_flood_bench.py -------------------------


def flood_run(args: argparse.Namespace) -> dict:
    """Runs `bench/ws_flood_bench.py --json` (one client flooding empty pings, then empty text
    frames, while /health is probed) on this tree or `--code`, and returns its figures."""
    code = Path(args.code).resolve() if args.code else ROOT
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "ws_flood_bench.py"),
            "--tree",
            str(code),
            "--duration",
            str(args.flood_duration),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=args.flood_duration * 6 + 120,
        check=True,
    )
    return json.loads(out.stdout)


def show_flood(result: dict | None) -> None:
    if not result:
        return
    print("\n6. /health while one WebSocket client floods empty frames (bench/ws_flood_bench.py)")
    for name, row in result.items():
        extra = {k: v for k, v in row.items() if k not in ("p50_ms", "p99_ms", "probes")}
        print(
            f"   {name:18} /health p50 {row['p50_ms']:8.2f} ms  p99 {row['p99_ms']:8.2f} ms  "
            f"probes {row['probes']:6}  {extra or ''}"
        )
