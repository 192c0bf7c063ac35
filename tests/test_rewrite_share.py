"""tests/support/rewriteshare.py: on a cold cache the xdist workers rewrite each test file once.

A throwaway suite of small test files runs under `pytest -n 2` with an empty
PYTHONPYCACHEPREFIX and the plugin loaded, as tests/conftest.py loads it; its conftest logs
every call of pytest's rewrite, with the worker that made it. Worker k of 2 must have rewritten
the files at positions k, k + 2, ... of the suite's sorted files (conftest.py first), each once.
Without the plugin each worker rewrites what it imports before the other has cached it: every
file twice, or all by the worker that started first, never that split. Plugins other than
xdist are not loaded: three pytest starts with schemathesis' and hypothesis' plugins cost
seconds of CPU for nothing here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import os
import sys

sys.path.insert(0, {str(TESTS)!r})
pytest_plugins = ["support.rewriteshare"]

from _pytest.assertion import rewrite

_rewrite_test = rewrite._rewrite_test


def _logged(fn, config):
    with open(os.environ["REWRITE_LOG"], "a") as log:
        log.write(f"{{os.environ.get('PYTEST_XDIST_WORKER', '-')}} {{fn.name}}\\n")
    return _rewrite_test(fn, config)


rewrite._rewrite_test = _logged
"""


def test_a_cold_cache_is_rewritten_once_across_the_workers_with_messages_kept(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (suite / "conftest.py").write_text(CONFTEST)
    names = [f"test_file_{number}.py" for number in range(6)]
    for number, name in enumerate(names):
        (suite / name).write_text(f"def test_value():\n    value = {number}\n    assert value == 4\n")
    log = tmp_path / "rewrites.log"
    env = {
        **os.environ,
        "PYTHONPYCACHEPREFIX": str(tmp_path / "pyc"),
        "REWRITE_LOG": str(log),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "xdist.plugin", "-p", "no:cacheprovider", "suite"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "5 failed, 1 passed" in done.stdout, done.stdout
    # the rewritten code read from the cache still explains a failing assert
    assert "assert 3 == 4" in done.stdout, done.stdout
    rewritten = sorted(tuple(line.split()) for line in log.read_text().splitlines())
    # the suite's files sorted: conftest.py (cached at its import, before the split) is 0,
    # then test_file_0 ... 5; the plugin itself is rewritten as a plugin by every process
    assert [pair for pair in rewritten if pair[1].startswith("test_file_")] == sorted(
        [("gw1", name) for name in names[0::2]] + [("gw0", name) for name in names[1::2]]
    )
