"""bench/mutation_pytest.py's bound on a test: at the limit every process the run started is
ended, however deep and in whatever process group or session, and the alarm comes again
while a test swallows it. Run in a child interpreter, which becomes the subreaper of its own
tree (the test process stays as it is). And which mutants `--only` and `--prefix` choose,
read in process (`_mutants` reads the `.meta` files and starts nothing)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, os, signal, subprocess, sys, time
    spec = importlib.util.spec_from_file_location("mutation_pytest", sys.argv[1])
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    runner.AGAIN_SECONDS = 1
    runner.become_subreaper()
    signal.signal(signal.SIGALRM, runner._alarm)
    # A child in its own process group whose own child is in a session of its own and
    # outlives it: as a supervisor's worker copies of the runner were (session 19).
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys, time; "
         "g = subprocess.Popen(['sleep', '120'], start_new_session=True); print(g.pid, flush=True); "
         "time.sleep(120)"],
        process_group=0, stdout=subprocess.PIPE, text=True,
    )
    grandchild = int(child.stdout.readline())
    signal.alarm(1)
    timeouts = 0
    started = time.monotonic()
    try:
        child.wait()  # the test that hangs on its child
    except runner.MutantTimeout:
        timeouts += 1
    try:
        time.sleep(30)  # a test that swallowed the first alarm and goes on
    except runner.MutantTimeout:
        timeouts += 1
    signal.alarm(0)
    alive = os.path.exists(f"/proc/{grandchild}")
    print(json.dumps({"timeouts": timeouts, "child": child.wait(), "grandchild_alive": alive,
                      "left": runner.descendants(), "seconds": time.monotonic() - started}))
    """
)


def test_at_the_limit_every_descendant_ends_and_the_alarm_comes_again(tmp_path):
    # Before the change the alarm only raised in the runner: the child's SIGKILL came from
    # nobody, the grandchild in its own session ran on, and a swallowed alarm never came back.
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT / "bench" / "mutation_pytest.py")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["timeouts"] == 2
    assert report["child"] == -9
    assert report["grandchild_alive"] is False  # killed, and reaped by the subreaper
    assert report["left"] == []
    assert report["seconds"] < 25  # the swallowed alarm came again, not the 30 s sleep's end


def test_only_takes_a_whole_name_and_prefix_a_start(tmp_path, monkeypatch):
    # Before the change `--only` was a prefix (a whole name needed a `$`): `..._5` ran
    # mutant 5 and 50-59 with it.
    spec = importlib.util.spec_from_file_location("mutation_pytest", ROOT / "bench" / "mutation_pytest.py")
    assert spec is not None and spec.loader is not None
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    names = [f"dbsvc.m.x_f__mutmut_{n}" for n in (5, 50, 59)]
    (tmp_path / "mutants" / "dbsvc").mkdir(parents=True)
    meta = tmp_path / "mutants" / "dbsvc" / "m.py.meta"
    meta.write_text(json.dumps({"exit_code_by_key": dict.fromkeys(names)}))
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    assert runner._mutants(["dbsvc.m.x_f__mutmut_5"], []) == ["dbsvc.m.x_f__mutmut_5"]
    assert runner._mutants([], ["dbsvc.m.x_f__mutmut_5"]) == names
    assert runner._mutants(["dbsvc.m.x_f__mutmut_5$"], []) == []  # no longer a spelling of a name
