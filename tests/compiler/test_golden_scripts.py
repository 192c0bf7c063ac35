"""The golden files' writers, run as their docstrings say: `python tests/compiler/test_X_mutants.py`.

Each golden test file doubles as the script that writes its golden files again after a
deliberate change. Run as a script, Python puts only tests/compiler/ on sys.path: the queries
writer failed on `support` (it needed PYTHONPATH=<tree>:<tree>/tests), and the others
imported whichever dbsvc was installed, so a worktree's command wrote main's output into the
worktree's golden files. Each is run here from another directory with no PYTHONPATH (the test
run sets one for its children), into a directory of its own (the optional argument), so the
tree's files are never rewritten by a test: what it writes must be the golden files as they
are, from this tree's dbsvc.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TREE = HERE.parents[1]

WRITERS = {
    "test_asyncapi_mutants.py": ["realtime.asyncapi.json"],
    "test_openapi_mutants.py": ["openapi.json"],
    "test_queries_mutants.py": ["queries.py.txt", "module.py.txt"],
    "test_validators_mutants.py": ["validators.py.txt"],
}


@pytest.mark.parametrize("script", sorted(WRITERS))
def test_a_golden_writer_runs_as_written_and_writes_the_golden_files_from_this_tree(script, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, str(HERE / script), str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(f"from the dbsvc in {TREE / 'dbsvc'}"), done.stdout
    assert sorted(path.name for path in out.iterdir()) == sorted(WRITERS[script])
    for name in WRITERS[script]:
        assert (out / name).read_bytes() == (HERE / "golden" / name).read_bytes(), name
