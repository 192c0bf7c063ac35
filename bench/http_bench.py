"""HTTP load measurement with wrk: the canned-server baseline and a helper for other benches.

    python bench/http_bench.py [--duration 10] [--connections 64] [--profile]

starts `bench/canned_server.py` pinned to core 0 (`taskset -c 0`), runs
`taskset -c 1 wrk -t1 -c64 -d10s --latency` against it, and prints requests/s, p50 and p99.
wrk is installed with apt-get when missing (`apt-get update` once, then `apt-get install -y wrk`).

For other benches (docs/guide/operations.md#performance figures are ratios against the canned server in the
same run):

    from bench.http_bench import canned_baseline, run_wrk, start_server
    base = canned_baseline(duration=10)                     # {"rps": ..., "p50_ms": ..., ...}
    proc, port = start_server([sys.executable, "dbsvc.py", "serve", "schemas/blog.dbs"], env=...)
    mine = run_wrk(f"http://127.0.0.1:{port}/api/user/7", duration=10)
    ratio = mine["rps"] / base["rps"]

`--profile` runs the canned server under cProfile for the load and prints the top entries
(cumulative and own time), to see what the protocol layer costs beyond h11.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CANNED = ROOT / "bench" / "canned_server.py"
SERVER_CORE, LOAD_CORE = "0", "1"

_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def ensure_wrk() -> str:
    """The path of wrk, installing it with apt-get when missing."""
    found = shutil.which("wrk")
    if found:
        return found
    subprocess.run(["apt-get", "update"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "wrk"], check=True, stdout=subprocess.DEVNULL)
    found = shutil.which("wrk")
    if not found:
        raise RuntimeError("wrk is not installed and apt-get could not install it")
    return found


def _pinned(core: str, command: list[str]) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", core, *command]
    return command


def start_server(
    command: list[str], env: dict[str, str] | None = None, core: str = SERVER_CORE, timeout: float = 60.0
) -> tuple[subprocess.Popen, int]:
    """Start a server that prints `PORT <n>` when listening, pinned to `core`."""
    process = subprocess.Popen(
        _pinned(core, command), stdout=subprocess.PIPE, env=dict(os.environ, **(env or {})), cwd=ROOT
    )
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline().decode()
        if line.startswith("PORT "):
            return process, int(line.split()[1])
        if not line and process.poll() is not None:
            break
    process.kill()
    raise RuntimeError(f"server {command!r} did not report its port")


LISTENING = re.compile(r"listening on http://[^:]+:(\d+)")


def start_dbsvc(
    env: dict[str, str],
    schema: Path = ROOT / "schemas" / "blog.dbs",
    core: str = SERVER_CORE,
    timeout: float = 120.0,
    code: Path = ROOT,
    argv: tuple[str, ...] = (),
    python: list[str] | None = None,
) -> tuple[subprocess.Popen, int, list[str]]:
    """`python dbsvc.py serve SCHEMA [argv]` on port 0 pinned to `core`: the process, its port,
    and its log lines other than request spans (drained in a thread so the pipe never fills).
    `code`: the checkout to run (another one measures a before/after side by side); `python`:
    the interpreter's command line in place of `sys.executable` alone (under cProfile, say)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    full.update({"SERVICE_PORT": "0", "RUST_LOG": "info"}, **env)
    if code != ROOT:
        full["PYTHONPATH"] = str(code)
    command = _pinned(core, [*(python or [sys.executable]), str(code / "dbsvc.py"), "serve", str(schema), *argv])
    proc = subprocess.Popen(command, cwd=code, env=full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        match = LISTENING.search(line)
        if match:

            def drain() -> None:
                for rest in proc.stderr:
                    if "dbsvc.http.request" not in rest:
                        log.append(rest)

            threading.Thread(target=drain, daemon=True).start()
            return proc, int(match.group(1)), log
        log.append(line)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"{code}: dbsvc did not start:\n" + "".join(log))


def stop_server(process: subprocess.Popen, timeout: float = 15.0) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if not match:
        raise ValueError(f"unreadable wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(output: str) -> dict:
    """requests/s, p50/p90/p99 (ms), requests, errors from `wrk --latency` output."""
    result: dict = {"rps": 0.0, "requests": 0, "errors": 0}
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("Requests/sec:"):
            result["rps"] = float(line.split()[1])
        elif line.startswith("Latency ") and "Distribution" not in line:  # avg, stdev, max
            result["max_ms"] = _ms(line.split()[3])
        elif re.match(r"^(50|75|90|99)(\.0+)?%\s", line):
            pct, value = line.split()[:2]
            result[f"p{pct.rstrip('%').split('.')[0]}_ms"] = _ms(value)
        elif "requests in" in line:
            result["requests"] = int(line.split()[0])
        elif line.startswith("Non-2xx or 3xx responses:"):
            result["errors"] += int(line.split()[-1])
        elif line.startswith("Socket errors:"):
            result["errors"] += sum(int(n) for n in re.findall(r"\d+", line))
    return result


def run_wrk(
    url: str,
    duration: float = 10,
    connections: int = 64,
    threads: int = 1,
    script: str | None = None,
    core: str = LOAD_CORE,
) -> dict:
    """Run wrk pinned to `core` against `url`; the parsed result plus the raw output."""
    command = [ensure_wrk(), f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", "--latency"]
    if script:
        command += ["-s", script]
    command.append(url)
    done = subprocess.run(_pinned(core, command), capture_output=True, text=True, check=True)
    result = parse_wrk(done.stdout)
    result["raw"] = done.stdout
    return result


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def core_times() -> dict[str, tuple[int, int, int]]:
    """Per core from /proc/stat: (busy, steal, total) ticks, busy being user, nice, system,
    irq and softirq (the realtime and replication benches' per-core shares)."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *values = line.split()
            v = [int(x) for x in values]
            out[name] = (v[0] + v[1] + v[2] + v[5] + v[6], v[7] if len(v) > 7 else 0, sum(v[:8]))
    return out


def measure(
    process: subprocess.Popen, url: str, duration: float = 10, connections: int = 64, script: str | None = None
) -> dict:
    """run_wrk plus the server's CPU time per request: on a shared, busy machine req/s
    swings with the neighbours' load, CPU microseconds per request much less."""
    before = process_cpu_seconds(process.pid)
    result = run_wrk(url, duration=duration, connections=connections, script=script)
    spent = process_cpu_seconds(process.pid) - before
    result["cpu_us_per_request"] = spent / max(1, result["requests"]) * 1e6
    return result


def side_by_side(
    baseline: tuple[subprocess.Popen, str],
    subject: tuple[subprocess.Popen, str],
    rounds: int = 5,
    duration: float = 3,
    connections: int = 64,
    script: str | None = None,
    baseline_script: str | None = None,
) -> dict:
    """The subject's requests/s as a ratio to the baseline's, both loaded at the same time.

    Both servers are pinned to the same core (SERVER_CORE) and each gets its own wrk
    (`connections` connections, pinned to LOAD_CORE) for `duration` seconds, `rounds` times.
    The scheduler shares the core evenly between the two busy servers, so each moment's
    speed of the core, which on a shared VM drifts by tens of percent within seconds, is
    the same for both: the ratio of their requests/s is the ratio of their costs per
    request. Measured back to back instead, single rounds of the same pair ranged from 48%
    to 151%; side by side they stay within about two points. The figure is the median of the
    per-round ratios; `base` and `subject` sum each server's slices (`_combined`).
    """
    pairs: list[tuple[dict, dict]] = []
    for _round in range(rounds):
        results: dict[str, dict] = {}
        errors: list[BaseException] = []

        def load(key: str, server: tuple[subprocess.Popen, str], lua: str | None) -> None:
            try:
                results[key] = measure(server[0], server[1], duration, connections, script=lua)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        threads = [
            threading.Thread(target=load, args=("base", baseline, baseline_script)),
            threading.Thread(target=load, args=("subject", subject, script)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        pairs.append((results["base"], results["subject"]))
    in_order = [m["rps"] / b["rps"] if b["rps"] else 0.0 for b, m in pairs]
    ratios = sorted(in_order)
    middle = len(ratios) // 2
    median = ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2
    return {
        "ratio": median,
        "ratios": ratios,  # sorted: the spread
        "in_order": in_order,  # the rounds as they ran (a dip in one round: what ran then?)
        "base": _combined([b for b, _m in pairs], duration),
        "subject": _combined([m for _b, m in pairs], duration),
    }


def _combined(results: list[dict], duration: float) -> dict:
    """Slices of one server summed: requests/s over all of them, median latencies, CPU per request."""
    requests = sum(r["requests"] for r in results)
    by_p50 = sorted(results, key=lambda r: r.get("p50_ms", 0.0))
    typical = by_p50[len(by_p50) // 2]
    cpu = sum(r["cpu_us_per_request"] * r["requests"] for r in results) / max(1, requests)
    return {
        "rps": requests / (duration * len(results)),
        "requests": requests,
        "errors": sum(r["errors"] for r in results),
        "p50_ms": typical.get("p50_ms", 0.0),
        "p99_ms": typical.get("p99_ms", 0.0),
        "max_ms": max(r.get("max_ms", 0.0) for r in results),
        "cpu_us_per_request": cpu,
    }


def canned_command(profile_to: str | None = None) -> list[str]:
    if profile_to:
        return [sys.executable, "-m", "cProfile", "-o", profile_to, str(CANNED)]
    return [sys.executable, str(CANNED)]


def canned_baseline(duration: float = 10, connections: int = 64, path: str = "/") -> dict:
    """Start the canned server, measure it with wrk, stop it."""
    process, port = start_server(canned_command())
    try:
        run_wrk(f"http://127.0.0.1:{port}{path}", duration=2, connections=connections)  # warm-up
        return measure(process, f"http://127.0.0.1:{port}{path}", duration, connections)
    finally:
        stop_server(process)


def _profile(duration: float, connections: int) -> None:
    import pstats

    out = "/tmp/dbsvc-canned.prof"
    process, port = start_server(canned_command(out))
    try:
        result = run_wrk(f"http://127.0.0.1:{port}/", duration=duration, connections=connections)
    finally:
        stop_server(process)
    print(f"under cProfile: {result['rps']:.0f} req/s")
    stats = pstats.Stats(out)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(30)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="wrk against the canned dbsvc.http server")
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--profile", action="store_true", help="cProfile the server under load")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.profile:
        _profile(args.duration, args.connections)
        return 0
    result = canned_baseline(args.duration, args.connections)
    result.pop("raw")
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"canned: {result['rps']:.0f} req/s  p50 {result.get('p50_ms', 0):.2f} ms  "
            f"p99 {result.get('p99_ms', 0):.2f} ms  server CPU {result['cpu_us_per_request']:.0f} us/request  "
            f"({result['requests']} requests, {result['errors']} errors)"
        )
        print(f"load average while measuring: {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
