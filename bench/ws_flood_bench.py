"""`/health` latency while one WebSocket client floods the server (issue 30 item 3).

One client opens `/subscribe/user` and sends, as fast as the socket takes them, 256 KiB
writes of empty masked frames (pings, or empty text frames), reading and dropping whatever
the server answers; meanwhile a prober asks `GET /health` on one keep-alive connection,
one request after another, and records each latency. Printed: p50 / p99 / count of the
probes with no flood, with a ping flood and with an empty-text flood, and how the flooder's
socket ended.

    python bench/ws_flood_bench.py                      # this tree
    python bench/ws_flood_bench.py --tree /tmp/before   # another checkout (git archive of a commit)
    python bench/ws_flood_bench.py --duration 5 --json

The figures live in bench/README.md ("WebSocket floods"); never a timed assert in a test.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(tree: Path, data: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = dict(
        os.environ,
        SERVICE_PORT=str(port),
        SERVICE_DATA=str(data),
        RUST_LOG="warn",
        PYTHONPATH=str(tree),
        SERVICE_SYNC="off",
    )
    proc = subprocess.Popen(
        [sys.executable, str(tree / "dbsvc.py"), "serve", str(ROOT / "schemas" / "blog.dbs")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tree,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the server did not start")


def flood_frame(opcode: int) -> bytes:
    return bytes((0x80 | opcode, 0x80)) + os.urandom(4)  # FIN, masked, empty payload


def flooder(port: int, opcode: int, stop: threading.Event, report: dict) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /subscribe/user HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    received = bytearray()

    def drain() -> None:
        try:
            while True:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    return
                if len(received) < 64:
                    received.extend(chunk[:64])
        except OSError:
            return

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    burst = flood_frame(opcode) * (256 * 1024 // 6)
    sent = 0
    try:
        while not stop.is_set():
            sock.sendall(burst)
            sent += len(burst)
    except OSError as exc:
        report["ended"] = f"server closed the socket ({type(exc).__name__})"
    else:
        report["ended"] = "still open at the end"
    report["frames_sent"] = sent // 6
    close = bytes(received).find(b"\x88")
    if close >= 0 and len(received) >= close + 4:
        report["close_code"] = int.from_bytes(received[close + 2 : close + 4], "big")
    sock.close()


def probe(port: int, duration: float) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies = []
    until = time.monotonic() + duration
    while time.monotonic() < until:
        started = time.perf_counter()
        conn.request("GET", "/health")
        conn.getresponse().read()
        latencies.append((time.perf_counter() - started) * 1000.0)
    conn.close()
    return latencies


def figures(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
        "probes": len(ordered),
    }


def run(tree: Path, duration: float) -> dict:
    results = {}
    with tempfile.TemporaryDirectory() as data:
        proc, port = start(tree, Path(data))
        try:
            results["no flood"] = figures(probe(port, duration))
            for name, opcode in (("ping flood", 0x9), ("empty text flood", 0x1)):
                stop, report = threading.Event(), {}
                thread = threading.Thread(target=flooder, args=(port, opcode, stop, report))
                thread.start()
                time.sleep(0.2)  # the flood is under way
                latencies = probe(port, duration)
                stop.set()
                thread.join(30)
                results[name] = {**figures(latencies), **report}
        finally:
            proc.terminate()
            proc.wait(30)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to serve (default: this one)")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.tree.resolve(), args.duration)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, row in results.items():
        extra = {k: v for k, v in row.items() if k not in ("p50_ms", "p99_ms", "probes")}
        print(f"{name:18} p50 {row['p50_ms']:9.3f} ms  p99 {row['p99_ms']:9.3f} ms  probes {row['probes']:6}  {extra}")


if __name__ == "__main__":
    main()
