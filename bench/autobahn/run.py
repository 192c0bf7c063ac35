"""Run Autobahn|Testsuite's fuzzing client against dbsvc's WebSocket layer.

    bash bench/autobahn/install.sh && python bench/autobahn/run.py
    python bench/autobahn/run.py --cases '1.*,2.*' --keep      # a subset; keep the reports
    python bench/autobahn/run.py --max-message 65536           # the production message limit

Starts bench/autobahn/echo_server.py (dbsvc's own server and WebSocket connection, an echo
session) on 127.0.0.1 with a free port, writes a `wstest -m fuzzingclient` spec into a temp
dir (the reports go there too), runs wstest with a bounded timeout, reads the reports'
index.json and prints one line per behavior with its count. Exits 1 when a case is FAILED
or its closing behavior is UNCLEAN (and lists those cases), 2 when the run itself broke.

Cases 12.* and 13.* (permessage-deflate) are excluded by default: dbsvc deliberately does
not negotiate compression (wsproto inflates without a size limit), so those cases would
only test that the extension is declined.

The echo raises the incoming message limit to 16 MiB + 1 KiB by default (production: 64 KiB,
closed with 1009) because cases 9.* send messages up to 16 MiB; every other limit is
production's. `--max-message 65536` runs with production's limit.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_VENV = os.environ.get("AUTOBAHN_VENV", "/opt/autobahn-venv")
EXCLUDED = ["12.*", "13.*"]
EXCLUDED_WHY = "permessage-deflate: dbsvc does not negotiate compression (wsproto inflates without a size limit)"
BIG_MESSAGE = 16 * 1024 * 1024 + 1024
PRODUCTION_MESSAGE = 64 * 1024
BEHAVIORS = ["OK", "NON-STRICT", "INFORMATIONAL", "UNIMPLEMENTED", "FAILED"]
CLOSE_BEHAVIORS = ["OK", "INFORMATIONAL", "UNCLEAN", "FAILED"]


def case_key(case_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in case_id.split(".") if part.isdigit())


def start_server(cmd: list[str], log_path: Path, ready_timeout: float) -> tuple[subprocess.Popen, int]:
    """Start the echo server; wait for its `listening on PORT` line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    port: list[int] = []
    got = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            text = line.decode("utf-8", "replace")
            if not port and text.startswith("listening on"):
                port.append(int(text.split()[-1].rsplit(":", 1)[-1]))
                got.set()
            log.write(line)
            log.flush()
        got.set()

    threading.Thread(target=pump, daemon=True).start()
    if not got.wait(ready_timeout) or not port:
        stop_server(proc)
        raise RuntimeError(
            f"echo server did not report its port in {ready_timeout:.0f} s; see {log_path}:\n{tail(log_path)}"
        )
    return proc, port[0]


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_wstest(wstest: str, spec_path: Path, cwd: Path, log_path: Path, timeout: float) -> int:
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [wstest, "-m", "fuzzingclient", "-s", str(spec_path)],
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wstest",
        default=os.path.join(DEFAULT_VENV, "bin", "wstest"),
        help="wstest executable (default: %(default)s, made by install.sh)",
    )
    parser.add_argument("--cases", default="*", help="comma-separated case patterns (default: all)")
    parser.add_argument(
        "--exclude", default=",".join(EXCLUDED), help="comma-separated case patterns to skip (default: %(default)s)"
    )
    parser.add_argument(
        "--max-message",
        type=int,
        default=BIG_MESSAGE,
        help=f"the echo's incoming message limit in bytes (default: %(default)s; production: {PRODUCTION_MESSAGE})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds wstest may run before it is killed (default: %(default)s)",
    )
    parser.add_argument("--outdir", help="keep the spec, logs and reports here (default: a temp dir, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir and print its path")
    parser.add_argument(
        "--server-cmd",
        help="run this server instead of echo_server.py "
        "(a shell-split command that prints 'listening on PORT'); for checking wstest",
    )
    parser.add_argument("--path", default="/echo", help="request path of the echo (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="also print the summary as one JSON line")
    args = parser.parse_args()

    if not os.access(args.wstest, os.X_OK):
        print(f"wstest not found at {args.wstest}: run `bash bench/autobahn/install.sh` first", file=sys.stderr)
        return 2

    if args.outdir:
        work = Path(args.outdir).resolve()
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        keep = True
    else:
        work = Path(tempfile.mkdtemp(prefix="autobahn-"))
        keep = args.keep
    reports = work / "reports"
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    excluded = [c.strip() for c in args.exclude.split(",") if c.strip()]

    if args.server_cmd:
        import shlex

        server_cmd = shlex.split(args.server_cmd)
        agent = "custom"
    else:
        server_cmd = [
            sys.executable,
            str(HERE / "echo_server.py"),
            "--port",
            "0",
            "--max-message",
            str(args.max_message),
        ]
        agent = "dbsvc"

    started = time.monotonic()
    server, port = start_server(server_cmd, work / "server.log", ready_timeout=30.0)
    try:
        spec = {
            "outdir": str(reports),
            "servers": [{"agent": agent, "url": f"ws://127.0.0.1:{port}{args.path}"}],
            "cases": cases,
            "exclude-cases": excluded,
            "exclude-agent-cases": {},
        }
        spec_path = work / "fuzzingclient.json"
        spec_path.write_text(json.dumps(spec, indent=2))
        try:
            rc = run_wstest(args.wstest, spec_path, work, work / "wstest.log", args.timeout)
        except subprocess.TimeoutExpired:
            print(
                f"wstest did not finish in {args.timeout:.0f} s (killed); log: {work / 'wstest.log'}", file=sys.stderr
            )
            print(tail(work / "wstest.log"), file=sys.stderr)
            return 2
        server_alive = server.poll() is None
    finally:
        stop_server(server)
    wall = time.monotonic() - started

    index_path = reports / "index.json"
    if rc != 0 or not index_path.exists():
        print(f"wstest exited {rc} without {index_path}; log tail:", file=sys.stderr)
        print(tail(work / "wstest.log"), file=sys.stderr)
        print(f"(kept {work})", file=sys.stderr)
        return 2
    index = json.loads(index_path.read_text())
    results: dict = index.get(agent) or next(iter(index.values()), {})

    behavior = collections.Counter(r["behavior"] for r in results.values())
    behavior_close = collections.Counter(r["behaviorClose"] for r in results.values())
    failed = sorted((c for c, r in results.items() if r["behavior"] == "FAILED"), key=case_key)
    unclean = sorted((c for c, r in results.items() if r["behaviorClose"] in ("UNCLEAN", "FAILED")), key=case_key)

    limit_note = (
        "production's 64 KiB"
        if args.max_message == PRODUCTION_MESSAGE
        else f"{args.max_message} bytes (raised for cases 9.*, which send up to 16 MiB;"
        f" production: {PRODUCTION_MESSAGE})"
    )
    print(f"Autobahn|Testsuite fuzzingclient -> {spec['servers'][0]['url']} ({agent})")
    print(f"cases run: {len(results)}   wall time: {wall:.1f} s")
    if excluded:
        print(
            f"excluded: {', '.join(excluded)} -- {EXCLUDED_WHY}"
            if excluded == EXCLUDED
            else f"excluded: {', '.join(excluded)}"
        )
    if not args.server_cmd:
        print(f"echo incoming message limit: {limit_note}")
    print(
        "behavior:       "
        + "  ".join(f"{b} {behavior.get(b, 0)}" for b in BEHAVIORS + sorted(set(behavior) - set(BEHAVIORS)))
    )
    print(
        "behaviorClose:  "
        + "  ".join(
            f"{b} {behavior_close.get(b, 0)}"
            for b in CLOSE_BEHAVIORS + sorted(set(behavior_close) - set(CLOSE_BEHAVIORS))
        )
    )
    for name, ids in (
        ("NON-STRICT", "NON-STRICT"),
        ("INFORMATIONAL", "INFORMATIONAL"),
        ("UNIMPLEMENTED", "UNIMPLEMENTED"),
    ):
        these = sorted((c for c, r in results.items() if r["behavior"] == ids), key=case_key)
        if these:
            print(f"  {name}: {' '.join(these)}")
    if failed:
        print(f"FAILED ({len(failed)}): {' '.join(failed)}")
    if unclean:
        print(f"UNCLEAN or FAILED close ({len(unclean)}): {' '.join(unclean)}")
    if not server_alive:
        print("the echo server exited during the run; log tail:")
        print(tail(work / "server.log"))
    if failed or unclean:
        for case_id in (failed + [c for c in unclean if c not in failed])[:50]:
            r = results[case_id]
            print(
                f"  {case_id}: behavior {r['behavior']}, close {r['behaviorClose']}, "
                f"remote close code {r.get('remoteCloseCode')}, report {reports / r['reportfile']}"
            )
    if args.json:
        print(
            json.dumps(
                {
                    "cases": len(results),
                    "wall_s": round(wall, 1),
                    "excluded": excluded,
                    "max_message": args.max_message,
                    "behavior": dict(behavior),
                    "behaviorClose": dict(behavior_close),
                    "failed": failed,
                    "unclean": unclean,
                }
            )
        )
    ok = not failed and not unclean and server_alive
    print(
        "RESULT: "
        + (
            "0 FAILED, 0 UNCLEAN"
            if ok
            else f"{len(failed)} FAILED, {len(unclean)} UNCLEAN" + ("" if server_alive else ", server died")
        )
    )
    if keep or not ok:
        print(f"reports kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
