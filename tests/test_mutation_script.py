"""bench/mutation.py end to end, on one small module: a copy of the tree in a temporary
directory, mutmut run for real (one worker, niced, time-bounded), the per-module table
printed, and a second call that finds nothing changed. Slow (a few minutes): `-m slow`."""

from __future__ import annotations

import configparser
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULE = "dbsvc/realtime/feeds.py"
TESTS = "tests/realtime"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1500),
    pytest.mark.skipif(
        importlib.util.find_spec("mutmut") is None, reason="mutmut is not installed (pip install -e '.[mutation]')"
    ),
]


def _copy_tree(dest: Path) -> None:
    """The parts of the repository mutmut needs, with [mutmut] narrowed to one module and
    the one test folder that covers it."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "dbsvc", dest / "dbsvc", ignore=ignore)
    shutil.copytree(ROOT / TESTS, dest / TESTS, ignore=ignore)
    shutil.copytree(ROOT / "tests" / "support", dest / "tests" / "support", ignore=ignore)
    shutil.copy2(ROOT / "tests" / "conftest.py", dest / "tests" / "conftest.py")
    shutil.copytree(ROOT / "schemas", dest / "schemas")
    (dest / "bench").mkdir()
    for name in ("bench/mutation.py", "dbsvc.py", "pyproject.toml"):
        shutil.copy2(ROOT / name, dest / name)
    config = configparser.RawConfigParser()
    config.read(ROOT / "setup.cfg")
    config.set("mutmut", "only_mutate", "\n" + MODULE)
    config.set("mutmut", "pytest_add_cli_args_test_selection", "\n" + TESTS)
    with open(dest / "setup.cfg", "w") as f:
        config.write(f)


def _script(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "bench/mutation.py", *args], cwd=tree, capture_output=True, text=True, timeout=1400
    )


def test_mutation_script_mutates_one_module_and_then_finds_nothing_changed(tmp_path):
    tree = tmp_path / "tree"
    _copy_tree(tree)

    first = _script(tree, MODULE, "--max-children", "1", "--time-limit", "1200")
    assert first.returncode in (0, 3), first.stdout + first.stderr  # 3: cut by the time limit
    rows = [line.split() for line in first.stdout.splitlines() if line.startswith(MODULE)]
    assert len(rows) == 1, first.stdout
    killed, survived, timeout, no_tests, other, unchecked, total = map(int, rows[0][1:])
    assert total > 50 and killed > 0
    assert killed + survived + timeout + no_tests + other + unchecked == total
    assert (tree / "mutants" / "dbsvc-mutation.json").exists()

    report = _script(tree, "--report")
    assert report.returncode == 0 and rows[0] in [line.split() for line in report.stdout.splitlines()]
    if first.returncode == 0:
        again = _script(tree)
        assert again.returncode == 0
        assert "nothing to mutate" in again.stdout
