"""Cold start of a built app: from `python -I APP.pyz` to the first 200 on an empty tenant.

    python bench/zipapp_bench.py [--schema schemas/blog.dbs] [--runs 10]

Builds the schema twice (`dbsvc build`, and `dbsvc build --with-guard`), makes a virtual
environment with no packages (`python -m venv --without-pip`), then times, in that
environment, each of these start-ups `--runs` times, every run on a new empty data
directory (the tenant `default` is created by the start-up itself):

    plain            python -I APP.pyz                       (no guard)
    guard, cold      python -I GUARD.pyz, guard on, an empty cache: cryptography unpacked
    guard, warm      the same with the cache the previous run filled
    checkout         python dbsvc.py serve SCHEMA from this checkout (the packages installed
                     here; the schema compiled in memory), for comparison

A run's time is from just before the process is started until the answer to
`GET /api/<first model>` (with a token when the guard is on) has been read: the process
prints `dbsvc: ready` with its port once it listens (SERVICE_PORT=0), and the request
follows at once. The process is then stopped with SIGTERM. Prints min / median / max per
mode and one JSON line; the target is under 1 s for `plain`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from dbsvc.build import build_zipapp  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SERVICE_", "PYTHON", "XDG_")) and k not in ("RUST_LOG", "HOME")
    }
    env.update(HOME=str(home), SERVICE_PORT="0", SERVICE_EXPLORER="off", RUST_LOG="warn", **extra)
    return env


def first_200(command: list[str], env: dict[str, str], path: str, token: str | None) -> float:
    """Seconds from starting `command` to the first 200 answer to GET `path`."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        command, env=env, cwd=env["HOME"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        ready, api = proc.stdout.readline(), proc.stdout.readline()
        if ready != "dbsvc: ready\n":
            proc.kill()
            raise SystemExit(f"{command} did not start: {ready!r}{proc.communicate(timeout=60)[1]}")
        port = int(re.fullmatch(r"  API       http://127\.0\.0\.1:(\d+)/api/\n", api).group(1))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        reply = conn.getresponse()
        reply.read()
        elapsed = time.perf_counter() - started
        conn.close()
        if reply.status != 200:
            raise SystemExit(f"{command}: GET {path} answered {reply.status}")
        return elapsed
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schema", default=str(ROOT / "schemas" / "blog.dbs"))
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    schema = load_schema(args.schema)
    path = f"/api/{schema.models[0].kebab}"
    work = Path(tempfile.mkdtemp(prefix="dbsvc-zipapp-bench-"))
    try:
        plain = build_zipapp(schema, work / "app.pyz")
        guarded = build_zipapp(schema, work / "guard.pyz", with_guard=True)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True)
        python = str(work / "venv" / "bin" / "python")
        from idp import TestIdp  # a key pair and tokens (PyJWT), as the tests use

        idp = TestIdp(work / "idp")
        guard_env = {**idp.server_env(), "SERVICE_TENANT": "default"}
        token = idp.token(tenant="default")

        results: dict[str, list[float]] = {"plain": [], "guard, cold": [], "guard, warm": [], "checkout": []}
        for run in range(args.runs):
            home = work / f"home{run}"
            home.mkdir()

            def env(**extra: str) -> dict[str, str]:
                data = Path(tempfile.mkdtemp(dir=work, prefix="data"))
                return clean_env(home, SERVICE_DATA=str(data), **extra)

            def tenant(**extra: str) -> dict[str, str]:
                environ = env(**extra)
                Path(environ["SERVICE_DATA"], "default").mkdir()  # a named tenant must exist
                return environ

            results["plain"].append(first_200([python, "-I", str(plain)], env(), path, None))
            results["guard, cold"].append(first_200([python, "-I", str(guarded)], tenant(**guard_env), path, token))
            results["guard, warm"].append(first_200([python, "-I", str(guarded)], tenant(**guard_env), path, token))
            results["checkout"].append(
                first_200([sys.executable, str(ROOT / "dbsvc.py"), "serve", args.schema], env(), path, None)
            )
        sizes = {"plain": plain.stat().st_size, "guard": guarded.stat().st_size}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"cold start to the first 200 on an empty tenant ({args.runs} runs each; load {os.getloadavg()[0]:.1f})")
    print(f"{'mode':<14} {'min':>8} {'median':>8} {'max':>8}")
    for mode, times in results.items():
        print(
            f"{mode:<14} {min(times) * 1000:7.0f}ms {statistics.median(times) * 1000:7.0f}ms {max(times) * 1000:7.0f}ms"
        )
    print(f"archive sizes: plain {sizes['plain']:,} bytes, with the guard {sizes['guard']:,} bytes")
    print(
        json.dumps(
            {
                "runs": args.runs,
                "sizes": sizes,
                "median_ms": {m: round(statistics.median(t) * 1000, 1) for m, t in results.items()},
                "min_ms": {m: round(min(t) * 1000, 1) for m, t in results.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
