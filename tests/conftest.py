"""Makes the shared test kit importable as `support` (tests/support/) from every test file.

pytest runs with `--import-mode=importlib` (setup.cfg): test files are imported without
touching sys.path, so they may share basenames across folders. This puts `tests/` itself on
sys.path, once, so `from support.server import start_server` works from any folder.

It also puts this checkout first on PYTHONPATH for every child process a test starts (servers,
CLI runs, crash children): a child imports the dbsvc beside these tests, never whichever tree
an editable install last pointed at (a git worktree's tests would otherwise run main's code in
their children, or fail when nothing is installed). Tests that need a bare environment (the
zipapp and first-contact ones) pass their own env or `python -I`.

Children also find compiled bytecode: under PYTHONDONTWRITEBYTECODE (set on some hosts to keep
trees free of `__pycache__`) every server and CLI child compiled dbsvc's ~140 modules from
source, about 0.4 s of CPU of a server's 0.9 s start, some thousand times a run. They write
and read it under PYTHONPYCACHEPREFIX instead, a directory outside the checkout (one tree per
source path, checked against each source's mtime and size as `__pycache__` is), unless the
environment names one already.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

CHECKOUT = str(Path(TESTS).parent)
_inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != CHECKOUT]
os.environ["PYTHONPATH"] = os.pathsep.join([CHECKOUT, *_inherited])

if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), f"dbsvc-tests-pycache-{os.getuid()}")

# Per-file CPU of the tests and their children (tests/support/filecpu.py), when asked for.
if os.environ.get("DBSVC_TEST_FILE_CPU"):
    pytest_plugins = ["support.filecpu"]
