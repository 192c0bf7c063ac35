"""The bench scripts answer `--help` and a missing argument with their usage (bench/usage.py),
never with an IndexError or a benchmark started by a request for help.

A script reads its arguments with argparse or by hand; one that indexes `sys.argv` by hand
calls `check_argv` first (read with `ast`: no script is run for that). One script is run for
real, twice, as a user would: `--help` prints its docstring and exits 0, no argument prints
its usage lines on stderr and exits 2. Each run is bounded (TIMEOUT) and starts no benchmark:
the check comes before the script imports the checkout under measure.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
TIMEOUT = 60  # seconds a run of the script may take on a loaded host; it takes well under one


def reads_argv_by_hand(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.argv" for node in ast.walk(tree))


def uses_argparse(tree: ast.Module) -> bool:
    return any(
        (isinstance(node, ast.Import) and any(alias.name == "argparse" for alias in node.names))
        or (isinstance(node, ast.ImportFrom) and node.module == "argparse")
        for node in ast.walk(tree)
    )


def checks_argv(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.Call) and ast.unparse(node.func) == "check_argv" for node in ast.walk(tree))


def test_every_bench_script_that_indexes_argv_by_hand_checks_it_first():
    unchecked = []
    for path in sorted(BENCH.glob("*.py")):
        if path.name == "usage.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        if reads_argv_by_hand(tree) and not uses_argparse(tree) and not checks_argv(tree):
            unchecked.append(path.name)
    assert unchecked == [], f"index sys.argv without usage.py's check_argv first: {unchecked}"


def run_get_text(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / "get_text.py"), *args], capture_output=True, text=True, timeout=TIMEOUT
    )


def test_help_prints_the_scripts_docstring_and_exits_0():
    done = run_get_text("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("A GET's CPU in process") and "python bench/get_text.py CODE DATA" in done.stdout
    assert done.stderr == ""


def test_a_missing_argument_prints_the_usage_lines_and_exits_2():
    done = run_get_text("/tmp/only-the-code")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == "usage:"
    assert lines[1] == "  python bench/get_text.py CODE DATA"
    assert lines[-1].endswith("get_text.py: expected at least 2 argument(s), got 1 (--help says more)")
