"""How late the supervisor acts after it is due: a quiet-host check for mutants no test can see.

Usage (from the repository root; from `mutants/` with MUTANT_UNDER_TEST set, for a mutant)::

    python bench/mutation_lateness.py                # restarts and a deaf reader's kill
    python bench/mutation_lateness.py --long         # also the default grace (35 s of waiting)
    cd mutants && MUTANT_UNDER_TEST=dbsvc.supervisor.xǁSupervisorǁ_next_due__mutmut_2 \\
        PYTHONPATH=. python bench/mutation_lateness.py

dbsvc/supervisor.py's loop sleeps in `select` until the next thing it has to do: a restart
whose backoff ends (`_next_due`), or, while stopping, a tick of 0.1 s that finds a worker's
kill deadline passed (`_stop_step`). Five of its mutants (docs/mutation.md, session 20:
`_next_due` 1, 2, 4, 10, `_stop_step` 12) do everything right, only later: a restart waits
for the 1 s tick instead of its 0.1 s backoff, a kill comes up to 1.1 s after its deadline,
or the default grace is 31 s instead of 30. A test would need an upper bound on a time, which
the house keeps out of tests; this script measures it instead, on the supervisor's own
clock (its log's millisecond timestamps), over tests/support/plan_worker.py's workers as
tests/workers/test_supervisor_loop.py runs them:

- restart: a reader exits three times (backoffs 0.1, 0.2, 0.4 s); lateness is the time
  from each exit's log line to the next start's, less the backoff.
- deadline: a reader deaf to SIGTERM, SERVICE_SHUTDOWN_TIMEOUT=0.2; lateness is the time
  from `stopping` to the kill, less 5.2 s (the timeout and KILL_GRACE).
- `--long`: the same with SERVICE_SHUTDOWN_TIMEOUT=0 (off for a server, 30 s here), less 35 s.

On a quiet host the supervisor is late by a few milliseconds; a mutant above by 0.6-1.0 s.
At load every figure grows (the loop waits for a core): compare with the unmutated tree in
the same minutes. Prints one line per case; not part of the test run.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))  # this tree, or mutants/ when run from there

from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402
from dbsvc.supervisor import supervise  # noqa: E402

PLAN_WORKER = str(ROOT / "tests" / "support" / "plan_worker.py")
LINE = re.compile(r"(\S+) +[A-Z]+ dbsvc\.supervisor: (.*) worker=supervisor")
SERVING = ["ready", "serve"]


def run(plan: dict, stop_when, env: dict[str, str], deadline: float) -> list[tuple[float, str]]:
    """Runs the supervisor over plan workers until `stop_when(journal)` (or `deadline` s),
    then SIGTERM; returns its log as (time, message) pairs."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "journal"
        environ = {
            "PATH": os.environ.get("PATH", ""),
            "SERVICE_DATA": str(Path(tmp) / "data"),
            "SERVICE_HOST": "127.0.0.1",
            "SERVICE_PORT": "0",
            "RUST_LOG": "info",
            "PLAN_WORKER": json.dumps(plan),
            "PLAN_JOURNAL": str(path),
            **env,
        }
        done = threading.Event()
        main = threading.main_thread().ident
        assert main is not None

        def drive() -> None:
            end = time.monotonic() + deadline
            while not done.is_set():
                lines = path.read_text().splitlines() if path.exists() else []
                if time.monotonic() > end or stop_when([json.loads(line) for line in lines if line]):
                    signal.pthread_kill(main, signal.SIGTERM)
                    return
                done.wait(0.02)

        log, stderr, stdout = io.StringIO(), sys.stderr, sys.stdout
        sys.stderr = log  # configure_logging writes to sys.stderr as it is at the call
        sys.stdout = io.StringIO()  # the ready banner
        driver = threading.Thread(target=drive, daemon=True)
        driver.start()
        try:
            supervise(BLOG, environ, 2, argv=[sys.executable, PLAN_WORKER])
        finally:
            sys.stderr, sys.stdout = stderr, stdout
            done.set()
            driver.join()
    out = []
    for line in log.getvalue().splitlines():
        m = LINE.match(line)
        if m:
            stamp = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ")
            out.append((stamp.replace(tzinfo=datetime.UTC).timestamp(), m.group(2)))
    return out


def times(log: list[tuple[float, str]], pattern: str) -> list[float]:
    return [at for at, message in log if re.fullmatch(pattern, message)]


def count(events: list[dict], label: str, event: str) -> int:
    return sum(1 for e in events if e["label"] == label and e["event"] == event)


def restart_lateness() -> list[float]:
    runs = [["ready", "exit:3"], ["ready", "exit:3"], ["ready", "exit:3"], SERVING]
    log = run({"writer": [SERVING], "reader-1": runs}, lambda e: count(e, "reader-1", "ready") >= 4, {}, 30.0)
    exits = times(log, r"worker reader-1 exited .*")
    starts = times(log, r"worker reader-1 started \(pid \d+\)")[1:]
    return [start - exit_ - backoff for exit_, start, backoff in zip(exits, starts, (0.1, 0.2, 0.4), strict=False)]


def kill_lateness(timeout: str, grace: float) -> float:
    plan = {"writer": [SERVING], "reader-1": [["deaf", "ready", "serve"]]}
    ready = lambda e: count(e, "writer", "ready") >= 1 and count(e, "reader-1", "ready") >= 1  # noqa: E731
    log = run(plan, ready, {"SERVICE_SHUTDOWN_TIMEOUT": timeout}, 30.0)
    (stopping,) = times(log, r"stopping: the readers first, then the writer")
    (killed,) = times(log, r"worker reader-1 did not stop in time: killing it")
    return killed - stopping - grace


BLOG = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", action="store_true", help="also the default grace: 35 s of waiting")
    args = parser.parse_args(argv)
    mutant = os.environ.get("MUTANT_UNDER_TEST") or "(none)"
    late = restart_lateness()
    print(f"mutant {mutant}: restart lateness {', '.join(f'{s:.3f}' for s in late)} s (backoffs 0.1, 0.2, 0.4)")
    print(f"mutant {mutant}: kill lateness past 0.2 + 5 s: {kill_lateness('0.2', 5.2):.3f} s", flush=True)
    if args.long:
        print(f"mutant {mutant}: kill lateness past 30 + 5 s: {kill_lateness('0', 35.0):.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
